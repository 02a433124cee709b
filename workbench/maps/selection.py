"""What the user picked on the map: selected papers and pairs marked similar or not, kept in the run directory.

The pane's lasso, box or region selection and its marked pairs are the user's work; a kernel
restart must not lose them. They are stored by doc_id in `maps/selection.json` (ids, not
row numbers, so a re-exported corpus in another order keeps them), written whole on every
change, and read back when an `Explorer` opens the run. `Explorer.selection` gives the
selected papers as a DataFrame; `Explorer.export_selection` writes them as CSV or RIS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir


@dataclass
class Selection:
    """Selected doc_ids (in the order picked) and marked pairs (doc_id, doc_id, similar) of one run."""

    doc_ids: list[str] = field(default_factory=list)
    marks: list[tuple[str, str, bool]] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir, known: Sequence[str]) -> "Selection":
        """The run's stored selection, keeping only papers of `known` (the corpus's doc_ids); empty if none."""
        path = RunDir(run_dir).selection
        if not path.is_file():
            return cls()
        try:
            stored = json.loads(path.read_text())
            ids = [str(d) for d in stored.get("doc_ids", [])]
            marks = [(str(a), str(b), bool(s)) for a, b, s in stored.get("marks", [])]
        except (ValueError, TypeError, AttributeError) as exc:  # a hand-edited or torn file: say so, start empty
            notice(f"{path}: the stored selection cannot be read ({exc}); starting with none")
            return cls()
        known = set(map(str, known))
        kept = cls([d for d in ids if d in known], [m for m in marks if m[0] in known and m[1] in known])
        lost = len(ids) - len(kept.doc_ids) + len(marks) - len(kept.marks)
        if lost:
            notice(f"{path}: {lost} selected papers or marked pairs are not in this corpus and were left out")
        return kept

    def save(self, run_dir) -> None:
        """Write the selection to the run directory (whole or not at all)."""
        write_json(RunDir(run_dir).selection, {"doc_ids": self.doc_ids, "marks": [list(m) for m in self.marks]})

    def papers(self, docs: pd.DataFrame) -> pd.DataFrame:
        """The selected rows of `docs` (a corpus's frame), in the order they were picked."""
        by_id = docs.assign(doc_id=docs["doc_id"].astype(str)).set_index("doc_id", drop=False)
        return by_id.loc[[d for d in self.doc_ids if d in by_id.index]].reset_index(drop=True)

    def pairs(self, titles: dict[str, str]) -> pd.DataFrame:
        """The marked pairs as a table: doc_id and title of each paper, and whether they were marked similar."""
        return pd.DataFrame([{"doc_id_a": a, "title_a": titles.get(a, ""), "doc_id_b": b,
                              "title_b": titles.get(b, ""), "similar": s} for a, b, s in self.marks],
                            columns=["doc_id_a", "title_a", "doc_id_b", "title_b", "similar"])
