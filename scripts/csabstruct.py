"""CSAbstruct: 2,155 real computer-science abstracts whose every sentence a person labelled with its role.

Human labels nobody here wrote, to develop and measure aspect work on (Cohan et al., EMNLP 2019;
Apache-2.0, `data/csabstruct/LICENSE`). The repository holds one file, `data/csabstruct/csabstruct.jsonl`,
one abstract a line:

    {"doc_id": "csab-<split>-<line>", "split": "train" | "dev" | "test", "sentences": [...],
     "roles": [background | objective | method | result | other, ...], "confs": [...]}

(`load` adds the abstract: its sentences joined by a space.)

`doc_id` numbers the line in the original split file (its `abstract_id` is 0 on every line). An abstract
whose text repeats an earlier one (train, then dev, then test) is left out: 32 test abstracts repeat one
of train or dev, one repeats within test and one within train and dev. The roles are "labels" in the
original; they are "roles" here so that no loader takes them for a corpus's label column.

The roles stand for the `acl` preset's aspects (`ASPECT_ROLES`): challenge ~ background + objective,
approach ~ method, outcome ~ result. They are ground truth only: no label enters the workbench's code,
constants, presets or aspect files.

    .venv/bin/python scripts/csabstruct.py build ../shared/data/csabstruct   # rewrite the file from the source
    .venv/bin/python scripts/csabstruct.py export OUT.csv [--split test]      # the corpus as a user's export
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "data" / "csabstruct" / "csabstruct.jsonl"
SPLITS = ("train", "dev", "test")
ASPECT_ROLES = {"challenge": ("background", "objective"), "approach": ("method",), "outcome": ("result",)}


def build(source: str | Path, out: Path = FILE) -> dict[str, int]:
    """Write `out` from the original split files in `source`; returns {split: abstracts kept}."""
    seen: set[str] = set()
    kept: dict[str, int] = {}
    rows = []
    for split in SPLITS:
        kept[split] = 0
        for line, text in enumerate(Path(source, f"{split}.jsonl").read_text(encoding="utf-8").splitlines()):
            record = json.loads(text)
            abstract = " ".join(record["sentences"])
            if abstract in seen:
                continue
            seen.add(abstract)
            kept[split] += 1
            rows.append({"doc_id": f"csab-{split}-{line}", "split": split,
                         "sentences": record["sentences"], "roles": record["labels"], "confs": record["confs"]})
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return kept


def load(splits: str | tuple[str, ...] | None = None) -> pd.DataFrame:
    """The abstracts of `splits` (all by default), in file order, with their sentences and roles."""
    frame = pd.read_json(FILE, lines=True, dtype={"doc_id": str})
    if splits is not None:
        frame = frame[frame["split"].isin([splits] if isinstance(splits, str) else splits)]
    frame = frame.reset_index(drop=True)
    frame["abstract"] = [" ".join(s) for s in frame["sentences"]]
    return frame


def aspect_marks(frame: pd.DataFrame, aspect: str) -> list[np.ndarray]:
    """Per abstract, which of its sentences a person gave one of the aspect's roles (a boolean array)."""
    roles = ASPECT_ROLES[aspect]
    return [np.isin(np.asarray(r, dtype=object), roles) for r in frame["roles"]]


def export(out: str | Path, splits: str | tuple[str, ...] | None = None) -> Path:
    """Write the abstracts as a user's export would have them: an id and the abstract, nothing else."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load(splits)[["doc_id", "abstract"]].to_csv(out, index=False)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build").add_argument("source", help="the folder of train.jsonl, dev.jsonl and test.jsonl")
    exp = sub.add_parser("export")
    exp.add_argument("out")
    exp.add_argument("--split", nargs="+", choices=SPLITS)
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build(args.source))
    else:
        print(export(args.out, tuple(args.split) if args.split else None))


if __name__ == "__main__":
    main()
