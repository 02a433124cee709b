"""Run directories on disk (`workbench runs`): what each holds, how much room it takes, and its caches cleaned.

A run's caches (`features/`: the frozen encoder's vectors of every text; `embeddings/`: every
abstract's aspect embeddings) are rebuilt by the stages that need them, so removing them loses no
result, only the time to encode again. Everything else (summaries, models, decoders, maps, metrics)
is a result and is never touched here.

A folder is ours only if it says so: cleaning needs the marker a run writes with its first
artifact (`RunDir.mark`), deletes only the caches it lists, and checks every one of them before it
deletes any. A symbolic link among them is removed as a link, never followed. A run made before
the marker existed is marked with `mark_run` (`workbench runs --mark RUN`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.files import RunLock
from ..core.rundir import MARKER_NAME, RUN_EVIDENCE, MarkerError, RunDir, why_not_a_run_dir


class RefusedError(RuntimeError):
    """`workbench runs --clean` or `--mark` refused; nothing was changed."""


@dataclass(frozen=True)
class CacheEntry:
    """One cache `--clean` will delete: its path, what it is ("folder", "file" or "link") and its size."""

    path: Path
    kind: str
    bytes: int
    target: str = ""  # where a link points: shown, never followed

    def describe(self) -> str:
        """One line for the list shown before deleting."""
        if self.kind == "link":
            return f"{self.path}  symbolic link to {self.target}: the link only, not what it points to"
        return f"{self.path}{'/' if self.kind == 'folder' else ''}  {human(self.bytes)}"


def _walk_size(path: Path) -> int:
    """Bytes of the files at or under `path`, following no symbolic link (a link counts as itself)."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size
    total = 0
    for folder, dirs, files in os.walk(path):  # os.walk follows no links to folders by default
        total += sum(os.lstat(os.path.join(folder, name)).st_size for name in files)
        total += sum(os.lstat(os.path.join(folder, name)).st_size for name in dirs
                     if os.path.islink(os.path.join(folder, name)))
    return total


def _unmarked(run: Path) -> str:
    looks = RunDir(run).is_run()
    how = (f"If it is a run made before the marker existed, mark it with `workbench runs --mark {run}` "
           f"and clean it again." if looks else
           f"It holds none of the files a run writes ({', '.join(RUN_EVIDENCE)}), so it is not a run.")
    return f"{run} has no {MARKER_NAME}, the marker of a workbench run, so nothing in it is ours to delete. " \
           f"{how} Nothing was deleted."


def _cache_entry(path: Path) -> CacheEntry:
    """What `path` is and what deleting it frees; RefusedError for what cannot be deleted whole."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return CacheEntry(path, "link", info.st_size, os.readlink(path))
    if stat.S_ISREG(info.st_mode):
        return CacheEntry(path, "file", info.st_size)
    if not stat.S_ISDIR(info.st_mode):
        raise RefusedError(f"{path} is neither a folder, a file nor a symbolic link; nothing was deleted")
    for folder, dirs, _ in os.walk(path):
        # Checked before anything is deleted, so a folder we may not empty stops the clean before it starts.
        if not os.access(folder, os.W_OK | os.X_OK):
            raise RefusedError(f"{folder} cannot be emptied (no write permission); nothing was deleted")
    return CacheEntry(path, "folder", _walk_size(path))


def _possible_run(run, nothing_done: str) -> Path:
    """`run` as a Path, or RefusedError (ending in `nothing_done`) where it is no folder or may never be a run."""
    run = Path(run)
    if not run.is_dir():
        raise RefusedError(f"{run} is not a folder; {nothing_done}")
    reason = why_not_a_run_dir(run)
    if reason:
        raise RefusedError(f"{run} {reason}, so it cannot be a run directory; {nothing_done}")
    return run


def plan_clean(run) -> list[CacheEntry]:
    """The caches `clean_caches` would delete in `run`, checked whole; RefusedError when it would delete nothing."""
    run = _possible_run(run, "nothing was deleted")
    if not RunDir(run).is_marked():
        raise RefusedError(_unmarked(run))
    try:
        names = RunDir(run).marked_caches()
    except MarkerError as exc:
        raise RefusedError(f"{exc}. Nothing was deleted; if {run} is a run, delete the marker and mark it again "
                           f"with `workbench runs --mark {run}`.") from None
    present = [run / name for name in names if os.path.lexists(run / name)]
    if present and not os.access(run, os.W_OK | os.X_OK):
        raise RefusedError(f"{run} is not writable, so its caches cannot be removed; nothing was deleted")
    return [_cache_entry(path) for path in present]


def _remove(entry: CacheEntry) -> None:
    if entry.kind == "folder":
        shutil.rmtree(entry.path)  # refuses a folder turned into a link since; removes links inside as links
    else:
        os.unlink(entry.path)  # a link: the link itself, never what it points to


def clean_caches(run, listed: list[CacheEntry] | None = None) -> int:
    """Remove the caches a marked run's marker lists (see `plan_clean`); returns the bytes freed.

    listed: the entries shown to the user (`plan_clean`); when given, what is found under the lock
    must be the same paths of the same kinds, or nothing is deleted. Refused while a run holds the
    folder (RunLockedError). An unmarked folder is refused before anything is written into it.
    """
    run = Path(run)
    plan_clean(run)  # refuses an unmarked folder before the lock writes its file into it
    with RunLock(run, "workbench runs --clean"):
        entries = plan_clean(run)
        if listed is not None and [(e.path, e.kind) for e in entries] != [(e.path, e.kind) for e in listed]:
            raise RefusedError(f"the caches of {run} changed since they were listed; nothing was deleted. "
                               f"Run `workbench runs --clean {run}` again.")
        for entry in entries:
            try:
                _remove(entry)
            except OSError as exc:
                raise RefusedError(f"could not delete {entry.path}: {exc.strerror or exc}") from None
    return sum(e.bytes for e in entries)


def mark_run(run) -> list[str]:
    """Mark a run made before the marker (`workbench runs --mark`); returns the caches `--clean` may now delete.

    Refused for a folder that holds no file only a run writes (RUN_EVIDENCE), for the checkout's
    root and the folders git tracks there, and for a folder holding `.git`.
    """
    run = _possible_run(run, "nothing was marked")
    if not RunDir(run).is_run():
        raise RefusedError(f"{run} holds none of the files a run writes ({', '.join(RUN_EVIDENCE)}), so it is not "
                           f"a run; nothing was marked")
    if not RunDir(run).is_marked():
        RunDir(run).mark(by="workbench runs --mark", claim_existing=True)
    try:
        return RunDir(run).marked_caches()
    except MarkerError as exc:
        raise RefusedError(f"{exc}; delete it and mark again") from None


def _stages(folder: Path) -> list[str]:
    """The stages a run's record names (its executed notebooks when it has no readable record)."""
    try:
        record = json.loads(RunDir(folder).run_record.read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict):
        return [k for k in record if re.match(r"\d\d_", str(k))]
    return sorted(p.stem for p in folder.glob("[0-9][0-9]_*.ipynb"))


def _row(folder: Path) -> dict:
    files = [os.path.join(d, name) for d, _, names in os.walk(folder) for name in names]
    marked = RunDir(folder).is_marked()
    try:
        caches = RunDir(folder).marked_caches() if marked else []
    except MarkerError:
        caches = []
    return {"run": str(folder), "stages": _stages(folder), "marked": marked,
            "bytes": sum(os.lstat(f).st_size for f in files),
            "cache bytes": sum(_walk_size(folder / c) for c in caches if os.path.lexists(folder / c)),
            "changed": time.strftime("%Y-%m-%d %H:%M",
                                     time.localtime(max((os.lstat(f).st_mtime for f in files), default=0)))}


def _listed(folder: Path) -> bool:
    return RunDir(folder).is_marked() or RunDir(folder).is_run()


def run_table(root="runs") -> list[dict]:
    """One row per run directory under `root` (or `root` itself): name, stages, whether marked, sizes, last change.

    Marked folders are runs; an unmarked folder holding a file only a run writes is listed too,
    with "marked": False (a run made before the marker). Other folders are not runs.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    folders = [root] if _listed(root) else sorted(p for p in root.iterdir() if p.is_dir() and _listed(p))
    return [_row(folder) for folder in folders]


def human(n: int) -> str:
    """Bytes for a reader: 1.2 GB, 34.0 MB, 512 B."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
