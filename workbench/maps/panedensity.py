"""The pane's map past a few hundred thousand papers: drawn as density, re-aggregated on zoom, as points once few.

A browser holds one glyph per paper comfortably up to about 200,000 papers. Above `PaneView.density_above`
papers, `MapPane` sends none of them: the kernel rasterises the view into an RGBA image (`density.counts`,
Datashader; a map coloured by its regions in their colours, `shaded_regions`, else `density.shaded`) that
Bokeh's `image_rgba` glyph shows, under the region labels and the markers. When the
user zooms or pans, the browser waits until the ranges rest for DEBOUNCE_MS (a drag changes them dozens of
times) and then sends the view to the kernel through a small data source that jupyter_bokeh carries back,
the same round trip as the lasso's selection; the kernel draws the new view. Once a view holds at most
`PaneView.points_in_view` papers, those papers are drawn as points instead, with the hover, the tap and the
lasso of a small map.

A mixin, like `panemarks.PaneMarks`: the pane provides `figure`, `source`, `coords`, `meta`, `color_by`,
`labels`, `width`, `_numbers`, `_on_selection` and `_fail`. Below the threshold nothing here changes the pane:
every point is in `source`, as before.
"""

from __future__ import annotations

import numpy as np

from . import density
from .mapview import ROW_DISPLAY, by_cluster, map_frame, named_groups, region_color

DENSITY_ABOVE = 200_000  # papers above which the pane draws density (PaneView.density_above)
# Papers a view may hold to be drawn as points. Half the page's `density.POINTS_IN_VIEW`: in JupyterLab at a
# million papers (headless Chromium, 2 cores under load 4) a zoom into 15,000 papers took 1.2 to 1.9 s to
# paint, half of it in the browser; into 8,800 papers 0.8 s at a quiet moment, inside the 1 s a zoom may take.
POINTS_IN_VIEW = 10_000
DEBOUNCE_MS = 150  # the ranges rest this long before the browser asks the kernel for the view
MARGIN = 0.02  # the whole map's view reaches this share of its extent past the outermost papers
TEMPLATE_ROWS = 2_000  # papers whose fields decide the hover's template on a density map
# jupyter_bokeh's page sends each change the kernel made back to it, after applying it, and the kernel calls the
# selection's callbacks for it: the rows the kernel selected itself, the last SENT_ROWS, are known as its own.
SENT_ROWS = 8
MIN_ALPHA = 60  # the opacity of a pixel of the fewest papers: one paper stays visible beside a crowd
# In the browser: every change of the ranges restarts a timer; when it runs out, the view is written into
# the request source, whose change jupyter_bokeh sends to the kernel.
VIEW_JS = """
clearTimeout(request._wb_timer);
request._wb_timer = setTimeout(() => {
  request.data = {x0: [xr.start], x1: [xr.end], y0: [yr.start], y1: [yr.end]};
}, ms);
"""


def full_view(coords: np.ndarray, width: int, height: int) -> density.View:
    """The view of every point of `coords` and a MARGIN around them, widened on one axis so that a unit spans as
    many pixels across as up (a map's distances mean the same both ways, as `match_aspect` keeps them on a small
    map)."""
    # Column by column: min(axis=0) of an (n, 2) array took 70 ms at a million rows, a column's min 1 ms.
    x, y = coords[:, 0], coords[:, 1]
    x0, x1, y0, y1 = float(x.min()), float(x.max()), float(y.min()), float(y.max())
    per_pixel = max((x1 - x0) / width, (y1 - y0) / height, 1e-9) * (1 + 2 * MARGIN)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return density.View((cx - per_pixel * width / 2, cx + per_pixel * width / 2),
                        (cy - per_pixel * height / 2, cy + per_pixel * height / 2), width, height)


def shaded_regions(groups: list[np.ndarray], colors: list[str], view: density.View) -> np.ndarray:
    """The view as an RGBA image packed into uint32 (as `density.shaded`), each pixel the mix of its papers' region
    colours (`groups`: the coordinates of each region's papers, `colors` theirs), its opacity the pixel's count
    equalised over the view's pixels (as eq_hist), so a region on the map has the colour of its label."""
    counts = np.stack([density.counts(g, view) for g in groups]).astype(np.float64)  # (regions, height, width)
    total = counts.sum(axis=0)
    rgb = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in colors], dtype=np.float64)
    mix = np.tensordot(counts, rgb, axes=(0, 0)) / np.maximum(total, 1.0)[..., None]
    filled = total > 0
    alpha = np.zeros(total.shape)
    if filled.any():
        ranked = np.sort(total[filled])
        alpha[filled] = MIN_ALPHA + (255 - MIN_ALPHA) * np.searchsorted(ranked, total[filled], "right") / len(ranked)
    channels = [mix[..., 0], mix[..., 1], mix[..., 2], alpha]
    packed = np.zeros(total.shape, dtype=np.uint32)
    for shift, channel in zip((0, 8, 16, 24), channels):  # little-endian RGBA, as Bokeh's image_rgba reads it
        packed |= np.clip(np.rint(channel), 0, 255).astype(np.uint32) << np.uint32(shift)
    return packed


def conform(data: dict, columns: list[str]) -> dict:
    """Map data (`map_frame`) of some papers with exactly `columns`, those of the hover's template: a switch
    (`shown_<field>`) the template reads but these papers need not (all or none have the field) is filled in."""
    n = len(data["x"])
    out = {}
    for column in columns:
        if column in data:
            out[column] = data[column]
        elif column.startswith("shown_"):
            field = column[len("shown_"):]
            shown = "inline" if field == "year" else ROW_DISPLAY
            out[column] = [shown if v else "none" for v in data.get(field, [""] * n)]
        else:
            out[column] = [""] * n
    return out


class PaneDensity:
    """The density half of `MapPane` (module docstring). `density` says whether the map is drawn as density;
    `shown` holds the indices of the papers drawn as points (every paper on a small map)."""

    density = False
    shown: np.ndarray | None = None

    def _start_density(self, view) -> dict:
        """Decide how the map is drawn; the map data to build the figure from (every paper, or on a density map
        a sample that decides the hover's fields)."""
        self.density = len(self.coords) > int(view.density_above)
        self.points_in_view, self.map_height = int(view.points_in_view), int(view.height)
        self.all_numbers = self._numbers(self.coords)
        if not self.density:
            self.shown = np.arange(len(self.coords))
            return map_frame(self.coords, self.meta, view.color_by, self.all_numbers)
        sample = np.linspace(0, len(self.coords) - 1, min(TEMPLATE_ROWS, len(self.coords))).astype(int)
        return self._points_data(sample, self.coords)

    def _build_density(self, selected) -> None:
        """On a density map: fixed ranges, the image under everything, the view request, the first view drawn."""
        from bokeh.models import ColumnDataSource, CustomJS, Range1d

        self.selected_papers = [int(i) for i in selected]
        # The pane never reads the plain-text "hover" one-liner (it repeats what the tooltip shows).
        self.columns = [c for c in self.source.data if c != "hover"]
        self.quiet_selection, self.sent_rows = False, []
        view = full_view(self.coords, self.width, self.map_height)
        self.figure.x_range, self.figure.y_range = Range1d(*view.x_range), Range1d(*view.y_range)
        self.image_source = ColumnDataSource({"image": [], "x": [], "y": [], "dw": [], "dh": []}, name="density")
        self.image_glyph = self.figure.image_rgba(image="image", x="x", y="y", dw="dw", dh="dh",
                                                  source=self.image_source, level="image", name="density_glyph")
        self.view_request = ColumnDataSource({"x0": [], "x1": [], "y0": [], "y1": []}, name="view_request")
        code = CustomJS(args=dict(request=self.view_request, xr=self.figure.x_range, yr=self.figure.y_range,
                                  ms=DEBOUNCE_MS), code=VIEW_JS)
        for axis in (self.figure.x_range, self.figure.y_range):
            axis.js_on_change("start", code)
            axis.js_on_change("end", code)
        self.view_request.on_change("data", lambda attr, old, new: self.request_view(new))
        self.drawn_view, self.by_region = None, None
        self.redraw(view)

    def _points_data(self, rows: np.ndarray, coords: np.ndarray) -> dict:
        """Map data of papers `rows` at `coords`, coloured and named as on the whole map."""
        numbers = None if self.all_numbers is None else self.all_numbers[rows]
        data = map_frame(coords[rows], self.meta.iloc[rows], self.color_by, numbers)
        if by_cluster(self.color_by) and self.labels:  # the hover names each point's region as the map does
            data["group"] = named_groups(data["group"], self.labels)
        if not hasattr(self, "columns"):
            return data
        data = conform(data, self.columns)
        for column in ("x", "y", "alpha", "size"):  # numbers travel to BokehJS as binary arrays, not JSON text
            data[column] = np.asarray(data[column], dtype=np.float64)
        return data

    def request_view(self, data: dict) -> density.View | None:
        """Draw the view the browser asks for ({x0, x1, y0, y1: [value]}, the request source's data); None when
        it is the view drawn already (the kernel's own change of the ranges comes back as a request too)."""
        try:
            view = density.View((float(data["x0"][0]), float(data["x1"][0])),
                                (float(data["y0"][0]), float(data["y1"][0])), self.width, self.map_height)
        except (KeyError, IndexError, TypeError, ValueError):  # an empty or torn request: nothing to draw
            return None
        if view == self.drawn_view or not (view.x_range[1] > view.x_range[0] and view.y_range[1] > view.y_range[0]):
            return None
        try:
            self.redraw(view)
            return view
        except Exception as exc:  # shown to the user, never raised into the kernel
            self._fail("Drawing the map", exc)
            return None

    def redraw(self, view: density.View, coords: np.ndarray | None = None) -> None:
        """Draw `view` of the map at `coords` (default: the map's): its papers as points where it holds at most
        `points_in_view` of them, else as a density image."""
        coords = self.coords if coords is None else coords
        inside = view.holds(coords)
        if int(np.count_nonzero(inside)) <= self.points_in_view:
            self.shown = np.flatnonzero(inside)
            self.image_glyph.visible = False
        else:
            self.shown = np.zeros(0, dtype=int)
            (x0, x1), (y0, y1) = view.x_range, view.y_range
            self.image_source.data = {"image": [self._image(coords, view)], "x": [x0], "y": [y0],
                                      "dw": [x1 - x0], "dh": [y1 - y0]}
            self.image_glyph.visible = True
        self._set_rows([])  # the rows change under the selection; the selected papers do not
        self.source.data = self._points_data(self.shown, coords)
        self._set_rows(self._selected_rows())
        self.drawn_view = view

    def _image(self, coords: np.ndarray, view: density.View) -> np.ndarray:
        """The view's image: coloured by region on a map coloured by its regions, else one colour ramp."""
        if self.all_numbers is None:
            return density.shaded(coords, view)
        if self.by_region is None or self.by_region[0] is not self.all_numbers:  # once per layout's regions
            order = np.argsort(self.all_numbers, kind="stable")
            numbers, cuts = np.unique(self.all_numbers[order], return_index=True)
            self.by_region = (self.all_numbers, order, cuts[1:], [region_color(m) for m in numbers], None, None)
        numbers, order, cuts, colors, grouped, groups = self.by_region
        if grouped is not coords:  # once per layout and per frame: one gather, each region a view of it
            groups = np.split(coords[order].astype(np.float32), cuts)
            self.by_region = (numbers, order, cuts, colors, coords, groups)
        return shaded_regions(groups, colors, view)

    def show_whole(self, coords: np.ndarray) -> None:
        """Show every paper of the map at `coords` (a new layout, or its first frame): the ranges and the view."""
        view = full_view(coords, self.width, self.map_height)
        for axis, (start, end) in ((self.figure.x_range, view.x_range), (self.figure.y_range, view.y_range)):
            axis.update(start=start, end=end, reset_start=start, reset_end=end)
        self.redraw(view, coords)

    def _selected_rows(self) -> list[int]:
        """The rows of `source` that hold selected papers."""
        if not self.selected_papers or self.shown is None or not len(self.shown):
            return []
        return np.flatnonzero(np.isin(self.shown, self.selected_papers)).tolist()

    def _set_rows(self, rows: list[int]) -> None:
        """Select `rows` of `source` for the papers they hold, without taking it for the user's selection."""
        if [int(r) for r in self.source.selected.indices] == rows:
            return
        self.sent_rows = (self.sent_rows + [rows])[-SENT_ROWS:]
        self.quiet_selection = True
        try:
            self.source.selected.indices = rows
        finally:
            self.quiet_selection = False

    def selection_changed(self, rows) -> None:
        """The source's selection changed (the lasso, the box, `select`): on a density map, the papers of
        those rows become the selection (as a lasso on a small map replaces it)."""
        if not self.density:
            self._on_selection(rows)
            return
        rows = [int(r) for r in rows]
        if self.quiet_selection:
            return
        if rows in self.sent_rows:  # the page sends the kernel's own change back once it has applied it
            self.sent_rows.remove(rows)
            return
        self.selected_papers = [int(self.shown[r]) for r in rows if 0 <= r < len(self.shown)]
        self._on_selection(self.selected_papers)

    def select_papers(self, indices) -> None:
        """Select papers by index: on a density map those in view are highlighted, all are kept."""
        indices = [int(i) for i in indices]
        if not self.density:
            self.source.selected.indices = indices
            return
        self.selected_papers = indices
        self._set_rows(self._selected_rows())
        self._on_selection(indices)

    def selected_count(self) -> int:
        """How many papers are selected."""
        return len(self.selected_papers) if self.density else len(self.source.selected.indices)
