"""A run's `metrics.json`: stage 06's numbers written whole as strict JSON, read back, and two runs compared.

`RunMetrics` is what stage 06 fills section by section: each section is on disk as soon as it
is computed, so a later section that fails loses nothing before it. `write_metrics` replaces
the file atomically (values made JSON-safe by `jsonable`: numpy types, DataFrames, NaN as
null), `load_metrics` reads a run's (or the file itself), and `compare_metrics` puts two runs
side by side (`workbench compare`).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import METRICS_FILE


def jsonable(value):
    """Plain JSON types: numpy scalars and arrays, DataFrames and Series converted; NaN and inf -> None."""
    if isinstance(value, pd.DataFrame):
        return {str(r): jsonable(row) for r, row in value.to_dict(orient="index").items()}
    if isinstance(value, pd.Series):
        return {str(k): jsonable(v) for k, v in value.to_dict().items()}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None  # strict JSON has no NaN
    if isinstance(value, os.PathLike):
        return str(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"cannot write {type(value).__name__} to metrics.json: {value!r:.100}")


def _metrics_path(run_dir) -> Path:
    """A run directory's metrics.json, or the path itself when it names a metrics file.

    A folder is a run directory whatever its name: `x.json/` is one, not a file to write over.
    """
    path = Path(run_dir)
    return path if path.suffix == ".json" and not path.is_dir() else path / METRICS_FILE


class RunMetrics(dict):
    """Stage 06's sections of `metrics.json`, written whole each time a section is set.

        metrics = RunMetrics(run_dir)              # this evaluation's file, replacing an older one
        metrics["spearman"] = table                # on disk now, marked incomplete
        metrics.save(complete=True)                # the last write: every section is there

    A section changed in place (metrics["evaluation"]["backbone"] = ...) is written by the next
    assignment or `save`. `warn` records what the evaluation could not do as it should (a missing
    artifact) in a "warnings" list, so metrics.json does not read as complete when it is not.
    """

    def __init__(self, run_dir, sections: Mapping | None = None):
        super().__init__(sections or {})
        self.run_dir = run_dir
        self.path = _metrics_path(run_dir)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.save(complete=False)

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self.save(complete=False)

    def warn(self, text: str) -> None:
        """Record a warning in the "warnings" section (once) and say it in the notebook and on the terminal."""
        notice(text)
        warnings = self.get("warnings", [])
        if text not in warnings:
            self["warnings"] = [*warnings, text]

    def save(self, complete: bool = True) -> Path:
        """Write every section now; `complete` says whether the evaluation has finished."""
        return write_metrics(self.run_dir, dict(self), complete=complete)


def write_metrics(run_dir, metrics: dict, complete: bool = True) -> Path:
    """Write `<run_dir>/metrics.json` whole from `metrics` (stage 06's sections); returns the path.

    The file is replaced, not merged: a section this run did not compute (no decoding, say)
    is absent rather than left over from an older run, where `workbench compare` would show it
    as current. A "written" section says when, and whether the evaluation had finished. Values are made JSON-safe (numpy types,
    DataFrames as {row: {column: value}}, NaN as null); the file is replaced atomically.
    """
    path = _metrics_path(run_dir)
    stamped = {**jsonable(metrics), "written": {"at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                                  "by": "stage 06 (evaluate)", "complete": complete}}
    return write_json(path, stamped)


def load_metrics(run_dir) -> dict:
    """The metrics of a run: a run directory or the metrics.json path itself."""
    path = _metrics_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}; run the evaluation stage for that run first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None


def _numeric_leaves(value, prefix: str = "") -> dict:
    """Flatten to {"a/b/c": number}; list items get [i]; null (a NaN written out) reads as NaN."""
    out = {}
    if isinstance(value, Mapping):
        for key, v in value.items():
            out.update(_numeric_leaves(v, f"{prefix}/{key}" if prefix else str(key)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(_numeric_leaves(v, f"{prefix}[{i}]"))
    elif value is None:
        out[prefix] = np.nan
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def compare_metrics(a: dict, b: dict) -> pd.DataFrame:
    """Two runs' metrics side by side: one row per numeric leaf (key path), columns A, B, difference.

    difference = B - A. A key found in one run only shows NaN for the other; strings
    and booleans are left out.
    """
    left, right = _numeric_leaves(a), _numeric_leaves(b)
    keys = list(left) + [k for k in right if k not in left]
    frame = pd.DataFrame({"A": [left.get(k, np.nan) for k in keys], "B": [right.get(k, np.nan) for k in keys]},
                         index=pd.Index(keys, name="metric"), dtype=float)
    frame["difference"] = frame["B"] - frame["A"]
    return frame
