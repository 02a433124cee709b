"""Run directories on disk (`workbench runs`): what each holds, how much room it takes, and its caches cleaned.

A run's caches (`features/`: the frozen encoder's vectors of every text; `embeddings/`: every
abstract's aspect embeddings) are rebuilt by the stages that need them, so removing them loses no
result, only the time to encode again. Everything else (summaries, models, decoders, maps, metrics)
is a result and is never touched here.

A folder is ours only if it says so: cleaning needs the marker a run writes with its first
artifact (`RunDir.mark`), and deletes, in the caches it lists, only the files the run's ledger says
the run wrote, at the size it wrote them (`RunDir.record_cache`). Everything else in a cache folder
(a note of the user's, a file overwritten since, a link) stays and is named. Files git tracks are
deleted only when asked (`include_tracked`); the lock file is not rewritten. A run made before the
marker or the ledger is marked with `mark_run` (`workbench runs --mark RUN`), which adopts the
files bearing the names the cache writers give.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.files import RunLock
from ..core.rundir import (CACHE_FILE_NAMES, MARKER_NAME, RUN_EVIDENCE, MarkerError, RunDir, tracked_files,
                           why_not_a_run_dir)


class RefusedError(RuntimeError):
    """`workbench runs --clean` or `--mark` refused; nothing was changed."""


@dataclass(frozen=True)
class CacheEntry:
    """One file `--clean` deletes: a file the run wrote into a cache, at the size it wrote it."""

    path: Path
    bytes: int


@dataclass(frozen=True)
class CleanPlan:
    """What `workbench runs --clean` would do in a run: the files it deletes, and what stays in its caches, and why.

    delete: the files the run's ledger says it wrote, unchanged in size since. kept: (path, why)
    for every other entry inside the caches (a file of the user's, one changed since, a link).
    tracked: the files of `delete` that git tracks, where the run lies in a git work tree.
    """

    run: Path
    delete: list[CacheEntry]
    kept: list[tuple[Path, str]]
    tracked: list[Path]

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.delete)

    def folders(self) -> list[str]:
        """One line per folder that holds files to delete: the folder, how many files, how many bytes."""
        by_folder: dict[Path, list[CacheEntry]] = {}
        for entry in self.delete:
            by_folder.setdefault(entry.path.parent, []).append(entry)
        return [f"{folder}/  {len(entries)} file{'s' * (len(entries) != 1)}, {human(sum(e.bytes for e in entries))}"
                for folder, entries in by_folder.items()]


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


def _why_kept(run: Path, name: str, records: dict[str, set]) -> str | None:
    """Why `--clean` keeps the entry `name` (its path in `run`), or None when the run wrote it as it is now."""
    path = run / name
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"a symbolic link (to {os.readlink(path)}): kept, and what it points to"
    if not stat.S_ISREG(info.st_mode):
        return "neither a file nor a folder"
    sizes = records.get(name)
    if sizes is None:
        adopt = f" (a cache file of a run made before the record; `workbench runs --mark {run}` adopts it)" \
            if CACHE_FILE_NAMES.fullmatch(name) else ""
        return f"not written by this run{adopt}"
    if None in sizes or info.st_size in sizes:
        return None
    return f"changed since the run wrote it ({human(info.st_size)} now, {human(max(sizes))} written)"


def _cache_contents(run: Path, caches: list[str]):
    """(path, path in the run) of every entry in the run's cache folders that is not a folder; links not followed.

    A cache that is itself a link or no folder is one entry: nothing behind it is looked at.
    """
    for cache in caches:
        top = run / cache
        if not os.path.lexists(top):
            continue
        if top.is_symlink() or not top.is_dir():
            yield top, cache
            continue
        for folder, dirs, files in os.walk(top):  # os.walk does not go into links to folders
            for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(folder, d))):
                path = Path(folder) / name
                yield path, path.relative_to(run).as_posix()


def _possible_run(run, nothing_done: str) -> Path:
    """`run` as a Path, or RefusedError (ending in `nothing_done`) where it is no folder or may never be a run."""
    run = Path(run)
    if not run.is_dir():
        raise RefusedError(f"{run} is not a folder; {nothing_done}")
    reason = why_not_a_run_dir(run)
    if reason:
        raise RefusedError(f"{run} {reason}, so it cannot be a run directory; {nothing_done}")
    return run


def plan_clean(run) -> CleanPlan:
    """What `clean_caches` would delete in `run` and what it keeps, checked whole; RefusedError where it may not.

    Only the files the run's ledger (`RunDir.cache_records`) says it wrote into the caches its
    marker lists are deleted, and only at the size it wrote them: a file of the user's in a cache
    folder, one overwritten since, a link, and the cache files of a run made before the ledger stay.
    """
    run = _possible_run(run, "nothing was deleted")
    if not RunDir(run).is_marked():
        raise RefusedError(_unmarked(run))
    try:
        caches, records = RunDir(run).marked_caches(), RunDir(run).cache_records()
    except MarkerError as exc:
        raise RefusedError(f"{exc}. Nothing was deleted; if {run} is a run, delete that file and mark the run again "
                           f"with `workbench runs --mark {run}`.") from None
    delete, kept = [], []
    for path, name in _cache_contents(run, caches):
        why = _why_kept(run, name, records)
        if why:
            kept.append((path, why))
        else:
            delete.append(CacheEntry(path, os.lstat(path).st_size))
    for folder in sorted({e.path.parent for e in delete}):
        # Checked before anything is deleted, so a folder we may not empty stops the clean before it starts.
        if not os.access(folder, os.W_OK | os.X_OK):
            raise RefusedError(f"{folder} cannot be emptied (no write permission); nothing was deleted")
    tracked = set(tracked_files(run, caches)) if delete else set()
    return CleanPlan(run, delete, kept, [e.path for e in delete if e.path.relative_to(run).as_posix() in tracked])


def _remove_empty_folders(run: Path, files: list[Path]) -> None:
    """Remove the folders the deleted `files` leave empty, up to the cache folder; a folder holding anything stays."""
    folders = {parent for f in files for parent in f.parents if run in parent.parents}
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        try:
            os.rmdir(folder)  # fails on a folder that is not empty: it stays
        except OSError:
            pass


def clean_caches(run, listed: CleanPlan | None = None, include_tracked: bool = False) -> int:
    """Delete the files `plan_clean` lists (those the run wrote into its caches); returns the bytes freed.

    listed: the plan shown to the user; when given, what is found under the lock must be the same
    files, or nothing is deleted. Files git tracks are refused unless `include_tracked`. Refused
    while a run holds the folder (RunLockedError); the lock file is not rewritten (`RunLock`'s
    note=False). An unmarked folder is refused before anything is written into it.
    """
    run = Path(run)
    plan_clean(run)  # refuses an unmarked folder before the lock writes its file into it
    with RunLock(run, "workbench runs --clean", note=False):
        plan = plan_clean(run)
        if listed is not None and [e.path for e in plan.delete] != [e.path for e in listed.delete]:
            raise RefusedError(f"the caches of {run} changed since they were listed; nothing was deleted. "
                               f"Run `workbench runs --clean {run}` again.")
        if plan.tracked and not include_tracked:
            raise RefusedError(tracked_refusal(plan))
        for entry in plan.delete:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass  # gone already (another clean): nothing to free
            except OSError as exc:
                raise RefusedError(f"could not delete {entry.path}: {exc.strerror or exc}") from None
        _remove_empty_folders(run, [e.path for e in plan.delete])
    return plan.bytes


def tracked_refusal(plan: CleanPlan, shown: int = 10) -> str:
    """The message of a clean refused because git tracks files it would delete, naming them."""
    names = [f"  {path}" for path in plan.tracked[:shown]]
    more = [f"  and {len(plan.tracked) - shown} more"] if len(plan.tracked) > shown else []
    return "\n".join([f"git tracks {len(plan.tracked)} of the files --clean would delete in {plan.run}:"]
                     + names + more + [f"Nothing was deleted. Deleting them would change your git work tree; add "
                                       f"--include-tracked to delete them anyway."])


def mark_run(run) -> tuple[list[str], list[Path]]:
    """Mark a run made before the marker or the ledger (`workbench runs --mark`): (its caches, the files adopted).

    Refused for a folder that holds no file only a run writes (RUN_EVIDENCE), for the checkout's
    root and the folders git tracks there, and for a folder holding `.git`. The files in its caches
    that bear the names the cache writers give (CACHE_FILE_NAMES) and are not in its ledger yet are
    recorded there at their present size, so that `--clean` may delete them; any other file stays
    the user's.
    """
    run = _possible_run(run, "nothing was marked")
    if not RunDir(run).is_run():
        raise RefusedError(f"{run} holds none of the files a run writes ({', '.join(RUN_EVIDENCE)}), so it is not "
                           f"a run; nothing was marked")
    if not RunDir(run).is_marked():
        RunDir(run).mark(by="workbench runs --mark", claim_existing=True)
    try:
        caches, records = RunDir(run).marked_caches(), RunDir(run).cache_records()
    except MarkerError as exc:
        raise RefusedError(f"{exc}; delete it and mark again") from None
    adopted = [path for path, name in _cache_contents(run, caches)
               if name not in records and CACHE_FILE_NAMES.fullmatch(name) and path.is_file() and not path.is_symlink()]
    for path in adopted:
        RunDir(run).record_cache(path)
    return caches, adopted


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


def _once(folders: list[Path]) -> list[Path]:
    """Each folder once: one reached through a link is named by its real path, and left out where that is listed."""
    named = {}
    for folder in sorted(folders, key=lambda f: f.is_symlink()):  # the folders themselves first, then the links
        named.setdefault(folder.resolve(), folder if not folder.is_symlink() else folder.resolve())
    return sorted(named.values())


def run_table(root="runs") -> list[dict]:
    """One row per run directory under `root` (or `root` itself): name, stages, whether marked, sizes, last change.

    Marked folders are runs; an unmarked folder holding a file only a run writes is listed too,
    with "marked": False (a run made before the marker). Other folders are not runs. A run reached
    through a link is listed once, under its real path.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    folders = [root] if _listed(root) else _once([p for p in root.iterdir() if p.is_dir() and _listed(p)])
    return [_row(folder) for folder in folders]


def human(n: int) -> str:
    """Bytes for a reader: 1.2 GB, 34.0 MB, 512 B."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
