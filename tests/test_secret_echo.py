"""A server that echoes the API key back never gets it into an error, a record, a notebook or a report.

Issue 41, item 3: a server on 127.0.0.1 that echoed the `Authorization` header in its 401, 500 and
200 replies put the whole key into the CLI error and the executed `01_generate.ipynb`. Here real
servers on loopback (`http.server` in a thread) echo the request headers as they are, JSON-escaped
(as Python, PHP and Go write it), HTML-escaped, URL-encoded, as a bytes repr, cut, and base64-encoded
(a Basic credential, standard and URL-safe, and a JSON body); the key is set
through the environment variable the backend reads, as a user sets it. Nothing the backend, stage 01's
functions or the CLI leave behind (exception text, captured terminal, summaries.jsonl,
judgements.jsonl, the run directory, the reports) may hold 8 consecutive characters of the key, in
any of those forms, nor anything that decodes to them (`decoded_leaks`).
"""

from __future__ import annotations

import base64
import html
import json
import os
import random
import re
import socketserver
import string
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

import pandas as pd
import pytest

from workbench.cli import main
from workbench.core.redaction import redact
from workbench.data.aspect_names import MAX_ASPECT_NAME
from workbench.data.aspects import AspectConfigError, load_aspects
from workbench.data.corpus import Corpus
from workbench.generate.http_backend import OpenAIBackend
from workbench.generate.sampling import BackendError, Sampling
from workbench.generate.sampling import RetryPolicy
from workbench.generate.summaries import (GenerationError, JudgeConfig, generate_summaries, judge_pairs,
                                          judgement_store, summary_store)

HOST = "127.0.0.1"
MESSAGES = [{"role": "user", "content": "Say hello."}]
FAST = Sampling(max_new_tokens=8, seed=0)


def make_key() -> str:
    """sk-TESTKEY- and 32 random characters, every other one a character that escaping changes.

    So no 8 characters of the key read the same JSON-, HTML- or URL-escaped: a form the
    redaction misses shows up as a leak in its escaped form.
    """
    rng = random.Random()
    specials = "+/=&<>\"'\\"
    return "sk-TESTKEY-" + "".join(rng.choice(string.ascii_letters + string.digits) + rng.choice(specials)
                                   for _ in range(16))


KEY = make_key()


def written_forms(text: str) -> list[str]:
    """`text` as a server or a file may write it: as is, JSON, HTML, URL, bytes repr, and escaped twice."""
    once = [text, json.dumps(text)[1:-1], json.dumps(text)[1:-1].replace("/", "\\/"), html.escape(text),
            html.escape(text, quote=False), quote(text, safe=""), repr(text.encode())[2:-1]]
    return once + [json.dumps(form)[1:-1] for form in once] + [html.escape(form) for form in once]


def leaked(text: str, key: str = KEY, n: int = 8) -> list[str]:
    """The runs of n characters of the key that `text` holds, in any written form or base64-decoded (empty: no
    leak)."""
    return [part for i in range(len(key) - n + 1) for part in [key[i:i + n]]
            if any(form in text for form in written_forms(part))] + decoded_leaks(text, key, n)


def decoded_leaks(text: str, key: str = KEY, n: int = 8) -> list[str]:
    """The runs of n characters of the key (as is, or JSON-escaped) that any part of `text` decodes to as base64.

    Computed apart from the redaction: every run of base64 characters (either alphabet, JSON's \\/ read as /)
    is decoded from each of its first four characters, which covers every substring of it: a substring that
    starts at character j decodes to a part of what the run decodes to from j mod 4."""
    grams = {form[i:i + n].encode() for form in (key, json.dumps(key)[1:-1]) for i in range(len(form) - n + 1)}
    found = set()
    for run in re.findall(r"[A-Za-z0-9+/_-]{%d,}" % (4 * n // 3), text.replace("\\/", "/")):
        run = run.replace("-", "+").replace("_", "/")
        for start in range(4):
            part = run[start:]
            part = part[:-1] if len(part) % 4 == 1 else part + "=" * (-len(part) % 4)  # its last group too
            data = base64.b64decode(part)
            found.update(data[i:i + n] for i in range(len(data) - n + 1) if data[i:i + n] in grams)
    return sorted(g.decode(errors="replace") for g in found)


def echo(headers) -> str:
    """The request's headers, written back every way a careless server or proxy writes them."""
    lines = "\n".join(f"{name}: {value}" for name, value in headers.items())
    auth = headers.get("Authorization", "")
    key = auth.removeprefix("Bearer ")
    as_json = json.dumps(dict(headers))
    go_json = as_json.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # Go's encoder
    # As a proxy echoes a Basic credential (base64 of "user:key"), URL-safe without padding, and a JSON body.
    as_base64 = [base64.b64encode(auth.encode()).decode(), base64.urlsafe_b64encode(f"me:{key}".encode()).decode()
                 .rstrip("="), base64.b64encode(as_json.encode()).decode()]
    # The header first: a server's message is cut (the backend shows its first 200 or 300 characters).
    return "\n".join([f"Authorization: {auth}", *as_base64[:2], html.escape(auth), lines, as_json,
                      as_json.replace("/", "\\/"), go_json, html.escape(lines), quote(auth, safe=""),
                      repr(auth.encode()), as_base64[2], f"key starts {key[:12]}", f"key ends {key[-12:]}"])


def chat_reply(content: str) -> dict:
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"completion_tokens": 5}}


def reply_for(status: int, headers) -> tuple[str, bytes]:
    """(content type, body) of an echoing reply: 401 as JSON, 500 as an HTML page, 200 as a chat completion."""
    said = echo(headers)
    if status == 401:
        return "application/json", json.dumps({"error": {"message": f"invalid key; you sent {said}"}}).encode()
    if status == 500:
        page = f"<html><body><h1>Internal error</h1><pre>{html.escape(said)}</pre>{said}</body></html>"
        return "text/html", page.encode()
    content = json.dumps({"sentence": f"The request carried {said}"})  # parses: the echo is stored as a summary
    return "application/json", json.dumps(chat_reply(content)).encode()


class EchoServer:
    """A ThreadingHTTPServer on 127.0.0.1 whose every reply echoes the request's headers.

    `status`: the HTTP status of every reply, or a function of the request's number (1-based).
    """

    def __init__(self, status):
        self.status, self.requests = status, 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the captured terminal to what the workbench prints
                pass

            def _handle(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests += 1
                status = server.status(server.requests) if callable(server.status) else server.status
                kind, body = reply_for(status, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _handle

        self.httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class MalformedHeaderServer:
    """Answers with a header line that has no colon and holds the Authorization header: httpx's
    error text quotes that line (`illegal header line: bytearray(b'...')`)."""

    def __init__(self):
        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                auth = next((line for line in head.split(b"\r\n") if line.lower().startswith(b"authorization:")), b"")
                self.request.sendall(b"HTTP/1.1 200 OK\r\nX-You-Sent " + auth + b"\r\nContent-Length: 0\r\n\r\n")

        self.server = socketserver.ThreadingTCPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://{HOST}:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def serve():
    """serve(status) starts an EchoServer (serve(None): a MalformedHeaderServer); all close at the end."""
    servers = []

    def start(status):
        server = EchoServer(status) if status is not None else MalformedHeaderServer()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def keyed(monkeypatch):
    """The key in the environment variable the backend reads, as a user sets it."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def backend_for(server, **options) -> OpenAIBackend:
    retry = {"timeout": 5.0, "retries": 1, "backoff": 0.01}
    retry.update({key: options.pop(key) for key in list(options) if key in retry})
    return OpenAIBackend(model="fake-model", base_url=server.base_url, retry=RetryPolicy(**retry), **options)


def two_papers() -> Corpus:
    docs = pd.DataFrame({"doc_id": ["d0", "d1"], "title": ["Parsing fast", "Mining pairs"], "abstract": [
        "Parsing long documents is slow. We propose a linear-time parser and show that it is as accurate as "
        "cubic-time parsers on two treebanks.",
        "Low-resource translation lacks parallel data. We mine sentence pairs from comparable corpora with "
        "multilingual embeddings and gain three points."]})
    return Corpus(docs, name="two")


def files_text(folder: Path) -> str:
    """Every file under `folder`, read as text (the raw bytes as latin-1, so nothing is skipped)."""
    return "\n".join(p.read_bytes().decode("latin-1") for p in sorted(folder.rglob("*")) if p.is_file())


# --------------------------------------------------------------------------- the echo reaches the backend


def test_the_echo_servers_send_the_key_back_in_every_form(keyed):
    """The test's own check: what the servers send holds the key (so a clean result means it was scrubbed)."""
    headers = {"Authorization": f"Bearer {keyed}", "Content-Type": "application/json"}
    for status in (401, 500, 200):
        _, body = reply_for(status, headers)
        assert leaked(body.decode()), status
    assert leaked(keyed[:12]) and leaked(html.escape(keyed)) and leaked(json.dumps(keyed).replace("/", "\\/"))
    assert not leaked("The request carried ***")


def test_a_401_echo_leaves_no_key_in_the_error(serve, keyed, capfd):
    server = serve(401)
    backend = backend_for(server)
    with pytest.raises(BackendError, match="HTTP 401") as err:
        backend.request(MESSAGES, FAST)
    backend.close()
    assert server.requests == 1 and "invalid key; you sent" in str(err.value)  # the server's words are kept
    out, errors = capfd.readouterr()
    assert leaked(str(err.value) + repr(err.value) + out + errors) == []


def test_a_500_echo_leaves_no_key_in_the_error_the_store_or_the_terminal(serve, keyed, tmp_path, capfd):
    server = serve(500)
    backend = backend_for(server, concurrency=1)
    aspects = load_aspects("acl").subset(["challenge"])
    with pytest.raises(GenerationError, match="HTTP 500") as err:
        generate_summaries(two_papers(), aspects, backend, tmp_path, k=1, progress=True)
    backend.close()
    assert server.requests >= 2  # retried, then given up
    out, errors = capfd.readouterr()
    assert leaked(str(err.value) + out + errors + files_text(tmp_path)) == []


def test_a_200_echo_is_scrubbed_from_stored_answers_and_progress(serve, keyed, tmp_path, capfd):
    """The echo comes back as the answer itself: summaries and judgements store it, raw and parsed."""
    server = serve(200)
    backend = backend_for(server, concurrency=2)
    aspects = load_aspects("acl").subset(["challenge", "approach"])
    summaries = generate_summaries(two_papers(), aspects, backend, tmp_path, k=2, progress=True)
    judged = judge_pairs(two_papers(), aspects, backend, tmp_path, judge=JudgeConfig(samples=1, progress=True))
    backend.close()
    assert summaries.written == 8 and judged.written == len(judgement_store(tmp_path)) > 0
    records = summary_store(tmp_path).records()
    assert all("The request carried" in r["raw"] and "Bearer ***" in r["raw"] for r in records)
    out, errors = capfd.readouterr()
    assert leaked(out + errors + files_text(tmp_path)) == []


def test_an_httpx_error_that_quotes_the_key_is_scrubbed(serve, keyed, tmp_path, capfd):
    """A malformed reply makes httpx raise an error whose text quotes the header line that holds the key."""
    server = serve(None)
    backend = backend_for(server, concurrency=1)
    completion = backend.request(MESSAGES, FAST)
    assert "illegal header line" in completion.error
    with pytest.raises(GenerationError) as err:
        generate_summaries(two_papers(), load_aspects("acl").subset(["challenge"]), backend, tmp_path, k=1,
                           progress=False)
    backend.close()
    out, errors = capfd.readouterr()
    assert leaked(completion.error + str(err.value) + out + errors + files_text(tmp_path)) == []


def test_credentials_in_the_url_are_scrubbed_from_what_the_server_sends(serve, tmp_path, monkeypatch):
    """user:password@ in base_url goes out as Basic credentials; their echo is scrubbed like the key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(401)
    password = "pw-" + make_key()[11:]
    url = server.base_url.replace("http://", f"http://me:{quote(password, safe='')}@")
    backend = OpenAIBackend(model="fake-model", base_url=url, retry=RetryPolicy(timeout=5.0, retries=0))
    with pytest.raises(BackendError) as err:
        backend.request(MESSAGES, FAST)
    backend.close()
    assert "Basic ***" in str(err.value) and leaked(str(err.value), key=password) == []


# --------------------------------------------------------------------------- redact itself


@pytest.mark.parametrize("form", ["as is", "Bearer", "json", "json slashes", "go json", "html", "url", "bytes repr",
                                  "json twice", "html of json", "first 12", "middle 9", "upper case"])
def test_redact_scrubs_the_key_in_every_form(form):
    key = KEY
    forms = {"as is": key, "Bearer": f"Bearer {key}", "json": json.dumps(key),
             "json slashes": json.dumps(key).replace("/", "\\/"),
             "go json": json.dumps(key).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"),
             "html": html.escape(key), "url": quote(key, safe=""), "bytes repr": repr(key.encode()),
             "json twice": json.dumps(json.dumps(key)), "html of json": html.escape(json.dumps(key)),
             "first 12": key[:12], "middle 9": key[14:23], "upper case": key.upper()}
    text = f"before {forms[form]} after"
    clean = redact(text, [key])
    assert clean.startswith("before ") and clean.endswith(" after") and "***" in clean
    assert leaked(clean) == []


BASE64_CUTS = {"whole": KEY, "first 8": KEY[:8], "middle 8": KEY[13:21], "last 8": KEY[-8:]}


@pytest.mark.parametrize("cut", list(BASE64_CUTS))
@pytest.mark.parametrize("alphabet", ["standard", "url-safe"])
@pytest.mark.parametrize("padded", [True, False])
def test_redact_scrubs_base64_of_any_text_holding_8_characters_of_the_key(cut, alphabet, padded):
    """At the three alignments of the key's bytes in base64's groups of three: after "", "u:" and "me:"."""
    encode = base64.b64encode if alphabet == "standard" else base64.urlsafe_b64encode
    for prefix in ("", "me:", "u:"):
        for tail in ("", "x", "!?"):  # what follows sets the padding: none, "==" or "="
            encoded = encode(f"{prefix}{BASE64_CUTS[cut]}{tail}".encode()).decode()
            encoded = encoded if padded else encoded.rstrip("=")
            text = f"before Basic {encoded} after"
            assert decoded_leaks(text), (prefix, tail)  # the test's own check: the key is there to find
            clean = redact(text, [KEY])
            assert clean == "before Basic *** after", (prefix, tail, clean)  # the whole run goes, padding too
            assert leaked(clean) == []


def test_redact_scrubs_a_json_body_holding_the_key_base64_encoded_and_escaped():
    body = json.dumps({"model": "m", "api_key": KEY, "messages": []})
    for encoded in (base64.b64encode(body.encode()).decode(), base64.urlsafe_b64encode(body.encode()).decode()):
        for written in (encoded, json.dumps(encoded).replace("/", "\\/"), quote(encoded, safe="")):
            assert decoded_leaks(unquote(written)) or decoded_leaks(written)
            clean = redact(f"echo: {written} .", [KEY])
            assert clean.startswith("echo: ") and clean.endswith(" .") and leaked(unquote(clean)) == []


def test_base64_is_matched_case_sensitively_and_other_base64_is_left_alone():
    """An upper- or lower-cased run decodes to other bytes: no leak, and left as it is (matching base64 without
    case would take runs that are not the key for it)."""
    encoded = base64.b64encode(f"me:{KEY}".encode()).decode()
    for other in (encoded.swapcase(), encoded.lower()):
        assert decoded_leaks(other) == [] and redact(other, [KEY]) == other
    image = base64.b64encode(bytes(range(256)) * 4).decode()  # an inline image in an error page
    text = f"<img src='data:image/png;base64,{image}'> token=eyJhbGciOiJIUzI1NiJ9 me:pw"
    assert redact(text, [KEY]) == text


def test_redact_leaves_other_text_and_short_runs_alone():
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5q"
    text = "A parser for long documents; 7 chars: Ab3dEf6 and the model sk-proj is named."
    assert redact(text, [key]) == text  # 7 characters of the key, and its prefix alone, are not a leak
    assert redact("", [key]) == "" and redact(text, []) == text
    assert redact("the ollama server answered", ["ollama"]) == "the *** server answered"  # a short key: whole
    assert redact("hollamas", ["ollama"]) == "hollamas"  # not inside a longer word


def test_redact_is_quick_on_a_large_error_page():
    page = "<p>lorem ipsum dolor sit amet</p>" * 2000 + KEY
    start = time.perf_counter()
    assert redact(page, [KEY]).endswith("***")
    assert time.perf_counter() - start < 2


# --------------------------------------------------------------------------- the CLI, as a user runs it


def _run_stage_01(home: Path, base_url: str) -> subprocess.CompletedProcess:
    (home / "papers.csv").write_text(two_papers().docs.to_csv(index=False))
    env = {**os.environ, "OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    params = ["corpus=papers.csv", "backend=openai", "model=fake-model", f"base_url={base_url}", "k=1",
              "subset=2", "aspect_names=[challenge]", "concurrency=1"]
    args = [sys.executable, "-m", "workbench", "run", "--run-dir", "run", "--stages", "01_generate"]
    for param in params:
        args += ["-p", param]
    return subprocess.run(args, cwd=home, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_stage_01_against_an_echoing_server_leaves_no_key(serve, tmp_path):
    """`python -m workbench run` stage 01, one run (a run costs a kernel: about 15 s): the two summary
    requests get the echo as their answer (stored, and shown in the notebook), the sentence-label
    requests after them a 401 echo, which stops the stage. Neither the CLI's error, nor the failed
    notebook kept in the run directory, nor anything else in it holds the key. A failed stage writes
    no report, so its notebook is exported here as the runner exports a report (a second run to a
    finished report would cost a second kernel)."""
    from workbench.run.reports import export_html  # only this test needs the report writer

    done = _run_stage_01(tmp_path, serve(lambda n: 200 if n <= 2 else 401).base_url)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "HTTP 401" in said and "invalid key; you sent" in said, said[-3000:]
    executed = tmp_path / "run" / "01_generate.ipynb"
    notebook = executed.read_text()
    assert "The request carried" in notebook and "Bearer ***" in notebook  # the echoed answers, shown scrubbed
    assert "Bearer ***" in (tmp_path / "run" / "summaries.jsonl").read_text()
    report = export_html(executed, tmp_path / "reports" / "run" / "01_generate.html")
    assert "The request carried" in report.read_text()
    assert leaked(said + files_text(tmp_path)) == []


# --------------------------------------------------------------------------- issue 41, item 8: aspect names


def _aspect_file(folder: Path, aspect_name: str) -> Path:
    data = load_aspects("acl").subset(["challenge"]).to_dict()
    data["aspects"][0]["name"] = aspect_name
    path = folder / "aspects.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def test_a_300_character_aspect_name_is_refused_when_the_file_is_loaded(tmp_path, capsys):
    """It becomes the folder aspect_models/<aspect>/: stage 02 died with "File name too long"."""
    path = _aspect_file(tmp_path, "a" * 300)
    start = time.perf_counter()
    with pytest.raises(AspectConfigError) as err:
        load_aspects(path)  # what every stage does first
    assert time.perf_counter() - start < 1
    message = str(err.value)
    assert err.value.field == "aspects[0].name" and "300 characters" in message
    assert f"limit is {MAX_ASPECT_NAME}" in message
    assert str(path) in message and len(message) < 400
    assert main(["aspects", str(path)]) == 2  # `workbench aspects FILE`: one line, no traceback
    assert "aspects[0].name" in capsys.readouterr().err


def test_aspect_names_up_to_the_limit_pass_and_device_names_are_refused(tmp_path):
    assert load_aspects(_aspect_file(tmp_path, "a" * MAX_ASPECT_NAME)).names == ["a" * MAX_ASPECT_NAME]
    with pytest.raises(AspectConfigError, match="limit is"):
        load_aspects(_aspect_file(tmp_path, "a" * (MAX_ASPECT_NAME + 1)))
    with pytest.raises(AspectConfigError, match="device name on Windows"):
        load_aspects(_aspect_file(tmp_path, "con"))
    with pytest.raises(AspectConfigError, match="invalid identifier"):  # what cannot be in a file name: refused before
        load_aspects(_aspect_file(tmp_path, "a/b"))
