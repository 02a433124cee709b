"""Faithfulness reports kept beside the decoder they measure, so that a rerun does not decode again.

Stage 04's faithfulness pass and stage 06's Table 3 decode every paper they score, and take most of a
rerun of a finished run (42 s and 44 s of the demo's two minutes on 2 cores) though nothing they read
has changed: a run resumed after a kill in stage 05 or 06 paid stage 04's pass again. `decoding_report`
(`faithfulness.py`) looks here first.

A report is found only under a key made of everything it is computed from: the contents of the files
that define the decoder (its folder; for a retrieval decoder also the aspect model it embeds with) and
of the round trip's aspect model, the embeddings, references, names, exclusions and reconstructed points
passed in, the settings, the device, the versions of torch and transformers, and the workbench's own
source. File names enter relative to their folder, so a copied run keeps its reports. A decoder not
loaded from files (one built in memory, or a registered kind that sets no `source_files`) is never
cached. A store that cannot be read counts as empty and is written again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.devices import best_device
from ..core.files import write_text

REPORTS_NAME = "reports.json"  # in the decoder's folder
KEEP = 16  # the latest reports kept per folder: a few settings a user switches between


@cache
def _source_hash() -> str:
    """The workbench's own source: a report computed by other code is not this code's."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@cache
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """A file's content hash, once per process for a file left as it was (a fine-tuned encoder is large)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _add_files(h, top: Path) -> None:
    top = Path(top)
    files = sorted(p for p in (top.rglob("*") if top.is_dir() else [top]) if p.is_file() and p.name != REPORTS_NAME)
    for path in files:
        stat = path.stat()
        h.update(str(path.relative_to(top) if top.is_dir() else path.name).encode())
        h.update(_file_digest(str(path), stat.st_size, stat.st_mtime_ns).encode())


def _add_value(h, value) -> None:
    """Arrays by dtype, shape and bytes; everything else by its JSON (dataclasses by their fields)."""
    if isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        for v in value:
            _add_value(h, v if isinstance(v, np.ndarray) else np.asarray(v))
    else:
        h.update(json.dumps(asdict(value) if is_dataclass(value) else value, sort_keys=True, default=str).encode())


class ReportStore:
    """The reports of one decoder folder: `key(...)`, then `get(key)` or `put(key, metrics, examples)`."""

    def __init__(self, folder: Path, sources: list[Path]):
        self.path = Path(folder) / REPORTS_NAME
        self.sources = sources

    @classmethod
    def of(cls, decoder, round_trip) -> "ReportStore | None":
        """The store for this decoder and round trip, or None where either is not known by its files."""
        sources = [Path(p) for p in getattr(decoder, "source_files", None) or ()]
        if not sources or not all(p.exists() for p in sources):
            return None
        if round_trip is not None:
            model = round_trip.aspect_model
            if not isinstance(model, (str, Path)) or not Path(model).exists():
                return None
            sources.append(Path(model))
        return cls(sources[0] if sources[0].is_dir() else sources[0].parent, sources)

    def key(self, *inputs) -> str:
        """A hash of the sources' contents, the inputs, the device and the library versions."""
        import torch
        import transformers

        h = hashlib.sha256(f"{_source_hash()} torch {torch.__version__} transformers {transformers.__version__} "
                           f"{best_device()}".encode())
        for source in self.sources:
            _add_files(h, source)
        for value in inputs:
            _add_value(h, value)
        return h.hexdigest()

    def _read(self) -> dict:
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            return stored if isinstance(stored, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> tuple[dict, pd.DataFrame] | None:
        """(metrics, examples) stored under `key`, or None."""
        entry = self._read().get(key)
        if not isinstance(entry, dict) or not {"metrics", "examples", "columns"} <= set(entry):
            return None
        return dict(entry["metrics"]), pd.DataFrame(entry["examples"], columns=entry["columns"])

    def put(self, key: str, metrics: dict, examples: pd.DataFrame) -> None:
        """Keep (metrics, examples) under `key`: only what JSON gives back as it went in (else nothing)."""
        try:
            entry = {"metrics": _plain(metrics), "columns": list(examples.columns),
                     "examples": {str(c): _plain(examples[c].tolist()) for c in examples.columns}}
        except TypeError:
            return
        stored = self._read()
        stored.pop(key, None)
        stored[key] = entry
        # Python's JSON, NaN kept as NaN (strict JSON would turn it into null): read back by `get` alone.
        try:
            write_text(self.path, json.dumps(dict(list(stored.items())[-KEEP:])))
        except OSError:  # a run one may read but not write (another user's): the report is simply not kept
            pass


def _plain(value):
    """numpy scalars as Python numbers, for JSON; TypeError for anything JSON would not give back."""
    def scalar(o):
        if isinstance(o, np.generic):
            return o.item()
        raise TypeError(f"{type(o).__name__} does not come back from JSON")

    return json.loads(json.dumps(value, default=scalar))
