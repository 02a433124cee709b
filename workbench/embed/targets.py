"""Stage 03's distillation targets: each document's mean aspect-model embedding of its views, cached in the run.

`check_teachers` finds stage 02's aspect models (the teachers) and checks that they share one
embedding size; `compute_targets` embeds every view (summary) of a document with its aspect's
model and averages the unit vectors, caching them in ``<run_dir>/targets.safetensors`` +
``targets.json`` keyed by the teacher's weights and the views; `load_targets` reads them back
without a model. `distill.py` trains the unified model on them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .checkpoints import load_model
from .embeddings import model_key
from .encoders import CONFIG_NAME
from ..core.files import write_json
from ..core.rundir import TARGETS_INDEX, TARGETS_NAME, RunDir
from .untaught import untrained_aspects

# Bump when the way targets are computed changes, so old caches are not reused.
TARGETS_METHOD = "mean-of-unit-views-v1"


class MissingTeachersError(FileNotFoundError):
    """The aspect models of stage 02 are not there; the message names the folder and what to run."""


def views_of(views) -> dict[str, list[str]]:
    """{doc_id: [texts]} from an `AspectViews` or a plain dict."""
    return {str(d): list(v) for d, v in getattr(views, "views", views).items()}


def check_teachers(run_dir: str | os.PathLike, aspects: Sequence[str]) -> dict[str, Path]:
    """The aspect model folder of each aspect stage 02 trained, after checking they exist and share one size.

    Raises MissingTeachersError (naming the folder and saying to run 02_train) when
    ``<run_dir>/aspect_models`` or an aspect's model is missing, and ValueError when the
    models' sizes differ. The aspects stage 02 left untrained on purpose (`untrained_aspects`) are not
    teachers: they are left out of the result. Only the small config files are read.
    """
    root = RunDir(run_dir).aspect_models
    untrained = untrained_aspects(run_dir, aspects) if root.is_dir() else {}
    aspects = [a for a in aspects if a not in untrained]
    if not root.is_dir():
        raise MissingTeachersError(
            f"{root} does not exist. The unified model is distilled from the aspect models of stage 02: "
            f"run 02_train first with this run_dir (notebooks/02_train.ipynb, or "
            f"`workbench run --run-dir {run_dir} --stages 02_train`)."
        )
    found = sorted(p.name for p in root.iterdir() if (p / CONFIG_NAME).is_file())
    missing = [a for a in aspects if not (root / a / CONFIG_NAME).is_file()]
    if missing:
        raise MissingTeachersError(
            f"no aspect model for {missing} in {root} (it has {found or 'none'}): run 02_train first for these "
            f"aspects, or leave them out with aspect_names."
        )
    dims = {a: json.loads((root / a / CONFIG_NAME).read_text()).get("dim") for a in aspects}
    if len(set(dims.values())) > 1:
        raise ValueError(
            f"the aspect models in {root} have different embedding sizes {dims}; the unified model predicts every "
            f"aspect with a head of one size, so train them with the same dim."
        )
    return {a: root / a for a in aspects}


def _targets_key(teacher_dir: Path, docs: Mapping[str, list[str]]) -> str:
    digest = hashlib.sha256(f"{TARGETS_METHOD}\n{model_key(teacher_dir)}\n".encode())
    digest.update(json.dumps(docs, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


def _read_targets_cache(run_dir: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(index, tensors) of the run's targets cache, or ({}, {}) when there is none or it is unreadable."""
    index_path, tensor_path = run_dir / TARGETS_INDEX, run_dir / TARGETS_NAME
    if not (index_path.is_file() and tensor_path.is_file()):
        return {}, {}
    from safetensors.numpy import load_file

    try:
        index = json.loads(index_path.read_text())
        tensors = load_file(str(tensor_path))
    except Exception:  # a damaged cache is recomputed, never trusted
        return {}, {}
    if index.get("method") != TARGETS_METHOD:
        return {}, {}
    return index, tensors


def load_targets(run_dir: str | os.PathLike, aspects: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """The targets that `compute_targets` saved in run_dir, without loading any model."""
    index, tensors = _read_targets_cache(Path(run_dir))
    if not index:
        raise FileNotFoundError(f"no targets in {run_dir}: run compute_targets (notebook 03_distill) first")
    entries = index["aspects"]
    aspects = list(entries) if aspects is None else list(aspects)
    unknown = [a for a in aspects if a not in entries]
    if unknown:
        raise KeyError(f"no targets for {unknown} in {run_dir}; it has {list(entries)}")
    return {a: dict(zip(entries[a]["doc_ids"], tensors[a])) for a in aspects}


def compute_targets(
    run_dir: str | os.PathLike,
    views_by_aspect: Mapping,
    aspects: Sequence[str] | None = None,
    batch_size: int = 64,
    device: str | None = None,
    progress: bool = True,
    force: bool = False,
) -> dict[str, dict[str, np.ndarray]]:
    """Target embeddings {aspect: {doc_id: float32 [dim]}} from the aspect models of stage 02.

    `views_by_aspect` maps each aspect to its views (`views.collect_views` output, or
    {doc_id: [texts]}). A document gets a target in an aspect when it has at least one
    view there (paper A.4: "at least one valid summary").

    Target = mean of the L2-normalised view embeddings (not renormalised). The authors
    average the raw projections; we normalise first because an aspect model is
    trained only through cosine similarity, so the length of its raw output carries no
    meaning, yet it would weight some summaries more than others in a raw mean and set
    the scale of the MSE arbitrarily per teacher. Unit views weight every summary
    equally and keep targets inside the unit ball, so the 10 x MSE has the same scale
    for any teacher; the mean's length still says how much the views agree.

    Results are saved to ``<run_dir>/targets.safetensors`` (one [n_docs, dim] tensor per
    aspect) and ``<run_dir>/targets.json`` (doc ids per aspect, and a key per aspect made
    of the teacher's weights and the views): an aspect whose key is unchanged is loaded,
    not recomputed, unless `force`.
    """
    run_dir = Path(run_dir)
    aspects = list(views_by_aspect) if aspects is None else list(aspects)
    missing_views = [a for a in aspects if a not in views_by_aspect]
    if missing_views:
        raise KeyError(f"no views for aspect(s) {missing_views}; views were given for {list(views_by_aspect)}")
    folders = check_teachers(run_dir, aspects)
    out: dict[str, dict[str, np.ndarray]] = {a: {} for a in aspects}  # an aspect stage 02 left untrained: no target
    aspects = [a for a in aspects if a in folders]
    if not aspects:
        return out
    index, tensors = ({}, {}) if force else _read_targets_cache(run_dir)
    dim = json.loads((folders[aspects[0]] / CONFIG_NAME).read_text())["dim"]
    if index.get("dim") != dim:  # teachers of another size: no cached aspect can be kept beside the new ones
        index, tensors = {}, {}
    entries: dict = dict(index.get("aspects", {}))
    stale = [a for a in out if a not in folders and a in entries]  # targets of a teacher stage 02 no longer has
    for a in stale:
        del entries[a]
    changed = bool(stale)
    for aspect in aspects:
        docs = {d: v for d, v in views_of(views_by_aspect[aspect]).items() if v}
        key = _targets_key(folders[aspect], docs)
        entry = entries.get(aspect)
        if entry and entry.get("key") == key and aspect in tensors:
            out[aspect] = dict(zip(entry["doc_ids"], tensors[aspect]))
            if progress:
                print(f"{aspect}: {len(entry['doc_ids'])} targets loaded from {run_dir / TARGETS_NAME}")
            continue
        ids = list(docs)
        teacher = load_model(folders[aspect], device=device, aspects=[aspect], run_dir=run_dir) if ids else None
        tensors[aspect] = _mean_views(teacher, aspect, docs, dim, batch_size, progress)
        del teacher
        entries[aspect] = {"key": key, "doc_ids": ids, "n_views": [len(docs[d]) for d in ids],
                           "teacher": str(folders[aspect])}
        out[aspect] = dict(zip(ids, tensors[aspect]))
        changed = True
    if changed:
        _save_targets(run_dir, tensors, entries, dim)
    return out


def _mean_views(teacher, aspect: str, docs: dict, dim: int, batch_size: int, progress: bool) -> np.ndarray:
    """[len(docs), dim]: per document (in `docs`' order) the mean of its views' unit vectors under `teacher`."""
    ids = list(docs)
    flat = [text for d in ids for text in docs[d]]
    if not flat:
        return np.zeros((0, dim), dtype=np.float32)
    # Each teacher reads views with the length it was trained with (its own max_length).
    vectors = teacher.encode(flat, aspects=[aspect], batch_size=batch_size, normalize=True, progress=progress)[aspect]
    bounds = np.cumsum([0] + [len(docs[d]) for d in ids])
    matrix = np.stack([vectors[s:e].mean(axis=0) for s, e in zip(bounds[:-1], bounds[1:])])
    return np.ascontiguousarray(matrix, dtype=np.float32)


def _save_targets(run_dir: Path, tensors: dict, entries: dict, dim: int) -> None:
    """Write the targets and their index. The index is removed first and written last: an interrupted save
    leaves no index, so the next run recomputes instead of pairing a new tensor file with old doc ids."""
    from safetensors.numpy import save_file

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / TARGETS_INDEX).unlink(missing_ok=True)
    keep = {a: tensors[a] for a in entries if a in tensors}
    tmp = run_dir / (TARGETS_NAME + ".tmp")
    save_file(keep, str(tmp), metadata={"method": TARGETS_METHOD})
    os.replace(tmp, run_dir / TARGETS_NAME)
    index = {"format": "workbench-targets", "method": TARGETS_METHOD, "dim": int(dim),
             "aspects": {a: entries[a] for a in keep}}
    write_json(run_dir / TARGETS_INDEX, index, indent=1)
