"""Stage 01's HTTP client against a slow served engine: answers a second into the store with hundreds in flight.

A real HTTP/1.1 server on loopback (stdlib asyncio, its own process) answers every chat completion after
`--delay` seconds, as a busy vLLM cluster would; stage 01's client (`OpenAIBackend`, `concurrency` requests
in flight) sends `--requests` requests through `summaries.run_requests` into a real summary store:

    .venv/bin/python benchmarks/client_inflight.py [--requests 2048] [--concurrency 256 512] [--delay 2] [--smoke]

From `http_backend.ASYNC_FROM` in flight the client runs on one event loop, below it on threads; a row says
which. `--smoke`: 64 requests at 8 and 48 in flight, answered after 0.2 s.

The ideal is concurrency / delay answers a second (256/s at 512 in flight and 2 s); the bar is 200/s at 512.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.generate.http_backend import ASYNC_FROM, OpenAIBackend  # noqa: E402
from workbench.generate.sampling import RetryPolicy, Sampling  # noqa: E402
from workbench.generate.summaries import Reporting, run_requests, summary_store  # noqa: E402

from _smoke import add_smoke  # noqa: E402

ANSWER = json.dumps({"choices": [{"message": {"content": "The method is a slow served answer."}}],
                     "usage": {"completion_tokens": 8}}).encode()


async def _handle(reader, writer, delay: float) -> None:
    """Keep-alive HTTP/1.1: read each request (headers, Content-Length body), answer it `delay` seconds later."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            await asyncio.sleep(delay)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(port: int, delay: float) -> None:
    """The slow server (a child process): 127.0.0.1 only."""
    async def main():
        server = await asyncio.start_server(lambda r, w: _handle(r, w, delay), "127.0.0.1", port, backlog=2048)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


def measure(port: int, n: int, concurrency: int) -> dict:
    """Send n requests with `concurrency` in flight into a fresh summary store; answers a second, stored."""
    backend = OpenAIBackend("slow", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=None,
                            concurrency=concurrency, retry=RetryPolicy(timeout=60.0, retries=0))
    tasks = [{"messages": [{"role": "user", "content": f"abstract {i}"}],
              "record": {"doc_id": f"d{i}", "aspect": "method", "key": "method", "prompt_hash": "h",
                         "model": "slow", "sample": 0}} for i in range(n)]
    with tempfile.TemporaryDirectory() as run:
        store = summary_store(run)
        t0 = time.perf_counter()
        run_requests(backend, store, tasks, Sampling(), None,
                              lambda t, c: {**t["record"], "status": "ok", "text": c.text, "raw": c.text,
                                            "tokens": c.tokens}, Reporting("bench", progress=False))
        seconds = time.perf_counter() - t0
        store.close()
        stored = sum(1 for _ in open(Path(run) / "summaries.jsonl"))
    backend.close()
    return {"requests": n, "stored": stored, "seconds": round(seconds, 2), "answers_per_s": round(stored / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--delay", type=float, default=2.0)
    add_smoke(parser, requests=64, concurrency=[8, 48], delay=0.2)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = multiprocessing.Process(target=serve, args=(port, args.delay), daemon=True)
    server.start()
    time.sleep(1.0)
    print(f"date {datetime.date.today()}, load {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs; "
          f"the server answers after {args.delay} s")
    print("| in flight | client | requests | stored | seconds | answers/s | ideal/s |\n|---:|---|---:|---:|---:|---:|---:|")
    try:
        for c in args.concurrency:
            row = measure(port, args.requests, c)
            client = "event loop" if c >= ASYNC_FROM else "threads"
            print(f"| {c} | {client} | {row['requests']} | {row['stored']} | {row['seconds']} | "
                  f"{row['answers_per_s']} | {c / args.delay:.1f} |")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
