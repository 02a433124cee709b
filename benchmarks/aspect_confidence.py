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
        [--rows rows.csv] [--memory weighed,MARGIN,all:MARGIN,...] [--marks-out marks.csv --marks 30]

--memory chooses the retrieval memory's own sentences again, in memory, before the taps: "weighed" takes each
paper's sentence its aspect's head weighs most (the rule before stage 04 read the aspect margin), a number the
sentence with the highest margin where it reaches that number, for the heads that read marks (stage 04's rule at
another `MEMORY_MARGIN`), "all:NUMBER" the same for every head, the floor's too (to sweep them on dev; several,
comma-separated, are tapped in turn). Without it, the memory stage 04 wrote.

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


def rechoose_memory(explorer, least: float | None, every_head: bool = False) -> dict[str, tuple[int, int]]:
    """Each retrieval memory with its papers' own sentences chosen again, in memory (the run untouched): at
    `least` (`aspect_margin.stating_sentences`, as stage 04 chooses them at `MEMORY_MARGIN`: by margin where the
    head reads marks, every_head: on every head), or, with None, the sentence each head weighs most
    (`retrieval.own_sentences`, the rule before the margin). {aspect: (papers without another statement, own
    sentences now held)}."""
    from workbench.decode.aspect_margin import stating_sentences
    from workbench.decode.retrieval import RetrievalDecoder, StatementMemory, memory_papers, own_sentences

    decoders = {a: d for a, d in (explorer.decoders or {}).items() if isinstance(d, RetrievalDecoder)}
    abstracts = dict(zip(map(str, explorer.corpus.ids), explorer.corpus.texts()))
    allowed = [d for d in memory_papers(explorer.run_dir.path, explorer.corpus) if d in abstracts]
    missing = {a: [d for d in allowed if d not in {p for p, s in zip(dec.memory.doc_ids, dec.memory.sources)
                                                   if s != "sentence"}] for a, dec in decoders.items()}
    papers = list(dict.fromkeys(d for ds in missing.values() for d in ds))
    texts = [abstracts[d] for d in papers]
    if least is None:
        found = [{a: (s, 0.0) for a, s in f.items()} for f in own_sentences(explorer.unified(), texts, list(decoders))]
    else:
        found = stating_sentences(explorer.unified(), texts, list(decoders), least, every_head)
    chosen = dict(zip(papers, found))
    counts = {}
    for a, dec in decoders.items():
        old = dec.memory.subset([s != "sentence" for s in dec.memory.sources])
        new = [(d, chosen[d][a][0]) for d in missing[a] if a in chosen.get(d, {})]
        vectors = dec.embed([t for _, t in new]) if new else np.zeros((0, old.vectors.shape[1]), np.float32)
        dec.memory = StatementMemory(a, old.texts + [t for _, t in new], old.doc_ids + [d for d, _ in new],
                                     old.sources + ["sentence"] * len(new), np.vstack([old.vectors, vectors]),
                                     encoder=dec.memory.encoder)
        counts[a] = (len(missing[a]), len(new))
    return counts


def open_run(run_dir: Path, corpus_csv: Path):
    """The pane's explorer of the run (its corpus the run's export)."""
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer

    return Explorer(run_dir, load_corpus(str(corpus_csv)))


def tap_rows(explorer, split: str, memory: str | None = None) -> pd.DataFrame:
    """One row per shown text of a tap on each paper of `split`: aspect, source, rank, margin, today's and the
    pane's level, and whether the from-paper's human role matches the aspect. memory: the run's memory (None),
    or its own sentences chosen again (`rechoose_memory`): "weighed" (the sentence weighed most) or a margin."""
    labels = csabstruct.load()
    by_id = {str(d): (s, r) for d, s, r in zip(labels["doc_id"], labels["sentences"], labels["roles"])}
    tapped = set(labels.loc[labels["split"] == split, "doc_id"].astype(str))
    if memory is not None:
        counts = rechoose_memory(explorer, None if memory == "weighed" else float(memory.removeprefix("all:")),
                                 memory.startswith("all:"))
        print(f"\nmemory {memory}: own sentences held of the papers without another statement: "
              + ", ".join(f"{a} {held} of {n}" for a, (n, held) in counts.items()))
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
    parser.add_argument("--memory", default=None,
                        help="choose the memory's own sentences again before the taps: 'weighed' (the sentence each "
                             "head weighs most, the rule before the margin), a least aspect margin for the heads that "
                             "read marks, or all:MARGIN for every head; comma-separated for a sweep")
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
    explorer = open_run(run_dir, corpus)
    for memory in (args.memory or "").split(",") if args.memory else [None]:
        report(tap_rows(explorer, args.split, memory), args, memory)
    print(f"\nmatrix product at the end: {matmul_gflops():.0f} GFLOP/s")


def report(rows: pd.DataFrame, args, memory: str | None) -> None:
    """The levels' table of one memory's taps (and its rows to --rows, suffixed by the memory where several)."""
    if args.rows:
        path = Path(args.rows)
        rows.to_csv(path if not memory or "," not in args.memory else path.with_stem(f"{path.stem}-{memory}"),
                    index=False)
    llm = rows[rows["source"] == "llm"]
    unknown = rows[(rows["source"] != "llm") & rows["matches"].isna()]
    print(f"\n{rows['tapped'].nunique()} {args.split} papers tapped, {len(rows)} texts: {len(llm)} LLM answers "
          f"(apart), {len(unknown)} sentences without a matched role (left out), sources "
          f"{rows['source'].value_counts().to_dict()}\n")
    print_levels(rows)
    if len(llm):
        print("LLM answers by the pane's level: " + str(llm["pane"].value_counts().to_dict()))


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
