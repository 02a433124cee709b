"""What one LLM request asks and gets back: `Messages`, `Sampling`, `Completion` or a `BackendError`, its seed,
and how each token is drawn.

Every backend (`llm.py`, `http_backend.py`) takes a `Sampling` and answers with `Completion`s; a request's seed
comes from what names it (`request_seed`), so an answer depends on its request only. The
local backend draws each token with `filtered_probs` (temperature, top-k, top-p) and `draw`.
How long an HTTP backend waits for a request and how often it asks again: `RetryPolicy`.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Sequence

Messages = list[dict]  # one conversation: {"role": ..., "content": ...} dicts, as chat templates take them


class BackendError(RuntimeError):
    """The backend could not answer (server unreachable, timed out after retries, bad reply)."""


@dataclass
class Sampling:
    """Sampling parameters. Defaults follow the authors' generator (temperature 0.7, top-k 50, top-p 0.95)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    max_new_tokens: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain dict, for provenance records."""
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @property
    def greedy(self) -> bool:
        """Temperature 0 means greedy decoding."""
        return self.temperature <= 0


@dataclass
class Completion:
    """One answer: its text (prefill included), generated token count, and seconds it took."""

    text: str
    tokens: int = 0
    seconds: float = 0.0
    error: str = ""  # non-empty when the request failed for good (after retries)


def request_seed(*parts) -> int:
    """A stable seed for one request, from what names it: e.g. (doc_id, prompt key, sample, seed).

    sha256 of the parts joined by "|", cut to 31 bits (a non-negative int every backend takes:
    torch, llama.cpp's uint32, an OpenAI-compatible server's "seed"). The same parts give the
    same seed in every process and Python version, whatever else the call asks.
    """
    digest = hashlib.sha256("|".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFF


def call_seeds(n: int, sampling: Sampling, seeds: Sequence[int] | None) -> list[int]:
    """The per-request seeds of one call: `seeds` as given, else derived from the call's seed
    and each request's position (reproducible only for this very call), else random."""
    if seeds is not None:
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} conversations")
        return [int(s) for s in seeds]
    base = sampling.seed if sampling.seed is not None else random.randrange(2**31)
    return [request_seed("call", base, index) for index in range(n)]


def filtered_probs(logits, sampling: Sampling):
    """Sampling probabilities after temperature, top-k and top-p, over each row's candidate tokens.

    Returns (probs, candidates), both (rows, n): the same distribution as transformers'
    Temperature, TopK and TopP warpers, but top-p sorts only the k candidates, not the
    whole vocabulary (49k tokens per row and step, a third of a small model's step).
    """
    import torch

    logits = logits.float() / sampling.temperature
    k = min(sampling.top_k or logits.shape[-1], logits.shape[-1])
    values, candidates = logits.topk(k, dim=-1)  # sorted, largest first
    if sampling.top_p < 1:
        probs = torch.softmax(values, -1)
        above = probs.cumsum(-1) - probs  # mass of the candidates ranked higher
        values = values.masked_fill(above >= sampling.top_p, float("-inf"))  # the first always stays
    return torch.softmax(values, -1), candidates


def draw(probs, uniform):
    """Index per row drawn from `probs` (rows, n) with one uniform number in [0, 1) per row.

    Inverse transform sampling: the first candidate whose cumulative probability exceeds
    `uniform` times the row's total. Row by row, so a row's draw depends on its own
    probabilities and number only.
    """
    import torch

    cdf = probs.double().cumsum(-1)
    index = (cdf <= uniform[:, None] * cdf[:, -1:]).sum(-1)
    # never a candidate of probability 0 (top-p masked): the last one with mass at most
    last = (probs > 0).sum(-1) - 1
    return torch.minimum(index, last)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text up to and including the first stop string (a token may run past it)."""
    ends = [text.index(s) + len(s) for s in stop if s in text]
    return text[:min(ends)] if ends else text


@dataclass(frozen=True)
class RetryPolicy:
    """How long `OpenAIBackend` waits for a request, and how often it tries again.

    `timeout`: seconds per HTTP request; `retries`: further attempts after the first
    (on connection errors, timeouts, 429 and 5xx); `backoff`: seconds before the first
    retry, doubled for each next one (with jitter).
    """

    timeout: float = 120.0
    retries: int = 3
    backoff: float = 1.0
