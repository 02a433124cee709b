"""Do the CPU-first aspect heads beat the encoder they start from? ACLSum test split, two backbones, two truths.

For each backbone (MiniLM, the demo's; mpnet), stages 02 and 03 run in frozen mode on
ACLSum's train and validation splits exactly as `make demo` runs them (the human views and
highlights of train and validation; no LLM summaries, so the figure does not depend on
the tiny generator), then the 100 test papers are embedded. Rows: each unified head and
the backbone's whole-abstract embedding; columns: the ground truth of each aspect, the
test papers' human summaries compared by a reference encoder (mpnet, as stage 06; and
MiniLM, so that nothing is tuned to one encoder). Cells: mean per-paper Spearman x100.
Also printed: the A.6 permutation p-value of each head against the whole-abstract
embedding on its own aspect, the seconds each stage took, and the goals of issue 10.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/heads.py [--backbones minilm mpnet] [--permutations 200]
        [--json results.json] [--corpus aclsum] [--head-steps 300] [--unified-head-steps 400] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 2 train, 2 validation and 4 test papers, MiniLM as the backbone
and the truth (the demo's, and five times lighter than mpnet), 2 head steps in stages 02 and 03, 2
permutations, to check that it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.embed.distill import DistillConfig, documents_with_targets, train_unified_model  # noqa: E402
from workbench.embed.targets import compute_targets  # noqa: E402
from workbench.embed.embeddings import embed_corpus  # noqa: E402
from workbench.measures.evaluation import cosine_similarity_matrix, permutation_test, rowwise_spearman  # noqa: E402
from workbench.embed.head_training import sentence_supervision  # noqa: E402
from workbench.evaluate.report import encode_texts, ground_truths  # noqa: E402
from workbench.embed.aspect_training import TrainConfig, train_aspect_models  # noqa: E402
from workbench.generate.views import collect_views, split_documents  # noqa: E402

from _smoke import add_smoke  # noqa: E402
from workbench.core.rundir import RunDir

ASPECTS = ["challenge", "approach", "outcome"]
GOALS = {"mpnet": (55, 52, 40)}  # issue 10: the diagonal with an mpnet backbone


def run_backbone(backbone: str, corpus, run_dir: Path, head_steps: int | None = None,
                 unified_head_steps: int | None = None) -> tuple[dict, dict]:
    """Stages 02 + 03 in frozen mode; returns (test embeddings {aspect: [n, D]}, seconds per stage).

    head_steps, unified_head_steps: the frozen heads' step budgets (None: the configs' defaults).
    """
    steps02 = {} if head_steps is None else {"head_steps": head_steps}
    steps03 = {} if unified_head_steps is None else {"head_steps": unified_head_steps}
    t0 = time.perf_counter()
    train_aspect_models(ASPECTS, run_dir, corpus,
                        TrainConfig(base_model=backbone, pooling="mean", mode="frozen", **steps02),
                        val_split="validation", progress=False)
    t1 = time.perf_counter()
    views = collect_views(ASPECTS, run_dir, corpus)
    targets = compute_targets(run_dir, views, ASPECTS, progress=False)
    train_ids, val_ids = split_documents(sorted(documents_with_targets(targets)), corpus, "validation")
    labels = sentence_supervision(corpus, ASPECTS, run_dir)
    result = train_unified_model(corpus, targets, (train_ids, val_ids), RunDir(run_dir).unified_model,
                                 DistillConfig(base_model=backbone, pooling="mean", mode="frozen", **steps03),
                                 progress=False,
                                 run_dir=run_dir, sentence_labels=labels)
    t2 = time.perf_counter()
    test = corpus.subset(where=corpus.docs["split"] == "test")
    emb = embed_corpus(result.out_dir, test, run_dir, progress=False)
    t3 = time.perf_counter()
    return emb, {"02 teachers": t1 - t0, "03 heads (targets + training)": t2 - t1,
                 f"embed {len(test)} test papers": t3 - t2,
                 "best step": result.best_step, "gates": {a: round(float(__import__("torch").sigmoid(
                     result.load(device="cpu").heads[a].blend.gate.detach())), 3) for a in ASPECTS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbones", nargs="+", default=["minilm", "mpnet"])
    parser.add_argument("--truths", nargs="+", default=["mpnet", "minilm"])
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--json", default=None)
    parser.add_argument("--corpus", default="aclsum", help="default: ACLSum, all splits")
    parser.add_argument("--head-steps", type=int, default=None,
                        help="stage 02's frozen head steps (default: TrainConfig's, 300)")
    parser.add_argument("--unified-head-steps", type=int, default=None,
                        help="stage 03's frozen head steps (default: DistillConfig's, 400)")
    add_smoke(parser, corpus="aclsum:train[:2],validation[:2],test[:4]", backbones=["minilm"], truths=["minilm"],
              permutations=2, head_steps=2, unified_head_steps=2)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    corpus = load_corpus(args.corpus)
    test = corpus.subset(where=corpus.docs["split"] == "test")
    truths = {ref: ground_truths(test, ASPECTS, reference=ref) for ref in args.truths}
    out = {}
    for backbone in args.backbones:
        run_dir = Path(tempfile.mkdtemp(prefix=f"heads-{backbone}-"))
        try:
            emb, seconds = run_backbone(backbone, corpus, run_dir, args.head_steps, args.unified_head_steps)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        whole = encode_texts(backbone, test.texts(), max_length=256)
        rows = {**{f"{a} head": emb[a] for a in ASPECTS}, "whole abstract": whole}
        sims = {name: cosine_similarity_matrix(v) for name, v in rows.items()}
        out[backbone] = {"seconds": seconds, "truths": {}}
        print(f"\n=== backbone {backbone}: {seconds}")
        for ref, truth in truths.items():
            table = {name: [100 * float(np.nanmean(rowwise_spearman(s, truth[a]))) for a in ASPECTS]
                     for name, s in sims.items()}
            p = {a: permutation_test(sims[f"{a} head"], sims["whole abstract"], truth[a], args.permutations)["p_value"]
                 for a in ASPECTS}
            gain = {a: table[f"{a} head"][i] - table["whole abstract"][i] for i, a in enumerate(ASPECTS)}
            best = {a: max(table, key=lambda n: table[n][i] if n != "whole abstract" else -1) == f"{a} head"
                    for i, a in enumerate(ASPECTS)}
            out[backbone]["truths"][ref] = {"spearman x100": table, "p vs whole": p, "gain": gain,
                                            "own head best": best}
            print(f"\n-- ground truth: human summaries compared by {ref} (mean per-paper Spearman x100)")
            print(f"{'embedding':18s}" + "".join(f"{a:>11s}" for a in ASPECTS))
            for name, values in table.items():
                print(f"{name:18s}" + "".join(f"{v:11.1f}" for v in values))
            print(f"{'gain over whole':18s}" + "".join(f"{gain[a]:+11.1f}" for a in ASPECTS))
            print(f"{'A.6 p vs whole':18s}" + "".join(f"{p[a]:11.3f}" for a in ASPECTS))
            print(f"{'own head best':18s}" + "".join(f"{str(best[a]):>11s}" for a in ASPECTS))
            goal = GOALS.get(backbone) if ref == "mpnet" else None
            if goal:
                print(f"{'goal (issue 10)':18s}" + "".join(f"{g:11d}" for g in goal))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
