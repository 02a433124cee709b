"""`OpenAIBackend` against real HTTP servers on loopback (no mocks of the backend).

Two kinds of server, both real processes or threads listening on 127.0.0.1:

* small `http.server` servers written here, which misbehave on purpose (too slow,
  5xx, 4xx, replies that are not JSON, nothing listening): fast, no model;
* `transformers serve` on the packaged SmolLM2 folder (marked slow): the real
  OpenAI-compatible server that the backend is meant for.

What `transformers serve` (transformers 5.23) does with what the backend sends, seen here:
max_tokens, temperature, top_p, seed and stop are honoured (stop strings are kept at the
end of the answer); n and response_format are accepted and ignored (a warning in its log);
top_k is rejected with HTTP 422 "Unexpected fields", which the backend answers by asking
again without it; sampling happens only if the model's generation config sets
do_sample (the converted SmolLM2 folder does not, so its answers are greedy);
/v1/models answers HTTP 500 on a machine without a hub cache, /health answers 200.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from loopback import FakeServer
from workbench.data.aspects import load_aspects
from workbench.data.corpus import Corpus
from workbench.generate.summaries import SUMMARY_STOP, GenerationError, generate_summaries, summary_store
from workbench.generate.http_backend import OpenAIBackend
from workbench.generate.sampling import BackendError, Completion, Sampling
from workbench.generate.sampling import RetryPolicy

try:
    import pytest_timeout  # noqa: F401

    timeout = pytest.mark.timeout
except ImportError:  # pytest-timeout is in the dev extra; without it, no per-test limit
    def timeout(seconds):
        return lambda f: f

HOST = "127.0.0.1"
MESSAGES = [{"role": "user", "content": "Say hello."}]
FAST = Sampling(max_new_tokens=8, seed=0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def chat_reply(content: str, tokens: int = 3) -> dict:
    return {"id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}}


def small_corpus(n: int = 2) -> Corpus:
    abstracts = [
        "Parsing long documents is slow. We propose a linear-time parser based on a stack of "
        "transitions and show that it is as accurate as cubic-time parsers on two treebanks.",
        "Low-resource machine translation lacks parallel data. We mine sentence pairs from "
        "comparable corpora with multilingual embeddings and gain three BLEU points.",
        "Annotating coreference is costly. We study active learning for coreference resolution "
        "and halve the annotation effort needed to reach the same accuracy.",
    ]
    docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "title": [f"Paper {i}" for i in range(n)],
                         "abstract": abstracts[:n]})
    return Corpus(docs, name="tiny")


# ------------------------------------------------------------------------------------
# Small real servers that misbehave on purpose
# ------------------------------------------------------------------------------------
@pytest.fixture
def serve():
    """serve(respond) starts a FakeServer; all are closed at the end of the test."""
    servers = []

    def start(respond):
        server = FakeServer(respond)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def backend_for(server, **options) -> OpenAIBackend:
    retry = {"timeout": 5.0, "retries": 2, "backoff": 0.01}
    retry.update({key: options.pop(key) for key in list(options) if key in retry})
    options = {"api_key_env": None, **options}
    return OpenAIBackend(model="fake-model", base_url=server.base_url, retry=RetryPolicy(**retry), **options)


@pytest.mark.slow
def test_timeout_gives_an_error_completion(serve):
    server = serve(lambda n, req: (server.stop.wait(10), (200, chat_reply("too late")))[1])
    backend = backend_for(server, timeout=0.5, retries=1)
    t0 = time.perf_counter()
    result = backend.request(MESSAGES, FAST)
    assert isinstance(result, Completion)
    assert "timed out" in result.error and result.text == ""
    assert "2 attempts" in result.error
    assert time.perf_counter() - t0 < 5
    assert len(server.posts) == 2


def test_server_errors_are_retried_until_success(serve):
    server = serve(lambda n, req: (500, {"error": "busy"}) if n <= 2 else (200, chat_reply("hello there", 2)))
    backend = backend_for(server, retries=3)
    result = backend.request(MESSAGES, FAST)
    assert result.error == ""
    assert result.text == "hello there" and result.tokens == 2
    assert len(server.posts) == 3
    body = server.posts[-1]["body"]
    assert server.posts[-1]["path"] == "/v1/chat/completions"
    assert body["model"] == "fake-model" and body["messages"] == MESSAGES
    assert body["max_tokens"] == 8 and body["seed"] == 0


def test_client_error_fails_at_once(serve):
    server = serve(lambda n, req: (400, {"error": {"message": "bad request"}}))
    backend = backend_for(server, retries=3)
    with pytest.raises(BackendError, match="HTTP 400"):
        backend.request(MESSAGES, FAST)
    assert len(server.posts) == 1


def test_reply_that_is_not_json_is_an_error_after_retries(serve):
    server = serve(lambda n, req: (200, b"<html>a proxy page, not JSON</html>"))
    backend = backend_for(server, retries=2)
    result = backend.request(MESSAGES, FAST)
    assert "not a chat completion" in result.error and result.text == ""
    assert len(server.posts) == 3


def test_nothing_listening_is_a_connection_error():
    port = free_port()  # bound then released: nothing listens there now
    backend = OpenAIBackend(model="m", base_url=f"http://{HOST}:{port}/v1", api_key_env=None,
                            retry=RetryPolicy(timeout=2.0, retries=1, backoff=0.01))
    assert backend.health() is False
    result = backend.request(MESSAGES, FAST)
    assert "connection failed" in result.error and result.text == ""


def test_top_k_rejected_by_a_strict_server_is_dropped(serve):
    """`transformers serve` and OpenAI reject the non-standard top_k; the backend asks again without it."""
    def respond(n, req):
        if "top_k" in req["body"]:
            return 422, {"detail": "Unexpected fields in the request: {'top_k'}"}
        return 200, chat_reply("fine")

    server = serve(respond)
    backend = backend_for(server)
    sampling = Sampling(temperature=0.7, top_k=50, max_new_tokens=8)
    assert backend.request(MESSAGES, sampling).text == "fine"
    assert [("top_k" in r["body"]) for r in server.posts] == [True, False]
    assert backend.request(MESSAGES, sampling).text == "fine"  # not sent again
    assert len(server.posts) == 3 and "top_k" not in server.posts[-1]["body"]


def test_top_k_is_kept_for_servers_that_accept_it(serve):
    server = serve(lambda n, req: (200, chat_reply("ok")))
    backend = backend_for(server)
    backend.request(MESSAGES, Sampling(temperature=0.7, top_k=40))
    backend.request(MESSAGES, Sampling(temperature=0.0, top_k=40))  # greedy: no top_k
    assert server.posts[0]["body"]["top_k"] == 40
    assert "top_k" not in server.posts[1]["body"]


def test_health_falls_back_to_root_health(serve):
    server = serve(lambda n, req: (500, {"error": "no hub cache"}) if req["path"].endswith("/models")
                   else (200, {"status": "ok"}))
    assert backend_for(server).health() is True
    assert [r["path"] for r in server.requests] == ["/v1/models", "/health"]


def test_api_key_goes_in_the_header_and_never_in_repr(serve, monkeypatch):
    secret = "sk-test-0123456789-secret"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server = serve(lambda n, req: (200, chat_reply("ok")))
    backend = OpenAIBackend(model="fake-model", base_url=server.base_url, retry=RetryPolicy(retries=0))
    assert backend.request(MESSAGES, FAST).text == "ok"
    headers = {k.lower(): v for k, v in server.posts[-1]["headers"].items()}
    assert headers["authorization"] == f"Bearer {secret}"
    assert secret not in repr(backend) and secret not in str(backend)

    without = OpenAIBackend(model="fake-model", base_url=server.base_url, retry=RetryPolicy(retries=0),
                            api_key_env=None)
    assert without.request(MESSAGES, FAST).text == "ok"
    assert "authorization" not in {k.lower() for k in server.posts[-1]["headers"]}


def test_generation_stops_early_against_a_dead_server_and_stores_nothing(serve, tmp_path):
    server = serve(lambda n, req: (503, {"error": "down"}))
    backend = backend_for(server, retries=0, concurrency=1)
    aspects = load_aspects("acl").subset(["challenge"])
    total = 2 * 1 * 5  # documents x prompt keys x k
    with pytest.raises(GenerationError, match="run again to retry only the failed ones") as info:
        generate_summaries(small_corpus(2), aspects, backend, tmp_path, k=5, progress=False)
    assert "stopped after" in str(info.value)
    assert 0 < len(server.posts) < total
    assert len(summary_store(tmp_path)) == 0


def test_failed_requests_are_not_stored_and_a_rerun_retries_them(serve, tmp_path):
    """Answers that came back are kept; the failed ones are asked again on the next run."""
    healthy = threading.Event()

    def respond(n, req):
        content = req["body"]["messages"][-1]["content"]
        if "Low-resource" in content and not healthy.is_set():
            return 500, {"error": "flaky"}
        return 200, chat_reply('{"sentence": "A general challenge."}', 6)

    server = serve(respond)
    backend = backend_for(server, retries=0, concurrency=2)
    aspects = load_aspects("acl").subset(["challenge"])
    with pytest.raises(GenerationError, match="2 of 4 requests failed"):
        generate_summaries(small_corpus(2), aspects, backend, tmp_path, k=2, progress=False)
    stored = summary_store(tmp_path).records()
    assert sorted((r["doc_id"], r["sample"]) for r in stored) == [("d0", 0), ("d0", 1)]
    assert all(r["status"] == "ok" and r["text"] == "A general challenge." for r in stored)

    healthy.set()
    report = generate_summaries(small_corpus(2), aspects, backend, tmp_path, k=2, progress=False)
    assert (report.written, report.skipped, report.failed) == (2, 2, 0)
    assert len(summary_store(tmp_path)) == 4


def test_answer_that_is_not_json_is_stored_as_unparsed(serve, tmp_path):
    server = serve(lambda n, req: (200, {"choices": [{"message": {"content": "not json at all"}}]}))
    backend = backend_for(server, retries=0)
    aspects = load_aspects("acl").subset(["challenge"])
    report = generate_summaries(small_corpus(1), aspects, backend, tmp_path, k=1, progress=False)
    assert report.written == 1 and report.status == {"unparsed": 1}
    (record,) = summary_store(tmp_path).records()
    assert record["status"] == "unparsed" and record["text"] is None
    assert record["raw"] == "not json at all" and record["error"]
    assert record["backend"] == "openai" and record["model"] == "fake-model"
    assert record["tokens"] == 0  # the reply had no usage


# ------------------------------------------------------------------------------------
# transformers serve, the real OpenAI-compatible server, on the packaged SmolLM2
# ------------------------------------------------------------------------------------
def _transformers_cli() -> Path:
    return Path(sys.executable).with_name("transformers")


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except Exception:
        return 0


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    """`transformers serve` on the packaged SmolLM2 folder, on a free loopback port."""
    cli = _transformers_cli()
    if not cli.exists():
        pytest.skip(f"{cli} not found: install the dev extra (transformers[serving])")
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        pytest.skip("transformers serve needs fastapi and uvicorn: install the dev extra (transformers[serving])")
    from workbench.core.models import prepare_causal_lm

    folder = prepare_causal_lm("smollm2-135m-instruct")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(cli), "serve", "--host", HOST, "--port", str(port), folder],
                                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode} before it was ready; "
                            f"log tail:\n{_tail(log)}")
            if _get(f"http://{HOST}:{port}/health") == 200 or _get(f"http://{HOST}:{port}/v1/models") == 200:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not answer /health within 180 s; log tail:\n{_tail(log)}")
            time.sleep(1)
        yield {"folder": folder, "port": port, "base_url": f"http://{HOST}:{port}/v1", "log": log}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.mark.slow
@timeout(600)
def test_real_server_completes_conversations(real_server):
    backend = OpenAIBackend(model=real_server["folder"], base_url=real_server["base_url"], api_key_env=None,
                            retry=RetryPolicy(timeout=120, retries=1, backoff=0.1))
    try:
        assert backend.health()
        conversations = [[{"role": "user", "content": text}] for text in
                         ("Say hello.", "Name a colour.", "What is two plus two?")]
        # Default sampling sends top_k, which this server rejects: the backend must drop it and go on.
        sampling = Sampling(max_new_tokens=8, seed=0)
        results = list(backend.complete(conversations, sampling))
    finally:
        backend.close()
    assert sorted(i for i, _ in results) == [0, 1, 2]
    for _, completion in results:
        assert completion.error == "", completion.error
        assert completion.text.strip()
        assert 0 < completion.tokens <= 8
        assert completion.seconds > 0
    assert backend._send_top_k is False


@pytest.mark.slow
@timeout(600)
def test_real_server_generate_summaries_is_resumable(real_server, short_aspects, tmp_path):
    backend = OpenAIBackend(model=real_server["folder"], base_url=real_server["base_url"], api_key_env=None,
                            retry=RetryPolicy(timeout=120, retries=1, backoff=0.1), concurrency=2)
    aspects = short_aspects.subset(["challenge"])
    corpus = small_corpus(2)
    sampling = Sampling(stop=SUMMARY_STOP, max_new_tokens=10, seed=0)  # what is answered is not under test
    try:
        first = generate_summaries(corpus, aspects, backend, tmp_path, k=2, sampling=sampling, progress=False)
        assert (first.requested, first.written, first.skipped, first.failed) == (4, 4, 0, 0)
        records = summary_store(tmp_path).records()
        assert sorted((r["doc_id"], r["key"], r["sample"]) for r in records) == [
            ("d0", "challenge", 0), ("d0", "challenge", 1), ("d1", "challenge", 0), ("d1", "challenge", 1)]
        for r in records:
            assert r["status"] in {"ok", "not_applicable", "unparsed"}
            assert isinstance(r["raw"], str) and r["raw"].strip()
            assert r["backend"] == "openai" and r["model"] == real_server["folder"]
            assert r["tokens"] > 0
        second = generate_summaries(corpus, aspects, backend, tmp_path, k=2, sampling=sampling, progress=False)
        assert (second.written, second.skipped, second.failed) == (0, 4, 0)
        assert len(summary_store(tmp_path)) == 4
    finally:
        backend.close()
