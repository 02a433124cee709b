"""Append-only, resumable JSONL record stores (summaries, judgements).

Why JSONL and not a database: one line per record is trivial to inspect, diff and
copy, and appending a line is the only write we ever do. Durability rules:

* each batch of records goes out in one `write` followed by flush and fsync, so a run
  killed at any moment (kill -9 included) loses at most the batch in flight;
* every record has a key; a record whose key is already stored is never written again,
  so resuming never duplicates work;
* an exclusive lock (flock on `<file>.lock`, released by the OS if the process dies)
  stops two processes from appending to the same store at once. The first `append`
  takes it and reads the file again under it, so records another process wrote since
  this store was opened are known and not written twice.

Reading never changes the file. Opening a store (to look at it in a notebook, with
`to_frame` or `in`, perhaps while a run is writing it) only reads; every repair is
made by a writer, under the lock:

* a torn last line (a process died inside its write, or a writer is in the middle of
  one right now) is ignored by readers, with a warning naming the file, the line and
  the byte offset; the next writer cuts it off (warning again) and its record is
  generated again;
* a complete record that lacks only its final newline (a file saved by an editor) is
  a record like any other; the next writer adds the newline before appending;
* a line that is not a usable record (not JSON, `null`, `[1, 2]`, an object without
  the key fields) is skipped with one warning per open that names the file and each
  such line with what is wrong with it. Skipping, rather than refusing to open, is on
  purpose: the line stays in the file untouched for the user to inspect or fix, nothing
  else is lost, and the rest of the store (hours of generation) stays usable; a
  skipped record is simply generated again, like a missing one.

Memory: opening streams through the file once and keeps, per record, only its key and
the byte offset of its line (the repeated key values, prompt keys, hashes and models,
shared), never its text: a million stage 01 summaries (a 0.9 GB file) resume in about
150 MB, where keeping the parsed records took 5.4 GB (benchmarks/store_resume.py).
`records`, `iter_records` and `to_frame` read the records from the file when asked. The
writer's read under the lock continues from where opening stopped when the file has only
grown since (it checks the last line it read), so a resume parses the file once, not twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

MAX_LISTED_LINES = 10  # bad lines named one by one in the warning; the rest are counted
READ_BUFFER = 1 << 20  # bytes per read while scanning: a million lines in large reads, not a million small ones


_scan = json.JSONDecoder().scan_once  # the C scanner under json.loads


def parse_line(line: bytes):
    """`json.loads(line)`, faster for the usual line (UTF-8, no leading space): the scanner is called directly,
    without json.loads's encoding detection and wrappers. Any other line goes to json.loads, so the value
    and the error raised are json.loads's."""
    try:
        text = line.decode("utf-8")
        value, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError):
        return json.loads(line)
    if text[end:].strip(" \t\n\r"):  # json's whitespace; anything else after the value is an error
        return json.loads(line)
    return value


class StoreError(RuntimeError):
    """A store that another process is writing, or a record without its key fields given to `append`."""


def _kind(value) -> str:
    """What a JSON value is, in words: 'a list', 'null', 'a string', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the value {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


class RecordStore:
    """An append-only JSONL file of dict records, unique by `key_fields`.

    Opening reads the file and never modifies it; `append` takes the writer's lock.
    After opening, `skipped_lines` lists the unusable lines as (line number, problem),
    and `repaired_bytes` counts the bytes of a torn last line this store cut off as a
    writer (0 for a reader).

    >>> store = RecordStore("runs/demo/summaries.jsonl", ("doc_id", "key", "sample"))
    >>> store.append([{"doc_id": "d1", "key": "challenge", "sample": 0, "text": "..."}])
    1
    """

    def __init__(self, path: str | os.PathLike, key_fields: Sequence[str]):
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self._reset()
        self._lock_file = None
        self._reported: set[str] = set()
        self.repaired_bytes = 0
        self._load(repair=False, stacklevel=3)

    def _reset(self) -> None:
        """Forget what was read: the next `_load` reads the file from its start."""
        self._keys: set[tuple] = set()
        self._order: list[tuple] = []  # the keys in the order of their lines
        self._offsets = array("q")  # the byte offset of each of those lines, same order
        self._values: dict = {}  # one object per distinct string key value, shared by every key holding it
        self.skipped_lines: list[tuple[int, str]] = []
        self._lines = 0  # whole (newline-ended) lines read
        self._body_end = 0  # the byte just after the last whole line read
        self._last_line = (0, zlib.crc32(b""))  # (offset, crc32) of that line: is the file still the one read?
        self._identity = None  # (device, inode) of the file read, None before it exists

    # -- reading -----------------------------------------------------------------
    def _unchanged(self) -> bool:
        """Whether the file is the one read before and still holds, unchanged, the whole lines read then.

        Writers only append (and cut a torn last line, which is never a whole line), so then the
        read can continue at `_body_end`. A file replaced, shortened or edited at its last whole line
        is read again from the start.
        """
        if self._identity is None:
            return False
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if (st.st_dev, st.st_ino) != self._identity or st.st_size < self._body_end:
                    return False
                start, crc = self._last_line
                fh.seek(start)
                return zlib.crc32(fh.read(self._body_end - start)) == crc
        except OSError:
            return False

    def _load(self, repair: bool, stacklevel: int) -> None:
        """Read the file (from where the last read stopped, if it has only grown since), keeping keys and
        offsets. With `repair` (only under the writer's lock) also fix its end.

        `stacklevel` is the one `warnings.warn` would need here to point at the user's code.
        """
        if not self._unchanged():
            self._reset()
        else:  # a line past the last whole one (a record without its newline) is read again
            self.skipped_lines = [(n, problem) for n, problem in self.skipped_lines if n <= self._lines]
            while self._offsets and self._offsets[-1] >= self._body_end:
                self._keys.discard(self._order.pop())
                self._offsets.pop()
        if not self.path.exists():
            self._reset()
            return
        tail = b""
        with open(self.path, "rb", buffering=READ_BUFFER) as fh:
            st = os.fstat(fh.fileno())
            self._identity = (st.st_dev, st.st_ino)
            offset = self._body_end
            fh.seek(offset)
            last = None
            for line in fh:  # streaming: one line in memory at a time
                if not line.endswith(b"\n"):
                    tail = line  # the last line, without its newline
                    break
                self._lines += 1
                self._take(line, self._lines, offset)
                last = (offset, line)
                offset += len(line)
            self._body_end = offset
            if last is not None:
                self._last_line = (last[0], zlib.crc32(last[1]))
        body_end, lineno = offset, self._lines + 1
        if tail.strip():
            try:
                json.loads(tail)
            except ValueError:
                # Not even JSON: the write of this line was cut short (or is under way).
                self._torn_tail(tail, body_end, lineno, repair, stacklevel + 1)
                tail = b""
            else:
                self._take(tail, lineno, body_end)  # a complete record that only lacks its newline
        self._warn_skipped(stacklevel + 1)
        if repair and tail:
            with open(self.path, "ab") as fh:  # so that the next record starts on a line of its own
                fh.write(b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._lines += 1
            self._last_line = (body_end, zlib.crc32(tail + b"\n"))
            self._body_end = body_end + len(tail) + 1

    def _warn_skipped(self, stacklevel: int) -> None:
        """One warning naming the unusable lines (the first MAX_LISTED_LINES of them), if any."""
        if not self.skipped_lines:
            return
        listed = "; ".join(f"line {n}: {problem}" for n, problem in self.skipped_lines[:MAX_LISTED_LINES])
        more = len(self.skipped_lines) - MAX_LISTED_LINES
        n = len(self.skipped_lines)
        self._warn(
            f"{self.path}: skipped {n} unusable line{'s' if n != 1 else ''} (left in the file, not used): "
            f"{listed}{f'; and {more} more' if more > 0 else ''}. Each line should be one JSON object with the "
            f"fields {', '.join(self.key_fields)}. Fix or delete those lines; a record that is not read is "
            "generated again when its stage runs.", stacklevel)

    def _take(self, line: bytes, lineno: int, offset: int) -> None:
        """Parse one line; keep its key and offset (not its text), or note why it cannot be used.

        Run once per line of the file (a million times on a resume), hence the common case first: a
        dict with plain key values goes straight in; anything else is looked at by `_problem`.
        """
        if not line.strip():
            return
        try:
            record = parse_line(line)
        except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
            self.skipped_lines.append((lineno, f"not valid JSON ({getattr(exc, 'msg', None) or exc})"))
            return
        try:
            key = self._share(map(record.__getitem__, self.key_fields))
            new = key not in self._keys  # TypeError if a key value is a list or an object
        except (AttributeError, KeyError, TypeError):  # not an object, a key field missing, or not plain
            self.skipped_lines.append((lineno, self._problem(record) or "not a usable record"))
            return
        if new:  # tolerate duplicates written by hand; keep the first
            self._keys.add(key)
            self._order.append(key)
            self._offsets.append(offset)

    def _share(self, key: Iterable) -> tuple:
        """A key as a tuple whose strings are shared with the keys already held (a million keys hold a few
        hundred thousand distinct strings: doc ids, and a handful of prompt keys, hashes and models)."""
        values = self._values
        return tuple([values.setdefault(v, v) if type(v) is str else v for v in key])

    def _torn_tail(self, tail: bytes, offset: int, lineno: int, repair: bool, stacklevel: int) -> None:
        where = f"line {lineno}, {len(tail)} bytes from byte {offset}"
        preview = tail[:80].decode("utf-8", "replace") + ("..." if len(tail) > 80 else "")
        if not repair:
            self._warn(
                f"{self.path}: ignoring an incomplete last line ({where}): {preview!r}. A write was cut short by "
                "an interrupted run, or a run is writing it right now. The next run that writes to this store "
                "cuts it off and generates that record again.", stacklevel)
            return
        with open(self.path, "r+b") as fh:
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())
        self.repaired_bytes += len(tail)
        self._warn(f"{self.path}: cut off an incomplete last line ({where}) left by an interrupted run: "
                   f"{preview!r}; that record will be generated again.", stacklevel)

    def _warn(self, message: str, stacklevel: int) -> None:
        if message not in self._reported:  # the writer reads the file again: say each thing once
            self._reported.add(message)
            warnings.warn(message, stacklevel=stacklevel + 1)

    def _problem(self, record) -> str | None:
        """Why `record` cannot be stored (not an object, a key field missing or not a plain value), or None."""
        if not isinstance(record, dict):
            return f"expected a JSON object with fields {', '.join(self.key_fields)}; got {_kind(record)}"
        missing = [f for f in self.key_fields if f not in record]
        if missing:
            return (f"record lacks key field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: "
                    f"{json.dumps(record, ensure_ascii=False, default=str)[:200]}")
        for f in self.key_fields:
            value = record[f]
            if isinstance(value, (list, dict)):
                return f"key field {f!r} must be a string or a number, got {_kind(value)}"
        return None

    def key_of(self, record: dict) -> tuple:
        """The record's identity: the values of `key_fields` (StoreError if it has none)."""
        problem = self._problem(record)
        if problem:
            raise StoreError(f"{self.path}: cannot store this record: {problem}")
        return tuple(record[f] for f in self.key_fields)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: tuple) -> bool:
        return tuple(key) in self._keys

    def keys(self) -> list[tuple]:
        """The stored records' keys, in the order they were written (read from memory, not the file)."""
        return list(self._order)

    def iter_records(self) -> Iterator[dict]:
        """Each stored record, in the order written, read from the file as it is reached (one at a time in memory).

        The records are those known when the iteration starts. StoreError if the file no longer holds one
        of them where it was read (a file edited or replaced since: open the store again).
        """
        count = len(self._order)
        if not count:
            return
        try:
            fh = open(self.path, "rb", buffering=READ_BUFFER)  # noqa: SIM115 - closed below, also on an early stop
        except FileNotFoundError:
            raise StoreError(f"{self.path} was removed after it was read; open the store again") from None
        with fh:
            at = 0
            for key, offset in zip(self._order[:count], self._offsets[:count]):
                if at != offset:
                    fh.seek(offset)  # past a skipped or duplicate line
                line = fh.readline()
                at = offset + len(line)
                yield self._read_line(line, key, offset)

    def _read_line(self, line: bytes, key: tuple, offset: int) -> dict:
        """The record on `line`, read at `offset` for `key`; StoreError if it is not that record any more."""
        try:
            record = parse_line(line)
        except ValueError:
            record = None
        if self._problem(record) is not None or tuple(record[f] for f in self.key_fields) != key:
            raise StoreError(f"{self.path} changed since it was read: byte {offset} no longer holds the record "
                             f"{key}. Open the store again.")
        return record

    def records(self) -> list[dict]:
        """All stored records, in the order they were written, read from the file now (a new list)."""
        return list(self.iter_records())

    def to_frame(self):
        """The records as a pandas DataFrame (one column per field), read from the file now."""
        import pandas as pd

        return pd.DataFrame(self.records())

    # -- writing -----------------------------------------------------------------
    def _acquire(self) -> None:
        """Take the writer's lock, then read the file again and repair its end (all writes happen under it)."""
        if self._lock_file is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fh = open(lock_path, "w")  # noqa: SIM115 - held open while this store is the writer
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise StoreError(
                f"{self.path} is being written by another process (lock {lock_path}). "
                "Wait for it to finish or stop it; two writers would duplicate work."
            ) from None
        self._lock_file = fh
        try:
            self._load(repair=True, stacklevel=4)
        except BaseException:
            self.close()
            raise

    def lock(self) -> RecordStore:
        """Become this store's writer now: take the lock (StoreError if another process has it), read the
        file again under it and repair its end. `append` does this itself; call it first to learn what is
        left to do, and to be refused, before any work is spent. Returns the store."""
        self._acquire()
        return self

    def append(self, records: Iterable[dict]) -> int:
        """Append the records whose key is new; returns how many were written.

        The batch goes to disk in one write, then flush and fsync, so it is either
        wholly there after a crash or (torn last line) cut off by the next writer.
        """
        self._acquire()
        fresh, keys = [], {}
        for record in records:
            key = self.key_of(record)
            if key in self._keys or key in keys:
                continue
            keys[key] = None
            fresh.append(record)
        if not fresh:
            return 0
        lines = [(json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in fresh]
        with open(self.path, "ab") as fh:
            offset = fh.tell()  # the end of the file: this store is its only writer now
            fh.write(b"".join(lines))
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        for key, line in zip(keys, lines):  # only once they are on disk
            key = self._share(key)
            self._keys.add(key)
            self._order.append(key)
            self._offsets.append(offset)
            self._last_line = (offset, zlib.crc32(line))
            offset += len(line)
        self._lines += len(lines)
        self._body_end, self._identity = offset, (st.st_dev, st.st_ino)
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
