"""Smoke mode shared by every benchmark: `--smoke` or WORKBENCH_BENCH_SMOKE=1.

Smoke mode shrinks every size of a benchmark (documents, points, steps, repetitions) to the
smallest that still runs each of its code paths, and changes nothing else: the script prints
its usual tables, with meaningless numbers. tests/test_benchmarks.py runs every script this
way, so that none breaks unseen. Sizes given on the command line still win.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

ENV = "WORKBENCH_BENCH_SMOKE"


def smoke_requested(argv: Sequence[str] | None = None) -> bool:
    """True for `--smoke` among the arguments or WORKBENCH_BENCH_SMOKE set to anything but "" or "0"."""
    argv = sys.argv[1:] if argv is None else argv
    return "--smoke" in argv or os.environ.get(ENV, "") not in ("", "0")


def add_smoke(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, **sizes) -> bool:
    """Add --smoke to `parser`; in smoke mode make `sizes` its defaults (explicit arguments still win).

    Returns whether smoke mode is on; `args.smoke` says the same after parsing.
    """
    parser.add_argument("--smoke", action="store_true",
                        help=f"tiny sizes, seconds: check that the script runs (also {ENV}=1)")
    on = smoke_requested(argv)
    if on:
        parser.set_defaults(smoke=True, **sizes)
    return on


# ACLSum papers of a smoke run: 6 validation papers stand in for stage 02's train (4) and validation (2)
# split, the first 10 test papers (what a health check needs at least) are the held-out ones.
SMOKE_CORPUS = "aclsum:validation[:6],test[:10]"


def tiny_run(run_dir, corpus_spec: str = SMOKE_CORPUS, aspects: Sequence[str] | None = None, decoders: bool = False,
             context: int = 3):
    """A run directory as a CPU run of stages 02-03 (and 04's retrieval decoders) leaves it, with untrained heads.

    What the benchmarks that read a finished run (runs/aclsum-demo) need, in seconds: frozen-
    backbone MiniLM aspect models and unified model (`PooledAspectModel`, untrained) and stage
    02's split of the corpus's non-test papers (as tests/test_stages_04_06.py makes it), for
    `aspects` (default: the "acl" set's); with
    `decoders`, stage 04's retrieval decoders built from the human views of those papers (`context`:
    statements in the LM's prompt, stage 04's default 3).
    Returns the run directory.
    """
    from pathlib import Path

    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.embed.distill import DistillConfig
    from workbench.embed.heads import PooledAspectModel
    from workbench.core.rundir import RunDir
    from workbench.embed.aspect_training import TrainConfig

    run = Path(run_dir)
    aspects = list(aspects or load_aspects("acl").names)
    corpus = load_corpus(corpus_spec)
    known = corpus.docs.loc[corpus.docs["split"] != "test", "doc_id"].astype(str).tolist()
    cut = max(1, (2 * len(known)) // 3)
    hidden = 384  # MiniLM's width: frozen-mode aspect vectors are backbone-sized
    models = RunDir(run).aspect_models
    for i, aspect in enumerate(aspects):
        PooledAspectModel("minilm", [aspect], hidden=hidden, pool=False, rank=TrainConfig().head_rank,
                          seed=i).save_pretrained(models / aspect, extra={"aspect": aspect, "mode": "frozen"})
    RunDir(run).write_split(known[:cut], known[cut:])
    PooledAspectModel("minilm", aspects, hidden=hidden, pool=True, rank=DistillConfig().head_rank).save_pretrained(
        RunDir(run).unified_model, extra={"stage": "distill", "mode": "frozen"})
    if decoders:
        from workbench.decode.decoding import RetrievalSettings, build_retrieval_decoders, set_default_decoder

        build_retrieval_decoders(run, corpus, aspects, RetrievalSettings(context=context))
        set_default_decoder(run, "retrieval")
    return run


class HashedBackbone:
    """A stand-in frozen encoder for smoke runs: a text's vector is the unit sum of a fixed random vector per word
    (seeded by the word's hash), so a smoke run passes every code path without loading a model. Its numbers mean
    nothing; a benchmark takes it in place of `FrozenBackbone` in smoke mode only."""

    name, pooling, max_length, hidden_size, key = "hashed-words", "mean", 256, 32, "hashed-words"

    def __init__(self):
        self.words: dict = {}

    def word(self, word: str):
        import zlib

        import numpy as np

        if word not in self.words:
            self.words[word] = np.random.default_rng(zlib.crc32(word.encode())).standard_normal(self.hidden_size)
        return self.words[word]

    def embed(self, texts, batch_size: int = 32, progress: bool = False):
        import numpy as np

        out = np.zeros((len(texts), self.hidden_size), np.float32)
        for i, text in enumerate(texts):
            for w in str(text).lower().split() or [""]:
                out[i] += self.word(w)
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-12)
        return out
