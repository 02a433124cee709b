"""Opening the feature cache of a large corpus: keys in memory and vectors read when asked, against every vector
read into memory (the way the cache opened before, and what a dict of arrays costs).

A folder of `--texts` MiniLM-sized vectors (384 float32) is written as the cache writes it (`FeatureCache.add`,
shards of 2,048). Then, each in a fresh process (its peak resident memory read by the parent):

* "keys only": `FeatureCache(folder, ...)` (headers and keys read; the vectors stay in the shards), then
  `--fetch` vectors of random texts read back;
* "every vector": each shard read whole by safetensors into a {key: vector} dict, then the same texts.

A million abstracts hold about nine million texts with their sentences; `--texts 1000000` is the size of the
cache of about 110,000 abstracts.

    .venv/bin/python benchmarks/feature_cache.py [--texts 1000000] [--fetch 10000] [--smoke]

`--smoke`: 5,000 texts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402

DIM = 384

# Run in a child process: open the cache one way, read `fetch` vectors, print seconds and the vectors' checksum.
CHILD = """
import json, sys, time
import numpy as np

def hwm():  # this process's peak resident MB (VmHWM: ru_maxrss would carry the parent's peak across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
sys.path.insert(0, {root!r})
folder, way = {folder!r}, {way!r}
picked = json.load(open({picked!r}))
t0 = time.perf_counter()
if way == "keys only":
    from workbench.embed.features import FeatureCache
    class Stored:  # the cache's encoder is never called: every text is stored
        name, pooling, max_length, hidden_size, key = "stored", "mean", 256, {dim}, "stored"
    cache = FeatureCache(folder, Stored())
    opened = time.perf_counter() - t0
    got = cache.vectors(picked)
else:
    from pathlib import Path
    from safetensors.numpy import load_file
    from workbench.embed.features import text_key
    vectors = {{}}
    for index in sorted(Path(folder).glob("shard-*.json")):
        keys = json.loads(index.read_text())["keys"]
        for key, vector in zip(keys, load_file(str(index.with_suffix(".safetensors")))["vectors"]):
            vectors.setdefault(key, vector)
    opened = time.perf_counter() - t0
    got = np.stack([vectors[text_key(t)] for t in picked])
total = time.perf_counter() - t0
print(json.dumps({{"opened": opened, "total": total, "sum": float(np.float64(got).sum()),
                   "rss": hwm()}}))
"""


def write_cache(folder: Path, n: int) -> None:
    """`n` random unit vectors of texts "text <i>", written through the cache as stage 02 writes them."""
    from workbench.embed.features import FeatureCache

    class Stored:
        name, pooling, max_length, hidden_size, key = "stored", "mean", 256, DIM, "stored"

    cache, rng = FeatureCache(folder, Stored()), np.random.default_rng(0)
    for start in range(0, n, 100_000):
        block = rng.standard_normal((min(100_000, n - start), DIM)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        texts = [f"text {i}" for i in range(start, start + len(block))]
        for a in range(0, len(texts), 2048):  # the cache's own shard size
            cache.add(texts[a:a + 2048], block[a:a + 2048])


def measure(folder: Path, way: str, picked: Path) -> dict:
    code = CHILD.format(root=str(ROOT), folder=str(folder), way=way, picked=str(picked), dim=DIM)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1_000_000)
    parser.add_argument("--fetch", type=int, default=10_000)
    add_smoke(parser, texts=5_000, fetch=500)
    args = parser.parse_args()
    print(f"date {datetime.date.today()}, load {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs, "
          f"{matmul_gflops():.0f} GFLOP/s (the 1600 x 768 x 3072 fp32 product)")
    with tempfile.TemporaryDirectory(prefix="feature-cache-") as tmp:
        folder = Path(tmp) / "cache"
        t0 = time.perf_counter()
        write_cache(folder, args.texts)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        print(f"{args.texts} vectors written in {time.perf_counter() - t0:.1f} s: {size:.0f} MB on disk")
        picked = Path(tmp) / "picked.json"  # the texts whose vectors are read back, the same for both
        picked.write_text(json.dumps([f"text {i}" for i in np.random.default_rng(1).choice(args.texts, args.fetch,
                                                                                             replace=False)]))
        rows = {way: measure(folder, way, picked) for way in ("keys only", "every vector")}
    assert abs(rows["keys only"]["sum"] - rows["every vector"]["sum"]) < 1e-3, rows  # the same vectors
    print(f"| opening | peak memory MB | open s | open + {args.fetch} vectors s |\n|---|---:|---:|---:|")
    for way, r in rows.items():
        print(f"| {way} | {r['rss']:.0f} | {r['opened']:.2f} | {r['total']:.2f} |")
    new, old = rows["keys only"], rows["every vector"]
    print(f"peak memory ratio every vector / keys only {old['rss'] / new['rss']:.2f}x; "
          f"time ratio {old['total'] / new['total']:.2f}x")


if __name__ == "__main__":
    main()
