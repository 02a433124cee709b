"""Map interaction times: refit after a weight change, place one point, invert one point.

On synthetic aspect embeddings (3 aspects x 64-D; each aspect clusters the papers its own
way, 12 gaussian clusters per aspect, unit rows) of n = 250, 2000 and 10000 papers, in
one process and one run, against what a user would otherwise do:

  refit   ours: `AspectMap.with_weights` (warm start from the old map, no early
          exaggeration; 300 exact iterations, or on openTSNE maps an exact blocked neighbour
          search, a first frame, then a settled map) against a fresh
          `openTSNE.TSNE().fit` and a fresh `sklearn.manifold.TSNE().fit_transform`
          (barnes_hut, its defaults) of the re-weighted features. The weights move a little
          (0.5/0.3/0.2 to 0.4/0.35/0.25) and, in a second row, far (to 0.1/0.1/0.8), where
          the old layout is a poor start and the settled map is laid out again from the first
          frame (`reweight.reweight`); that row compares with openTSNE only. Above --sklearn-full-max
          points (default 10000: about 2.5 minutes on 2 cores) sklearn runs 250 iterations
          (its minimum) and the time is extrapolated x4 to its default 1000, labelled "~".
  place   ours: `AspectMap.place` of one held-out point against openTSNE's
          `TSNEEmbedding.transform` into the same map (its defaults: perplexity 5, 250
          iterations, the gradient method openTSNE picks for n); the mean over --new held-out
          points after one warm-up call (which builds both sides' per-map caches and indexes;
          its time is printed separately).
  invert  ours: `AspectMap.invert`, per iteration, against the paper's procedure (reference
          facts): the new embedding e = mean + z @ U (20 PCA components) appended to the
          corpus, the whole (n+1) x (n+1) distance matrix and P recomputed every step,
          precisions refreshed every 10 steps, KL against a fixed Q, SGD with momentum.
          The baseline runs --baseline-steps steps after untimed warm-up steps; its per-step
          time includes 1/10 of a precision refresh (timed once).

Threads: every method runs on the same --threads (default 1) threads: openTSNE's and
sklearn's n_jobs, workbench.maps.tsne.N_JOBS, BLAS (threadpoolctl) and torch. On a shared 2-core
machine (load 3-4), 2 threads made everything slower, the small steps most: a fresh
openTSNE fit of 250 points took 10.1 s with 2 threads against 0.7 s with 1 (sklearn 20.0
against 1.4 s); openTSNE's transform of one point 3.4 s against 0.08 s. On an idle
multi-core machine pass --threads N.

Quality columns: "kNN@10" is the share of a point's 10 nearest map neighbours that are
among its 10 nearest papers in the weighted high-dimensional space (mean over 500 points
of the map; for placed points over the held-out points).

    nice .venv/bin/python benchmarks/maps.py [--sizes 250 2000 10000] [--new 5]
        [--baseline-steps 5] [--sklearn-full-max 10000] [--threads 1] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): maps of 100 and 120 points (sklearn's full run at the
first, its 250-iteration extrapolation at the second), 2 placed points, 2 inversion steps, 1
baseline step, to check that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402

from workbench.maps import tsne  # noqa: E402
from workbench.maps.tsne import AspectMap, calibrate_rows, invert_steps, weighted_features  # noqa: E402

from _smoke import add_smoke  # noqa: E402

ASPECTS, DIM, CLUSTERS = ("task", "method", "outcome"), 64, 12
W_OLD = {"task": 0.5, "method": 0.3, "outcome": 0.2}  # a small move to W_NEW
W_NEW = {"task": 0.4, "method": 0.35, "outcome": 0.25}
W_FAR = {"task": 0.1, "method": 0.1, "outcome": 0.8}  # a large move: the old layout is a poor start
PAPER_INVERT_MAX = 20000  # the paper's inversion holds (n+1)^2 matrices: not run above this many points


def synthetic(n: int, seed: int = 0, dim: int = DIM) -> dict[str, np.ndarray]:
    """aspect -> (n, dim) unit rows; each aspect draws its own cluster label per paper."""
    rng = np.random.default_rng(seed)
    out = {}
    for a in ASPECTS:
        centers = rng.normal(size=(CLUSTERS, dim))
        e = centers[rng.integers(CLUSTERS, size=n)] + 0.6 * rng.normal(size=(n, dim))
        out[a] = e / np.linalg.norm(e, axis=1, keepdims=True)
    return out


def synthetic_page_inputs(n: int, presets: int = 3, seed: int = 0):
    """A map of n papers as a run would export it: coordinates per preset, metadata with two aspect summaries,
    and records with realistic abstracts (about 1,200 characters of varied words)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"{w}{k}" for k in range(60) for w in ("model", "cell", "graph", "trial", "signal", "dose")])
    text = lambda words: " ".join(vocab[rng.integers(len(vocab), size=words)])  # noqa: E731
    centres = rng.uniform(-40, 40, size=(12, 2))
    coords = {f"preset {p}": centres[rng.integers(12, size=n)] + rng.normal(size=(n, 2)) * 3 for p in range(presets)}
    import pandas as pd

    meta = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "title": [text(10) for _ in range(n)],
                         "year": rng.integers(1990, 2026, size=n).astype(float),
                         "summary_method": [text(14) for _ in range(n)], "summary_task": [text(14) for _ in range(n)]})
    records = meta[["doc_id", "title", "year"]].assign(abstract=[text(150) for _ in range(n)])
    labels = {name: [(float(x), float(y), text(3)) for x, y in centres[:8]] for name in coords}
    return coords, meta, records, labels


def page_row(n: int, coords: np.ndarray, args) -> list[str]:
    """Export the map page of n papers (abstracts in it up to page.PAGE_ABSTRACTS_MAX) and time its drawing in
    headless Chromium (tests/lab_harness.Browser: the browser already started; until every point is in the
    plot's data source), with whether WebGL draws the points."""
    import tempfile

    from workbench.maps.page import export_html

    _, meta, records, labels = synthetic_page_inputs(n)
    presets = {"small change": coords[0], "large change": coords[1], "before": coords[2]}
    folder = Path(tempfile.mkdtemp(prefix="map-page-"))
    page, t_export = timed(lambda: export_html(folder / "map.html", presets, meta,
                                               {k: labels[next(iter(labels))] for k in presets}, records=records))
    size = page.stat().st_size
    drawn, webgl = float("nan"), None
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from lab_harness import Browser, chromium_paths

        if chromium_paths() is not None:
            browser = Browser(folder / "profile")
            try:
                start = time.perf_counter()
                browser.driver.get(page.as_uri())
                browser.wait(lambda: len((browser.map_points() or {}).get("x") or []) == n, 120,
                             "the page's points were not drawn", every=0.05)
                drawn, webgl = time.perf_counter() - start, browser.points_webgl()
            finally:
                browser.close()
    except ImportError:  # selenium missing: size only
        pass
    print(f"  page: {size / 1e6:.1f} MB (export {t_export:.1f}s), drawn in {drawn:.2f}s, WebGL {webgl}", flush=True)
    return [f"| {n} | map page (3 presets{', abstracts' if n <= 20000 else ''}) | `export_html` | {drawn:.2f} | | "
            f"{size / 1e6:.1f} MB, WebGL {'on' if webgl else 'off' if webgl is False else 'not measured'}; "
            f"export {t_export:.1f} s |"]


def knn_agreement(features, coords, rows, k=10, queries=None, query_coords=None) -> float:
    """Mean share of the k nearest map neighbours that are among the k nearest in the features.

    With queries/query_coords: for points outside the map (placed points), against the map.
    """
    f = np.asarray(features, dtype=np.float64)
    q, qy = (f[rows], coords[rows]) if queries is None else (np.asarray(queries, float), query_coords)
    sims = q @ f.T
    d2 = np.sum((qy[:, None, :] - coords[None]) ** 2, axis=-1)
    if queries is None:  # a map point is not its own neighbour
        sims[np.arange(len(rows)), rows] = -np.inf
        d2[np.arange(len(rows)), rows] = np.inf
    hi = np.argsort(-sims, axis=1)[:, :k]
    lo = np.argsort(d2, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(hi, lo)]))


@contextlib.contextmanager
def limited_threads(n: int):
    """BLAS/OpenMP pools (threadpoolctl) and torch limited to n threads inside the block."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(before)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def baseline_invert(amap: AspectMap, target, steps: int, n_components: int = 20):
    """The paper's inversion, minimally: full (n+1)-point P every step; returns (s/step, s/refresh).

    float32 (as on the authors' GPU), torch autograd, SGD lr 1e-3 momentum 0.3, precisions
    (one binary search per row of the (n+1) x (n+1) matrix) refreshed every 10 steps.
    """
    import torch

    F = torch.as_tensor(amap.features(), dtype=torch.float32)
    n = F.shape[0]
    mean, comps, _ = amap._pca(n_components)
    mean, U = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(comps, dtype=torch.float32)
    Y = torch.as_tensor(np.vstack([amap.coords, np.asarray(target)[None]]), dtype=torch.float32)
    W = 1.0 / (1.0 + torch.cdist(Y, Y) ** 2)
    W.fill_diagonal_(0.0)
    log_q = torch.log((W / W.sum()).clamp_min(1e-12))
    del W
    x0 = F[amap.nearest(target, 5)].mean(0)
    z = ((x0 - mean) @ U.T).clone().requires_grad_(True)
    velocity = torch.zeros_like(z)

    def distances():
        X = torch.cat([F, (mean + z @ U)[None]])
        X = X / X.norm(dim=1, keepdim=True)
        return (1.0 - X @ X.T).clamp(0.0, 2.0)

    def refresh():
        with torch.no_grad():
            d = distances().double().numpy()
        np.fill_diagonal(d, np.inf)
        betas = [calibrate_rows(d[s:s + 1000], amap.perplexity)[1] for s in range(0, len(d), 1000)]
        return torch.as_tensor(np.concatenate(betas), dtype=torch.float32)

    beta, t_refresh = timed(refresh)
    warmup = 3 if n <= 2000 else 1  # torch's first backward passes are slow (lazy set-up); not timed
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        d = distances()
        logits = -beta[:, None] * d
        logits.fill_diagonal_(-math.inf)
        C = torch.softmax(logits, dim=1)
        P = ((C + C.T) / (2 * (n + 1))).clamp_min(1e-12)
        loss = torch.sum(P * (torch.log(P) - log_q))
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():  # SGD with momentum 0.3, lr 1e-3 (the authors' settings)
            velocity.mul_(0.3).add_(grad)
            z -= 1e-3 * velocity
        del d, logits, C, P, loss
    return (time.perf_counter() - t0) / steps, t_refresh


def place_and_invert(base: AspectMap, new: dict, args) -> list[str]:
    """Rows of the table for placing and inverting one point in `base`."""
    from openTSNE import TSNEEmbedding
    from openTSNE.affinity import PerplexityBasedNN

    n, rows_out = len(base), []

    # ---- place one point
    f_corpus, f_add = base.features(), weighted_features(new, W_OLD)
    one = lambda i: {a: e[i:i + 1] for a, e in new.items()}  # noqa: E731
    _, t_first = timed(lambda: base.place(one(0)))
    ours_xy, ours_t = [], []
    for i in range(args.new):
        xy, t = timed(lambda: base.place(one(i)))
        ours_xy.append(xy[0])
        ours_t.append(t)
    ours_xy = np.array(ours_xy)
    a_ours = knn_agreement(f_corpus, base.coords, None, queries=f_add, query_coords=ours_xy)
    (ref, t_index) = timed(lambda: TSNEEmbedding(base.coords.copy(), PerplexityBasedNN(
        f_corpus.astype(np.float64), perplexity=base.perplexity, n_jobs=args.threads, random_state=0),
        negative_gradient_method="auto", n_jobs=args.threads, random_state=0))
    _, t_ot_first = timed(lambda: ref.transform(f_add[:1].astype(np.float64)))
    ot_xy, ot_t = [], []
    for i in range(args.new):
        xy, t = timed(lambda: np.asarray(ref.transform(f_add[i:i + 1].astype(np.float64))))
        ot_xy.append(xy[0])
        ot_t.append(t)
    a_ot = knn_agreement(f_corpus, np.asarray(ref), None, queries=f_add, query_coords=np.array(ot_xy))
    print(f"  place: ours first {t_first:.2f}s then {np.mean(ours_t):.3f}s/point; openTSNE index {t_index:.1f}s, "
          f"first {t_ot_first:.2f}s then {np.mean(ot_t):.3f}s/point", flush=True)
    rows_out.append(f"| {n} | place one point | ours `place` | {np.mean(ours_t):.3f} | 1.00x | kNN@10 {a_ours:.2f} "
                    f"(first call {t_first:.2f}s) |")
    rows_out.append(f"| {n} | | openTSNE `transform` | {np.mean(ot_t):.3f} | {np.mean(ot_t) / np.mean(ours_t):.1f}x | "
                    f"kNN@10 {a_ot:.2f} (index {t_index:.1f}s, first {t_ot_first:.2f}s) |")

    # ---- invert one point (per optimisation step)
    target = ours_xy[0]
    steps = args.invert_iter or invert_steps(n)
    _, t_inv = timed(lambda: base.invert(target, n_iter=steps))  # the fit prepared its caches (`prepare`)
    per_ours = t_inv / steps
    rows_out.append(f"| {n} | invert one point, per step | ours `invert` | {per_ours * 1e3:.1f} ms | 1.00x | "
                    f"{steps} steps: {t_inv:.2f}s |")
    if n > PAPER_INVERT_MAX:  # (n+1)^2 float32 matrices: 40 GB each at 100,000 papers
        print(f"  invert: ours {per_ours * 1e3:.1f} ms/step ({t_inv:.2f}s for {steps}); the paper's full "
              f"recompute not run above {PAPER_INVERT_MAX} points", flush=True)
        return rows_out
    per_base, t_refresh = baseline_invert(base, target, args.baseline_steps)
    per_base_all = per_base + t_refresh / 10
    print(f"  invert: ours {per_ours * 1e3:.1f} ms/step ({t_inv:.2f}s for {steps}); full recompute "
          f"{per_base * 1e3:.0f} ms/step + refresh {t_refresh:.1f}s / 10", flush=True)
    rows_out.append(f"| {n} | | paper: full (n+1)^2 P per step | {per_base_all * 1e3:.0f} ms | "
                    f"{per_base_all / per_ours:.0f}x | step {per_base * 1e3:.0f} ms + refresh {t_refresh:.1f}s/10 |")
    return rows_out


def explorer_clicks(run_dir: str, corpus_path: str) -> list[str]:
    """Rows for clicks in `Explorer` on a real run: a tap on an empty spot (inverted and decoded, with the
    round trip), on a paper, a pasted abstract placed (the first of each and the next ones), and a weight step
    of 0.05 up and back (its first frame, its settled map)."""
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer

    (ex, t_open) = timed(lambda: Explorer(run_dir, load_corpus(corpus_path)))
    n, c = len(ex.coords), ex.coords
    print(f"\n== Explorer on {run_dir}: {n} papers, {ex.map.method}, opened in {t_open:.1f}s", flush=True)
    spots = [c.mean(axis=0) + np.array([3.0, -2.0]), c[10] + 0.5, c[n // 2] - 0.7, c[n // 3] + [0.4, 0.4]]
    taps = [timed(lambda: ex.on_tap(float(x), float(y), None))[1] for x, y in spots]
    _, t_paper = timed(lambda: ex.on_tap(float(c[7, 0]), float(c[7, 1]), 7))
    texts = ["We followed a cohort of patients for five years.", "A survey of teachers about remote lessons."]
    places = [timed(lambda: ex.place_texts([t]))[1] for t in texts]
    # A slider step of 0.05 on the first aspect, as the pane sends it: a first frame, then the settled map.
    steps = []
    for step in (0.05, -0.05):
        w = dict(ex.weights)
        first = next(iter(w))
        w[first] = max(w[first] + step, 0.0)
        frames, start = [], time.perf_counter()
        _, t_settled = timed(lambda: ex.reweight(w, on_frame=lambda _: frames.append(time.perf_counter() - start)))
        steps.append((frames[0] if frames else t_settled, t_settled, len(frames) + 1))
    print("  weight step of 0.05: " + "; ".join(f"first frame {f:.2f}s, settled {t:.2f}s, {k} updates"
                                                for f, t, k in steps), flush=True)
    print(f"  tap on an empty spot: first {taps[0]:.3f}s, then {np.mean(taps[1:]):.3f}s; tap on a paper "
          f"{t_paper:.3f}s; place a text: first {places[0]:.3f}s, then {places[1]:.3f}s", flush=True)
    return [f"| {n} (run) | click-decode an empty spot (invert, decode, round trip) | `Explorer.on_tap` | "
            f"{np.mean(taps[1:]):.3f} | | first call {taps[0]:.3f} s (opening the run: {t_open:.0f} s) |",
            f"| {n} (run) | a weight step of 0.05: first frame | `Explorer.reweight` | "
            f"{np.mean([f for f, _, _ in steps]):.3f} | | {steps[0][2]} updates |",
            f"| {n} (run) | the same: settled map | `Explorer.reweight` | {np.mean([t for _, t, _ in steps]):.3f} | | |",
            f"| {n} (run) | read a tapped paper | `Explorer.on_tap` | {t_paper:.3f} | | |",
            f"| {n} (run) | place a pasted abstract (encode, place) | `Explorer.place_texts` | {places[1]:.3f} | | "
            f"first call {places[0]:.3f} s |"]


def run_size(n: int, args) -> list[str]:
    import openTSNE
    from sklearn.manifold import TSNE

    rows_out = []
    emb = synthetic(n + args.new, seed=n, dim=args.dim)
    corpus = {a: e[:n] for a, e in emb.items()}
    new = {a: e[n:] for a, e in emb.items()}
    rows = np.random.default_rng(0).choice(n, size=min(500, n), replace=False)
    print(f"\n== n = {n} (load average {os.getloadavg()[0]:.1f})", flush=True)

    base, t_base = timed(lambda: AspectMap.fit(corpus, W_OLD, seed=0))
    print(f"  base map: {base.method}, fit {t_base:.1f}s (neighbours, layout and click caches)", flush=True)

    # ---- refit after a weight change: the first frame (handed to on_frame) and the settled map
    f_new = weighted_features(corpus, W_NEW)
    frame: dict = {}
    t_start = time.perf_counter()
    warm = base.with_weights(W_NEW, on_frame=lambda c: frame.update(coords=c, t=time.perf_counter() - t_start))
    t_warm = time.perf_counter() - t_start
    q_warm, q_first = knn_agreement(f_new, warm.coords, rows), knn_agreement(f_new, frame["coords"], rows)
    print(f"  ours: first frame {frame['t']:.2f}s (kNN@10 {q_first:.2f}), settled {t_warm:.1f}s (kNN@10 "
          f"{q_warm:.2f})", flush=True)
    ot, t_ot = timed(lambda: np.asarray(openTSNE.TSNE(n_jobs=args.threads, random_state=0).fit(
        f_new.astype(np.float64))))
    q_ot = knn_agreement(f_new, ot, rows)
    print(f"  openTSNE fresh: {t_ot:.1f}s, kNN@10 {q_ot:.2f}", flush=True)
    full = n <= args.sklearn_full_max
    if n <= args.sklearn_max:
        sk, t_sk = timed(lambda: TSNE(random_state=0, n_jobs=args.threads,
                                      max_iter=1000 if full else 250).fit_transform(f_new))
        q_sk = knn_agreement(f_new, sk, rows) if full else float("nan")
        label_sk = f"{t_sk:.1f}" if full else f"~{4 * t_sk:.0f} (250 its: {t_sk:.1f})"
        print(f"  sklearn fresh: {label_sk}s", flush=True)
        t_sk_full = t_sk if full else 4 * t_sk
    rows_out.append(f"| {n} | fit a map | ours ({base.method}) | {t_base:.1f} | | neighbours, layout and the click "
                    f"caches |")
    rows_out.append(f"| {n} | weight change: first frame | ours ({base.method}) | {frame['t']:.2f} | "
                    f"{frame['t'] / t_warm:.2f}x | kNN@10 {q_first:.2f} ({q_first / q_ot:.2f} of a fresh fit's) |")
    rows_out.append(f"| {n} | weight change: settled | ours ({base.method}) | {t_warm:.2f} | 1.00x | "
                    f"kNN@10 {q_warm:.2f} |")
    rows_out.append(f"| {n} | | openTSNE fresh fit | {t_ot:.2f} | {t_ot / t_warm:.1f}x | kNN@10 {q_ot:.2f} |")
    if n <= args.sklearn_max:
        rows_out.append(f"| {n} | | sklearn TSNE fresh (barnes_hut) | {label_sk} | {'~' * (not full)}"
                        f"{t_sk_full / t_warm:.1f}x | " + (f"kNN@10 {q_sk:.2f} |" if full else "(250 its only) |"))

    # ---- a large weight change: ours against a fresh openTSNE fit of the same features
    f_far = weighted_features(corpus, W_FAR)
    frame = {}
    t_start = time.perf_counter()
    far = base.with_weights(W_FAR, on_frame=lambda c: frame.update(coords=c, t=time.perf_counter() - t_start))
    t_far = time.perf_counter() - t_start
    # A click right after the weight change: its caches are still being built in the background.
    spot = far.coords[0] + 0.5
    _, t_inv_after = timed(lambda: far.invert(spot))
    _, t_place_after = timed(lambda: far.place({a: e[:1] for a, e in new.items()}))
    print(f"  right after the weight change: invert {t_inv_after:.2f}s, then place {t_place_after:.2f}s", flush=True)
    q_far, q_far_first = knn_agreement(f_far, far.coords, rows), knn_agreement(f_far, frame["coords"], rows)
    ot_far, t_ot_far = timed(lambda: np.asarray(openTSNE.TSNE(n_jobs=args.threads, random_state=0).fit(
        f_far.astype(np.float64))))
    q_ot_far = knn_agreement(f_far, ot_far, rows)
    print(f"  large change: first frame {frame['t']:.2f}s (kNN@10 {q_far_first:.3f}), settled {t_far:.1f}s "
          f"(kNN@10 {q_far:.3f}); openTSNE fresh {t_ot_far:.1f}s (kNN@10 {q_ot_far:.3f})", flush=True)
    rows_out.append(f"| {n} | large weight change: first frame | ours | {frame['t']:.2f} | {frame['t'] / t_far:.2f}x | "
                    f"kNN@10 {q_far_first:.3f} ({q_far_first / q_ot_far:.3f} of a fresh fit's) |")
    rows_out.append(f"| {n} | large weight change: settled | ours | {t_far:.2f} | 1.00x | kNN@10 {q_far:.3f} |")
    rows_out.append(f"| {n} | | openTSNE fresh fit | {t_ot_far:.2f} | {t_ot_far / t_far:.1f}x | "
                    f"kNN@10 {q_ot_far:.3f} |")

    rows_out.append(f"| {n} | invert right after it (first call) | ours | {t_inv_after:.2f} | | caches built after "
                    f"the first frame and in the background (`prepare`); then place {t_place_after:.2f} s |")
    rows_out += place_and_invert(base, new, args)
    if args.page:
        rows_out += page_row(n, [warm.coords, far.coords, base.coords], args)
    return rows_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 2000, 10000])
    parser.add_argument("--new", type=int, default=5, help="held-out points to place (default 5)")
    parser.add_argument("--invert-iter", type=int, default=None,
                        help="our inversion steps (default: tsne.invert_steps, 300 below 1,500 papers, else 100)")
    parser.add_argument("--dim", type=int, default=DIM, help=f"dimensions per aspect (default {DIM}; MiniLM: 384)")
    parser.add_argument("--run", help="also time clicks in `Explorer` on this run directory (needs --corpus)")
    parser.add_argument("--page", action="store_true", help="also export each map as a page and time its drawing")
    parser.add_argument("--sklearn-max", type=int, default=20000, help="no sklearn fit above this many points")
    parser.add_argument("--corpus", help="the run's corpus file, for --run")
    parser.add_argument("--baseline-steps", type=int, default=5, help="full-recompute steps timed (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="threads for every method (default 1)")
    parser.add_argument("--sklearn-full-max", type=int, default=10000,
                        help="largest n at which sklearn runs its full 1000 iterations (default 10000)")
    add_smoke(parser, sizes=[100, 120], new=2, invert_iter=2, baseline_steps=1, sklearn_full_max=100)
    args = parser.parse_args()

    import openTSNE
    import sklearn
    import torch

    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.machine()}, "
          f"{os.cpu_count()} CPU cores, numpy {np.__version__}, openTSNE {openTSNE.__version__}, "
          f"scikit-learn {sklearn.__version__}, torch {torch.__version__}; {args.threads} thread(s) for every method; "
          f"{len(ASPECTS)} aspects x {args.dim} dimensions")
    tsne.N_JOBS = args.threads  # our openTSNE calls
    table = []
    with limited_threads(args.threads):
        for n in args.sizes:
            table += run_size(n, args)
        if args.run:
            table += explorer_clicks(args.run, args.corpus)
    print(f"\nload average now {os.getloadavg()[0]:.1f}\n")
    print("| n | task | method | seconds | vs ours | notes |")
    print("|---:|---|---|---:|---:|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
