"""What the user picked on the map: selected papers and pairs marked similar or not, kept in the run directory.

The pane's lasso, box or region selection and its marked pairs are the user's work; a kernel
restart must not lose them. They are stored by doc_id in `maps/selection.json` (ids, not
row numbers, so a re-exported corpus in another order keeps them), written whole on every
change, and read back when an `Explorer` opens the run. `Explorer.selection` gives the
selected papers as a DataFrame; `Explorer.export_selection` writes them as CSV or RIS.

Nothing stored is ever dropped because the corpus at hand lacks a paper: an Explorer opened
on a smaller re-export keeps the selected papers and marked pairs it cannot show, says how
many in a notice, and lists them (`Explorer.not_in_corpus`, `in_corpus` in `marked_pairs`).
A new selection or new marks made on that map replace only what that map can show; they come
back in full when the run is opened on a corpus that holds those papers again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir

Mark = tuple[str, str, bool]  # (doc_id, doc_id, marked similar)


@dataclass
class Selection:
    """Selected doc_ids (in the order picked) and marked pairs (doc_id, doc_id, similar) of one run.

    Holds every stored entry, also those of papers the corpus at hand lacks (see `absent`).
    """

    doc_ids: list[str] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir, known: Sequence[str]) -> "Selection":
        """The run's stored selection, whole; empty if none. `known` (the corpus's doc_ids) only decides what
        the notice counts as not in this corpus: those entries are kept, never pruned."""
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
        loaded = cls(ids, marks)
        away_ids, away_marks = loaded.absent(known)
        if away_ids or away_marks:
            notice(f"{path}: {len(away_ids)} selected papers and {len(away_marks)} marked pairs are of papers not "
                   "in this corpus; they are kept in the file (listed by `explorer.not_in_corpus`) and come back "
                   "when the run is opened on a corpus that holds those papers")
        return loaded

    def save(self, run_dir) -> None:
        """Write the selection to the run directory (whole or not at all)."""
        write_json(RunDir(run_dir).selection, {"doc_ids": self.doc_ids, "marks": [list(m) for m in self.marks]})

    def absent(self, known: Sequence[str]) -> tuple[list[str], list[Mark]]:
        """The selected doc_ids and the marked pairs that name a paper not in `known` (a corpus's doc_ids)."""
        known = set(map(str, known))
        return ([d for d in self.doc_ids if d not in known],
                [m for m in self.marks if m[0] not in known or m[1] not in known])

    def replace_ids(self, doc_ids: Sequence[str], known: Sequence[str]) -> None:
        """Select `doc_ids` (papers of `known`) instead of what was selected among `known`; selected papers
        that `known` lacks stay selected, first, since a map of `known` could neither show nor unselect them."""
        kept, _ = self.absent(known)
        self.doc_ids = kept + [d for d in doc_ids if d not in kept]

    def replace_marks(self, marks: Sequence[Mark], known: Sequence[str]) -> None:
        """Mark `marks` (pairs of papers of `known`) instead of the pairs marked among `known`; pairs that name
        a paper `known` lacks stay marked, first, for the same reason as in `replace_ids`."""
        _, kept = self.absent(known)
        self.marks = kept + list(marks)

    def papers(self, docs: pd.DataFrame) -> pd.DataFrame:
        """The selected rows of `docs` (a corpus's frame), in the order they were picked; papers it lacks are
        not rows of it (see `absent`)."""
        by_id = docs.assign(doc_id=docs["doc_id"].astype(str)).set_index("doc_id", drop=False)
        return by_id.loc[[d for d in self.doc_ids if d in by_id.index]].reset_index(drop=True)

    def pairs(self, titles: dict[str, str]) -> pd.DataFrame:
        """The marked pairs as a table: doc_id and title of each paper, whether they were marked similar, and
        whether both papers are in the corpus whose titles these are (`in_corpus`; a paper it lacks has no title)."""
        return pd.DataFrame([{"doc_id_a": a, "title_a": titles.get(a, ""), "doc_id_b": b,
                              "title_b": titles.get(b, ""), "similar": s, "in_corpus": a in titles and b in titles}
                             for a, b, s in self.marks],
                            columns=["doc_id_a", "title_a", "doc_id_b", "title_b", "similar", "in_corpus"])

    def not_in(self, known: Sequence[str]) -> pd.DataFrame:
        """One row per stored paper that `known` lacks: its doc_id, whether it is selected, and in how many
        marked pairs it is (a listing of what the map at hand keeps but cannot show)."""
        known = set(map(str, known))
        away = list(dict.fromkeys([d for d in self.doc_ids if d not in known]
                                  + [d for a, b, _ in self.marks for d in (a, b) if d not in known]))
        selected = set(self.doc_ids)
        return pd.DataFrame([{"doc_id": d, "selected": d in selected,
                              "marked_pairs": sum(d in (a, b) for a, b, _ in self.marks)} for d in away],
                            columns=["doc_id", "selected", "marked_pairs"])
