"""Does a shown sentence marked "high" state the aspect? The pane's tap readout on CSAbstruct, judged by its roles.

On a run of CSAbstruct as a user's corpus (`scripts/csabstruct_run.py`), every paper of a split is tapped as the
pane taps it (`Explorer.describe`, its own statements hidden). Each shown text that is a sentence of another
paper's abstract is looked up in that paper's human roles (a sentence people marked background or objective
states challenge, method approach, result outcome; `match_highlights` matches the workbench's sentence to the
human ones). Per level, today's (the rank alone, `faithfulness.rank_level`) and the pane's (`stating.stated_level`:
the rank and the aspect margin), how many sentences and what share has a matching role; LLM answers are counted
apart. "topic only" counts as low. --rows writes every text's rank, margin and role, to choose the constants
on the dev split (`--split dev`) and report them on test.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/aspect_confidence.py --run-dir runs/csabstruct --split test
        [--rows rows.csv] [--marks-out marks.csv --marks 30]

--marks-out writes a simulated user's marks instead (N train sentences of each group, challenge, approach,
outcome and none, drawn at random by the roles, seed 0): the CSV stage 03 reads as `marks` to teach the heads.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import csabstruct  # noqa: E402
from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402
from workbench.data.sentences import match_highlights, split_sentences  # noqa: E402
from workbench.decode.faithfulness import rank_level  # noqa: E402
from workbench.decode.stating import TOPIC_ONLY, stated_level  # noqa: E402

LEVELS = ("high", "medium", "low")


def role_of(sentence: str, human: list[str], roles: list[str]) -> str | None:
    """The human role of a workbench sentence: the role of the human sentence(s) it matches (the first); None."""
    hits = match_highlights(list(human), [sentence])  # which human sentences the text contains or is in
    found = [r for r, h in zip(roles, hits) if h >= 0.5]
    return found[0] if found else None


def tap_rows(run_dir: Path, corpus_csv: Path, split: str) -> pd.DataFrame:
    """One row per shown text of a tap on each paper of `split`: aspect, source, rank, margin, today's and the
    pane's level, and whether the from-paper's human role matches the aspect."""
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer

    labels = csabstruct.load()
    by_id = {str(d): (s, r) for d, s, r in zip(labels["doc_id"], labels["sentences"], labels["roles"])}
    tapped = set(labels.loc[labels["split"] == split, "doc_id"].astype(str))
    explorer = Explorer(run_dir, load_corpus(str(corpus_csv)))
    rows = []
    for i, doc_id in enumerate(explorer.meta["doc_id"].astype(str)):
        if doc_id not in tapped:
            continue
        frame = explorer.describe({a: explorer.embeddings[a][i] for a in explorer.aspects}, exclude=doc_id,
                                  point="paper")
        for _, r in frame.iterrows():
            paper = str(r.get("from paper") or "")
            role = role_of(str(r["decoded"]), *by_id[paper]) if paper in by_id and r.get("source") != "llm" \
                else None
            margin = r.get("aspect margin")
            rows.append({"tapped": doc_id, "aspect": r["aspect"], "source": r.get("source"), "from": paper,
                         "rank": r.get("round-trip rank"), "size": r.get("corpus size"),
                         "margin": None if margin is None or margin != margin else float(margin),
                         "today": rank_level(r.get("round-trip rank"), r.get("corpus size")),
                         "pane": r.get("level"), "role": role,
                         "matches": None if role is None else role in csabstruct.ASPECT_ROLES[r["aspect"]],
                         "text": r["decoded"]})
    return pd.DataFrame(rows)


def shares(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per level of `column` ("topic only" as low), the sentences and the share whose role matches the aspect."""
    known = rows[rows["source"] != "llm"].dropna(subset=["matches"])
    level = known[column].replace({TOPIC_ONLY: "low"})
    out = []
    for name in LEVELS:
        picked = known[level == name]
        out.append({"level": name, "sentences": len(picked),
                    "matching": float(picked["matches"].mean()) if len(picked) else float("nan")})
    return pd.DataFrame(out)


def relevel(rows: pd.DataFrame) -> pd.Series:
    """The pane's level of every row under the constants now in `stating` (for a sweep of them)."""
    return pd.Series([stated_level(r, s, m if m == m else None) if src != "llm" else rank_level(r, s)
                      for r, s, m, src in zip(rows["rank"], rows["size"], rows["margin"], rows["source"])],
                     index=rows.index)


def write_marks(out: Path, n: int, seed: int = 0) -> int:
    """A simulated user's marks on train papers: n sentences of each group (the aspects by their roles, and
    none), drawn at random; the workbench's own sentences, answered by the human roles they match."""
    train = csabstruct.load("train")
    pools: dict[str, list] = {a: [] for a in (*csabstruct.ASPECT_ROLES, "none")}
    for doc, human, roles in zip(train["doc_id"], train["sentences"], train["roles"]):
        for s in split_sentences(" ".join(human)):
            role = role_of(s, human, roles)
            if role is None:
                continue
            group = next((a for a, rs in csabstruct.ASPECT_ROLES.items() if role in rs), "none")
            pools[group].append((str(doc), s))
    rng = np.random.default_rng(seed)
    rows = []
    for group, pool in pools.items():
        for k in rng.choice(len(pool), size=min(n, len(pool)), replace=False):
            rows.append({"doc_id": pool[k][0], "sentence": pool[k][1], "aspect": group, "source": "person"})
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["doc_id", "sentence", "aspect", "source"])
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/csabstruct")
    parser.add_argument("--corpus", default=None, help="the run's export (default: csabstruct.csv beside the run)")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--rows", default=None, help="write every shown text's row to this CSV")
    parser.add_argument("--marks-out", default=None, help="write a simulated user's marks here and stop")
    parser.add_argument("--marks", type=int, default=30, help="marks per group for --marks-out")
    smoke = add_smoke(parser, argv)
    args = parser.parse_args(argv)
    if smoke:  # no finished run to tap: the levels' tables on made-up rows
        return print_levels(smoke_rows())
    if args.marks_out:
        print(f"{write_marks(Path(args.marks_out), args.marks)} marks written to {args.marks_out}")
        return
    run_dir = Path(args.run_dir).resolve()
    corpus = Path(args.corpus) if args.corpus else run_dir.parent / "csabstruct.csv"
    print(f"matrix product: {matmul_gflops():.0f} GFLOP/s")
    rows = tap_rows(run_dir, corpus, args.split)
    if args.rows:
        rows.to_csv(args.rows, index=False)
    llm = rows[rows["source"] == "llm"]
    unknown = rows[(rows["source"] != "llm") & rows["matches"].isna()]
    print(f"\n{rows['tapped'].nunique()} {args.split} papers tapped, {len(rows)} texts: {len(llm)} LLM answers "
          f"(apart), {len(unknown)} sentences without a matched role (left out), sources "
          f"{rows['source'].value_counts().to_dict()}\n")
    print_levels(rows)
    if len(llm):
        print("LLM answers by the pane's level: " + str(llm["pane"].value_counts().to_dict()))
    print(f"\nmatrix product at the end: {matmul_gflops():.0f} GFLOP/s")


def smoke_rows() -> pd.DataFrame:
    """Made-up shown sentences: rank, corpus size, aspect margin, whether the role matches."""
    ranks, margins = [1, 3, 40, 80, 200, 5], [3.0, 0.5, 2.8, -1.0, 1.5, None]
    rows = pd.DataFrame({"rank": ranks, "size": 500, "margin": margins, "source": "corpus",
                         "matches": [True, False, True, False, True, True]})
    rows["today"] = [rank_level(r, 500) for r in ranks]
    rows["pane"] = relevel(rows)
    return rows


def print_levels(rows: pd.DataFrame) -> None:
    """Per level, today's and the pane's: how many sentences and what share has a role matching the aspect."""
    today, pane = shares(rows, "today"), shares(rows, "pane")
    print("| level | today: sentences | today: role matches | pane: sentences | pane: role matches |")
    print("|---|---:|---:|---:|---:|")
    for t, p in zip(today.itertuples(), pane.itertuples()):
        print(f"| {t.level} | {t.sentences} | {t.matching:.0%} | {p.sentences} | {p.matching:.0%} |")
    print(f"\n'topic only' among the pane's low: {int((rows['pane'] == TOPIC_ONLY).sum())}")


if __name__ == "__main__":
    main()
