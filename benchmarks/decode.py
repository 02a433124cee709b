"""Decoded descriptions per second: batched decoding vs one embedding at a time vs the plain LM.

All three use the same frozen LM (the packaged SmolLM2-135M-Instruct unless --lm says
otherwise), greedy decoding and exactly --new-tokens new tokens per description
(min_new_tokens = max_new_tokens, so every method writes the same amount of text):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/decode.py [--n 32] [--batch-size 16]
        [--new-tokens 32] [--repeats 3] [--device cpu] [--lm smollm2-135m-instruct] [--spot-n 2000] [--smoke]

(a) ours, batched: `EmbeddingDecoder.generate` on --batch-size embeddings per call; the
    prompt has the same length for every embedding, so a batch needs no padding;
(b) ours, one at a time: the same decoder called once per embedding (what a loop over
    `generate` in a notebook cell would do);
(c) the plain LM: `model.generate(input_ids)` on a text prompt of the same length,
    batched likewise: the reference for what the LM itself costs, so (a)/(c) is the
    overhead of the soft tokens.

An untrained mapping network: speed does not depend on its weights. The methods run in
turn, --repeats rounds after a warm-up, rotating the order each round; medians reported.

Then the map pane's "click an empty spot" at --spot-n papers (default 2,000; 0 skips it):
invert the spot to one embedding per aspect (appendix A.10) and describe each aspect with
its round-trip confidence, (d) with the retrieval decoder (a memory of 3 statements per
paper and aspect, MiniLM re-embedding the answer) against (e) the soft-prompt decoder
writing --new-tokens tokens per aspect. Goal (issue 12): at most 2 s on 2 cores.

--smoke (or WORKBENCH_BENCH_SMOKE=1): 3 embeddings in batches of 2, 2 new tokens, 1 round, a map
of 100 papers, to check that it runs.
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

from workbench.decode.soft_prompt import DecodeSampling, DecoderConfig, EmbeddingDecoder  # noqa: E402
from workbench.core.devices import best_device  # noqa: E402
from workbench.core.models import load_causal_lm  # noqa: E402

from _smoke import add_smoke  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=32, help="embeddings to decode per round (default 32)")
    parser.add_argument("--batch-size", type=int, default=16, help="embeddings per generate call (default 16)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens written per description (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--device", default=None, help="default: auto (cuda, mps or cpu)")
    parser.add_argument("--lm", default="smollm2-135m-instruct", help="frozen LM: packaged name, folder or hub id")
    parser.add_argument("--spot-n", type=int, default=2000, help="papers on the map for the empty-spot timing (0 skips)")
    add_smoke(parser, n=3, batch_size=2, new_tokens=2, repeats=1, spot_n=100)
    args = parser.parse_args()

    import numpy as np
    import torch
    import transformers

    device = args.device or best_device()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, device {device}, "
          f"load average {os.getloadavg()[0]:.1f}")
    model, tokenizer = load_causal_lm(args.lm, device=device)
    torch.manual_seed(0)
    decoder = EmbeddingDecoder(model, tokenizer, 150, DecoderConfig(lm=args.lm), aspect="approach").eval()
    emb = np.random.default_rng(0).standard_normal((args.n, 150)).astype(np.float32)
    M = args.new_tokens
    settings = DecodeSampling(greedy=True, max_new_tokens=M, min_new_tokens=M, no_repeat_ngram_size=0)

    # (c): a text prompt with exactly as many tokens as the decoder's prompt.
    words = tokenizer("Describe the approach of a paper in one sentence please " * 8,
                      add_special_tokens=False)["input_ids"][:decoder.n_prompt]
    plain_ids = torch.tensor([words] * args.batch_size, device=model.device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def plain(n: int) -> int:
        made = 0
        for start in range(0, n, args.batch_size):
            b = min(args.batch_size, n - start)
            with torch.no_grad():
                out = model.generate(input_ids=plain_ids[:b], attention_mask=torch.ones_like(plain_ids[:b]),
                                     do_sample=False, max_new_tokens=M, min_new_tokens=M, pad_token_id=pad,
                                     top_k=None, top_p=None, temperature=None)
            made += (out.shape[1] - plain_ids.shape[1]) * b
        return made

    methods = {
        "(a) ours, batched": lambda: decoder.generate(emb, settings, batch_size=args.batch_size),
        "(b) ours, one at a time": lambda: [decoder.generate(emb[i:i + 1], settings) for i in range(args.n)],
        "(c) plain LM generate, batched": lambda: plain(args.n),
    }
    out = methods["(a) ours, batched"]()
    assert len(out) == args.n and all(len(c) == 1 for c in out)
    print(f"{args.n} embeddings, {M} new tokens each, prompt {decoder.n_prompt} positions, batch {args.batch_size}; "
          f"example: {out[0][0][:80]!r}")
    for run in methods.values():  # warm-up
        run()

    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            methods[name]()
            times[name].append(time.perf_counter() - t0)
            print(f"  round {r + 1}: {name}: {times[name][-1]:.2f}s", flush=True)

    median = {name: statistics.median(t) for name, t in times.items()}
    base = median[names[0]]
    print()
    print(f"| method | median s ({args.repeats} runs) | descriptions/s | tokens/s | time vs (a) |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        print(f"| {name} | {median[name]:.2f} | {args.n / median[name]:.2f} | {args.n * M / median[name]:.0f} "
              f"| {median[name] / base:.2f}x |")
    print(f"\nbatched (a) is {median[names[1]] / base:.2f}x faster than one at a time (b); the plain LM (c) takes "
          f"{median[names[2]] / base:.2f}x the time of (a). Load average now {os.getloadavg()[0]:.1f}")
    if args.spot_n:
        empty_spot(args, model, tokenizer)


def empty_spot(args, model, tokenizer) -> None:
    """Time a click on an empty spot of a map of --spot-n papers: inversion plus one description per aspect."""
    import numpy as np

    from workbench.decode.decoding import AspectDecoder
    from workbench.decode.faithfulness import describe_with_confidence
    from workbench.embed.heads import PooledAspectModel
    from workbench.decode.retrieval import RetrievalDecoder, StatementMemory
    from workbench.maps.tsne import AspectMap

    aspects, dim, n = ["challenge", "approach", "outcome"], 384, args.spot_n
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((20, dim))
    emb = {a: centres[rng.integers(0, 20, n)] + 0.7 * rng.standard_normal((n, dim)) for a in aspects}
    emb = {a: (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32) for a, e in emb.items()}
    t0 = time.perf_counter()
    amap = AspectMap.fit(emb, None, seed=0)
    print(f"\nempty spot on a map of {n} papers (map fitted in {time.perf_counter() - t0:.0f}s, not counted)")
    encoders = {a: PooledAspectModel("minilm", [a], hidden=dim, pool=False, rank=8, seed=i)
                for i, a in enumerate(aspects)}
    retrieval = {}
    for a in aspects:  # 3 statements per paper, each near its paper's embedding
        vectors = np.repeat(emb[a], 3, axis=0) + 0.3 * rng.standard_normal((3 * n, dim)).astype(np.float32)
        texts = [f"Statement {j} of paper {j // 3} about its {a}." for j in range(3 * n)]
        retrieval[a] = RetrievalDecoder(StatementMemory(a, texts, [f"p{j // 3}" for j in range(3 * n)],
                                                        ["llm"] * (3 * n), vectors), encoders[a], lm=None)
    soft = AspectDecoder("approach", EmbeddingDecoder(model, tokenizer, dim, DecoderConfig(lm=args.lm),
                                                      aspects=aspects).eval())
    soft_decoders = {a: AspectDecoder(a, soft.decoder) for a in aspects}
    spot = amap.coords.mean(axis=0) + np.array([0.5, 0.5])
    sampling = dict(greedy=True, max_new_tokens=args.new_tokens)

    def click(decoders):
        vectors = amap.invert(spot)
        return describe_with_confidence(decoders, vectors, encoders, emb, sampling)

    methods = {"(d) retrieval decoder": lambda: click(retrieval), "(e) soft-prompt decoder": lambda: click(soft_decoders)}
    for run in methods.values():  # warm-up: caches of the map and the models
        run()
    times = {name: [] for name in methods}
    for r in range(args.repeats):
        for name in methods:
            t0 = time.perf_counter()
            table = methods[name]()
            times[name].append(time.perf_counter() - t0)
    print("| click on an empty spot (invert + 3 aspects + round trip) | median s | vs (d) |")
    print("|---|---:|---:|")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in methods:
        print(f"| {name} | {med[name]:.2f} | {med[name] / med['(d) retrieval decoder']:.1f}x |")
    t0 = time.perf_counter()
    amap.invert(spot)
    print(f"of which the inversion alone: {time.perf_counter() - t0:.2f}s; example: {table.iloc[0]['decoded'][:60]!r}; "
          f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
