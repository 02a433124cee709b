"""The settings of the map workbench's views: how `Explorer` lays out its map (`MapLayout`), and what
`pane.MapPane` is built with: its callbacks (`PaneCallbacks`), its look (`PaneView`) and the user's
restored selection and marks (`PaneState`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .mapview import MAP_HEIGHT, MAP_WIDTH, MapRegions
from .panedensity import DENSITY_ABOVE, POINTS_IN_VIEW


@dataclass(frozen=True)
class MapLayout:
    """How `Explorer` lays out its map: t-SNE `perplexity`, `method` ("auto", or a t-SNE
    implementation `AspectMap.fit` knows) and `seed`. reuse_map: the saved map (`save_map`) to
    reopen when it was drawn with the same aspects, perplexity and seed: its papers keep their
    place and papers added to the corpus since are placed on it (`saved.reopen_map`); None
    always fits a new map."""

    perplexity: float = 30.0
    method: str = "auto"
    seed: int = 42
    reuse_map: str | None = "current"


@dataclass(frozen=True)
class PaneCallbacks:
    """What `MapPane` calls back besides `on_weights`; each may be None, which disables its widgets.
    See `MapPane` for what each takes and returns."""

    on_tap: Callable[[float, float, int | None], str] | None = None
    on_place: Callable[[str], tuple[float, float, str]] | None = None
    on_search: Callable[[dict[str, tuple[str, float]]], object] | None = None  # returns a DataFrame
    on_labels: Callable[[], list] | None = None
    on_fit_weights: Callable[[list], object] | None = None
    on_compare: Callable[[int, int | tuple[float, float]], str] | None = None
    on_select: Callable[[list[int]], object] | None = None
    on_marks: Callable[[list], object] | None = None
    on_verdict: Callable[[], list[str]] | None = None  # each aspect's verdict in words, under the weights


@dataclass(frozen=True)
class PaneView:
    """How `MapPane` draws the map: region `labels` ([(x, y, text[, detail[, number]]), ...]) and
    `color_by` (a column, or a region count) as `mapview.build_figure` takes them; the map's `width`
    and `height` in pixels; `hit_fraction`: a tap within this fraction of the map's extent of a point
    taps it; `regions`: the `mapview.MapRegions` that number and colour the regions (shared with the
    caller; None: the pane's own). A map of more than `density_above` papers is drawn as density, each view
    holding at most `points_in_view` papers as points (`panedensity`)."""

    labels: object = None
    color_by: object = None
    width: int = MAP_WIDTH
    height: int = MAP_HEIGHT
    hit_fraction: float = 0.015
    regions: MapRegions | None = None
    density_above: int = DENSITY_ABOVE
    points_in_view: int = POINTS_IN_VIEW


@dataclass(frozen=True)
class PaneState:
    """What the user did on an earlier pane, restored (after a kernel restart, from the run directory):
    the `selected` paper indices and the `marks`, (i, j, similar) pairs."""

    selected: Sequence[int] = ()
    marks: Sequence[tuple[int, int, bool]] = ()
