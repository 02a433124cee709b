"""The OpenAI-compatible HTTP backend: any chat-completions server (vLLM, llama.cpp's server, Ollama, TGI,
`transformers serve`), with concurrent requests, timeouts and retries with exponential backoff.

The API key is read from an environment variable only and scrubbed from everything the server sends
back (`workbench.core.redaction`); URL credentials never appear in a message. `llm.make_backend`
builds it by name ("openai", "vllm", ...).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Iterator, Sequence

from ..core.redaction import redact, url_secrets, without_credentials
from .asyncio_client import in_flight
from .sampling import BackendError, Completion, Messages, RetryPolicy, Sampling

# From this many requests in flight, `complete` keeps them on one event loop (`asyncio_client`): threads, one per
# request, held 512 in flight to 65 answers a second against a server answering in 2 s, on 2 busy cores.
ASYNC_FROM = 32


class OpenAIBackend:
    """Any OpenAI-compatible chat-completions server, with concurrency, timeouts and retries.

    The API key is taken from the environment variable named by `api_key_env`
    (default OPENAI_API_KEY); it is never logged or stored, and every reply is scrubbed of it (`_clean`).
    Timeouts and retries: `retry` (a `RetryPolicy`).
    """

    kind = "openai"

    def __init__(self, model: str, base_url: str = "http://127.0.0.1:8000/v1", api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, json_mode: bool = False, extra_body: dict | None = None,
                 retry: RetryPolicy = RetryPolicy()):
        import httpx

        self.model_id = model
        self.base_url = base_url.rstrip("/")
        self.shown_url = without_credentials(self.base_url)  # for messages: never the user:password part
        self.concurrency = max(1, int(concurrency))
        self.retries = int(retry.retries)
        self.backoff = float(retry.backoff)
        self.json_mode = json_mode
        self.extra_body = dict(extra_body or {})
        # top_k is not in the OpenAI schema: vLLM, llama.cpp and TGI read it, but strict servers
        # (OpenAI itself, `transformers serve`) reject the request; then we stop sending it.
        self._send_top_k = True
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        # What a server may echo back (a test server, a proxy's error page): scrubbed from all it sends.
        self._secrets = tuple(s for s in (key, *url_secrets(self.base_url)) if s)
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=retry.timeout,
                                    limits=httpx.Limits(max_connections=self.concurrency))
        self._tls = None  # the async clients' shared TLS context (`async_client`)

    def __repr__(self) -> str:  # never show headers (they hold the key)
        return f"OpenAIBackend(model={self.model_id!r}, base_url={self.shown_url!r}, concurrency={self.concurrency})"

    def async_client(self, connections: int):
        """An `httpx.AsyncClient` like this backend's own client (URL, headers, timeout) with `connections`."""
        import httpx

        # One TLS context for all of them: httpx builds one per client otherwise, loading every CA certificate
        # again (about 30 ms each, a second of the first wave at 512 in flight, even for plain http://).
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return httpx.AsyncClient(base_url=self.base_url, headers=self._client.headers, timeout=self._client.timeout,
                                 verify=self._tls, limits=httpx.Limits(max_connections=connections,
                                                                       max_keepalive_connections=connections))

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _body(self, messages: Messages, sampling: Sampling, seed: int | None = None) -> dict:
        body = {"model": self.model_id, "messages": messages, "max_tokens": sampling.max_new_tokens,
                "temperature": max(sampling.temperature, 0.0), "top_p": sampling.top_p, "n": 1}
        if sampling.top_k and not sampling.greedy and self._send_top_k:
            body["top_k"] = sampling.top_k  # vLLM, llama.cpp and TGI read it; strict servers reject it
        seed = seed if seed is not None else sampling.seed
        if seed is not None:
            body["seed"] = seed  # vLLM, llama.cpp's server, TGI and OpenAI read it
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra_body)
        return body

    def request(self, messages: Messages, sampling: Sampling, seed: int | None = None) -> Completion:
        """One chat completion with retries and exponential backoff (with jitter).

        `seed` (this request's own; default `sampling.seed`) is sent as the body's "seed".

        Retries on connection errors, timeouts, 429 and 5xx; a 4xx answer other than
        429 is a mistake in the request and fails at once.
        What the server sends (answer, error page, httpx's error text) passes `_clean` first.
        """
        body = self._body(messages, sampling, seed)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._backoff(attempt))
            t0 = time.perf_counter()
            try:
                resp = self._post(body)
            except Exception as exc:  # noqa: BLE001 - `_failed` names what is retried and raises the rest
                last = self._failed(exc)
                continue
            done, last = self._reply(resp, t0)
            if done is not None:
                return done
        return Completion("", 0, 0.0, error=f"{self.shown_url}: {last} ({self.retries + 1} attempts)")

    async def arequest(self, client, messages: Messages, sampling: Sampling, seed: int | None = None) -> Completion:
        """`request` on an `httpx.AsyncClient` (`complete`'s path for many requests in flight)."""
        body = self._body(messages, sampling, seed)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))
            t0 = time.perf_counter()
            try:
                resp = await client.post("/chat/completions", json=body)
                if resp.status_code in (400, 422) and "top_k" in body and "top_k" in resp.text:
                    self._send_top_k = False
                    del body["top_k"]
                    resp = await client.post("/chat/completions", json=body)
            except Exception as exc:  # noqa: BLE001 - `_failed` names what is retried and raises the rest
                last = self._failed(exc)
                continue
            done, last = self._reply(resp, t0)
            if done is not None:
                return done
        return Completion("", 0, 0.0, error=f"{self.shown_url}: {last} ({self.retries + 1} attempts)")

    def _backoff(self, attempt: int) -> float:
        """Seconds before retry `attempt` (1, 2, ...): doubling from `backoff`, with jitter."""
        return self.backoff * 2 ** (attempt - 1) * (1 + random.random()) / 2

    def _failed(self, exc: Exception) -> str:
        """What a failed POST says, for a retry (timeouts, connection errors); anything else raises BackendError."""
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return f"timed out after {self._client.timeout.read}s"
        if isinstance(exc, httpx.TransportError):
            return f"connection failed ({type(exc).__name__}: {self._clean(str(exc))})"
        if isinstance(exc, httpx.HTTPError):  # e.g. a body that cannot be decoded: its text may quote the server
            raise BackendError(f"{self.shown_url}/chat/completions failed ({type(exc).__name__}: "
                               f"{self._clean(str(exc))})") from None
        raise exc

    def _reply(self, resp, t0: float) -> tuple[Completion | None, str]:
        """(the completion, "") from a good answer; (None, why) from one worth retrying; BackendError on a 4xx."""
        if resp.status_code == 429 or resp.status_code >= 500:
            return None, f"HTTP {resp.status_code}: {self._clean(resp.text, 200)}"
        if resp.status_code >= 400:
            raise BackendError(f"{self.shown_url}/chat/completions answered HTTP {resp.status_code}: "
                               f"{self._clean(resp.text, 300)}")
        try:
            data = resp.json()
            text = data["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            return None, f"reply is not a chat completion: {self._clean(resp.text, 200)}"
        tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
        return Completion(self._clean(str(text)), tokens, time.perf_counter() - t0), ""

    def _post(self, body: dict):
        """POST the request; a strict server that rejects top_k is asked again without it, and from now on."""
        resp = self._client.post("/chat/completions", json=body)
        if resp.status_code in (400, 422) and "top_k" in body and "top_k" in resp.text:
            self._send_top_k = False
            del body["top_k"]
            resp = self._client.post("/chat/completions", json=body)
        return resp

    def _clean(self, text: str, limit: int | None = None) -> str:
        """`text` from the server with the key (and URL credentials) redacted, then cut to `limit` characters."""
        # Redacted before the cut: a cut first could leave a key's start too short to recognise.
        head = text if limit is None else text[:limit + 4096]  # an error page can be megabytes
        clean = redact(head, self._secrets)
        return clean if limit is None else clean[:limit]

    def complete(self, conversations: Sequence[Messages], sampling: Sampling,
                 prefill: str | None = None, seeds: Sequence[int] | None = None) -> Iterator[tuple[int, Completion]]:
        """Yield (index, Completion) as requests finish, `concurrency` at a time: threads for a few, one event loop
        (`asyncio_client.in_flight`) from ASYNC_FROM on, where hundreds of threads cost more than the answers.

        `prefill` is ignored: chat servers do not share one way to start the answer;
        use `json_mode=True` where the server supports it. `seeds` (one per conversation)
        go out as each request's "seed"; without them every request sends `sampling.seed`.
        """
        if seeds is not None and len(seeds) != len(conversations):
            raise ValueError(f"{len(seeds)} seeds for {len(conversations)} conversations")
        todo = iter((index, (messages, None if seeds is None else int(seeds[index])))
                    for index, messages in enumerate(conversations))
        if self.concurrency >= ASYNC_FROM:
            yield from in_flight(self, todo, sampling)
            return
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
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
            index, (messages, seed) = item
            running[pool.submit(self.request, messages, sampling, seed)] = index

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
