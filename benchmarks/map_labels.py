"""The region labels of a run's map, checked against its abstracts: does each term cover its region, and how many say "mixed"?

On the run's saved map (stage 05; reopened as the pane reopens it), the `Explorer`'s term labels of its 8
regions (`labels.term_labels`, the pane's and the page's default). Each term of a label is counted again here,
independently of `labels.term_matrix`: the share of the region's abstracts in which it occurs as a whole word
sequence (lower case), which must reach the labels' coverage (25%) and be at least 1.5 times its share of the
map's abstracts. A label passes where every term does; "mixed" labels have no term to check.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/map_labels.py --run-dir runs/csabstruct [--corpus CSV] [--k 8]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from _smoke import add_smoke  # noqa: E402
from workbench.maps.labels import LabelRules  # noqa: E402

# Smoke mode's input: (x, y, text, detail, number) labels, each paper's region number, the abstracts.
SMOKE_LABELS = ([(0, 0, "1: graph, tree", "", 1), (1, 1, "2: speech", "", 2), (2, 2, "mixed", "", 3)],
                [1, 1, 2, 2, 3, 3], ["a graph and a tree", "tree graph", "speech data", "speech", "x", "y"])


def occurs(term: str, texts) -> np.ndarray:
    """Which texts hold `term` as a whole word sequence (lower case; any spacing between its words)."""
    pattern = re.compile(r"(?<![\w-])" + r"\s+".join(map(re.escape, term.split())) + r"(?![\w-])")
    return np.array([bool(pattern.search(str(t).lower())) for t in texts])


def check(labels, numbers, abstracts, rules: LabelRules = LabelRules()) -> list[dict]:
    """Per label: its text, size, whether it says mixed, each term's region and map share, and whether it passes."""
    out = []
    for x, y, text, detail, number in labels:
        members = np.asarray([str(m) for m in numbers]) == str(number)
        mixed = text.startswith("mixed")
        terms = [] if mixed else [t.strip() for t in text.split(": ", 1)[-1].split(",") if t.strip()]
        shares = []
        for term in terms:
            hits = occurs(term, abstracts)
            region, everywhere = float(hits[members].mean()), float(hits.mean())
            shares.append((term, region, everywhere))
        passes = all(r >= rules.min_coverage and r >= rules.min_lift * e for _, r, e in shares)
        out.append({"number": number, "text": text, "size": int(members.sum()), "mixed": mixed,
                    "shares": shares, "passes": passes or mixed})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/csabstruct")
    parser.add_argument("--corpus", default=None, help="the run's export (default: csabstruct.csv beside the run)")
    parser.add_argument("--k", type=int, default=8)
    smoke = add_smoke(parser, argv)
    args = parser.parse_args(argv)
    if smoke:  # no finished run to read: the check itself on three made-up regions
        return print_rows(check(*SMOKE_LABELS))
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer

    run_dir = Path(args.run_dir).resolve()
    corpus = load_corpus(str(Path(args.corpus) if args.corpus else run_dir.parent / "csabstruct.csv"))
    explorer = Explorer(run_dir, corpus)
    labels = explorer.region_labels(args.k)
    rows = check(labels, explorer.region_numbers(args.k), corpus.texts())
    print(f"{len(explorer.meta)} papers, {args.k} regions; weights {explorer.weights}\n")
    print_rows(rows)
    print("\nDrawn on the map: " + " | ".join(explorer_names(labels)))


def print_rows(rows: list[dict]) -> None:
    """The table of labels, each term's shares, and whether each passes."""
    print("| region | papers | label | each term: share of the region's abstracts (of the map's) | passes |")
    print("|---|---:|---|---|---|")
    for r in rows:
        terms = "; ".join(f"{t} {a:.0%} ({b:.0%})" for t, a, b in r["shares"]) or "(mixed)"
        print(f"| {r['number']} | {r['size']} | {r['text']} | {terms} | {'yes' if r['passes'] else 'no'} |")
    print(f"\nmixed: {sum(r['mixed'] for r in rows)} of {len(rows)}; every label passes: "
          f"{all(r['passes'] for r in rows)}")


def explorer_names(labels) -> list[str]:
    """The names the map draws over its regions (`mapview.label_source_data`)."""
    from workbench.maps.mapview import label_source_data

    return label_source_data(labels)["name"]


if __name__ == "__main__":
    main()
