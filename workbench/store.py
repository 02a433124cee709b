"""Append-only, resumable JSONL record stores (summaries, judgements).

Why JSONL and not a database: one line per record is trivial to inspect, diff and
copy, and appending a line is the only write we ever do. Durability rules:

* each batch of records goes out in one `write` followed by flush and fsync, so a run
  killed at any moment (kill -9 included) loses at most the batch in flight;
* a torn last line (the process died inside that write) is cut off when the store is
  opened again, and reported;
* every record has a key; a record whose key is already stored is never written again,
  so resuming never duplicates work;
* an exclusive lock (flock, released by the OS if the process dies) stops two
  processes from appending to the same store at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from pathlib import Path
from typing import Iterable, Sequence


class StoreError(RuntimeError):
    """A store file that cannot be read (a corrupt line in the middle) or is in use."""


class RecordStore:
    """An append-only JSONL file of dict records, unique by `key_fields`.

    >>> store = RecordStore("runs/demo/summaries.jsonl", ("doc_id", "key", "sample"))
    >>> store.append([{"doc_id": "d1", "key": "challenge", "sample": 0, "text": "..."}])
    1
    """

    def __init__(self, path: str | os.PathLike, key_fields: Sequence[str]):
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict] = []
        self._keys: set[tuple] = set()
        self._lock_file = None
        self.repaired_bytes = 0
        self._load()

    # -- reading -----------------------------------------------------------------
    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # The last write was cut short: that record was in flight and is redone on resume.
            self.repaired_bytes = len(data) - end
            warnings.warn(
                f"{self.path}: dropped an incomplete last line ({self.repaired_bytes} bytes) left by an "
                "interrupted run; that record will be generated again.",
                stacklevel=3,
            )
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
        for lineno, line in enumerate(data[:end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise StoreError(
                    f"{self.path}, line {lineno}: not valid JSON ({exc.msg}). The file was edited or "
                    "corrupted; fix or delete that line and run again."
                ) from None
            key = self.key_of(record)
            if key not in self._keys:  # tolerate duplicates written by hand; keep the first
                self._keys.add(key)
                self._records.append(record)

    def key_of(self, record: dict) -> tuple:
        """The record's identity: the values of `key_fields`."""
        try:
            return tuple(record[f] for f in self.key_fields)
        except KeyError as exc:
            raise StoreError(f"{self.path}: record lacks key field {exc.args[0]!r}: {record!r:.200}") from None

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: tuple) -> bool:
        return tuple(key) in self._keys

    def records(self) -> list[dict]:
        """All stored records, in the order they were written (a copy of the list)."""
        return list(self._records)

    def to_frame(self):
        """The records as a pandas DataFrame (one column per field)."""
        import pandas as pd

        return pd.DataFrame(self._records)

    # -- writing -----------------------------------------------------------------
    def _acquire(self) -> None:
        if self._lock_file is not None:
            return
        lock_path = self.path.with_name(self.path.name + ".lock")
        fh = open(lock_path, "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise StoreError(
                f"{self.path} is being written by another process (lock {lock_path}). "
                "Wait for it to finish or stop it; two writers would duplicate work."
            ) from None
        self._lock_file = fh

    def append(self, records: Iterable[dict]) -> int:
        """Append the records whose key is new; returns how many were written.

        The batch goes to disk in one write, then flush and fsync, so it is either
        wholly there after a crash or (torn last line) repaired on the next open.
        """
        self._acquire()
        fresh = []
        for record in records:
            key = self.key_of(record)
            if key in self._keys:
                continue
            self._keys.add(key)
            fresh.append(record)
        if not fresh:
            return 0
        payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fresh)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        self._records.extend(fresh)
        return len(fresh)

    def close(self) -> None:
        """Release the writer's lock (also released automatically when the process ends)."""
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
