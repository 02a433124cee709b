"""The map in JupyterLab: `MapPane` (weight sliders, tap, place, search, marked pairs) and the BokehJS loader.

The pane takes the maths (t-SNE, re-weighting, placing an abstract, decoding a spot) as
callbacks, so it can be driven and tested without a model or a browser; its figure and data
come from `mapview.py`, marking pairs and fitting the weights to them from `panemarks.py`. Paper
text in the pane's HTML goes through `display.esc`.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ..core.display import html_table
from .options import PaneCallbacks, PaneState, PaneView
from .mapview import (READOUT_WIDTH, MapRegions, as_coords, as_text, build_figure, by_cluster, error_html,
                      group_title, label_source_data, legend_html, message_html, named_groups,
                      point_colors, region_colors, region_count)
from .page import verdicts_html
from .panedensity import PaneDensity
from .panepage import QUIET_ECHO_JS
from .panemarks import PaneMarks

log = logging.getLogger(__name__)

# A test-only switch: False leaves BokehJS out of the pane, so a browser test can check that it then
# sees jupyter_bokeh's error view (a negative control: a test that passes on an empty page proves nothing).
LOAD_BOKEHJS = True
MAX_RESULT_ROWS = 50  # search results shown in the pane
LOAD_MIME_TYPE = "application/vnd.bokehjs_load.v0+json"  # jupyter_bokeh's renderer runs it as a <script>
WIDGET_MIME_TYPE = "application/vnd.jupyter.widget-view+json"
# After a first frame the kernel's layout threads take every core again, and a browser that draws
# with its CPU (headless Chromium, a laptop without GPU compositing) drew that frame only once the
# settled layout had come: at 10,000 points the redraw costs it about 0.3 s, and with one other busy
# process on 2 cores a slider's first frame was painted after 4.2 to 4.7 s instead of 1.6 s.
FRAME_PAUSE = 0.5  # seconds the kernel rests after sending a first frame of FRAME_PAUSE_MIN points or more
FRAME_PAUSE_MIN = 5_000  # below it the settled layout follows within about a second anyway
_LOADER: dict[str, str] = {}


def bokehjs_loader() -> dict[str, str]:
    """The display data that loads BokehJS into the page, inline (no CDN) and without a banner.

    jupyter_bokeh's view needs `window.Bokeh` when it is created and loads nothing itself. The
    script is skipped when this BokehJS version is already in the page (a second pane, a second
    notebook), so a page pays for the 4 MB once; then QUIET_ECHO_JS, before any view exists. Built
    once per process.
    """
    if not _LOADER:
        from bokeh import __version__
        from bokeh.core.templates import AUTOLOAD_NB_JS
        from bokeh.embed.bundle import bundle_for_objs_and_resources
        from bokeh.resources import INLINE

        # What bokeh.io.output_notebook(INLINE, hide_banner=True) publishes for JupyterLab.
        script = AUTOLOAD_NB_JS.render(bundle=bundle_for_objs_and_resources(None, INLINE), elementid=None,
                                       force=True, timeout=5000, register_mime=False)
        guarded = (f"if (typeof window.Bokeh === 'undefined' || window.Bokeh.version !== {__version__!r}) {{\n"
                   f"{script}\n}}\n{QUIET_ECHO_JS}")
        _LOADER.update({LOAD_MIME_TYPE: guarded, "application/javascript": guarded})
    return dict(_LOADER)


def map_output(bokeh_widget, width: str):
    """An ipywidgets Output that first loads BokehJS, then shows `bokeh_widget` (a jupyter_bokeh BokehModel).

    Why an Output and not `output_notebook()` in a cell: an Output's content lives in the
    kernel's widget state and renders as trusted output, in order. So the loader runs before the
    map's view is created, also after the browser page is reloaded, in a second tab or a second
    view of the notebook, where a cell's saved script output would not run (or run too late).
    """
    import ipywidgets as widgets

    outputs = []
    if LOAD_BOKEHJS:
        outputs.append({"output_type": "display_data", "data": bokehjs_loader(), "metadata": {}})
    outputs.append({"output_type": "display_data", "metadata": {},
                    "data": {WIDGET_MIME_TYPE: {"version_major": 2, "version_minor": 0,
                                                "model_id": bokeh_widget.model_id},
                             "text/plain": "the map (needs a live kernel in JupyterLab)"}})
    out = widgets.Output(layout=widgets.Layout(width=width))
    out.outputs = tuple(outputs)
    return out


def _widgets():
    """ipywidgets, imported when a pane is built (the package imports without it)."""
    import ipywidgets

    return ipywidgets


class MapPane(PaneMarks, PaneDensity):
    """The map in JupyterLab, with aspect-weight sliders, tap, place-an-abstract and query search.

    All maths is in the callbacks; each may be None, which disables its widgets:

    * `on_weights(weights) -> coords`: new layout for normalised weights (sum 1);
    * `on_tap(x, y, index_or_None) -> html`: description of a spot (index of the tapped
      point, None for an empty spot); the caller escapes the HTML it returns;
    * `on_place(text) -> (x, y, html)`: where a new abstract lands;
    * `on_search({aspect: (query, weight)}) -> DataFrame`: nearest papers;
    * `on_labels() -> [(x, y, text[, detail[, number]]), ...]`: region labels for a new layout (after
      `on_weights`), numbered by `regions` (`mapview.MapRegions`, shared with the caller), which numbers
      and colours the map's regions so that each keeps its number and colour across layouts;
    * `on_fit_weights([(i, j, similar), ...]) -> fit`: aspect weights fitted to the pairs the
      user marked (tap two papers, then "similar" / "not similar"); `fit` is a
      `weights.WeightFit` (its `summary()` is shown) or a plain {aspect: weight} dict. The
      map is then re-laid out through `set_weights`; negative weights are reported but the
      map uses their positive part (a t-SNE distance cannot weigh an aspect negatively);
    * `on_compare(i, other) -> html`: why paper i and `other` are close (question axes); other
      is a paper index when two papers were tapped in turn, or the (x, y) of an empty spot
      tapped right after paper i. Shown below `on_tap`'s description; the caller escapes it;
    * `on_select(indices)`: the papers selected with the lasso or box tool (or `select`);
      `on_marks(marks)`: the marked pairs after each change. `selected` and `marks` restore
      both when the pane is built again (after a kernel restart, from the run directory);
    * `on_verdict() -> [line, ...]`: each aspect's verdict in plain words (`teach.verdict.verdict_lines`),
      shown under the weights and read again after a refit of taught aspects (`relayout`).

    `on_weights` is a parameter of its own; the other callbacks come as one `PaneCallbacks`
    (callbacks=), how the map is drawn (labels, colours, size, regions) as a `PaneView` (view=),
    and `selected` and `marks` as a `PaneState` (state=).

    The widgets call the public methods `set_weights`, `tap`, `place`, `search`, `mark` and
    `fit_marks`, so a
    test (or a notebook cell) can drive the pane the same way. A callback's exception is
    shown, escaped, in the detail panel and logged; it never propagates into the kernel.
    """

    def __init__(self, coords, meta: pd.DataFrame, aspects, weights,
                 on_weights: Callable[[dict], np.ndarray] | None = None,
                 callbacks: PaneCallbacks = PaneCallbacks(), view: PaneView = PaneView(),
                 state: PaneState = PaneState()):
        from jupyter_bokeh import BokehModel

        self.meta = meta.reset_index(drop=True)
        self.aspects = [str(a) for a in aspects]
        self.color_by = view.color_by
        self.on_weights = on_weights
        self.on_tap, self.on_place, self.on_search = callbacks.on_tap, callbacks.on_place, callbacks.on_search
        self.on_labels = callbacks.on_labels
        self.on_fit_weights = callbacks.on_fit_weights
        self.on_compare = callbacks.on_compare
        self.tapped: list[int] = []  # the last two tapped papers: the pair the mark buttons record
        self.last_tap: int | None = None  # the paper of the last tap (None: an empty spot), for on_compare
        self.marks: list[tuple[int, int, bool]] = [tuple(m) for m in state.marks]  # (i, j, similar) pairs marked
        self.on_select, self.on_marks = callbacks.on_select, callbacks.on_marks
        self.on_verdict = callbacks.on_verdict
        # A tap within this fraction of the map's extent of a point counts as tapping it.
        self.hit_fraction = view.hit_fraction
        self.coords = as_coords(coords)
        self.regions, self.labels = view.regions or MapRegions(), view.labels
        self.width = view.width
        self._build_map(view, state.selected)
        self._build_sliders(weights)
        self._build_widgets(view)
        self.bokeh = BokehModel(self.figure)
        self._name_widgets()
        self.layout = self._layout(_widgets())

    def _build_map(self, view: PaneView, selected: Sequence[int]) -> None:
        """The Bokeh figure with its tap marker, placed abstracts, lasso and box; `selected` selected."""
        from bokeh.events import Tap
        from bokeh.models import BoxSelectTool, ColumnDataSource, LassoSelectTool, TapTool

        data = self._start_density(view)  # every paper, or on a density map (`panedensity`) a sample
        self.figure, self.source, self.label_source = build_figure(data, view.labels, group_title(view.color_by),
                                                                    "", view.width, view.height)
        self.figure.toolbar_location = "above"  # on the right it overlapped whatever stands beside the map
        self.tap_source = ColumnDataSource({"x": [], "y": []}, name="tap_marker")
        self.placed_source = ColumnDataSource({"x": [], "y": [], "text": []}, name="placed")
        self.figure.scatter("x", "y", source=self.tap_source, marker="x", size=18, line_width=3,
                            line_color="#d62728", name="tap_marker_glyph")
        self.figure.scatter("x", "y", source=self.placed_source, marker="star", size=20,
                            fill_color="#ffd700", line_color="black", name="placed_glyph")
        self.figure.on_event(Tap, self._on_tap_event)
        points = self.figure.select_one({"name": "points_glyph"})
        self.figure.add_tools(LassoSelectTool(renderers=[points]), BoxSelectTool(renderers=[points]))
        # A tap reads a paper (the Tap event above); only the lasso and the box select, so a tap neither
        # replaces the user's selection nor lands in the stored one.
        self.figure.select_one(TapTool).behavior = "inspect"
        if self.density:
            self._build_density(selected)
        else:
            self.source.selected.indices = [int(i) for i in selected]
        self.source.selected.on_change("indices", lambda attr, old, new: self.selection_changed(new))

    def _build_sliders(self, weights) -> None:
        """One weight slider per aspect, showing the weights as the map uses them (positive, summing to 1)."""
        widgets = _widgets()
        weights = {a: float(w) for a, w in dict(weights or {}).items()}
        total = sum(w for w in weights.values() if w > 0)
        if total > 0:  # the sliders show the weights as the map uses them: summing to 1
            weights = {a: max(w, 0.0) / total for a, w in weights.items()}
        self.drawn_weights = dict(weights)  # the legend's: those of the map drawn, not of a layout under way
        self.sliders = {
            a: widgets.FloatSlider(value=float(weights.get(a, 0.0)), min=0.0, max=1.0, step=0.05,
                                   description=a, continuous_update=False,  # recompute on release only
                                   disabled=self.on_weights is None, readout_format=".2f")
            for a in self.aspects
        }
        self._syncing = False  # set while set_weights moves the sliders, so they don't re-fire
        for slider in self.sliders.values():
            slider.observe(self._on_slider, names="value")

    def _build_widgets(self, view: PaneView) -> None:
        """The readout, place, search, legend, mark and selection widgets; a missing callback disables its own."""
        widgets = _widgets()
        on_place, on_search = self.on_place, self.on_search
        # The readout stands beside the map, so what a tap produced is in view where the tap was.
        self.detail = widgets.HTML(value=message_html("Tap a paper or an empty spot on the map to read it."),
                                   layout=widgets.Layout(width=f"{READOUT_WIDTH}px",
                                                         max_height=f"{view.height + 40}px", overflow="auto"))
        self.place_text = widgets.Textarea(placeholder="Paste an abstract to place it on the map",
                                           layout=widgets.Layout(width="100%", height="90px"),
                                           disabled=on_place is None)
        self.place_button = widgets.Button(description="place abstract", disabled=on_place is None)
        self.place_button.on_click(lambda _: self.place(self.place_text.value))
        self.query_texts = {a: widgets.Text(placeholder=f"{a} query", description=a,
                                            disabled=on_search is None) for a in self.aspects}
        self.query_weights = {a: widgets.FloatSlider(value=1.0, min=-1.0, max=1.0, step=0.1,
                                                     description="weight", continuous_update=False,
                                                     disabled=on_search is None) for a in self.aspects}
        self.search_button = widgets.Button(description="search", disabled=on_search is None)
        self.search_button.on_click(lambda _: self.search(self._queries()))
        self.results = widgets.HTML(value="")
        self.legend = widgets.HTML(value=legend_html(view.labels, self.drawn_weights,
                                                     region_colors(view.labels, view.color_by)),
                                   layout=widgets.Layout(width=f"{READOUT_WIDTH + view.width - 350}px"))
        self.mark_info = widgets.HTML(value=self._marks_html())
        self.selection_info = widgets.HTML(value=self._selection_html())
        self.similar_button = widgets.Button(description="similar")
        self.similar_button.on_click(lambda _: self.mark(True))
        self.dissimilar_button = widgets.Button(description="not similar")
        self.dissimilar_button.on_click(lambda _: self.mark(False))
        self.fit_button = widgets.Button(description="fit weights to my marks", disabled=self.on_fit_weights is None,
                                         layout=widgets.Layout(width="auto"))
        self.fit_button.on_click(lambda _: self.fit_marks())
        self.clear_marks_button = widgets.Button(description="clear marks")
        self.clear_marks_button.on_click(lambda _: self.clear_marks())
        self.verdict = widgets.HTML(value="")
        self.show_verdict()

    def _name_widgets(self) -> None:
        """CSS classes on the parts a user reaches for, so a browser test (or a user's CSS) can find them."""
        named = {"wb-map": self.bokeh, "wb-readout": self.detail, "wb-legend": self.legend,
                 "wb-place-text": self.place_text, "wb-place-button": self.place_button,
                 "wb-similar": self.similar_button, "wb-not-similar": self.dissimilar_button,
                 "wb-fit": self.fit_button, "wb-marks": self.mark_info, "wb-search": self.search_button,
                 "wb-selection": self.selection_info, "wb-verdict": self.verdict}
        named.update({"wb-weight-" + re.sub(r"[^A-Za-z0-9_-]", "-", a): s for a, s in self.sliders.items()})
        for css, widget in named.items():
            widget.add_class(css)

    # -- layout

    def _layout(self, widgets):
        """Map and readout side by side; below them the weights, marks and legend; then place and search.

        About 830 px wide at the default map size: no sideways scroll in JupyterLab at 1,280 px
        with the file browser open.
        """
        self.map_output = map_output(self.bokeh, f"{self.width + 10}px")
        controls = widgets.VBox([widgets.HTML("<b>Aspect weights</b> <small>(they sum to 1)</small>"),
                                 *self.sliders.values(), self.verdict,  # how far to trust what they weigh
                                 widgets.HTML("<b>What I mean by similar</b>"), self.mark_info,
                                 widgets.HBox([self.similar_button, self.dissimilar_button]),
                                 widgets.HBox([self.fit_button, self.clear_marks_button]),
                                 widgets.HTML("<b>Selection</b>"), self.selection_info],
                                layout=widgets.Layout(width="340px"))
        place = widgets.VBox([widgets.HTML("<b>Place an abstract</b>"), self.place_text, self.place_button],
                             layout=widgets.Layout(width=f"{self.width + READOUT_WIDTH}px"))
        queries = widgets.VBox([widgets.HTML("<b>Search by aspect</b>")]
                               + [widgets.HBox([self.query_texts[a], self.query_weights[a]]) for a in self.aspects]
                               + [self.search_button, self.results],
                               layout=widgets.Layout(width=f"{self.width + READOUT_WIDTH}px"))
        return widgets.VBox([widgets.HBox([self.map_output, self.detail]),
                             widgets.HBox([controls, self.legend]), place, queries])

    def display(self):
        """The ipywidgets layout of the pane (what a notebook cell shows)."""
        return self.layout

    def _ipython_display_(self):
        from IPython.display import display

        display(self.layout)

    # -- helpers

    def _show(self, html: str) -> None:
        self.detail.value = html

    def _fail(self, action: str, exc: BaseException) -> None:
        log.exception("map pane: %s failed", action)
        self._show(error_html(action, exc))

    def _queries(self) -> dict[str, tuple[str, float]]:
        return {a: (self.query_texts[a].value, float(self.query_weights[a].value)) for a in self.aspects}

    def nearest(self, x: float, y: float) -> int | None:
        """Index of the point nearest (x, y) if it lies within the hit radius, else None.

        Decided here rather than from the TapTool's selection: the Tap event and the
        selection change reach the kernel as separate messages in no guaranteed order.
        """
        if len(self.coords) == 0:
            return None
        d = np.hypot(self.coords[:, 0] - x, self.coords[:, 1] - y)
        i = int(np.argmin(d))
        # Column by column: np.ptp(axis=0) of (n, 2) took 70 ms at a million papers, a column 2 ms.
        extent = max(float(np.ptp(self.coords[:, 0])), float(np.ptp(self.coords[:, 1]))) or 1.0
        return i if d[i] <= self.hit_fraction * extent else None

    # -- actions (the widgets call these; so can tests)

    def _on_slider(self, change) -> None:
        if not self._syncing:
            self.set_weights({a: s.value for a, s in self.sliders.items()})

    def set_weights(self, weights: dict) -> np.ndarray | None:
        """Re-layout the map for aspect weights (missing aspects keep their slider value).

        Weights are normalised to sum 1 before `on_weights` sees them; all zero shows a
        message instead. Returns the new coordinates, or None when nothing changed.
        """
        try:
            unknown = set(weights) - set(self.aspects)
            if unknown:
                raise ValueError(f"unknown aspects: {sorted(unknown)}")
            merged = {a: float(weights.get(a, self.sliders[a].value)) for a in self.aspects}
            if any(w < 0 or w != w for w in merged.values()):
                raise ValueError("aspect weights must be non-negative")
            self._set_sliders(merged)
            total = sum(merged.values())
            if total <= 0:
                self._show(message_html("All aspect weights are zero: raise at least one to lay out the map."))
                return None
            if self.on_weights is None:
                self._show(message_html("Re-weighting is not available for this map."))
                return None
            normalised = {a: w / total for a, w in merged.items()}
            self._show(message_html("Computing the new layout…"))
            self._show_legend(pending=normalised)
            # A first frame, where on_weights offers one (large maps), is drawn while the layout settles.
            takes_frames = "on_frame" in inspect.signature(self.on_weights).parameters
            coords = as_coords(self.on_weights(normalised, on_frame=self._draw_frame) if takes_frames
                               else self.on_weights(normalised))
            if len(coords) != len(self.coords):
                raise ValueError(f"on_weights returned {len(coords)} points, the map has {len(self.coords)}")
            self._set_sliders(normalised)  # one way to show weights: the sliders, legend and status agree
            self.drawn_weights = normalised
            self._set_coords(coords)
            self._show(message_html("Layout: " + ", ".join(f"{a} {w:.2f}" for a, w in normalised.items())))
            return coords
        except Exception as exc:  # shown to the user, never raised into the kernel
            self._set_sliders(self.drawn_weights)  # the map drawn is still the old one: so are the weights shown
            self._show_legend()
            self._fail("Re-weighting", exc)
            return None

    def relayout(self, compute: Callable) -> np.ndarray:
        """Draw a layout made outside the sliders (a refit of taught aspects): `compute(on_frame)` returns the
        settled coordinates and hands a first frame to on_frame, as `on_weights` does."""
        coords = as_coords(compute(self._draw_frame))
        self._set_coords(coords)
        self.show_verdict()
        return coords

    def show_verdict(self) -> None:
        """Each aspect's verdict under the weights, read afresh (`on_verdict`): a refit or stage 03 run again
        changes it. An expert weighs an aspect by how far it was checked; the teaching widget at the bottom is
        out of view."""
        if self.on_verdict is None:
            return
        try:
            lines = [str(v) for v in self.on_verdict()]
        except Exception as exc:  # the verdict reads files of its own; the map stands without it
            log.exception("map pane: reading the verdict failed")
            lines = [f"no verdict: {exc}"]
        self.verdict.value = verdicts_html(lines)

    def _draw_frame(self, coords) -> None:
        # Positions only: the colours and labels follow with the settled layout.
        coords = as_coords(coords)
        if len(coords) == len(self.coords):
            if self.density:
                self.show_whole(coords)
            else:
                self.source.data.update(_xy(coords))
            if len(coords) >= FRAME_PAUSE_MIN:
                time.sleep(FRAME_PAUSE)  # the browser draws the frame now, not after the settled layout

    def weights(self) -> dict[str, float]:
        """The aspect weights the sliders show (normalised to sum 1 once the map has been laid out with them)."""
        return {a: float(s.value) for a, s in self.sliders.items()}

    def _set_sliders(self, weights: dict[str, float]) -> None:
        self._syncing = True
        try:
            for a, w in weights.items():
                self.sliders[a].value = min(float(w), 1.0)
        finally:
            self._syncing = False

    def _numbers(self, coords) -> np.ndarray | None:
        """Each paper's region number on the map at `coords` when the map is coloured by its regions."""
        return self.regions.numbers(coords, region_count(self.color_by)) if by_cluster(self.color_by) else None

    def _show_legend(self, pending: dict | None = None) -> None:
        """The legend of the map drawn: its weights (and, while a layout is computed, the ones it is for)."""
        self.legend.value = legend_html(self.labels, self.drawn_weights, region_colors(self.labels, self.color_by),
                                        pending)

    def _set_coords(self, coords: np.ndarray) -> None:
        """Draw a new layout: move the points, colour them by its regions and draw its region labels (`on_labels`);
        the markers of the old layout are cleared. Each source changes at most once, and only where it changes:
        the page redraws the map for every change it is sent (about 0.3 s at 10,000 points in headless
        Chromium), also for one that changes nothing. An `on_labels` that fails is raised once the points are
        drawn, without labels."""
        self.coords = coords
        self.all_numbers = self._numbers(coords)
        labels, failed = None, None
        if self.on_labels is not None:
            try:
                labels = self.on_labels()
            except Exception as exc:
                failed = exc
        self.labels = labels
        if self.density:
            self.show_whole(coords)  # names the shown papers' regions with `labels`
        else:
            patch = _xy(coords)
            if by_cluster(self.color_by):
                # Region colours follow the new layout's regions, each matched to the old one it continues.
                colors, groups, _ = point_colors(coords, self.meta, self.color_by, self.all_numbers)
                patch.update(_changed(self.source.data, color=colors,
                                      group=named_groups(groups, labels) if labels else groups))
            self.source.data.update(patch)
        _replace(self.tap_source, {"x": [], "y": []})
        _replace(self.placed_source, {"x": [], "y": [], "text": []})
        _replace(self.label_source, label_source_data(labels))
        self._show_legend()
        if failed is not None:
            raise failed

    def set_labels(self, labels) -> None:
        """Replace the region labels, [(x, y, text[, detail[, number]]), ...] (after a re-layout), and the legend."""
        _replace(self.label_source, label_source_data(labels))
        self.labels = labels
        if by_cluster(self.color_by) and labels:  # the hover names each point's region as the map does
            self.source.data.update(_changed(self.source.data,
                                             group=named_groups(self.source.data["group"], labels)))
        self._show_legend()

    def _on_tap_event(self, event) -> None:
        if event.x is not None and event.y is not None:
            self.tap(event.x, event.y)

    def tap(self, x: float, y: float) -> str | None:
        """Mark (x, y) and show `on_tap`'s description of it (tapped point index or None).

        With `on_compare`, a tap on a paper that makes a tapped pair also shows why the two
        are close, and a tap on an empty spot right after a paper compares that paper with
        the spot. Returns the HTML shown, or None when there was nothing to show or a callback failed.
        """
        self.tap_source.data = {"x": [float(x)], "y": [float(y)]}
        index = self.nearest(x, y)
        previous, self.last_tap = self.last_tap, index
        if index is not None and index not in self.tapped[-1:]:
            self.tapped = (self.tapped + [index])[-2:]
            self.mark_info.value = self._marks_html()
        pair = None
        if self.on_compare is not None:
            if index is not None and len(self.tapped) == 2 and self.tapped[-1] == index:
                pair = (self.tapped[0], index)
            elif index is None and previous is not None:
                pair = (previous, (float(x), float(y)))
        if self.on_tap is None and pair is None:
            return None
        self._show(message_html("Describing this spot…"))
        calls = []
        if self.on_tap is not None:
            calls.append(("Describing the spot", lambda: self.on_tap(float(x), float(y), index)))
        if pair is not None:
            calls.append(("Comparing the papers", lambda: self.on_compare(*pair)))
        parts, ok = [], True
        for action, call in calls:  # each fails on its own: a failed comparison leaves the description shown
            try:
                parts.append(str(call()))
            except Exception as exc:
                log.exception("map pane: %s failed", action)
                parts.append(error_html(action, exc))
                ok = False
        html = "<hr>".join(parts)
        self._show(html)
        return html if ok else None

    def place(self, text: str) -> tuple[float, float] | None:
        """Place an abstract with `on_place`, mark it on the map and show its description."""
        if not str(text or "").strip():
            self._show(message_html("Paste an abstract first."))
            return None
        if self.on_place is None:
            return None
        try:
            self._show(message_html("Placing the abstract…"))
            x, y, html = self.on_place(str(text))
            x, y = float(x), float(y)
            if not (np.isfinite(x) and np.isfinite(y)):
                raise ValueError("on_place returned a non-finite position")
            self.placed_source.stream({"x": [x], "y": [y], "text": [as_text(text, 80)]})
            self._show(str(html))
            return x, y
        except Exception as exc:
            self._fail("Placing the abstract", exc)
            return None

    def search(self, queries: dict[str, tuple[str, float]]) -> pd.DataFrame | None:
        """Run `on_search` with the non-blank queries and show its results as an escaped table."""
        active = {a: (str(q).strip(), float(w)) for a, (q, w) in queries.items() if str(q or "").strip()}
        if not active:
            self._show(message_html("Type a query for at least one aspect."))
            return None
        if self.on_search is None:
            return None
        try:
            self._show(message_html("Searching…"))
            frame = self.on_search(active)
            if not isinstance(frame, pd.DataFrame):
                raise TypeError(f"on_search returned {type(frame).__name__}, not a DataFrame")
            shown = html_table(frame.head(MAX_RESULT_ROWS)) if len(frame) else "<p><em>No results.</em></p>"
            more = len(frame) - MAX_RESULT_ROWS
            self.results.value = shown + (f"<p><small>{more} more rows not shown</small></p>" if more > 0 else "")
            self._show(message_html(f"{len(frame)} results."))
            return frame
        except Exception as exc:
            self.results.value = ""
            self._fail("Search", exc)
            return None


def _changed(data, **columns) -> dict:
    """The `columns` whose values differ from `data`'s (a source's data): those worth sending to the page."""
    return {name: values for name, values in columns.items() if list(data.get(name, ())) != list(values)}


def _replace(source, data: dict) -> None:
    """Set a small source's data unless it already holds exactly that (Bokeh would send it all the same)."""
    if set(source.data) != set(data) or _changed(source.data, **data):
        source.data = data


def _xy(coords: np.ndarray) -> dict:
    # Arrays travel to BokehJS as binary buffers: 160 kB at 10,000 points against about 400 kB of JSON text.
    return {"x": np.ascontiguousarray(coords[:, 0], dtype=np.float64),
            "y": np.ascontiguousarray(coords[:, 1], dtype=np.float64)}
