"""Resuming an interrupted command: the stages it finished are not run again when the same command is.

A `workbench run` killed in stage 05 (the OOM killer, a closed laptop, Ctrl-C) or stopped by a failing
stage leaves, in the run directory, the command's fingerprint and the stages it finished
(``RunDir.unfinished``). Started again with the same fingerprint, it skips those stages and goes on
from the first one it did not finish; inside that stage, the stage's own resume keeps what was stored
(summaries, checkpoints, feature and embedding shards). The file goes once the command completes, so
a command run again after it completed runs every stage again, as asked.

The fingerprint is what decides what the stages compute: the parameters (with overrides), the stages
asked for, whether reports are written, the package's version, and the size and modification time of
every input file the parameters name (corpus, aspect file) and of the run's marks, and what each local
model folder they name holds (`models.local_model_identity`). Change any of them and every stage runs
again. `redo=True` (`workbench run --redo`) runs every stage whatever was left.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .. import __version__
from ..core.files import write_json
from ..core.models import local_model_identity
from ..core.rundir import RunDir


def _paths(value, keep) -> list[str]:
    """Every string in `value` (nested in mappings and lists) whose path `keep` accepts."""
    if isinstance(value, dict):
        return [f for v in value.values() for f in _paths(v, keep)]
    if isinstance(value, (list, tuple)):
        return [f for v in value for f in _paths(v, keep)]
    if isinstance(value, str) and 0 < len(value) < 4096:  # paths are made absolute by `load_params`
        try:
            return [value] if keep(Path(value)) else []
        except (OSError, ValueError):  # a name too long for the system, a NUL byte in a prompt
            return []
    return []


def _files(value) -> list[str]:
    """Every string in `value` that names an existing file."""
    return _paths(value, Path.is_file)


def _model_folders(value) -> list[str]:
    """Every string in `value` that names a model folder (one holding a config.json)."""
    return _paths(value, lambda path: (path / "config.json").is_file())


def _stat(path) -> list:
    try:
        info = os.stat(path)
    except OSError:
        return [str(path), None]
    return [str(Path(path).resolve()), info.st_size, info.st_mtime_ns]


def command_fingerprint(config: dict, stages: list[str], report: bool, run_path) -> str:
    """A hash of what the command's stages compute from (module doc)."""
    inputs = sorted({str(Path(f).resolve()) for f in _files(config)})
    models = sorted({str(Path(f).resolve()) for f in _model_folders(config)})
    state = {"config": config, "stages": stages, "report": bool(report), "version": __version__,
             "inputs": [_stat(f) for f in inputs], "marks": _stat(RunDir(run_path).marks),
             "models": [[f, local_model_identity(f)] for f in models]}
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Unfinished:
    """The record of one command in a run directory: its fingerprint and the stages it has finished."""

    def __init__(self, run_path, fingerprint: str, redo: bool = False):
        self.path = RunDir(run_path).unfinished
        self.fingerprint = fingerprint
        left = self._read() if not redo else {}
        self.done: list[str] = list(left.get("done", [])) if left.get("fingerprint") == fingerprint else []
        self.finished_before = tuple(self.done)  # the stages this start of the command skips

    def _read(self) -> dict:
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def write(self) -> None:
        """Write the record: before the first stage (a command started afresh forgets another's stages), and
        after each stage it finishes."""
        write_json(self.path, {"fingerprint": self.fingerprint, "done": self.done})

    def finished(self, stage: str) -> None:
        """A stage completed: a later start of this command skips it."""
        if stage not in self.done:
            self.done.append(stage)
        self.write()

    def complete(self) -> None:
        """Every stage completed: the command is not unfinished any more."""
        self.path.unlink(missing_ok=True)
