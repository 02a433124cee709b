"""CSAbstruct run as a user would: the whole file through all six stages, its test papers judged by people's labels.

A user's own corpus has no human summaries. CSAbstruct (`data/csabstruct/`, 2,155 real computer-science
abstracts) is exported as such a user's file would be (an id and the abstract, nothing else) and run with
`params/own-corpus.yaml`'s settings and the `acl` preset: stage 01 writes no summary with the packaged 135M model
(`summaries: auto`; `--with-summaries` has it summarise a seeded sample of 150 abstracts, as it did before), and
stages 02-06 embed every abstract. No label reaches the run.

Then the run's unified model (as stage 03 left it: trained heads, or the aspect-file floor where its check
replaced one) embeds the 193 test abstracts, and each head is judged against the sentences people marked for
its aspect (challenge ~ background + objective, approach ~ method, outcome ~ result), pooled by MiniLM and,
separately, by mpnet: mean per-paper Spearman x100 of the cosine similarities, over the test papers that have
the aspect. Beside it: MiniLM's whole abstract (the encoder the heads start from) and position pooling (first
40% of the sentences challenge, last 25% outcome, the rest approach).

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/csabstruct_run.py [--run-dir runs/csabstruct] [--score-only]

--score-only scores an existing run. A run already there resumes (finished stages are skipped). --taps also
reads what the pane shows for a tap on each test paper (every aspect, the paper's own statements hidden, as
for a tap): each text's kind, its confidence level, the tapped paper's rank among all papers for it, and
whether it carries a prompt artefact (`decode.artefacts`). --cost N times stages 02 and 03 alone on N abstracts:
the papers stage 01 summarised in the run, then the export's first other papers up to N, in a run directory
beside it (`<run-dir>-N`) that starts from a copy of the run's stage-01 output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import csabstruct  # noqa: E402
from _machine import matmul_gflops  # noqa: E402
from families import TRUTH_ENCODERS, pooled_truth, position_pooling, spearman_on  # noqa: E402
from workbench.core.rundir import RunDir  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.embed.checkpoints import load_model  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone  # noqa: E402


def run_pipeline(run_dir: Path, corpus: Path, summaries: bool = False) -> float:
    """Run the six stages as a user would (`params/own-corpus.yaml`, `acl`); the seconds it took."""
    t0 = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "workbench"), "run",
                    "--params", str(ROOT / "params" / "own-corpus.yaml"), "--run-dir", str(run_dir),
                    "-p", f"corpus={corpus}", "-p", "aspects=acl", "--no-report",
                    *(["-p", "01_generate.summaries=on"] if summaries else [])], check=True)
    return time.perf_counter() - t0


def time_stages_02_03(run_dir: Path, corpus: Path, n: int) -> float:
    """Seconds of stages 02 and 03 on `n` abstracts of the export, with the run's stage-01 output (see --cost)."""
    import shutil

    import pandas as pd
    from workbench.generate.summaries import CURRENT, summaries_frame

    frame = pd.read_csv(corpus, dtype={"doc_id": str})
    summarised = set(summaries_frame(run_dir)["doc_id"].astype(str))
    others = frame.loc[~frame["doc_id"].isin(summarised), "doc_id"].head(max(n - len(summarised), 0))
    chosen = frame[frame["doc_id"].isin(summarised | set(others))]
    target = run_dir.parent / f"{run_dir.name}-{n}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in (RunDir(run_dir).summaries.name, CURRENT):
        shutil.copy2(run_dir / name, target / name)
    chosen.to_csv(target.parent / f"{target.name}.csv", index=False)
    t0 = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "workbench"), "run", "--params",
                    str(ROOT / "params" / "own-corpus.yaml"), "--run-dir", str(target), "--stages", "02,03",
                    "-p", f"corpus={target.parent / f'{target.name}.csv'}", "-p", "aspects=acl", "--no-report"],
                   check=True)
    print(f"stages 02 and 03 on {len(chosen)} abstracts ({len(summarised)} summarised by stage 01): "
          f"{time.perf_counter() - t0:.0f} s")
    return time.perf_counter() - t0


def score(run_dir: Path) -> dict:
    """{row: {"<aspect> <encoder>": Spearman x100}} on the test papers."""
    frame = csabstruct.load("test")
    run = RunDir(run_dir)
    model = load_model(run.unified_model, run_dir=run)
    aspects = list(model.aspects)
    texts = frame["abstract"].tolist()
    caches = {enc: FeatureCache(None, FrozenBackbone(enc)) for enc in TRUTH_ENCODERS}
    truths = {}
    for a in aspects:
        groups = [[s for s, r in zip(ss, rr) if r in csabstruct.ASPECT_ROLES[a]]
                  for ss, rr in zip(frame["sentences"], frame["roles"])]
        for enc in TRUTH_ENCODERS:
            truths[a, enc] = pooled_truth(caches[enc], groups)
    features = caches["minilm"].documents(texts)
    rows = {"MiniLM whole abstract": {a: unit_rows(features.whole) for a in aspects},
            "position pooling": position_pooling(features, aspects),
            "the run's unified model": model.encode(texts)}
    return {name: {f"{a} {enc}": spearman_on(emb[a], *truths[a, enc]) for a in aspects for enc in TRUTH_ENCODERS}
            for name, emb in rows.items()}, aspects


def tap_readouts(run_dir: Path, corpus_path: Path) -> None:
    """Print, over the test papers' taps, how many texts of each kind and level, and the median rank per level."""
    import pandas as pd
    from workbench.data.corpus import load_corpus
    from workbench.decode.artefacts import artefact_reason
    from workbench.maps.explore import Explorer

    test_ids = set(csabstruct.load("test")["doc_id"].astype(str))
    explorer = Explorer(run_dir, load_corpus(str(corpus_path)))
    rows = []
    for i, doc_id in enumerate(explorer.meta["doc_id"].astype(str)):
        if doc_id in test_ids:
            frame = explorer.describe({a: explorer.embeddings[a][i] for a in explorer.aspects}, exclude=doc_id,
                                      point="paper")
            for _, row in frame.iterrows():
                rows.append({"aspect": row["aspect"], "kind": row["kind"], "level": row.get("level") or "none",
                             "rank": row.get("round-trip rank"), "artefact": artefact_reason(str(row["decoded"]))})
    taps = pd.DataFrame(rows)
    print(f"\nTaps on the {taps.shape[0] // max(len(explorer.aspects), 1)} test papers, every aspect "
          f"({len(taps)} texts, {len(explorer.meta)} papers on the map): texts with an artefact "
          f"{int(taps['artefact'].notna().sum())}\n")
    table = taps.groupby(["kind", "level"]).agg(texts=("rank", "size"), median_rank=("rank", "median"))
    print("| kind | level | texts | median rank of the tapped paper |\n|---|---|---:|---:|")
    for (kind, level), r in table.iterrows():
        print(f"| {kind} | {level} | {int(r['texts'])} | {r['median_rank']:.0f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/csabstruct")
    parser.add_argument("--score-only", action="store_true")
    parser.add_argument("--taps", action="store_true", help="also read the pane's text for a tap on each test paper")
    parser.add_argument("--with-summaries", action="store_true",
                        help="stage 01 summarises 150 abstracts with the packaged 135M model (params: auto, off)")
    parser.add_argument("--cost", type=int, default=None, metavar="N",
                        help="time stages 02 and 03 alone on N abstracts of a finished run (nothing else)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    print(f"# CSAbstruct as a user's corpus\n\nmatrix product: {matmul_gflops():.0f} GFLOP/s")
    if args.cost:
        time_stages_02_03(run_dir, run_dir.parent / "csabstruct.csv", args.cost)
        print(f"matrix product at the end: {matmul_gflops():.0f} GFLOP/s")
        return
    if not args.score_only:
        corpus = csabstruct.export(run_dir.parent / "csabstruct.csv")
        print(f"all six stages: {run_pipeline(run_dir, corpus, args.with_summaries):.0f} s")
    scores, aspects = score(run_dir)
    guard = json.loads((RunDir(run_dir).guard).read_text()) if RunDir(run_dir).guard.exists() else {}
    kept = {a: guard.get("aspects", {}).get(a, {}).get("kept", "?") for a in aspects}
    print("\nTest papers (193), mean per-paper Spearman x100, MiniLM / mpnet truth; stage 03 kept: "
          + ", ".join(f"{a} {k}" for a, k in kept.items()) + "\n")
    print("| embedding | " + " | ".join(aspects) + " |")
    print("|---|" + "---|" * len(aspects))
    for name, s in scores.items():
        print(f"| {name} | " + " | ".join(f"{s[f'{a} minilm']:.1f} / {s[f'{a} mpnet']:.1f}" for a in aspects) + " |")
    if args.taps:
        tap_readouts(run_dir, run_dir.parent / "csabstruct.csv")
    print(f"\nmatrix product at the end: {matmul_gflops():.0f} GFLOP/s")


if __name__ == "__main__":
    main()
