"""Stage 01 on a CPU: seconds per (document, aspect) and tokens per second of every generator, on the same prompts.

The prompts are those of `workbench.generate.summaries.generate_summaries` (ACLSum train abstracts x
the "acl" aspect set's prompt keys, the summary prefill and stop strings, k samples
each), generated in one process, one run, with the same sampling:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generate.py [--docs 4] [--k 4] [--aspects 3]
        [--max-new-tokens 64] [--batch-size 96] [--generate-batch-size 24] [--sentences N] [--no-llama-cpp] [--smoke]

Rows:
* workbench transformers: `TransformersBackend` (each prompt token read once, each
  aspect's instruction held once by cascade attention, the k samples and the aspects in
  one batch, finished answers leave the batch);
* workbench, plain cache: the same backend with transformers' own cache, where every row
  holds a copy of its whole prompt (the design of 2026-11-23);
* transformers generate: what a user would write, `model.generate` on left-padded
  batches of the same conversations (the workbench's backend before this design);
* workbench llama.cpp: `LlamaCppBackend` on the GGUF file (one answer at a time; llama.cpp
  reuses the previous prompt's cache);
* llama.cpp chat completion: llama-cpp-python's own `create_chat_completion` on the same
  messages, what a CPU user would otherwise pick.

llama-cpp-python is an optional extra that compiles llama.cpp; when it is missing this
script installs it first (about 4 minutes on 2 cores; pip keeps the wheel), unless
`--no-llama-cpp`. `--smoke` (or WORKBENCH_BENCH_SMOKE=1): the first 2 sentences of 1 abstract, 1 aspect, k = 2,
4 new tokens, batches of 2, to check that every row still runs; it uses llama.cpp only where it is already
installed (it never installs it).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.data.sentences import split_sentences  # noqa: E402
from workbench.generate.summaries import SUMMARY_PREFILL, SUMMARY_STOP  # noqa: E402
from workbench.generate.llm import Sampling, TransformersBackend  # noqa: E402

from _smoke import add_smoke  # noqa: E402

LLAMA_CPP = "llama-cpp-python==0.3.36"


def build_prompts(docs: int, k: int, aspects: int | None = None, sentences: int | None = None) -> list[list[dict]]:
    """k copies of each (abstract, prompt key) conversation for the first `docs` train abstracts (their first
    `sentences` sentences; None: whole) and the first `aspects` prompt keys of the acl preset (None: all)."""
    corpus = load_corpus("aclsum:train")
    preset = load_aspects("acl")
    abstracts = [a if sentences is None else " ".join(split_sentences(a)[:sentences]) for a in corpus.texts()[:docs]]
    return [preset.messages(key, abstract) for abstract in abstracts
            for _, key in preset.prompt_keys()[:aspects] for _ in range(k)]


def ensure_llama_cpp(install: bool = True) -> bool:
    """Import llama_cpp, installing it first when missing (it compiles llama.cpp from source) unless not `install`."""
    try:
        import llama_cpp  # noqa: F401
        return True
    except ImportError:
        pass
    if not install:
        return False
    print(f"llama_cpp is missing: installing {LLAMA_CPP} (compiles llama.cpp; about 4 minutes on 2 cores, "
          "instant when pip has the wheel cached) ...", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", LLAMA_CPP]).returncode == 0
    print(f"  {'installed' if done else 'FAILED'} in {time.perf_counter() - t0:.0f}s", flush=True)
    if done:
        import importlib

        importlib.invalidate_caches()
    return done


def plain_generate(backend: TransformersBackend, prompts, sampling, batch_size: int):
    """model.generate on left-padded batches: the straightforward way to batch a transformers LM."""
    import torch

    tok, model = backend.tokenizer, backend.model
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, do_sample=True, temperature=sampling.temperature,
                  top_p=sampling.top_p, top_k=sampling.top_k, pad_token_id=tok.pad_token_id,
                  stop_strings=list(sampling.stop), tokenizer=tok)
    tokens = 0
    for start in range(0, len(prompts), batch_size):
        texts = [backend._prompt(m, SUMMARY_PREFILL) for m in prompts[start:start + batch_size]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, **kwargs)
        tokens += int((out[:, enc["input_ids"].shape[1]:] != tok.pad_token_id).sum())
    return tokens


def plain_cache(backend: TransformersBackend, prompts, sampling, batch_size: int) -> int:
    """The workbench backend without cascade attention: each row copies its whole prompt's keys and values."""
    from workbench.generate import cascade

    supports, size = cascade.supports, backend.batch_size
    cascade.supports, backend.batch_size = (lambda model: False), batch_size
    try:
        return sum(c.tokens for _, c in backend.complete(prompts, sampling, prefill=SUMMARY_PREFILL))
    finally:
        cascade.supports, backend.batch_size = supports, size


def llama_chat(llm, prompts, sampling):
    tokens = 0
    for i, messages in enumerate(prompts):
        out = llm.create_chat_completion(messages, max_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
                                         top_p=sampling.top_p, top_k=sampling.top_k, stop=list(sampling.stop), seed=i)
        tokens += out["usage"]["completion_tokens"]
    return tokens


def timed(label, run, rows):
    t0 = time.perf_counter()
    tokens = run()
    seconds = time.perf_counter() - t0
    rows.append((label, tokens, seconds))
    print(f"  done: {label}: {tokens} tokens in {seconds:.1f}s", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=4, help="abstracts (default 4, the demo's stage 01)")
    parser.add_argument("--k", type=int, default=4, help="samples per (abstract, aspect) (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per answer at most (default 64)")
    parser.add_argument("--batch-size", type=int, default=96, help="answers per batch, workbench (default 96)")
    parser.add_argument("--generate-batch-size", type=int, default=24,
                        help="answers per batch, transformers generate and the plain cache (default 24)")
    parser.add_argument("--aspects", type=int, default=None, help="the first N aspects of the acl preset (default: all 3)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="the first N sentences of each abstract (default: the whole abstract)")
    parser.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp (do not install it)")
    add_smoke(parser, argv, docs=1, k=2, aspects=1, max_new_tokens=4, batch_size=2, generate_batch_size=2,
              sentences=2)
    args = parser.parse_args(argv)

    import torch

    from workbench.core.devices import free_threads

    prompts = build_prompts(args.docs, args.k, args.aspects, args.sentences)
    groups = len(prompts) // args.k
    sampling = Sampling(stop=SUMMARY_STOP, max_new_tokens=args.max_new_tokens, seed=0)
    print(f"{args.docs} ACLSum abstracts x {groups // args.docs} aspects x k={args.k}: {len(prompts)} answers, "
          f"max_new_tokens={args.max_new_tokens}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), free threads now {free_threads()}, load {os.getloadavg()[0]:.2f}, "
          f"python {platform.python_version()}, {datetime.datetime.now().isoformat(timespec='minutes')}")
    have_llama = not args.no_llama_cpp and ensure_llama_cpp(install=not args.smoke)

    backend = TransformersBackend("smollm2-135m-instruct", batch_size=args.batch_size)
    tokens = [len(backend.tokenizer(backend._prompt(m, SUMMARY_PREFILL), add_special_tokens=False)["input_ids"])
              for m in prompts[::args.k]]
    print(f"prompt tokens per (abstract, aspect): {sum(tokens) / len(tokens):.0f}")
    list(backend.complete(prompts[:1], Sampling(max_new_tokens=4, seed=0), prefill=SUMMARY_PREFILL))  # warm-up

    rows: list[tuple[str, int, float]] = []
    timed("workbench transformers", lambda: sum(
        c.tokens for _, c in backend.complete(prompts, sampling, prefill=SUMMARY_PREFILL)), rows)
    timed("workbench, plain cache (11-23)", lambda: plain_cache(backend, prompts, sampling, args.generate_batch_size),
          rows)
    timed("transformers generate (batched)",
          lambda: plain_generate(backend, prompts, sampling, args.generate_batch_size), rows)
    if have_llama:
        from llama_cpp import Llama

        from workbench.generate.llm import LlamaCppBackend

        llama = LlamaCppBackend("smollm2-135m-instruct")
        timed("workbench llama.cpp", lambda: sum(
            c.tokens for _, c in llama.complete(prompts, sampling, prefill=SUMMARY_PREFILL)), rows)
        llm = Llama(model_path=llama.llm.model_path, n_ctx=2048, n_threads=llama.n_threads, verbose=False)
        timed("llama.cpp chat completion", lambda: llama_chat(llm, prompts, sampling), rows)
    elif not args.no_llama_cpp:
        print("llama.cpp is not installed (smoke mode does not install it): its rows are missing" if args.smoke
              else "llama.cpp could not be installed: its rows are missing")

    print()
    print(f"{'generator':34s} {'answers':>7s} {'tokens':>7s} {'seconds':>8s} {'tokens/s':>9s} {'s/(doc,aspect)':>15s}")
    for label, n_tokens, seconds in rows:
        print(f"{label:34s} {len(prompts):7d} {n_tokens:7d} {seconds:8.1f} {n_tokens / seconds:9.1f} "
              f"{seconds / groups:15.2f}")
    per_group = {label: seconds / groups for label, _, seconds in rows}
    rate = {label: n / s for label, n, s in rows}
    ours = "workbench transformers"
    print(f"\nworkbench transformers against transformers generate: "
          f"{per_group['transformers generate (batched)'] / per_group[ours]:.1f}x faster per (abstract, aspect)")
    if have_llama:
        print(f"workbench transformers throughput / llama.cpp chat completion: "
              f"{rate[ours] / rate['llama.cpp chat completion']:.2f} (goal: at least 0.5)")
        print(f"seconds per (abstract, aspect): workbench transformers {per_group[ours]:.2f}, "
              f"workbench llama.cpp {per_group['workbench llama.cpp']:.2f}, "
              f"llama.cpp chat completion {per_group['llama.cpp chat completion']:.2f} (goal: 1.5 at most)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
