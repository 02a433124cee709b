"""A run's saved maps (`maps/<name>/`): written after stage 05, reopened later, and grown by papers added since.

A map a user has learnt to read should not be redrawn because twelve papers were added to
the export. `reopen_map` takes the saved map when it was drawn from the same aspects,
perplexity and seed: the papers it holds keep their positions (in the corpus's new order),
and papers it does not hold are placed on it, frozen (`AspectMap.extend`, appendix A.10).
Other weights then start from that layout (`with_weights`, a warm refit), as a slider does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from .tsne import CONFIG_NAME, WEIGHTS_NAME, AspectMap, normalize_weights, read_map_config
from .tsne_math import unit32

DOC_IDS = "doc_ids.json"
EMBEDDINGS_CHANGED = 1e-3  # largest change of a unit-row coordinate still read as the same embeddings
MAX_NAME = 60  # characters of a map's name: at most 240 bytes in UTF-8, under every file system's 255 per name
SELECTION_FILE = "selection.json"  # RunDir.selection's name: maps/selection.json holds the pane's picks, not a map
# A map's name is one folder under maps/: a letter, digit or underscore first (so never '.', '..' or a hidden
# folder), then those and '.', '-'; no separator, so no name can reach outside maps/.
MAP_NAME = re.compile(r"\w[\w.-]*")
CHECK_ROWS = 16_384  # saved rows read at a time to compare them with the current embeddings


@dataclass
class SavedMap:
    """A saved map's settings and places, its embeddings left in the file and read by blocks of rows: reopening
    a map of a million papers need not hold its saved embeddings (4.6 GB) beside the current ones to compare them."""

    folder: Path
    config: dict
    coords: np.ndarray

    @classmethod
    def read(cls, folder) -> "SavedMap":
        """The map written by `AspectMap.save` in `folder` (ValueError or safetensors' own error where damaged)."""
        from safetensors import safe_open

        folder = Path(folder)
        config = read_map_config(folder)
        with safe_open(str(folder / WEIGHTS_NAME), framework="numpy") as f:
            coords = f.get_tensor("coords")
            for i, _ in enumerate(config["aspects"]):
                if f.get_slice(f"embeddings/{i}").get_shape()[0] != len(coords):
                    raise ValueError(f"{folder}: aspect {i}'s embeddings do not match the map's {len(coords)} places")
        return cls(folder, config, coords)

    def __len__(self) -> int:
        return len(self.coords)

    def __getattr__(self, key):  # aspects, weights, perplexity, seed, method: the config's
        if key in ("aspects", "weights", "perplexity", "seed", "method"):
            return self.config[key]
        raise AttributeError(key)

    def largest_change(self, kept: Sequence[int], embeddings: Mapping[str, np.ndarray], order: Sequence[int]) -> float:
        """max |saved row - current unit row| over the saved rows `kept` (ascending) and the current rows `order`
        that hold the same papers, the saved rows read CHECK_ROWS at a time."""
        from safetensors import safe_open

        kept, order, worst = np.asarray(kept), np.asarray(order), 0.0
        with safe_open(str(self.folder / WEIGHTS_NAME), framework="numpy") as f:
            for i, aspect in enumerate(self.aspects):
                rows = f.get_slice(f"embeddings/{i}")
                for lo in range(0, len(self), CHECK_ROWS):
                    a, b = np.searchsorted(kept, [lo, lo + CHECK_ROWS])
                    if a < b:
                        saved = rows[lo:min(lo + CHECK_ROWS, len(self))][kept[a:b] - lo]
                        now = unit32(np.asarray(embeddings[aspect][order[a:b]]))
                        worst = max(worst, float(np.abs(saved - now).max()))
        return worst


def check_map_name(name) -> str:
    """`name` if it is a usable map name (`MAP_NAME`, at most MAX_NAME characters, not the selection's file),
    else ValueError saying which names are allowed: a map is saved in a folder of that name under maps/."""
    text = name if isinstance(name, str) else ""
    if not (MAP_NAME.fullmatch(text) and len(text) <= MAX_NAME and text != SELECTION_FILE):
        raise ValueError(f"cannot use {name!r} as a map's name: it is the name of a folder under the run's maps/, "
                         f"so it must be 1 to {MAX_NAME} letters, digits, '_', '.' or '-', start with a letter, "
                         f"digit or '_', and not be {SELECTION_FILE!r} (e.g. 'current' or 'by-approach')")
    return text


def save_map(run_dir, name: str, aspect_map: AspectMap, doc_ids: Sequence[str]):
    """Store a map and the doc_id of each of its rows under <run_dir>/maps/<name>/; returns the folder.

    ValueError, before anything is written, for a name that is not a plain folder name (`check_map_name`).
    """
    folder = RunDir(run_dir).map(check_map_name(name))
    aspect_map.save(folder)
    write_json(folder / DOC_IDS, [str(d) for d in doc_ids], indent=None)
    return folder


def reopen_map(run_dir, name: str, doc_ids: Sequence[str], embeddings: Mapping[str, np.ndarray], weights=None,
               perplexity: float = 30.0, seed: int = 42, method: str = "auto") -> AspectMap | None:
    """The saved map `name` for these papers (rows in `doc_ids` order), new papers placed on it; None when
    there is none or it was drawn otherwise (other aspects, perplexity, seed or method): then fit afresh.

    embeddings: {aspect: (n, d)} of the papers in `doc_ids` order; weights: None keeps the saved ones.
    """
    folder = RunDir(run_dir).map(check_map_name(name))
    if not (folder / CONFIG_NAME).is_file() or not (folder / DOC_IDS).is_file():
        return None
    try:
        saved = SavedMap.read(folder)
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
    order = [row[saved_ids[j]] for j in kept]
    # A map drawn from other embeddings (stage 03 run again, another model) shows their structure, not these:
    # its papers may not keep their place. Unit rows, so a change below 1e-3 is float noise.
    try:
        moved = saved.largest_change(kept, embeddings, order)
    except Exception as exc:  # noqa: BLE001 - a damaged saved map: draw a new one, and say so
        notice(f"the saved map {folder} cannot be read ({exc}); fitting a new one")
        return None
    if moved > EMBEDDINGS_CHANGED:
        notice(f"the saved map {folder.name!r} was drawn from other embeddings of these papers (stage 03 ran "
               "again since); drawing the map afresh")
        return None
    if not new and len(order) == len(ids) and np.array_equal(order, np.arange(len(ids))):
        # The same papers in the same order (a plain reopen): the current embeddings as they are, uncopied (a
        # million papers' memory maps stay maps).
        result = AspectMap(dict(embeddings), saved.weights, saved.coords, saved.perplexity, saved.seed, saved.method)
        return _reweighted(result, weights, folder.name, len(kept))
    # The saved map restricted to the papers still in the corpus, with their current embeddings.
    base = AspectMap({a: e[order] for a, e in embeddings.items()}, saved.weights, saved.coords[kept],
                     saved.perplexity, saved.seed, saved.method)
    grown = base.extend({a: e[new] for a, e in embeddings.items()}) if new else base
    # Rows back into corpus order: the kept papers first in the map, then the new ones.
    position = np.empty(len(ids), dtype=int)
    position[order + new] = np.arange(len(ids))
    result = AspectMap({a: grown.embeddings[a][position] for a in grown.aspects}, grown.weights,
                       grown.coords[position], grown.perplexity, grown.seed, grown.method)
    dropped = len(saved_ids) - len(kept)
    return _reweighted(result, weights, folder.name, len(kept), len(new), dropped)


def _reweighted(result: AspectMap, weights, name: str, kept: int, new: int = 0, dropped: int = 0) -> AspectMap:
    """The reopened map, said so, at the weights asked for (a warm refit where they differ from the saved)."""
    notice(f"reopened the saved map {name!r}: {kept} papers keep their place"
           + (f", {new} new placed on it" if new else "") + (f", {dropped} no longer in the corpus" if dropped
                                                              else ""))
    wanted_weights = normalize_weights(weights, result.aspects) if weights is not None else result.weights
    if not np.allclose(list(wanted_weights.values()), list(result.weights.values())):
        result = result.with_weights(wanted_weights)
    return result


def map_regions(run_dir, ids: Sequence[str], emb: Mapping[str, np.ndarray], aspects: Sequence[str],
                n_regions: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(each paper's region number, the map's coordinates or None, where the regions came from), for stage 07.

    Stage 05's stored map of the same papers gives its regions, numbered as the pane numbers that map's
    (`mapview.MapRegions`: 1, 2, ...), so "region 3" is the same papers in notebook 07 and on the map; without
    one, KMeans on the equally weighted aspect embeddings, numbered from 1."""
    from ..questions.axes import cluster
    from .mapview import MapRegions

    stored = RunDir(run_dir).map("current")
    coords = None
    if (stored / "doc_ids.json").is_file():
        order = [str(d) for d in json.loads((stored / "doc_ids.json").read_text())]
        if sorted(order) == sorted(map(str, ids)):
            position = {d: n for n, d in enumerate(order)}
            coords = AspectMap.load(stored).coords[[position[str(d)] for d in ids]]
    if coords is not None:
        return MapRegions(seed=seed).numbers(coords, n_regions), coords, "stage 05's stored map"
    regions, _ = cluster(np.hstack([emb[a] for a in aspects]), n_regions, seed)
    return np.asarray(regions) + 1, None, \
        "KMeans on the equally weighted aspect embeddings (no stored map of this corpus)"
