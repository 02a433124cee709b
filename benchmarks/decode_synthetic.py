"""Does a decoded text state the right aspect? A second corpus with an exact answer (scripts/synthetic_corpus.py).

On synthetic clinical abstracts every paper's disease, method and population are known,
and they vary independently. Stages 02 and 03 run in frozen mode (as `make demo` on a
CPU), the retrieval decoder is built from the train and validation papers, and each test
paper's aspect embedding is decoded. The decoded statement comes from a known paper, so we
can check whether it states the test paper's own value of that aspect (chance: 1/6):

    (r) ours: the retrieval decoder reading the unified model's aspect embedding;
    (b) what a user would otherwise do: take the paper nearest by the whole-abstract MiniLM
        embedding and read its statement of that aspect (its human-like summary).

Also the round trip (MRR of the test paper among all test papers; chance about 5/n).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/decode_synthetic.py [--seed 0] [--run-dir runs/synthetic-bench]
        [--train 120] [--val 40] [--test 60] [--head-steps 300] [--unified-head-steps 400] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 8 train, 4 validation and 6 test papers, 2 head steps in
stages 02 and 03, in a temporary run directory, to check that it runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from _smoke import add_smoke  # noqa: E402
from workbench.core.rundir import RunDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--run-dir", default="runs/synthetic-bench",
                        help="where stages 02-04 write (smoke mode: a temporary folder)")
    parser.add_argument("--train", type=int, default=120, help="train papers (default 120)")
    parser.add_argument("--val", type=int, default=40, help="validation papers (default 40)")
    parser.add_argument("--test", type=int, default=60, help="test papers (default 60)")
    parser.add_argument("--head-steps", type=int, default=None,
                        help="stage 02's frozen head steps (default: TrainConfig's, 300)")
    parser.add_argument("--unified-head-steps", type=int, default=None,
                        help="stage 03's frozen head steps (default: DistillConfig's, 400)")
    add_smoke(parser, run_dir=None, train=8, val=4, test=6, head_steps=2, unified_head_steps=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-synthetic-") as tmp:
        if args.run_dir is None:  # smoke mode
            args.run_dir = str(Path(tmp) / "run")
        measure(args)


def measure(args) -> None:
    import numpy as np

    from workbench.decode.decoding import build_retrieval_decoders, load_decoders, round_trip
    from workbench.embed.distill import DistillConfig, documents_with_targets, train_unified_model
    from workbench.embed.targets import compute_targets
    from workbench.embed.embeddings import embed_corpus
    from workbench.embed.head_training import sentence_supervision
    from workbench.evaluate.report import encode_texts
    from workbench.embed.aspect_training import TrainConfig, train_aspect_models
    from workbench.generate.views import collect_views, split_documents

    spec = importlib.util.spec_from_file_location("synthetic_corpus", ROOT / "scripts" / "synthetic_corpus.py")
    syn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(syn)
    aspects = syn.ASPECTS
    corpus = syn.synthetic_corpus(n_train=args.train, n_val=args.val, n_test=args.test, seed=args.seed)
    run = Path(args.run_dir)
    print(f"load average {os.getloadavg()[0]:.1f}; corpus seed {args.seed}: {args.train} train, {args.val} validation, "
          f"{args.test} test papers")
    steps02 = {} if args.head_steps is None else {"head_steps": args.head_steps}
    steps03 = {} if args.unified_head_steps is None else {"head_steps": args.unified_head_steps}
    t0 = time.perf_counter()
    train_aspect_models(aspects, run, corpus, TrainConfig(base_model="minilm", pooling="mean", mode="frozen",
                                                          **steps02),
                        val_split="validation", progress=False)
    views = collect_views(aspects, run, corpus)
    targets = compute_targets(run, views, aspects, progress=False)
    train_ids, val_ids = split_documents(sorted(documents_with_targets(targets)), corpus, "validation")
    result = train_unified_model(corpus, targets, (train_ids, val_ids), RunDir(run).unified_model,
                                 DistillConfig(base_model="minilm", pooling="mean", mode="frozen", **steps03),
                                 progress=False,
                                 run_dir=run, sentence_labels=sentence_supervision(corpus, aspects, run))
    memory = build_retrieval_decoders(run, corpus, aspects)
    print(f"stages 02-04 in {time.perf_counter() - t0:.0f}s; memory: "
          + ", ".join(f"{a} {m['statements']} statements" for a, m in memory.items()))

    docs = corpus.docs.reset_index(drop=True)
    test = docs.index[docs["split"] == "test"].to_numpy()
    known = docs.index[docs["split"] != "test"].to_numpy()
    value = {a: dict(zip(docs["doc_id"].astype(str), docs[a])) for a in aspects}
    heads = embed_corpus(result.out_dir, corpus, run, progress=False)
    whole = encode_texts("minilm", corpus.texts(), max_length=256)
    whole = whole / np.linalg.norm(whole, axis=1, keepdims=True)
    nearest_paper = known[np.argmax(whole[test] @ whole[known].T, axis=1)]
    decoders = load_decoders(run, aspects, kind="retrieval")
    print("\n| aspect | (r) retrieval decoder: right value | (b) nearest paper by whole abstract: right value "
          "| round-trip MRR (r) | round-trip MRR (b) |")
    print("|---|---:|---:|---:|---:|")
    for a in aspects:
        found = decoders[a].decode(heads[a][test])
        ours = np.mean([value[a][o["doc_id"]] == docs.at[i, a] for o, i in zip(found, test)])
        base_texts = [docs.at[j, f"summary_{a}"] for j in nearest_paper]
        base = np.mean([docs.at[j, a] == docs.at[i, a] for j, i in zip(nearest_paper, test)])
        model = RunDir(run).aspect_model(a)
        mrr = {}
        for name, texts in (("r", [o["text"] for o in found]), ("b", base_texts)):
            rt = round_trip(texts, heads[a][test], model, a, heads[a][test])
            mrr[name] = float(np.mean(1.0 / rt["rank"]))
        print(f"| {a} | {ours:.2f} | {base:.2f} | {mrr['r']:.2f} | {mrr['b']:.2f} |")
    print(f"\nchance: {1 / 6:.2f} for the value, about {5 / len(test):.2f} for the MRR; "
          f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
