"""Generated tokens per second of the packaged SmolLM2 generator: batched against one prompt at a time.

Both measurements use the same N prompts, built as `workbench.generate.generate_summaries`
builds them (ACLSum train abstracts x the "acl" aspect set's prompt keys, the summary
prefill and stop strings), with the same sampling, in one process and one run:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generate.py [--n 16] [--batch-size 16]
        [--max-new-tokens 48] [--llama-cpp]

`--llama-cpp` also times llama-cpp-python on the GGUF file itself (sequential chat
completions of the same messages), if `llama_cpp` is importable; it is not installed by
the workbench (it compiles llama.cpp from source).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.aspects import load_aspects  # noqa: E402
from workbench.corpus import load_corpus  # noqa: E402
from workbench.generate import SUMMARY_PREFILL, SUMMARY_STOP  # noqa: E402
from workbench.llm import Sampling, TransformersBackend  # noqa: E402


def build_prompts(n: int) -> list[list[dict]]:
    """The first n (abstract, prompt key) conversations, abstracts in corpus order."""
    corpus = load_corpus("aclsum:train")
    aspects = load_aspects("acl")
    prompts = []
    for abstract in corpus.texts():
        for _, key in aspects.prompt_keys():
            prompts.append(aspects.messages(key, abstract))
            if len(prompts) == n:
                return prompts
    return prompts


def time_backend(backend, prompts, sampling) -> tuple[int, float]:
    """(generated tokens, wall seconds) for all prompts."""
    t0 = time.perf_counter()
    tokens = sum(c.tokens for _, c in backend.complete(prompts, sampling, prefill=SUMMARY_PREFILL))
    return tokens, time.perf_counter() - t0


def time_llama_cpp(prompts, sampling) -> tuple[int, float, str] | None:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    from workbench.models import resolve_model

    resolved = resolve_model("smollm2-135m-instruct")
    path = str(Path(resolved.path) / resolved.gguf_file)
    llm = Llama(model_path=path, n_ctx=2048, n_threads=os.cpu_count(), seed=sampling.seed or 0, verbose=False)
    tokens = 0
    t0 = time.perf_counter()
    for messages in prompts:
        out = llm.create_chat_completion(messages, max_tokens=sampling.max_new_tokens,
                                         temperature=sampling.temperature, top_p=sampling.top_p,
                                         top_k=sampling.top_k, stop=list(sampling.stop))
        tokens += out["usage"]["completion_tokens"]
    return tokens, time.perf_counter() - t0, path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=16, help="number of prompts (default 16)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size of the batched run (default 16)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens per answer at most (default 48)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="generator (default: the packaged SmolLM2)")
    parser.add_argument("--llama-cpp", action="store_true",
                        help="also time llama-cpp-python on the GGUF file, if it is installed")
    args = parser.parse_args(argv)

    import torch

    prompts = build_prompts(args.n)
    sampling = Sampling(stop=SUMMARY_STOP, max_new_tokens=args.max_new_tokens, seed=0)
    print(f"{len(prompts)} prompts (ACLSum train x acl prompt keys), max_new_tokens={args.max_new_tokens}, "
          f"sampling {sampling.to_dict()}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), python {platform.python_version()}, "
          f"{datetime.datetime.now().isoformat(timespec='minutes')}")

    t0 = time.perf_counter()
    backend = TransformersBackend(args.model, batch_size=args.batch_size)
    print(f"loaded {backend.model_id} on {backend.device} in {time.perf_counter() - t0:.1f}s")
    prompt_tokens = sum(len(backend.tokenizer(backend._prompt(m, SUMMARY_PREFILL), add_special_tokens=False)["input_ids"])
                        for m in prompts)
    print(f"prompt tokens: {prompt_tokens} in all, {prompt_tokens / len(prompts):.0f} per prompt "
          "(every prompt is processed before its first new token)")
    time_backend(backend, prompts[:1], Sampling(stop=SUMMARY_STOP, max_new_tokens=4, seed=0))  # warm-up

    rows = []
    for label, batch_size in ((f"transformers, batched ({args.batch_size})", args.batch_size),
                              ("transformers, one at a time", 1)):
        backend.batch_size = batch_size
        tokens, seconds = time_backend(backend, prompts, sampling)
        rows.append((label, tokens, seconds))
        print(f"  done: {label}: {tokens} tokens in {seconds:.1f}s", flush=True)

    if args.llama_cpp:
        result = time_llama_cpp(prompts, sampling)
        if result is None:
            print("llama_cpp is not importable (pip install llama-cpp-python compiles llama.cpp): skipped")
        else:
            tokens, seconds, path = result
            rows.append(("llama.cpp (GGUF), one at a time", tokens, seconds))

    print()
    print(f"{'backend':36s} {'prompts':>7s} {'tokens':>7s} {'seconds':>8s} {'tokens/s':>9s} {'s/prompt':>9s}")
    for label, tokens, seconds in rows:
        print(f"{label:36s} {len(prompts):7d} {tokens:7d} {seconds:8.1f} {tokens / seconds:9.1f} "
              f"{seconds / len(prompts):9.2f}")
    rate = {label: tokens / seconds for label, tokens, seconds in rows}
    batched, sequential = rate[rows[0][0]], rate[rows[1][0]]
    print(f"\nbatched / one at a time: {batched / sequential:.2f}x")
    if len(rows) > 2:
        print(f"llama.cpp / transformers batched: {rate[rows[2][0]] / batched:.2f}x")


if __name__ == "__main__":
    main()
