"""Weight changes on the pane's 10,000-paper map: each paper's searched neighbours re-ranked, against a new search.

    .venv/bin/python benchmarks/map_steps.py [--papers 10000] [--seeds 0 1] [--queries 2000] [--smoke]

The map of tests/test_jupyterlab.py's 10,000-paper pane (three aspects of 64 dimensions, 12 clusters each, fitted
at 0.5 / 0.3 / 0.2 by `AspectMap.fit(method="opentsne")`), then each change below from that map, twice: as the
engine does it (`KNNEngine._reranked`: a change whose re-ranked 10 nearest keep at least `engine.RERANK_MIN` of
the searched ones searches nothing) and with every change searched (RERANK_MIN above 1, the engine before). Per
change: the first frame's time (`on_frame`), the settled map's, and its score, the share of each of --queries
random papers' 10 nearest (exact weighted cosine) among its 50 nearest on the map (`map_million.score`). Run alone;
the map computes on the cores free when it starts (WORKBENCH_THREADS sets them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._smoke import add_smoke  # noqa: E402
from workbench.maps import engine, tsne  # noqa: E402

from map_million import score as map_score, true_neighbours  # noqa: E402  (the same score as at a million)

W_FIT = {"task": 0.5, "method": 0.3, "outcome": 0.2}
CHANGES = {"a step of 0.05 (outcome)": {"task": 0.5, "method": 0.3, "outcome": 0.25},
           "task typed to 1.0": {"task": 1.0, "method": 0.3, "outcome": 0.2},
           "0.4 / 0.35 / 0.25": {"task": 0.4, "method": 0.35, "outcome": 0.25},
           "0.35 / 0.35 / 0.3": {"task": 0.35, "method": 0.35, "outcome": 0.3},
           "0.2 / 0.3 / 0.5": {"task": 0.2, "method": 0.3, "outcome": 0.5}}


def pane_map_embeddings(n: int, seed: int) -> dict:
    """The pane test's synthetic aspects: 12 cluster centres of 64 dimensions per aspect, noise 0.6, unit rows."""
    rng = np.random.default_rng(seed)
    emb = {}
    for a in W_FIT:
        e = rng.normal(size=(12, 64))[rng.integers(12, size=n)] + 0.6 * rng.normal(size=(n, 64))
        emb[a] = e / np.linalg.norm(e, axis=1, keepdims=True)
    return emb


def change(base, weights: dict, rerank_min: float) -> tuple[float, float, object]:
    """(first frame s, settled s, the settled map) of one weight change from `base` at `rerank_min`."""
    kept, engine.RERANK_MIN = engine.RERANK_MIN, rerank_min
    frames = []
    try:
        t0 = time.perf_counter()
        moved = base.with_weights(weights, on_frame=lambda c: frames.append(time.perf_counter() - t0))
        settled = time.perf_counter() - t0
    finally:
        engine.RERANK_MIN = kept
    if moved.preparing is not None:  # the click caches, built in the background: not running beside the next change
        moved.preparing.join()
    return frames[0] if frames else settled, settled, moved


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--papers", type=int, default=10_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--queries", type=int, default=2000)
    add_smoke(p, papers=600, seeds=[0], queries=100)
    args = p.parse_args()
    tsne.EXAGGERATION_ITER = 50  # as the pane test fits it
    print(f"{args.papers} papers; first frame / settled seconds, score (share of the 10 nearest among the 50 "
          f"nearest on the map); re-ranked where its lists keep {engine.RERANK_MIN:.2f} or more")
    for seed in args.seeds:
        base = tsne.AspectMap.fit(pane_map_embeddings(args.papers, seed), W_FIT, method="opentsne", n_iter=50)
        queries = np.sort(np.random.default_rng(1).choice(args.papers, min(args.queries, args.papers), False))
        for name, weights in CHANGES.items():
            s_first, s_settled, searched = change(base, weights, 2.0)
            truth = true_neighbours(searched.features(), queries)  # the new weights' 10 nearest: both maps' truth
            r_first, r_settled, ours = change(base, weights, engine.RERANK_MIN)
            how = "re-ranked" if ours._cache.get(engine.SEARCHED_KEY) is not ours.known_neighbours()[0] else "searched"
            s_score, r_score = (map_score(m.coords, queries, truth) for m in (searched, ours))
            print(f"seed {seed}, {name}: searched {s_first:.2f} / {s_settled:.2f} s, {s_score:.4f}; "
                  f"ours ({how}) {r_first:.2f} / {r_settled:.2f} s, {r_score:.4f}; time ratio "
                  f"searched / ours: first frame {s_first / r_first:.2f}x, settled {s_settled / r_settled:.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
