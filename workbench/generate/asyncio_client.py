"""Hundreds of chat completions in flight from one client: one event loop in a thread, a fixed set of workers.

`OpenAIBackend.complete` hands its requests here from `http_backend.ASYNC_FROM` in flight on, so one
client never limits a served engine (a vLLM cluster answers thousands at once). The caller keeps a plain
iterator of (index, Completion) in the order answers come, as with the threads:

    for index, completion in in_flight(backend, iter(enumerate_items), sampling): ...

`concurrency` workers share one iterator of requests (so a million requests never become a million tasks at
once) and one `httpx.AsyncClient` with as many connections. Answers pass to the caller through a queue; a
caller that stops early (a dead server, Ctrl-C) cancels what is in flight.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Iterator

_DONE = object()
POOL = 16  # connections per httpx client


async def _run(backend, todo, sampling, out: queue.Queue, started: dict) -> None:
    """Send every request of `todo` with `backend.concurrency` in flight, putting (index, Completion) on `out`."""
    started["task"] = asyncio.current_task()
    # httpx's pool looks through all its connections for each request: a few small pools, not one of hundreds.
    clients = [backend.async_client(POOL) for _ in range(-(-backend.concurrency // POOL))]

    async def worker(client):
        for index, (messages, seed) in todo:  # one iterator for all: the loop runs one worker at a time
            out.put((index, await backend.arequest(client, messages, sampling, seed)))

    workers = [asyncio.ensure_future(worker(clients[i // POOL])) for i in range(backend.concurrency)]
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            out.put(failed[0])  # a request the server refused (HTTP 4xx): the caller raises it
    except BaseException as exc:  # noqa: BLE001 - cancelled by a caller that stopped early
        out.put(exc)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for client in clients:
            await client.aclose()
        out.put(_DONE)


def in_flight(backend, todo: Iterator, sampling) -> Iterator[tuple]:
    """Yield (index, Completion) for each (index, (messages, seed)) of `todo` as its answer comes."""
    out: queue.Queue = queue.Queue()
    started: dict = {}
    loop = asyncio.new_event_loop()

    def serve():
        try:
            loop.run_until_complete(_run(backend, todo, sampling, out, started))
        except asyncio.CancelledError:
            pass  # the caller stopped early and cancelled the run while it was closing: nothing is lost
    thread = threading.Thread(target=serve, name="workbench-http-in-flight", daemon=True)
    thread.start()
    try:
        while (item := out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        task = started.get("task")
        if thread.is_alive() and task is not None:
            loop.call_soon_threadsafe(task.cancel)  # the caller stopped early: nothing more is sent
        thread.join()
        loop.close()
