"""Stage 06's decoding table (Table 3): shared work against the plain way, measured in one run.

On the held-out ACLSum test papers of a finished run (default runs/aclsum-demo, as `make demo`
leaves it), with its retrieval decoders:

BERTScore of the decoded texts against the human summaries (matching and shuffled pairs,
every aspect), together with the ground-truth pass over those summaries that stage 06 makes
anyway:
  (a) the plain way: the summaries through mpnet for the truths (`FrozenBackbone.embed`), then
      `bert_score.BERTScorer` (mpnet, layer 9), which reads summaries and decoded texts again;
  (b) the workbench: one pass over the summaries gives the truths' vectors and keeps their
      token vectors (`bertscore.read`), then `bertscore.f1` reads only the decoded texts.
Perplexity of the human summaries of the first --docs papers, matching, shuffled and
unconditioned (what `decoding_report` asks):
  (c) the plain way: one request after another, each text read with its prompt (`_nll_whole`);
  (d) the workbench: `perplexities`, each distinct prompt read once for every request (cascade).

Each pair runs in turn, --repeats rounds (order rotated), nothing cached between rounds;
medians reported, with the largest difference between the two ways' numbers.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/evaluate.py [--run runs/aclsum-demo] [--docs 10] [--repeats 2]
        [--corpus aclsum] [--aspects challenge approach outcome] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): a tiny run with untrained heads and retrieval decoders built
in a temporary folder (3 known and 3 test papers, one aspect, one statement in the LM's prompt),
perplexity of 2 papers, 1 round, to check that it runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from workbench.decode import bertscore as bs  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.decode.decoding import load_decoders  # noqa: E402
from workbench.decode.faithfulness import derangement  # noqa: E402
from workbench.embed.features import FrozenBackbone  # noqa: E402
from workbench.core.models import resolve_model  # noqa: E402
from workbench.evaluate.report import embedding_rows, evaluation_corpus  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402

from _smoke import add_smoke, tiny_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/aclsum-demo",
                        help="a finished run (smoke mode: a tiny run made in a temporary folder)")
    parser.add_argument("--corpus", default="aclsum", help="the run's corpus (default aclsum)")
    parser.add_argument("--docs", type=int, default=10, help="papers whose perplexity is scored (make demo: 10)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--aspects", nargs="+", default=None, help="default: every aspect of the acl set")
    add_smoke(parser, run=None, corpus="aclsum:validation[:3],test[:3]", aspects=["challenge"], docs=2, repeats=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        if args.run is None:  # smoke mode
            args.run = str(tiny_run(Path(tmp) / "run", args.corpus, args.aspects, decoders=True, context=1))
        measure(args)


def measure(args) -> None:
    import bert_score
    import torch

    run = Path(args.run)
    names = args.aspects or load_aspects("acl").names
    docs, _ = load_corpus(args.corpus).drop_invalid()
    held = evaluation_corpus(docs, run, "test")
    frame = held.docs.reset_index(drop=True)
    emb = {a: unit_rows(v) for a, v in embedding_rows(run, held, names, baselines=[])["unified"].items()}
    decoders = load_decoders(run, names)
    refs = {a: frame[f"summary_{a}"].tolist() for a in names}
    decoded = {a: [c[0] for c in decoders[a].describe(emb[a], greedy=True, max_new_tokens=48)] for a in names}
    n = len(frame)
    perm = derangement(n, 0)
    summaries = [t for a in names for t in refs[a]]
    cands = [t for a in names for t in decoded[a] + [decoded[a][j] for j in perm]]
    pair_refs = [t for a in names for t in refs[a] * 2]
    print(f"{args.run}: {n} test papers, {len(names)} aspects; {len(summaries)} summaries, "
          f"{len(set(cands))} distinct decoded texts; torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f}")

    mpnet = FrozenBackbone("mpnet")
    mpnet.embed(summaries[:8])  # load once, outside the timings
    scorer = bert_score.BERTScorer(model_type=resolve_model("mpnet").path, num_layers=9, rescale_with_baseline=False)

    def plain_bertscore():
        mpnet.embed(summaries)  # the truths' pass
        return scorer.score(cands, [[r] for r in pair_refs])[2].numpy()

    def shared_bertscore():
        bs.TOKENS.clear()
        bs.read("mpnet", summaries, 9, pooled=True)  # the truths' pass, keeping the token vectors
        return bs.f1(cands, pair_refs, "mpnet", 9)

    m = min(args.docs, n)
    shuffle = derangement(m, 0)

    def requests(a):
        texts = refs[a][:m]
        return {"matching": (emb[a][:m], texts, None), "shuffled": (emb[a][shuffle], texts, None),
                "unconditioned": (None, texts, None)}

    def plain_perplexity():
        out = []
        for a in names:
            dec = decoders[a]
            shared, dec._nll_shared = dec._nll_shared, dec._nll_whole  # the path of models without cascade
            try:
                out += [dec.perplexities({k: v})[k] for k, v in requests(a).items()]
            finally:
                dec._nll_shared = shared
        return np.array(out)

    def shared_perplexity():
        return np.array([p for a in names for p in decoders[a].perplexities(requests(a)).values()])

    shared_perplexity()  # loads the LM and warms up both paths
    rows = [("BERTScore + truths' pass", "bert-score package", plain_bertscore, "workbench, one pass", shared_bertscore),
            (f"perplexity ({m} papers x 3 controls)", "one request at a time", plain_perplexity,
             "workbench, prompts read once", shared_perplexity)]
    print(f"\n| work | {'plain':>24} | s | {'workbench':>28} | s | speed-up | largest difference |")
    print("|---|---|---:|---|---:|---:|---:|")
    for label, plain_name, plain, ours_name, ours in rows:
        times = {plain_name: [], ours_name: []}
        values = {}
        for r in range(args.repeats):
            order = [(plain_name, plain), (ours_name, ours)]
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                t = time.perf_counter()
                values[name] = fn()
                times[name].append(time.perf_counter() - t)
        a, b = statistics.median(times[plain_name]), statistics.median(times[ours_name])
        diff = np.max(np.abs(values[plain_name] - values[ours_name]) / np.maximum(np.abs(values[plain_name]), 1e-9))
        print(f"| {label} | {plain_name:>24} | {a:.1f} | {ours_name:>28} | {b:.1f} | {a / b:.2f}x | {diff:.1e} (relative) |")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
