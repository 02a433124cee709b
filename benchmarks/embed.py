"""Abstracts per second: the unified model (all aspects, one pass) vs K separate aspect models vs sentence-transformers.

All three run the same backbone (the packaged all-MiniLM-L6-v2) on the same abstracts
with the same batch size and maximum length, in one process and one run:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/embed.py [--docs 64] [--batch-size 32]
        [--max-length 256] [--repeats 3] [--device cpu] [--smoke]

(a) unified: `AspectEncoder` with one head per aspect ("acl": challenge, approach,
    outcome), `encode` returns every aspect from one backbone pass per batch;
(b) separate: K single-head `AspectEncoder`s (as stage 02 saves them), one full pass each;
(c) sentence-transformers: `SentenceTransformer(<minilm folder>).encode`, one pass, its
    own mean pooling and normalisation (a reference for the plain backbone's speed).

Untrained heads: speed does not depend on the weights. The methods are timed in turn,
`--repeats` rounds after a warm-up, rotating the order each round so that a noisy
neighbour does not always hit the same one; the median time is reported.

--smoke (or WORKBENCH_BENCH_SMOKE=1): 4 abstracts in batches of 2, max length 32, 1 round, to
check that it runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.core.devices import best_device  # noqa: E402
from workbench.embed.encoders import AspectEncoder  # noqa: E402
from workbench.core.models import resolve_model  # noqa: E402

from _smoke import add_smoke  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=64, help="number of ACLSum abstracts (default 64)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size for all methods (default 32)")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per abstract at most (default 256)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--device", default=None, help="default: auto (cuda, mps or cpu)")
    add_smoke(parser, docs=4, batch_size=2, max_length=32, repeats=1)
    args = parser.parse_args()

    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    device = args.device or best_device()
    texts = load_corpus("aclsum:train").texts()[:args.docs]
    aspects = load_aspects("acl").names
    folder = resolve_model("minilm").path
    print(f"{len(texts)} ACLSum train abstracts ({sum(map(len, texts)) / len(texts):.0f} characters on average), "
          f"aspects {aspects}, batch {args.batch_size}, max_length {args.max_length}, device {device}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")

    unified = AspectEncoder.from_base("minilm", aspects, dim=150, max_length=args.max_length, device=device)
    separate = [AspectEncoder.from_base("minilm", [a], dim=150, max_length=args.max_length, device=device)
                for a in aspects]
    st = SentenceTransformer(folder, device=device)
    st.max_seq_length = args.max_length

    methods = {
        "(a) unified, all aspects in one pass": lambda x: unified.encode(x, batch_size=args.batch_size),
        f"(b) {len(aspects)} separate aspect models": lambda x: [m.encode(x, batch_size=args.batch_size)
                                                                for m in separate],
        "(c) sentence-transformers encode": lambda x: st.encode(x, batch_size=args.batch_size,
                                                                show_progress_bar=False),
    }
    out = methods["(a) unified, all aspects in one pass"](texts[:4])
    assert sorted(out) == sorted(aspects) and all(v.shape == (4, 150) for v in out.values())
    for run in methods.values():  # warm-up: allocator, kernels, tokenizer caches
        run(texts[:args.batch_size])

    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            methods[name](texts)
            times[name].append(time.perf_counter() - t0)
            print(f"  round {r + 1}: {name}: {times[name][-1]:.2f}s", flush=True)

    median = {name: statistics.median(t) for name, t in times.items()}
    base = median[names[0]]
    print()
    print(f"| method | median s ({args.repeats} runs) | abstracts/s | time vs (a) |")
    print("|---|---:|---:|---:|")
    for name in names:
        print(f"| {name} | {median[name]:.2f} | {len(texts) / median[name]:.1f} | {median[name] / base:.2f}x |")
    print(f"\nspeed of (a) relative to (b): {median[names[1]] / base:.2f}x; relative to (c): "
          f"{median[names[2]] / base:.2f}x (above 1: (a) is faster). Load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
