"""Stage 01's summary store resumed at a million records: time and peak memory, keys in memory vs the whole file.

Writes `--records` synthetic summaries through `RecordStore` (stage 01's record: k = 2 samples x 3 aspects
per paper, about 40 words each in `text` and again in `raw`, the sampling settings, ...; about 0.95 kB a
line), then resumes it in a fresh process per row, as stage 01 does: open the store, take the writer's
lock, list the keys of what is done and find the missing ones for a corpus of the stored papers plus
`--extra` new ones (6 missing per new paper). Rows:

* previous store, one read: the store as it was before keys-and-offsets (a copy of its reading below),
  opened once: the file read whole, every record parsed and kept;
* previous store, as stage 01 resumed: opened, then read whole again under the writer's lock;
* this store: opened (one streaming pass, keys and offsets kept), then locked (the read continues
  where opening stopped: nothing to read).

Memory is each process's peak RSS (VmHWM), also given above the interpreter's own (read before
the store is opened). The file is in the page cache for every row (it was just written).

    .venv/bin/python benchmarks/store_resume.py [--records 1000000] [--extra 1000] [--batch 4096] [--smoke]

`--batch`: records per `append` while writing (one fsync each); stage 01 appends 16 at a time, which
changes the writing time only. `--smoke`: 600 records, 10 new papers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.core.store import RecordStore  # noqa: E402

from _smoke import add_smoke  # noqa: E402

SUMMARY_KEY = ("doc_id", "key", "prompt_hash", "model", "sample")  # generate.summaries.SUMMARY_KEY
ASPECTS = ("challenge", "approach", "outcome")
SAMPLES = 2
HASH, MODEL = "3f2a9c1b7e4d", "Qwen/Qwen2.5-7B-Instruct"
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 50, "max_new_tokens": 96, "seed": 0, "stop": ['"}', '"\n}']}


def doc_id(i: int) -> str:
    return f"paper-{i:08d}"


def synthetic_records(n: int, seed: int = 0):
    """`n` stage 01 records, paper by paper (3 aspects x 2 samples each), about 40 words of text each."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(5000)]
    made = 0
    for paper in range(n):
        for aspect in ASPECTS:
            for sample in range(SAMPLES):
                if made == n:
                    return
                text = " ".join(rng.choices(vocabulary, k=40)).capitalize() + "."
                yield {"doc_id": doc_id(paper), "aspect": aspect, "key": aspect, "prompt_hash": HASH, "model": MODEL,
                       "sample": sample, "status": "ok", "text": text, "raw": text + '"}', "error": None,
                       "backend": "openai", "sampling": SAMPLING, "tokens": 52, "time": 1.79e9 + made}
                made += 1


def write(path: Path, n: int, batch: int) -> float:
    """Write `n` records through the store, `batch` per append; returns the seconds taken."""
    t0 = time.perf_counter()
    with RecordStore(path, SUMMARY_KEY) as store:
        pending = []
        for record in synthetic_records(n):
            pending.append(record)
            if len(pending) == batch:
                store.append(pending)
                pending = []
        store.append(pending)
    return time.perf_counter() - t0


class PreviousStore:
    """The previous RecordStore's reading (before keys-and-offsets), copied: the file read whole and every
    record parsed and kept (its warnings and repairs left out: this benchmark's file needs none)."""

    def __init__(self, path: Path, key_fields):
        self.path, self.key_fields = path, tuple(key_fields)
        self._load()

    def _load(self) -> None:
        self._records, self._keys = [], set()
        data = self.path.read_bytes()
        body_end = data.rfind(b"\n") + 1
        for line in data[:body_end].split(b"\n")[:-1]:
            if not line.strip():
                continue
            record = json.loads(line)
            key = tuple(record[f] for f in self.key_fields)
            if key not in self._keys:
                self._keys.add(key)
                self._records.append(record)

    def lock(self):
        self._load()  # the previous writer read the whole file again under its lock
        return self

    def keys(self) -> list[tuple]:
        return [tuple(r[f] for f in self.key_fields) for r in self._records]

    def __contains__(self, key) -> bool:
        return tuple(key) in self._keys


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def measure(path: Path, row: str, papers: int) -> dict:
    """In this (fresh) process: resume the store the way `row` says; seconds and peak RSS."""
    base = peak_rss_mb()
    t0 = time.perf_counter()
    if row == "new":
        store = RecordStore(path, SUMMARY_KEY).lock()
    else:
        store = PreviousStore(path, SUMMARY_KEY)
        if row == "old-stage":
            store.lock()
    done = len(store.keys())
    tasks = ((doc_id(p), a, HASH, MODEL, s) for p in range(papers) for a in ASPECTS for s in range(SAMPLES))
    missing = sum(key not in store for key in tasks)  # streamed: the corpus's tasks are not the store's memory
    seconds = time.perf_counter() - t0
    peak = peak_rss_mb()
    if row == "new":
        store.close()
    return {"seconds": seconds, "peak_mb": peak, "base_mb": base, "done": done, "missing": missing}


def run_row(path: Path, row: str, papers: int) -> dict:
    """`measure` in a child process of its own, so that each row's peak is its own."""
    out = subprocess.run([sys.executable, __file__, "--measure", row, "--path", str(path), "--papers", str(papers)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


ROWS = {"old": "previous store, one read", "old-stage": "previous store, as stage 01 resumed (read twice)",
        "new": "this store (keys and offsets; open + lock)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--extra", type=int, default=1000, help="new papers in the corpus (6 tasks each)")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--dir", default=None, help="where the store is written (default: a temporary folder)")
    parser.add_argument("--measure", choices=list(ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--papers", type=int, help=argparse.SUPPRESS)
    add_smoke(parser, records=600, extra=10, batch=64)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.path), args.measure, args.papers)))
        return
    from _machine import matmul_gflops

    print(f"date {datetime.date.today()}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs, {matmul_gflops():.0f} GFLOP/s")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "summaries.jsonl"
        seconds = write(path, args.records, args.batch)
        size = path.stat().st_size / 2**20
        print(f"wrote {args.records:,} records through the store in {seconds:.1f} s ({args.records / seconds:,.0f}/s, "
              f"{args.batch} per append); file {size:,.0f} MB")
        papers = -(-args.records // (len(ASPECTS) * SAMPLES)) + args.extra
        results = {row: run_row(path, row, papers) for row in ("new", "old", "old-stage")}
    new = results["new"]
    expected = papers * len(ASPECTS) * SAMPLES - args.records
    print(f"\n{args.records:,} records ({size:,.0f} MB), corpus of {papers:,} papers: {expected:,} missing\n")
    print("| store | seconds | peak RSS MB | above interpreter MB | peak / file size | time / this store's "
          "| memory / this store's |\n|---|---:|---:|---:|---:|---:|---:|")
    for row in ("old", "old-stage", "new"):
        r = results[row]
        assert (r["done"], r["missing"]) == (args.records, expected), r
        above = r["peak_mb"] - r["base_mb"]
        print(f"| {ROWS[row]} | {r['seconds']:.1f} | {r['peak_mb']:,.0f} | {above:,.0f} | {r['peak_mb'] / size:.2f} | "
              f"{r['seconds'] / new['seconds']:.2f}x | {above / max(new['peak_mb'] - new['base_mb'], 1):.1f}x |")
    print(f"\nload at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
