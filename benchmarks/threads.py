"""Threads on a shared machine: 2 threads against 1, on a quiet machine and beside busy jobs.

Two fixed workloads that stand for the workbench's CPU work, each timed with 2 threads
and with 1 thread, (a) on the quiet machine, (b) while a competing single-threaded job
(a pure-Python spin loop in another process, as a user's other program or another test
run would be) keeps one core busy, and (c) beside two such jobs (--busy sets the list):

  encode  the packaged all-MiniLM-L6-v2 as the frozen backbone of stages 02-03
          (`workbench.embed.features.FrozenBackbone`: mean pooling, max length 256) encoding
          the first --docs (64) ACLSum train abstracts and their sentences, as stage 03's
          frozen mode reads them (`split_sentences`), batches of 32;
  t-SNE   `workbench.maps.tsne.AspectMap.fit(method="opentsne")` (openTSNE's k-NN affinities
          and Barnes-Hut gradient, 250 + 500 iterations) of --points (1000) random points
          in 3 aspects x 64-D (unit rows).

"2 threads" means torch's intra-op threads, openTSNE's n_jobs (`workbench.maps.tsne.N_JOBS`)
and the BLAS pools (threadpoolctl) all at 2; "1 thread" all at 1. Each condition also
prints what `workbench.core.devices.free_threads()` picks (the count the workbench now uses
when WORKBENCH_THREADS is not set), and the table marks that column. Every timing is
the median of --repeats (2) runs after one untimed warm-up.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/threads.py [--docs 64] [--points 1000]
        [--repeats 2] [--busy 0 1 2] [--tsne-iter 500] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 1 abstract, 100 points, 10 t-SNE iterations after the 250
of early exaggeration, 1 run per cell, quiet only (its busy job would slow whatever runs beside the smoke
run, the test suite's other worker included), to check that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402

from workbench.maps import tsne  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.core.devices import free_threads  # noqa: E402
from workbench.embed.features import FrozenBackbone  # noqa: E402
from workbench.data.sentences import split_sentences  # noqa: E402

from _smoke import add_smoke  # noqa: E402


def spin() -> None:
    """The competing job: one core kept busy by pure Python, no threads of its own."""
    x = 0
    while True:
        x += 1


@contextlib.contextmanager
def threads(n: int):
    """torch, openTSNE (workbench.maps.tsne.N_JOBS), the BLAS pools and WORKBENCH_THREADS at n inside the block."""
    import torch
    from threadpoolctl import threadpool_limits

    before, before_jobs = torch.get_num_threads(), tsne.N_JOBS
    torch.set_num_threads(n)
    tsne.N_JOBS = n
    os.environ["WORKBENCH_THREADS"] = str(n)  # and whatever in the workbench asks free_threads()
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(before)
        tsne.N_JOBS = before_jobs
        del os.environ["WORKBENCH_THREADS"]


@contextlib.contextmanager
def busy_cores(jobs: int):
    """Run `jobs` processes of `spin` inside the block."""
    procs = [multiprocessing.get_context("spawn").Process(target=spin, daemon=True) for _ in range(jobs)]
    for proc in procs:
        proc.start()
    if procs:
        time.sleep(1.0)  # let them start and take their cores
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.join()


def random_embeddings(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for aspect in ("challenge", "approach", "outcome"):
        e = rng.normal(size=(n, 64))
        out[aspect] = e / np.linalg.norm(e, axis=1, keepdims=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=64, help="ACLSum abstracts to encode (default 64)")
    parser.add_argument("--points", type=int, default=1000, help="points of the t-SNE map (default 1000)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per cell, median (default 2)")
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2],
                        help="competing single-threaded jobs, one condition each (default 0 1 2)")
    parser.add_argument("--tsne-iter", type=int, default=None,
                        help="t-SNE iterations after the 250 of early exaggeration (default: openTSNE's 500)")
    add_smoke(parser, docs=1, points=100, repeats=1, busy=[0], tsne_iter=10)
    args = parser.parse_args()
    os.environ.pop("WORKBENCH_THREADS", None)  # measure what free_threads() picks by itself
    os.environ.pop("OMP_NUM_THREADS", None)

    import openTSNE
    import torch

    abstracts = load_corpus("aclsum:train").texts()[:args.docs]
    texts = abstracts + [sentence for text in abstracts for sentence in split_sentences(text)]
    backbone = FrozenBackbone("minilm", pooling="mean", max_length=256, device="cpu")
    embeddings = random_embeddings(args.points)
    workloads = {
        f"encode {len(abstracts)} abstracts + {len(texts) - len(abstracts)} sentences (MiniLM)":
            lambda: backbone.embed(texts, batch_size=32),
        f"t-SNE of {args.points} points (openTSNE)": lambda: tsne.AspectMap.fit(embeddings, method="opentsne",
                                                                                seed=0, n_iter=args.tsne_iter),
    }
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.machine()}, "
          f"{os.cpu_count()} CPU cores, torch {torch.__version__}, openTSNE {openTSNE.__version__}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    with threads(1):
        for run in workloads.values():  # warm-up: model load, allocator, openTSNE's first call
            run()

    rows = []  # (condition, picked, workload, {threads: seconds})
    conditions = {jobs: f"({'abcdefgh'[i]}) " + ("quiet" if jobs == 0 else
                                                f"beside {jobs} busy single-threaded job{'s' if jobs > 1 else ''}")
                  for i, jobs in enumerate(args.busy)}
    for jobs, condition in conditions.items():
        with busy_cores(jobs):
            picked = min(free_threads(), 2)  # the table has columns for 2 and 1
            print(f"{condition}: free_threads() picks {picked}; load average {os.getloadavg()[0]:.1f}",
                  flush=True)
            for name, run in workloads.items():
                seconds = {}
                for n in (2, 1):
                    times = []
                    with threads(n):
                        for _ in range(args.repeats):
                            t0 = time.perf_counter()
                            run()
                            times.append(time.perf_counter() - t0)
                    seconds[n] = statistics.median(times)
                    print(f"  {name}, {n} thread{'s' if n > 1 else ''}: "
                          + ", ".join(f"{t:.2f}s" for t in times), flush=True)
                rows.append((condition, picked, name, seconds))

    print(f"\nload average now {os.getloadavg()[0]:.1f}\n")
    print("| condition | free_threads() | workload | 2 threads s | 1 thread s | 2 threads / 1 thread |")
    print("|---|---:|---|---:|---:|---:|")
    for condition, picked, name, s in rows:
        cells = [f"**{s[n]:.2f}**" if n == picked else f"{s[n]:.2f}" for n in (2, 1)]
        print(f"| {condition} | {picked} | {name} | {cells[0]} | {cells[1]} | {s[2] / s[1]:.2f}x |")
    print("\n(bold: the count free_threads() picked)")
    if 0 not in conditions:
        return
    picked = {c: p for c, p, _, _ in rows}
    quiet = {name: s for c, _, name, s in rows if c == conditions[0]}
    for c, p, name, s in rows:
        if c != conditions[0]:
            q = quiet[name]
            print(f"{name}, {c[4:]}: 2 threads take {s[2] / q[2]:.1f}x their quiet time, 1 thread "
                  f"{s[1] / q[1]:.1f}x; free_threads()' choice {s[p] / q[picked[conditions[0]]]:.1f}x the time of "
                  f"its quiet choice, against {s[2] / q[2]:.1f}x for a fixed 2")


if __name__ == "__main__":
    main()
