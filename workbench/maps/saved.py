"""A run's saved maps (`maps/<name>/`): written after stage 05, reopened later, and grown by papers added since.

A map a user has learnt to read should not be redrawn because twelve papers were added to
the export. `reopen_map` takes the saved map when it was drawn from the same aspects,
perplexity and seed: the papers it holds keep their positions (in the corpus's new order),
and papers it does not hold are placed on it, frozen (`AspectMap.extend`, appendix A.10).
Other weights then start from that layout (`with_weights`, a warm refit), as a slider does.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

import numpy as np

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from .tsne import CONFIG_NAME, AspectMap, normalize_weights

DOC_IDS = "doc_ids.json"


def save_map(run_dir, name: str, aspect_map: AspectMap, doc_ids: Sequence[str]):
    """Store a map and the doc_id of each of its rows under <run_dir>/maps/<name>/; returns the folder."""
    folder = RunDir(run_dir).map(name)
    aspect_map.save(folder)
    write_json(folder / DOC_IDS, [str(d) for d in doc_ids], indent=None)
    return folder


def reopen_map(run_dir, name: str, doc_ids: Sequence[str], embeddings: Mapping[str, np.ndarray], weights=None,
               perplexity: float = 30.0, seed: int = 42, method: str = "auto") -> AspectMap | None:
    """The saved map `name` for these papers (rows in `doc_ids` order), new papers placed on it; None when
    there is none or it was drawn otherwise (other aspects, perplexity, seed or method): then fit afresh.

    embeddings: {aspect: (n, d)} of the papers in `doc_ids` order; weights: None keeps the saved ones.
    """
    folder = RunDir(run_dir).map(name)
    if not (folder / CONFIG_NAME).is_file() or not (folder / DOC_IDS).is_file():
        return None
    try:
        saved = AspectMap.load(folder)
        saved_ids = [str(d) for d in json.loads((folder / DOC_IDS).read_text())]
    except Exception as exc:  # a damaged saved map (safetensors raises its own error): draw a new one, and say so
        notice(f"the saved map {folder} cannot be read ({exc}); fitting a new one")
        return None
    if len(saved_ids) != len(saved):
        return None
    wanted = min(float(perplexity), (len(saved) - 1) / 3.0)  # a small map keeps the perplexity it could have
    if (saved.aspects != list(embeddings) or abs(saved.perplexity - wanted) > 1e-9 or saved.seed != int(seed)
            or method not in ("auto", saved.method)):
        return None
    ids = [str(d) for d in doc_ids]
    row = {d: i for i, d in enumerate(ids)}
    kept = [j for j, d in enumerate(saved_ids) if d in row]
    on_map = set(saved_ids)  # once: a set built per paper made this quadratic
    new = [i for i, d in enumerate(ids) if d not in on_map]
    if len(kept) < 4:  # too little of the saved map is left to place anything on
        return None
    # The saved map restricted to the papers still in the corpus, with their current embeddings.
    order = [row[saved_ids[j]] for j in kept]
    base = AspectMap({a: e[order] for a, e in embeddings.items()}, saved.weights, saved.coords[kept],
                     saved.perplexity, saved.seed, saved.method)
    grown = base.extend({a: e[new] for a, e in embeddings.items()}) if new else base
    # Rows back into corpus order: the kept papers first in the map, then the new ones.
    position = np.empty(len(ids), dtype=int)
    position[order + new] = np.arange(len(ids))
    result = AspectMap({a: grown.embeddings[a][position] for a in grown.aspects}, grown.weights,
                       grown.coords[position], grown.perplexity, grown.seed, grown.method)
    dropped = len(saved_ids) - len(kept)
    notice(f"reopened the saved map {folder.name!r}: {len(kept)} papers keep their place"
           + (f", {len(new)} new placed on it" if new else "") + (f", {dropped} no longer in the corpus" if dropped
                                                                  else ""))
    wanted_weights = normalize_weights(weights, result.aspects) if weights is not None else result.weights
    if not np.allclose(list(wanted_weights.values()), list(result.weights.values())):
        result = result.with_weights(wanted_weights)
    return result
