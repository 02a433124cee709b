"""`OpenAIBackend.complete` with many requests in flight (one event loop, `generate/asyncio_client.py`), against a
real server on loopback: every answer once, seeds sent, retries, a refused request raised, requests truly in flight."""

from __future__ import annotations

import threading
import time

import pytest

from loopback import FakeServer
from workbench.generate.http_backend import ASYNC_FROM, OpenAIBackend
from workbench.generate.sampling import BackendError, RetryPolicy, Sampling

DELAY = 0.3


def reply(content: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": {"completion_tokens": 2}}


@pytest.fixture
def server(monkeypatch):
    """Answers "echo <seed>" after DELAY seconds; the 5th request first gets a 503 (retried); counts peak load.
    Its listen backlog is a served engine's (uvicorn's 2048), not the stdlib's 5, which resets connections
    that arrive dozens at once."""
    import http.server

    monkeypatch.setattr(http.server.ThreadingHTTPServer, "request_queue_size", 2048, raising=False)
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def respond(n, request):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(DELAY)
        with lock:
            state["now"] -= 1
        if n == 5:
            return 503, {"error": "busy"}
        if request["body"]["messages"][0]["content"] == "refuse":
            return 400, {"error": "bad request"}
        return 200, reply(f"echo {request['body'].get('seed')}")

    fake = FakeServer(respond)
    yield fake, state
    fake.close()


def backend(fake, concurrency: int) -> OpenAIBackend:
    return OpenAIBackend("m", base_url=fake.base_url, api_key_env=None, concurrency=concurrency,
                         retry=RetryPolicy(timeout=10.0, retries=2, backoff=0.01))


@pytest.mark.slow  # about 1.2 s: two waves of 0.3 s on a loaded machine
def test_many_in_flight_every_answer_once_with_its_seed(server):
    fake, state = server
    n, concurrency = 128, max(ASYNC_FROM, 64)
    client = backend(fake, concurrency)
    t0 = time.perf_counter()
    got = dict(client.complete([[{"role": "user", "content": f"q{i}"}] for i in range(n)], Sampling(),
                               seeds=list(range(1000, 1000 + n))))
    seconds = time.perf_counter() - t0
    client.close()
    assert sorted(got) == list(range(n))
    wrong = [(i, got[i].text, got[i].error) for i in range(n) if got[i].text != f"echo {1000 + i}" or got[i].error]
    assert not wrong, wrong[:3]
    assert len(fake.requests) == n + 1  # the 503 was asked again, once
    # Truly in flight together: more than the default 8 threads could hold (the server's threads start one by
    # one, so the peak may stay under 64 on a busy machine), and faster than 8 at a time.
    assert state["peak"] >= 16, state["peak"]
    assert seconds < n / 8 * DELAY, seconds


def test_a_refused_request_raises_and_stops_the_rest(server):
    fake, _ = server
    client = backend(fake, ASYNC_FROM)
    conversations = [[{"role": "user", "content": "refuse" if i == 40 else f"q{i}"}] for i in range(400)]
    with pytest.raises(BackendError, match="HTTP 400"):
        list(client.complete(conversations, Sampling()))
    client.close()
    assert len(fake.requests) < 400  # what had not been sent when it failed never was
