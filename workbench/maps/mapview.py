"""The map's figure (paper section 6): a Bokeh scatter of a 2-D layout of the corpus, and its standalone page.

Pure view layer: it takes coordinates and metadata as plain arrays and frames, so it can be
driven and tested without a model or a browser.

Two entry points here, and the pane beside them:

* `map_figure` - a static Bokeh figure with hover, tap and region labels;
* `page.export_html` - the standalone HTML page built from the same figure;
* `pane.MapPane` - the JupyterLab pane, built from this module's data (`map_frame`) and
  figure (`build_figure`).

Paper text never goes into HTML by string formatting: it travels in the data source (JSON)
and Bokeh escapes `@field` tooltips; the few HTML snippets built here use `display.esc`.
"""

from __future__ import annotations

import textwrap
from typing import Mapping

import numpy as np
import pandas as pd

from ..core.display import esc

DEFAULT_CLUSTERS = 8
MISSING_COLOR = "#9e9e9e"
BASE_ALPHA = 0.8
DIM_ALPHA = 0.08  # points not matching a title search: faint but still there for context
POINT_SIZE = 8
HIT_SIZE = 12
TOOLTIP_CHARS = 110  # per summary: the tooltip (TOOLTIP_WIDTH wide) stays inside a 1,280 x 800 window
TOOLTIP_WIDTH = 300
# The pane's map and its readout side by side fit JupyterLab's notebook at 1,280 x 800 with the file
# browser open (about 880 px for an output): 480 + 340 px and the gaps, no sideways scroll.
MAP_WIDTH, MAP_HEIGHT, READOUT_WIDTH = 480, 420, 340
QUESTIONS = "questions"  # optional meta column: a paper's likeliest yes-questions (Explorer.hover_questions)


# --------------------------------------------------------------------------- data


def as_coords(coords) -> np.ndarray:
    """Coordinates as a finite float array of shape (n, 2); anything else is a ValueError."""
    arr = np.asarray(coords, dtype=float)
    if arr.size == 0:
        return arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"coordinates must have shape (n, 2), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("coordinates contain NaN or infinite values")
    return arr


def as_text(value, limit: int | None = None) -> str:
    """Plain (unescaped) text for the data source: None/NaN become "", whole floats drop ".0".

    Not escaped on purpose: Bokeh escapes `@field` values when it renders a tooltip, and
    escaping here as well would show `&lt;` to the reader.
    """
    if value is None or (np.ndim(value) == 0 and pd.isna(value)):  # None, NaN, NaT, pd.NA
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    text = " ".join(str(value).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def summary_aspects(meta: pd.DataFrame) -> list[str]:
    """The aspects that have a `summary_<aspect>` column in `meta`, in column order."""
    return [c[len("summary_"):] for c in meta.columns if c.startswith("summary_") and len(c) > len("summary_")]


def kmeans_regions(coords: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """KMeans cluster ids (0..k-1) of the 2-D points; fixed seed so colours are reproducible."""
    from sklearn.cluster import KMeans

    k = min(int(k), len(np.unique(coords, axis=0)))  # KMeans warns when asked for more clusters than points
    if k <= 1:
        return np.zeros(len(coords), dtype=int)
    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(coords).astype(int)


# How a map is cut into regions (its colours, the region labels, stage 07's regions):
# name -> fn(coords [n, 2], k, seed) -> region id per point. `register_regions` adds one.
REGION_METHODS = {"kmeans": kmeans_regions}
REGION_DEFAULT = {"method": "kmeans"}


def register_regions(name: str, fn, default: bool = False) -> None:
    """Add a way to cut a map into regions, `fn(coords, k, seed) -> ids`; default=True makes every map use it."""
    REGION_METHODS[name] = fn
    if default:
        REGION_DEFAULT["method"] = name


def cluster_labels(coords, k: int = DEFAULT_CLUSTERS, seed: int = 0, method: str | None = None) -> np.ndarray:
    """Region ids (0..k-1) of the 2-D points, by `method` (default: KMeans, or the one registered as default)."""
    method = method or REGION_DEFAULT["method"]
    if method not in REGION_METHODS:
        raise ValueError(f"unknown region method {method!r}; known: {sorted(REGION_METHODS)}")
    arr = as_coords(coords)
    ids = np.asarray(REGION_METHODS[method](arr, k, seed), dtype=int)
    if ids.shape != (len(arr),):
        raise ValueError(f"region method {method!r} gave {ids.shape} ids for {len(arr)} points")
    return np.unique(ids, return_inverse=True)[1].reshape(-1)  # ids 0..r-1, whatever the method numbered


def _palette(n: int) -> list[str]:
    """n distinct colours: Category10 up to 10 groups, Category20 (cycled) beyond."""
    from bokeh.palettes import Category10_10, Category20_20

    base = list(Category10_10 if n <= 10 else Category20_20)
    return [base[i % len(base)] for i in range(n)]


def by_cluster(color_by) -> bool:
    """Whether `color_by` asks for map clusters (None or an int k) rather than a metadata column."""
    return color_by is None or (isinstance(color_by, (int, np.integer)) and not isinstance(color_by, bool))


def group_title(color_by) -> str:
    """What the colour means, for the tooltip."""
    return "region" if by_cluster(color_by) else str(color_by)


def point_colors(coords: np.ndarray, meta: pd.DataFrame, color_by) -> tuple[list[str], list[str], str]:
    """(colour per point, group name per point, name of the grouping) for `color_by`.

    `color_by` is a metadata column (categorical colours), an int k (k map clusters), or
    None (the default number of map clusters).
    """
    if by_cluster(color_by):
        ids = cluster_labels(coords, DEFAULT_CLUSTERS if color_by is None else int(color_by))
        colors = _palette(int(ids.max()) + 1 if len(ids) else 0)
        # Numbered from 1, as the legend and the map's labels number the regions.
        return [colors[i] for i in ids], [f"region {i + 1}" for i in ids], "region"
    if color_by not in meta.columns:
        raise ValueError(f"color_by={color_by!r} is not a metadata column")
    groups = [as_text(v) for v in meta[color_by]]
    names = sorted({g for g in groups if g})
    lookup = dict(zip(names, _palette(len(names))))
    return [lookup.get(g, MISSING_COLOR) for g in groups], groups, str(color_by)


def map_frame(coords, meta: pd.DataFrame, color_by=None) -> dict[str, list]:
    """The ColumnDataSource data of the map: one row per paper.

    Columns: x, y, title, year, hover (a plain-text one-liner: title, year and the aspect
    summaries), summary_<aspect> (shortened, for the tooltip), color, group (what the colour
    means), alpha and size (changed by the title search), and `questions` only when `meta`
    has that column (question axes, stage 07). Text is left unescaped: Bokeh escapes it when
    it renders the tooltip.
    """
    arr = as_coords(coords)
    if len(arr) != len(meta):
        raise ValueError(f"{len(arr)} coordinates but {len(meta)} metadata rows")
    meta = meta.reset_index(drop=True)
    n = len(arr)
    titles = [as_text(v) for v in meta["title"]] if "title" in meta.columns else [""] * n
    years = [as_text(v) for v in meta["year"]] if "year" in meta.columns else [""] * n
    aspects = summary_aspects(meta)
    summaries = {a: [as_text(v, TOOLTIP_CHARS) for v in meta[f"summary_{a}"]] for a in aspects}
    # Up to 2 questions per aspect and 3 aspects: longer than a summary, still cut.
    questions = [as_text(v, 2 * TOOLTIP_CHARS) for v in meta[QUESTIONS]] if QUESTIONS in meta.columns else None
    hover = []
    for i in range(n):
        parts = [titles[i] + (f" ({years[i]})" if years[i] else "")]
        parts += [f"{a}: {summaries[a][i]}" for a in aspects if summaries[a][i]]
        parts += [f"yes to: {questions[i]}"] if questions and questions[i] else []
        hover.append(" | ".join(p for p in parts if p))
    colors, groups, _ = point_colors(arr, meta, color_by)
    data = {
        "x": arr[:, 0].tolist(), "y": arr[:, 1].tolist(),
        "title": titles, "year": years, "hover": hover,
        "color": colors, "group": groups,
        "alpha": [BASE_ALPHA] * n, "size": [POINT_SIZE] * n,
    }
    data.update({f"summary_{a}": summaries[a] for a in aspects})
    if questions is not None:
        data[QUESTIONS] = questions
    return data


def label_source_data(labels) -> dict[str, list]:
    """Region labels [(x, y, text[, detail]), ...] as LabelSet source data (drawn on the canvas, not as HTML).

    The canvas shows only the region's number ("number"), so labels never cover the points;
    the text and its detail go into the legend beside the map (`legend_html`).
    """
    labels = list(labels or [])
    return {
        "x": [float(label[0]) for label in labels],
        "y": [float(label[1]) for label in labels],
        "text": [as_text(label[2]) for label in labels],
        "detail": [as_text(label[3] if len(label) > 3 else label[2]) for label in labels],
        "number": [str(i + 1) for i in range(len(labels))],
    }


def caption_html(weights: dict | None, color_by=None, n: int | None = None) -> str:
    """One line under a map's title saying what it shows: a dot, a colour, a distance, and the weights (escaped)."""
    colour = ("regions of this map (clusters of the layout, numbered as in the legend)" if by_cluster(color_by)
              else f"the papers' {esc(color_by)}")
    weighted = (", ".join(f"{esc(a)} {float(w):.2f}" for a, w in weights.items() if float(w) > 0)
                if weights else "")
    return ("<p style='margin:4px 0;color:#333'>Each dot is a paper" + (f" ({int(n)} in all)" if n else "")
            + f"; colours are {colour}. Papers close together are similar in the weighted aspects"
            + (f" ({weighted})" if weighted else "") + "; between distant groups, distance means little "
            "(t-SNE keeps neighbours, not far distances).</p>")


def legend_html(labels, weights: dict | None = None, colors: list[str] | None = None) -> str:
    """What the map shows, as escaped HTML: the weights that made it and each region's colour and label.

    labels: [(x, y, text[, detail]), ...] in region order; colors[i]: region i's colour
    (the map's cluster colours when it is coloured by its regions). The regions are described in
    the most heavily weighted aspect (`Explorer.region_labels`' default), which the header names.
    """
    parts = []
    described = max(weights, key=weights.get) if weights else None
    if weights:
        parts.append("<p style='margin:2px 0'><b>Aspect weights of this map:</b> "
                     + ", ".join(f"{esc(a)} {float(w):.2f}" for a, w in weights.items()) + "</p>")
    data = label_source_data(labels)
    if data["number"]:
        aspect = f", described in their <i>{esc(described)}</i> aspect" if described else ""
        parts.append(f"<p style='margin:2px 0'><b>Regions</b>{aspect} (colours: clusters of the map; numbers: "
                     "where each region's description sits):</p><ol style='margin:2px 0;padding-left:1.6em'>")
        for i, (short, detail) in enumerate(zip(data["text"], data["detail"])):
            swatch = ""
            if colors and i < len(colors):
                swatch = (f"<span style='display:inline-block;width:0.8em;height:0.8em;margin-right:4px;"
                          f"background:{esc(colors[i])}'></span>")
            parts.append(f"<li>{swatch}<b>{esc(short)}</b><br><small>{esc(detail)}</small></li>")
        parts.append("</ol>")
    return "".join(parts)


def region_colors(labels, color_by) -> list[str] | None:
    """Region i's colour when the map is coloured by as many clusters as it has labels, else None."""
    n = len(labels or [])
    if n and by_cluster(color_by) and (color_by if color_by is not None else DEFAULT_CLUSTERS) == n:
        return _palette(n)
    return None


# --------------------------------------------------------------------------- figure


def tooltip_template(data: dict, group_name: str) -> str:
    """The hover's HTML template: title, year, the colour's group, each aspect's summary, wrapped at TOOLTIP_WIDTH.

    A fixed width that wraps keeps the tooltip inside the window (Bokeh's default rows never wrap).
    Plain `@field`s only: Bokeh escapes their values; `{safe}` would let a title inject markup.
    """
    row = "<div style='-webkit-line-clamp:4;display:-webkit-box;-webkit-box-orient:vertical;overflow:hidden'>" \
          "<span style='color:#666'>{}:</span> {}</div>"
    clamp = "display:-webkit-box;-webkit-box-orient:vertical;overflow:hidden;-webkit-line-clamp:"
    rows = [f"<div style='font-weight:bold;{clamp}3'>@title</div>", row.format("year", "@year"),
            row.format(esc(group_name), "@group")]
    rows += [row.format(esc(c[len("summary_"):]), f"@{{{c}}}") for c in data if c.startswith("summary_")]
    if QUESTIONS in data:
        rows.append(row.format("yes to", f"@{QUESTIONS}"))
    return (f"<div style='width:{TOOLTIP_WIDTH}px;white-space:normal;overflow-wrap:anywhere;font-size:12px;"
            f"line-height:1.25'>" + "".join(rows) + "</div>")


def build_figure(data: dict, labels, group_name: str, title: str, width: int, height: int):
    """(figure, points source, label source) for map data from `map_frame`."""
    from bokeh.models import ColumnDataSource, HoverTool, LabelSet, TapTool
    from bokeh.plotting import figure

    source = ColumnDataSource(data, name="points")
    label_source = ColumnDataSource(label_source_data(labels), name="labels")
    # WebGL draws the points (canvas still draws labels and tooltips): at 10,000 points a redraw
    # after a pan or a weight change is what the browser spends its time on. BokehJS falls back to
    # canvas where WebGL is missing (it says so in the console).
    fig = figure(title=title, width=width, height=height, tools="pan,wheel_zoom,box_zoom,reset,save",
                 active_scroll="wheel_zoom", match_aspect=True, output_backend="webgl")
    points = fig.scatter("x", "y", source=source, size="size", fill_color="color", line_color="color",
                         fill_alpha="alpha", line_alpha="alpha", name="points_glyph")
    fig.add_tools(HoverTool(renderers=[points], tooltips=tooltip_template(data, group_name)),
                  TapTool(renderers=[points]))
    fig.add_layout(LabelSet(x="x", y="y", text="number", source=label_source, text_font_size="10pt",
                            text_font_style="bold", text_align="center", text_baseline="middle",
                            background_fill_color="white", background_fill_alpha=0.7,
                            name="labels_glyph"))
    fig.xaxis.visible = fig.yaxis.visible = False  # t-SNE axes carry no meaning
    fig.grid.visible = False
    return fig, source, label_source


def map_figure(coords, meta: pd.DataFrame, color_by=None, labels=None, title: str = "",
               width: int = 800, height: int = 600):
    """A Bokeh scatter of the map with hover (escaped), tap selection and optional region labels.

    `labels` is a list of (x, y, text) drawn as a LabelSet with a light background. The
    data sources are named "points" and "labels" (`fig.select_one({"name": "points"})`).
    """
    data = map_frame(coords, meta, color_by)
    fig, _, _ = build_figure(data, labels, group_title(color_by), title, width, height)
    return fig


# --------------------------------------------------------------------------- static picture
def plot_map(coords, labels=None, groups=None, ax=None, title: str = "", marks: Mapping[str, tuple] | None = None,
             s: float = 12):
    """A static (matplotlib) picture of a map for reports: points, region labels, marked spots.

    groups: a colour per point (e.g. cluster ids); marks: {name: (x, y)} drawn as stars
    with their name (a placed abstract, an inverted spot).
    """
    import matplotlib.pyplot as plt

    coords = np.asarray(coords)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 5))
    groups = cluster_labels(coords, 8) if groups is None else groups
    ax.scatter(coords[:, 0], coords[:, 1], c=pd.factorize(pd.Series(groups))[0], cmap="tab10", s=s, alpha=0.75,
               linewidths=0)
    # Region labels: a number on the map (the points stay visible), the text in a list below it.
    labels = list(labels or [])
    for i, label in enumerate(labels):
        ax.annotate(str(i + 1), label[:2], fontsize=8, weight="bold", ha="center", va="center",
                    bbox=dict(boxstyle="circle,pad=0.2", fc="white", ec="0.3", alpha=0.85))
    if labels:
        listing = "\n".join(textwrap.shorten(f"{i + 1}. {label[2]}", 90) for i, label in enumerate(labels))
        ax.text(0.0, -0.02, listing, transform=ax.transAxes, va="top", ha="left", fontsize=7)
    for name, (x, y) in (marks or {}).items():
        ax.scatter([x], [y], marker="*", s=260, c="gold", edgecolors="black", zorder=5)
        ax.annotate(name, (x, y), xytext=(6, 6), textcoords="offset points", fontsize=8, weight="bold")
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax
