"""How long a refit after a few new marks takes on a 4,000-paper corpus, and the map's first frame after it.

    python benchmarks/teach_speed.py [--papers 4000] [--sentences 8] [--smoke]

The speed bar of teaching: on a 4,000-paper corpus (frozen mode, feature cache filled) a refit after 5 new
marks gives new embeddings within 2 s, and the map's first frame follows within 2 s after that. The corpus
here is synthetic (the feature cache stands filled: MiniLM-sized 384-d sentence vectors, `--sentences` per
abstract, three aspects planted along three directions), the floor `fit_floor`'s without the phrases step
(which reads word vectors, not sentences: its time is in the fit, not the refit). 30 answers train the first
fit, then 5 more come, and `TeachLoop.refit` plus `embeddings` are timed, then `AspectMap.with_embeddings`
to its first frame (`on_frame`) and to the settled map, as the widget's refit runs them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402

from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.embed.aspectfile import AspectPrototypes  # noqa: E402
from workbench.embed.features import DocumentFeatures  # noqa: E402
from workbench.embed.floor import STEPS, fit_floor  # noqa: E402
from workbench.maps.tsne import AspectMap  # noqa: E402
from workbench.teach.loop import TeachLoop  # noqa: E402

H, ASPECTS = 384, ["challenge", "approach", "outcome"]


def synthetic(papers: int, sentences: int, seed: int = 0):
    """DocumentFeatures with sentence k of each abstract leaning to aspect k mod 3 (a planted structure), the
    aspects' directions, and each sentence's aspect (what a simulated user answers)."""
    rng = np.random.default_rng(seed)
    directions = unit_rows(rng.normal(size=(len(ASPECTS), H)).astype(np.float32))
    topics = unit_rows(rng.normal(size=(40, H)).astype(np.float32))  # papers share topics: a map has clusters
    sents, texts, truth = [], [], {}
    for i in range(papers):
        topic = topics[rng.integers(len(topics), size=len(ASPECTS))]
        rows = [directions[k % 3] + 1.5 * topic[k % 3] + 0.8 * rng.normal(size=H) for k in range(sentences)]
        sents.append(unit_rows(np.asarray(rows, np.float32)))
        texts.append([f"Paper {i} says thing {k} about aspect {ASPECTS[k % 3]}." for k in range(sentences)])
        truth.update({(f"p{i}", k): ASPECTS[k % 3] for k in range(sentences)})
    whole = unit_rows(np.stack([s.mean(0) for s in sents]))
    return DocumentFeatures(whole, sents, texts), directions, truth


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papers", type=int, default=4000)
    parser.add_argument("--sentences", type=int, default=8, help="sentences per abstract")
    parser.add_argument("--first", type=int, default=30, help="answers before the timed refit")
    parser.add_argument("--new", type=int, default=5, help="new answers the timed refit learns")
    add_smoke(parser, argv, papers=60, first=6)
    args = parser.parse_args(argv)
    print(f"# Teaching: refit speed ({args.papers} papers x {args.sentences} sentences, {H}-d)\n\nmatrix product: "
          f"{matmul_gflops():.0f} GFLOP/s; load {os.getloadavg()[0]:.1f}")
    features, directions, truth = synthetic(args.papers, args.sentences)
    ids = [f"p{i}" for i in range(args.papers)]
    protos = AspectPrototypes(ASPECTS, directions.copy(), directions, np.zeros_like(directions))
    t = time.perf_counter()
    floor = fit_floor(features, protos, None, steps=[s for s in STEPS if s != "phrases"])
    loop = TeachLoop(features, floor, ids)
    print(f"first use: floor fitted and loop built in {time.perf_counter() - t:.1f} s")
    for q in loop.next_questions(args.first):
        loop.answer(q, truth[q.doc_id, q.index])
    loop.refit()
    base = loop.embeddings()
    amap = AspectMap.fit(base, None, method="opentsne", seed=0)
    for q in loop.next_questions(args.new):
        loop.answer(q, truth[q.doc_id, q.index])
    t = time.perf_counter()
    loop.refit()
    new = loop.embeddings()
    refit = time.perf_counter() - t
    frame = {}
    t = time.perf_counter()
    amap.with_embeddings(new, on_frame=lambda coords: frame.setdefault("at", time.perf_counter() - t))
    settled = time.perf_counter() - t
    print("\n| step | seconds | bar |\n|---|---:|---:|\n"
          f"| refit after {args.new} new marks, new embeddings | {refit:.2f} | 2 |\n"
          f"| the map's first frame after that (in the kernel) | {frame.get('at', float('nan')):.2f} | 2 |\n"
          f"| the settled map | {settled:.2f} | |")


if __name__ == "__main__":
    main()
