"""Run directories on disk (`workbench runs`): what each holds, how much room it takes, and its caches cleaned.

A run's caches (`features/`: the frozen encoder's vectors of every text; `embeddings/`: every
abstract's aspect embeddings) are rebuilt by the stages that need them, so removing them loses no
result, only the time to encode again. Everything else (summaries, models, decoders, maps, metrics)
is a result and is never touched here.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from ..core.files import RunLock
from ..core.rundir import CACHES, RunDir


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def is_run(folder: Path) -> bool:
    """Whether `folder` looks like a run directory (one of the files a stage leaves)."""
    return RunDir(folder).is_run()


def run_table(root="runs") -> list[dict]:
    """One row per run directory under `root` (or `root` itself): name, stages, sizes, last change."""
    root = Path(root)
    folders = [root] if is_run(root) else sorted(p for p in root.iterdir() if is_run(p)) if root.is_dir() else []
    rows = []
    for folder in folders:
        try:
            stages = list(json.loads((folder / "run.json").read_text()))
        except (OSError, ValueError):
            stages = sorted(p.stem for p in folder.glob("[0-9][0-9]_*.ipynb"))
        files = [p for p in folder.rglob("*") if p.is_file()]
        rows.append({"run": str(folder), "stages": stages, "bytes": sum(p.stat().st_size for p in files),
                     "cache bytes": sum(_size(folder / c) for c in CACHES if (folder / c).exists()),
                     "changed": time.strftime("%Y-%m-%d %H:%M",
                                              time.localtime(max((p.stat().st_mtime for p in files), default=0)))})
    return rows


def clean_caches(run) -> int:
    """Remove a run's rebuildable caches (CACHES); returns the bytes freed. Refused while a run holds the folder."""
    run = Path(run)
    if not is_run(run):
        raise FileNotFoundError(f"{run} is not a run directory (no params.yaml, run.json or stage artifacts)")
    with RunLock(run, "workbench runs --clean"):
        freed = 0
        for name in CACHES:
            if (run / name).exists():
                freed += _size(run / name)
                shutil.rmtree(run / name)
    return freed


def human(n: int) -> str:
    """Bytes for a reader: 1.2 GB, 34.0 MB, 512 B."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
