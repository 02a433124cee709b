"""A server on 127.0.0.1 for the tests of HTTP clients: `FakeServer` answers each request as a test says.

Shared by the tests of the OpenAI-compatible backend and of stage 01-03 against a server answering junk.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"


class FakeServer:
    """A ThreadingHTTPServer on 127.0.0.1 whose answers come from `respond(n, request)`.

    `respond` gets the request number (1-based) and a dict with method, path, headers
    and the JSON body, and returns (status, body) where body is a dict (sent as JSON)
    or bytes; it may sleep. Every request is kept in `requests`.
    """

    def __init__(self, respond):
        self.respond = respond
        self.requests: list[dict] = []
        self.stop = threading.Event()  # set at close: handlers that sleep wake up
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                with fake._lock:
                    fake.requests.append(request)
                    n = len(fake.requests)
                status, payload = fake.respond(n, request)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

            do_GET = do_POST = _handle

        self.httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def posts(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST"]

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
