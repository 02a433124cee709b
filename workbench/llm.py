"""LLM backends for generating summaries and judgements.

Two backends, one interface (`complete`):

* `TransformersBackend`: any causal chat model that transformers loads (hub id, local
  folder, GGUF file, packaged short name), batched with left padding, on the
  auto-detected device;
* `OpenAIBackend`: any OpenAI-compatible HTTP server (vLLM, llama.cpp's server,
  Ollama, TGI, `transformers serve`), with concurrent requests, timeouts and retries
  with exponential backoff. The API key is read from an environment variable only.

`complete` yields `(index, Completion)` pairs as answers arrive, so the caller can save
each batch as soon as it is done (the stores are resumable; see `workbench.store`).
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

Messages = list[dict]


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


class BackendError(RuntimeError):
    """The backend could not answer (server unreachable, timed out after retries, bad reply)."""


class TransformersBackend:
    """Local generation with a transformers causal LM, batched, left-padded.

    `prefill` (a string) is placed at the start of the assistant's answer: a tiny model
    that ignores "answer in JSON" still writes JSON when its answer starts with `{"sentence": "`.
    """

    kind = "transformers"

    def __init__(self, model: str = "smollm2-135m-instruct", device: str | None = None, batch_size: int = 16,
                 dtype=None, trust_remote_code: bool = False):
        from .models import load_causal_lm

        self.model_id = str(model)
        self.batch_size = batch_size
        self.model, self.tokenizer = load_causal_lm(model, device=device, dtype=dtype,
                                                    trust_remote_code=trust_remote_code)
        self.device = str(self.model.device)
        if not self.tokenizer.chat_template:
            raise BackendError(
                f"{self.model_id} has no chat template; the generator needs a chat (instruct) model."
            )

    def _prompt(self, messages: Messages, prefill: str | None) -> str:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return text + (prefill or "")

    def complete(self, conversations: Sequence[Messages], sampling: Sampling,
                 prefill: str | None = None) -> Iterator[tuple[int, Completion]]:
        """Yield (index, Completion) for each conversation, one batch at a time."""
        import torch

        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        eos = [self.tokenizer.eos_token_id]
        for start in range(0, len(conversations), self.batch_size):
            batch = conversations[start:start + self.batch_size]
            t0 = time.perf_counter()
            enc = self.tokenizer([self._prompt(m, prefill) for m in batch], return_tensors="pt",
                                 padding=True, add_special_tokens=False).to(self.model.device)
            kwargs = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id,
                          eos_token_id=eos)
            if sampling.greedy:
                kwargs.update(do_sample=False)
            else:
                kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k)
            if sampling.stop:
                kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
            with torch.inference_mode():
                out = self.model.generate(**enc, **kwargs)
            new = out[:, enc["input_ids"].shape[1]:]
            seconds = (time.perf_counter() - t0) / len(batch)
            for i, row in enumerate(new):
                n_tokens = int((row != self.tokenizer.pad_token_id).sum())
                text = self.tokenizer.decode(row, skip_special_tokens=True)
                yield start + i, Completion((prefill or "") + text, n_tokens, seconds)


class OpenAIBackend:
    """Any OpenAI-compatible chat-completions server, with concurrency, timeouts and retries.

    The API key is taken from the environment variable named by `api_key_env`
    (default OPENAI_API_KEY); it is never logged or stored in records.
    """

    kind = "openai"

    def __init__(self, model: str, base_url: str = "http://127.0.0.1:8000/v1", api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout: float = 120.0, retries: int = 3, backoff: float = 1.0,
                 json_mode: bool = False, extra_body: dict | None = None):
        import httpx

        self.model_id = model
        self.base_url = base_url.rstrip("/")
        self.concurrency = max(1, int(concurrency))
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.json_mode = json_mode
        self.extra_body = dict(extra_body or {})
        # top_k is not in the OpenAI schema: vLLM, llama.cpp and TGI read it, but strict servers
        # (OpenAI itself, `transformers serve`) reject the request; then we stop sending it.
        self._send_top_k = True
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                    limits=httpx.Limits(max_connections=self.concurrency))

    def __repr__(self) -> str:  # never show headers (they hold the key)
        return f"OpenAIBackend(model={self.model_id!r}, base_url={self.base_url!r}, concurrency={self.concurrency})"

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _body(self, messages: Messages, sampling: Sampling) -> dict:
        body = {"model": self.model_id, "messages": messages, "max_tokens": sampling.max_new_tokens,
                "temperature": max(sampling.temperature, 0.0), "top_p": sampling.top_p, "n": 1}
        if sampling.top_k and not sampling.greedy and self._send_top_k:
            body["top_k"] = sampling.top_k  # vLLM, llama.cpp and TGI read it; strict servers reject it
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra_body)
        return body

    def request(self, messages: Messages, sampling: Sampling) -> Completion:
        """One chat completion with retries and exponential backoff (with jitter).

        Retries on connection errors, timeouts, 429 and 5xx; a 4xx answer other than
        429 is a mistake in the request and fails at once.
        """
        import httpx

        body = self._body(messages, sampling)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1) * (1 + random.random()) / 2)
            t0 = time.perf_counter()
            try:
                resp = self._client.post("/chat/completions", json=body)
                if resp.status_code in (400, 422) and "top_k" in body and "top_k" in resp.text:
                    self._send_top_k = False  # a strict server: ask again without it, and from now on
                    del body["top_k"]
                    resp = self._client.post("/chat/completions", json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self._client.timeout.read}s"
                continue
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:
                raise BackendError(f"{self.base_url}/chat/completions answered HTTP {resp.status_code}: "
                                   f"{resp.text[:300]}")
            try:
                data = resp.json()
                text = data["choices"][0]["message"]["content"] or ""
            except (ValueError, KeyError, IndexError, TypeError):
                last = f"reply is not a chat completion: {resp.text[:200]}"
                continue
            tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
            return Completion(text, tokens, time.perf_counter() - t0)
        return Completion("", 0, 0.0, error=f"{self.base_url}: {last} ({self.retries + 1} attempts)")

    def complete(self, conversations: Sequence[Messages], sampling: Sampling,
                 prefill: str | None = None) -> Iterator[tuple[int, Completion]]:
        """Yield (index, Completion) as requests finish, `concurrency` at a time.

        `prefill` is ignored: chat servers do not share one way to start the answer;
        use `json_mode=True` where the server supports it.
        """
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        todo = iter(enumerate(conversations))
        running = {}
        try:
            for _ in range(self.concurrency):
                self._submit(pool, todo, running, sampling)
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    index = running.pop(fut)
                    yield index, fut.result()
                    self._submit(pool, todo, running, sampling)
        finally:
            for fut in running:
                fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, pool, todo, running, sampling) -> None:
        item = next(todo, None)
        if item is not None:
            index, messages = item
            running[pool.submit(self.request, messages, sampling)] = index

    def health(self) -> bool:
        """True when the server lists models at /models, or else answers /health at its root.

        (`transformers serve` answers /v1/models with HTTP 500 when the machine has no hub cache.)
        """
        import httpx

        try:
            if self._client.get("/models").status_code == 200:
                return True
        except Exception:
            pass
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        try:  # on a new connection: uvicorn closes its connection after an error
            return httpx.get(f"{root}/health", headers=self._client.headers,
                             timeout=self._client.timeout).status_code == 200
        except Exception:
            return False


def make_backend(backend: str = "transformers", model: str = "smollm2-135m-instruct", **options):
    """Build a backend by name: "transformers" (local) or "openai" (any OpenAI-compatible server)."""
    if backend in {"transformers", "local", "hf"}:
        return TransformersBackend(model, **options)
    if backend in {"openai", "http", "vllm", "llamacpp", "ollama", "tgi"}:
        return OpenAIBackend(model, **options)
    raise ValueError(f"unknown backend {backend!r}: use 'transformers' or 'openai'")
