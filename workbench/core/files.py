"""Writing a run directory safely (every stage): whole files or none, and one run at a time.

* `write_text` / `write_json` / `replace_from`: a file is written under a temporary name in the same
  folder and renamed over the target, so a reader (the next stage, the next run, `workbench
  compare`) sees the old file or the new one, never half of one, whatever kills the writer: a
  full disk, a kill -9. The temporary name carries the process id, so two writers never share one.
* `RunLock`: an advisory lock (flock) on ``<run_dir>/.workbench.lock`` held for a whole run. A
  second run into the same folder is refused at once, naming the process that holds it, before it
  writes anything. The kernel releases a flock when its holder dies, so a killed run leaves no
  stale lock; the file's PID is only there to say who holds it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

import numpy as np

LOCK_NAME = ".workbench.lock"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_bytes(path, data: bytes) -> Path:
    """Write `data` to `path` whole or not at all (temporary name, flush, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no torn temporary behind either
        raise
    return path


def write_text(path, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` whole or not at all."""
    return write_bytes(path, text.encode(encoding))


def strict(value):
    """`value` with NaN and infinities as None and numpy scalars as Python ones, recursively, so that it is
    strict JSON: json.dumps would write a bare NaN, which strict parsers, browsers and jq refuse."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def json_text(data, indent: int | None = 2) -> str:
    """`data` as strict JSON text (`strict` first; allow_nan=False catches anything it missed)."""
    return json.dumps(strict(data), indent=indent, allow_nan=False, ensure_ascii=False)


def write_json(path, data, indent: int | None = 2) -> Path:
    """Write `data` as strict JSON (NaN and infinities as null) whole or not at all."""
    return write_text(path, json_text(data, indent) + "\n")


def write_tensors(path, tensors: dict, metadata: dict | None = None) -> Path:
    """Write torch tensors as safetensors at `path`, whole or not at all (a temporary file, then a rename).

    The one way every checkpoint of the package writes its weights; its JSON config is written
    after it, so a folder without its config is an unfinished save. Numpy arrays: `write_arrays`.
    """
    from safetensors.torch import save_file  # lazy: torch

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return replace_from(tmp, path)


def write_arrays(path, arrays: dict, metadata: dict | None = None) -> Path:
    """`write_tensors` for numpy arrays (stored contiguous, as given)."""
    from safetensors.numpy import save_file  # lazy: only the maps write numpy tensors

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp), metadata=metadata)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return replace_from(tmp, path)


def replace_from(source, target) -> Path:
    """Move a file written elsewhere in full (e.g. by a library that writes in place) onto `target` atomically."""
    os.replace(source, target)
    return Path(target)


class RunLockedError(RuntimeError):
    """Another run holds the run directory."""


class RunLock:
    """Hold ``<run_dir>/.workbench.lock`` for a run: `with RunLock(run_dir, what): ...`.

    Raises RunLockedError at once when another process holds it, with that process's
    PID, host, start time and command, and writes nothing in that case. With `wait`, it waits
    for the holder instead (writers of a shared cache folder take turns: `FeatureCache`).
    With `note=False` a lock file already there is only read, never rewritten (`workbench runs
    --clean` changes no file it did not write, and the lock file may be tracked by git).
    """

    def __init__(self, run_dir, what: str = "workbench run", wait: bool = False, note: bool = True):
        self.path = Path(run_dir) / LOCK_NAME
        self.what = what
        self.wait = wait
        self.note = note
        self._file = None

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+": opening never truncates the holder's note; "r": an flock needs no write access to the file
        keep = not self.note and self.path.is_file() and not self.path.is_symlink()
        handle = open(self.path, "r" if keep else "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunLockedError(f"{self.path.parent} is in use by {holder}; wait for that run to finish (or stop "
                                 f"it), or give this run another run directory. Nothing was written.") from None
        if not keep:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC ({self.what})\n")
            handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc):
        import fcntl

        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
