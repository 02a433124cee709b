"""The map's figure (paper section 6): a Bokeh scatter of a 2-D layout of the corpus, and its standalone page.

Pure view layer: it takes coordinates and metadata as plain arrays and frames, so it can be
driven and tested without a model or a browser.

Two entry points here, and the pane beside them:

* `map_figure` - a static Bokeh figure with hover, tap and region labels;
* `MapRegions` - the map's regions, numbered and coloured so that a region keeps its number and
  colour when the map is laid out again (`match_regions`), and finer sub-regions (`fine_regions`);
* `page.export_html` - the standalone HTML page built from the same figure;
* `pane.MapPane` - the JupyterLab pane, built from this module's data (`map_frame`) and
  figure (`build_figure`).

Paper text never goes into HTML by string formatting: it travels in the data source (JSON)
and Bokeh escapes `@field` tooltips; the few HTML snippets built here use `display.esc`.
"""

from __future__ import annotations

import re
import textwrap
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.display import esc

DEFAULT_CLUSTERS = 8
MISSING_COLOR = "#9e9e9e"
BASE_ALPHA = 0.8
DIM_ALPHA = 0.08  # points not matching a title search: faint but still there for context
POINT_SIZE = 8
HIT_SIZE = 12
# Per summary: two lines of the tooltip. TOOLTIP_WIDTH keeps it inside a 1,280 x 800 window and, with two
# lines per field and no field a paper lacks, off most of the map: a tapped paper's hover left about a sixth of
# a 480 x 420 map covered at 300 px and four lines per field.
TOOLTIP_CHARS = 80
TOOLTIP_WIDTH = 250
# The pane's map and its readout side by side fit JupyterLab's notebook at 1,280 x 800 with the file
# browser open (about 880 px for an output): 480 + 340 px and the gaps, no sideways scroll.
MAP_WIDTH, MAP_HEIGHT, READOUT_WIDTH = 480, 420, 340
ROW_DISPLAY = "-webkit-box"  # a hover row shown: a box whose lines are clamped
# Stacked points listed 8 to 14 papers in one hover, about 600 px over the map and the notebook's toolbar. A hover
# lists HOVER_PAPERS of them (Bokeh's `limit`) and says how many more are under the pointer. Three made the hover
# over the most crowded point of the 2,155-paper map 180 px tall in JupyterLab (an id, its region and three
# one-line summaries each); two keep it under 160 px.
HOVER_PAPERS = 2
MAP_NAME_CHARS = 26  # a region's label on the map itself: short enough not to cover its neighbours
# How many papers under the pointer the hover leaves out, said once, under the last one listed.
MORE_JS = (f"const n = special_vars.indices.length; return n > {HOVER_PAPERS} ? "
           f"'and ' + (n - {HOVER_PAPERS}) + ' more here: zoom in to tell them apart' : '';")
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


KMEANS_FIT_MAX = 100_000


def kmeans_regions(coords: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """KMeans cluster ids (0..k-1) of the 2-D points; fixed seed so colours are reproducible. Past KMEANS_FIT_MAX
    points the centres are fitted on a seeded sample of that many and every point takes its nearest centre."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    fit = coords
    if len(coords) > KMEANS_FIT_MAX:  # a million points took 10 s on 2 cores, with a weight change waiting on it
        fit = coords[np.random.default_rng(seed).choice(len(coords), KMEANS_FIT_MAX, replace=False)]
    k = min(int(k), len(np.unique(fit, axis=0)))  # KMeans warns when asked for more clusters than points
    if k <= 1:
        return np.zeros(len(coords), dtype=int)
    model = KMeans(n_clusters=k, n_init=4, random_state=seed)
    # One thread: beside two busy processes on 2 cores, 10,000 points took 0.80 s with sklearn's OpenMP threads
    # and 0.03 s with one (100,000: 1.1 s and 0.14 s), with a weight change of the pane waiting on it.
    with threadpool_limits(1):
        return (model.fit_predict(fit) if fit is coords else model.fit(fit).predict(coords)).astype(int)


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


MATCH_MIN = 0.2  # Jaccard overlap below which a new region continues no old one: it gets a fresh number
FINE_PER_REGION = 3  # sub-regions per region at the fine level (fewer in a small region)
FINE_MIN_PAPERS = 10  # papers per sub-region at least


def match_regions(previous, current, min_jaccard: float = MATCH_MIN) -> np.ndarray:
    """Per paper, the number of its region in `current` (region ids, any ints), carried over from `previous`
    (region numbers of the same papers on the map before).

    The regions are paired by the overlap of their members. A new region that holds more than half of an
    old one's members, and whose members are more than half from it, continues it. The others are paired by
    the assignment (Hungarian, scipy's `linear_sum_assignment`) that maximises the summed Jaccard index
    |A & B| / |A | B|. A new region paired with an old one at a Jaccard of `min_jaccard` or more keeps its
    number (and so its colour); any other gets the smallest number neither map uses.
    """
    from scipy.optimize import linear_sum_assignment

    old_ids, old_of = np.unique(np.asarray(previous), return_inverse=True)
    new_ids, new_of = np.unique(np.asarray(current), return_inverse=True)
    shared = np.zeros((len(old_ids), len(new_ids)))
    np.add.at(shared, (old_of.ravel(), new_of.ravel()), 1.0)
    old_size, new_size = shared.sum(axis=1, keepdims=True), shared.sum(axis=0, keepdims=True)
    jaccard = shared / (old_size + new_size - shared)
    # A majority both ways pairs two regions alone (neither can hold a majority of another); a summed
    # Jaccard could trade such a pair for two middling ones.
    continues = (shared > 0.5 * old_size) & (shared > 0.5 * new_size)
    number = {int(c): int(old_ids[r]) for r, c in zip(*np.nonzero(continues))}
    rows = np.flatnonzero(~continues.any(axis=1))
    cols = np.flatnonzero(~continues.any(axis=0))
    for r, c in zip(*linear_sum_assignment(-jaccard[np.ix_(rows, cols)])):
        if jaccard[rows[r], cols[c]] >= min_jaccard:
            number[int(cols[c])] = int(old_ids[rows[r]])
    used = {int(i) for i in old_ids} | set(number.values())
    fresh = (m for m in range(1, len(used) + len(new_ids) + 2) if m not in used)
    for c in np.argsort(-shared.sum(axis=0), kind="stable"):  # the larger unmatched regions first
        if int(c) not in number:
            number[int(c)] = next(fresh)
    return np.array([number[c] for c in range(len(new_ids))], dtype=int)[new_of.ravel()]


def fine_regions(coords, numbers, per_region: int = FINE_PER_REGION, seed: int = 0) -> np.ndarray:
    """The finer level of a map's regions: each region (`numbers`, per paper) cut into up to `per_region`
    sub-regions of FINE_MIN_PAPERS papers or more (KMeans of its points). Per paper its sub-region's name,
    "3.2": region 3, its second-largest part."""
    arr, numbers = as_coords(coords), np.asarray(numbers)
    names = np.empty(len(arr), dtype=object)
    for g in np.unique(numbers):
        members = np.flatnonzero(numbers == g)
        parts = kmeans_regions(arr[members], max(1, min(per_region, len(members) // FINE_MIN_PAPERS)), seed)
        order = np.argsort(-np.bincount(parts), kind="stable")  # part 1 the largest
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(1, len(order) + 1)
        names[members] = [f"{int(g)}.{rank[p]}" for p in parts]
    return names


def carry_fine(previous, current, numbers) -> np.ndarray:
    """Sub-region names (`fine_regions`, "3.2") of a map, renumbered within each region so that a sub-region
    keeps its number where it continues one of the last map's (`match_regions` on the papers' names there);
    `numbers`: each paper's region on this map (already carried over by `MapRegions.numbers`)."""
    previous, current, numbers = np.asarray(previous), np.asarray(current), np.asarray(numbers)
    out = current.copy()
    elsewhere = 1_000_000  # the old sub-number of papers that were in another region before
    for g in np.unique(numbers):
        members = np.flatnonzero(numbers == g)
        before = np.array([int(str(n).split(".")[1]) if str(n).split(".")[0] == str(g) else elsewhere
                           for n in previous[members]])
        parts = np.array([int(str(n).split(".")[1]) for n in current[members]])
        carried = match_regions(before, parts)
        if (carried == elsewhere).any():  # a part made of papers from elsewhere: the smallest number free
            taken = set(carried[carried != elsewhere].tolist()) | set(before[before != elsewhere].tolist())
            carried[carried == elsewhere] = next(m for m in range(1, len(members) + 2) if m not in taken)
        out[members] = [f"{int(g)}.{c}" for c in carried]
    return out


class MapRegions:
    """The regions of the map drawn, numbered from 1 so that a region keeps its number and colour across maps.

    `numbers(coords, k)` cuts a map into k regions (`cluster_labels`) and numbers them by the regions of
    the last map seen at that k (`match_regions`); the same coordinates again give the same numbers without
    cutting again. The pane, the region labels, `Explorer.select_region` and an exported page share one, so
    the colours, the legend, the numbers on the map and a selection by number agree.
    """

    def __init__(self, method: str | None = None, seed: int = 0):
        self.method, self.seed = method, seed
        self._last: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # k -> (coords, numbers) of the last map
        self._last_fine: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # k -> (coords, sub-region names)

    def numbers(self, coords, k: int = DEFAULT_CLUSTERS, keep: bool = True) -> np.ndarray:
        """Per paper, its region's number on the map at `coords`; keep=False leaves the last map as it was."""
        arr = as_coords(coords)
        last = self._last.get(int(k))
        if last is not None and last[0].shape == arr.shape and np.array_equal(last[0], arr):
            return last[1].copy()
        ids = cluster_labels(arr, k, self.seed, self.method)
        numbers = ids + 1 if last is None or len(last[1]) != len(ids) else match_regions(last[1], ids)
        if keep:
            self._last[int(k)] = (arr.copy(), numbers)
        return numbers.copy()

    def fine(self, coords, k: int = DEFAULT_CLUSTERS) -> np.ndarray:
        """Per paper, its sub-region's name on the map at `coords` ("3.2": `fine_regions`), a sub-region keeping
        its number across maps where it continues one of the last map's at k (`carry_fine`)."""
        arr = as_coords(coords)
        numbers = self.numbers(arr, k)
        last = self._last_fine.get(int(k))
        if last is not None and last[0].shape == arr.shape and np.array_equal(last[0], arr):
            return last[1].copy()
        names = fine_regions(arr, numbers, seed=self.seed)
        if last is not None and len(last[1]) == len(names):
            names = carry_fine(last[1], names, numbers)
        self._last_fine[int(k)] = (arr.copy(), names)
        return names.copy()

    def fork(self) -> "MapRegions":
        """A copy that numbers further maps against this one's, leaving this one as it is (a page's presets)."""
        other = MapRegions(self.method, self.seed)
        other._last, other._last_fine = dict(self._last), dict(self._last_fine)
        return other


def region_order(numbers) -> list:
    """The distinct regions of a map in reading order: 1, 2, ..., 10, or "1.1", "1.2", ..., "10.1"."""
    distinct = {g.item() if hasattr(g, "item") else g for g in np.asarray(numbers).ravel()}
    return sorted(distinct, key=lambda g: tuple(int(p) for p in str(g).split(".")) if str(g).replace(
        ".", "").lstrip("-").isdigit() else (float("inf"), str(g)))


def region_color(number) -> str:
    """The colour of region `number` (1, 2, ...; "3.2" takes region 3's): Category10 for 1-10, their light
    shades (Category20) for 11-20, then round again. A region's colour depends on its number alone."""
    from bokeh.palettes import Category10_10, Category20_20

    n = int(str(number).split(".")[0]) - 1
    return Category10_10[n % 10] if n % 20 < 10 else Category20_20[2 * (n % 10) + 1]


def region_count(color_by) -> int:
    """How many regions colour a map coloured by clusters (`color_by` None or an int k)."""
    return DEFAULT_CLUSTERS if color_by is None else int(color_by)


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


def point_colors(coords: np.ndarray, meta: pd.DataFrame, color_by, regions=None) -> tuple[list[str], list[str], str]:
    """(colour per point, group name per point, name of the grouping) for `color_by`.

    `color_by` is a metadata column (categorical colours), an int k (k map clusters), or
    None (the default number of map clusters). regions: each point's region number where the
    caller keeps them (`MapRegions`), else the map's clusters numbered from 1.
    """
    if by_cluster(color_by):
        numbers = cluster_labels(coords, region_count(color_by)) + 1 if regions is None else np.asarray(regions)
        # The legend and the map's labels number the regions the same way, and colour them by number.
        return [region_color(m) for m in numbers], [f"region {m}" for m in numbers], "region"
    if color_by not in meta.columns:
        raise ValueError(f"color_by={color_by!r} is not a metadata column")
    groups = [as_text(v) for v in meta[color_by]]
    names = sorted({g for g in groups if g})
    lookup = dict(zip(names, _palette(len(names))))
    return [lookup.get(g, MISSING_COLOR) for g in groups], groups, str(color_by)


def shown_column(field: str) -> str:
    """The data column saying, per paper, whether its hover shows `field` (a CSS display value)."""
    return f"shown_{field}"


def shown_values(values: Sequence[str], always: bool = False, display: str = ROW_DISPLAY) -> list[str] | None:
    """Per paper, `display` where it has the field and "none" where not; None where every paper has it
    (or none does) and `always` is False: then the hover's row needs no switch."""
    has = [bool(v) for v in values]
    if not always and (all(has) or not any(has)):
        return None
    return [display if h else "none" for h in has]


def map_frame(coords, meta: pd.DataFrame, color_by=None, regions=None) -> dict[str, list]:
    """The ColumnDataSource data of the map: one row per paper.

    Columns: x, y, title, year, hover (a plain-text one-liner: title, year and the aspect
    summaries), summary_<aspect> (shortened, for the tooltip), color, group (what the colour
    means; `regions`: each paper's region number, see `point_colors`), alpha and size (changed
    by the title search), and `questions` only when `meta` has that column (question axes,
    stage 07). A field some papers lack gets `shown_<field>` ("none" where a paper lacks it), so
    the hover shows only the fields a paper has (`tooltip_template`); doc_id comes along where
    no paper has a title. Text is left unescaped: Bokeh escapes it when it renders the tooltip.
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
    colors, groups, _ = point_colors(arr, meta, color_by, regions)
    data = {
        "x": arr[:, 0].tolist(), "y": arr[:, 1].tolist(),
        "title": titles, "year": years, "hover": hover,
        "color": colors, "group": groups,
        "alpha": [BASE_ALPHA] * n, "size": [POINT_SIZE] * n,
    }
    data.update({f"summary_{a}": summaries[a] for a in aspects})
    if not any(titles) and "doc_id" in meta.columns:  # the hover names a paper by its id where none has a title
        data["doc_id"] = [as_text(v) for v in meta["doc_id"]]
    if questions is not None:
        data[QUESTIONS] = questions
    for name in ["year"] + [f"summary_{a}" for a in aspects] + ([QUESTIONS] if questions is not None else []):
        # The questions' switch always: a page swaps it with the questions per preset (page._PRESET_JS).
        shown = shown_values(data[name], name == QUESTIONS, "inline" if name == "year" else ROW_DISPLAY)
        if shown is not None:
            data[shown_column(name)] = shown
    return data


def label_source_data(labels) -> dict[str, list]:
    """Region labels [(x, y, text[, detail[, number]]), ...] as LabelSet source data (drawn on the canvas, not as
    HTML). A label's number is the region's (`MapRegions`; "3.2" a sub-region), else its place in the list.

    The canvas shows each region's number and its label cut short ("name", `short_name`), so the map itself
    says what a region is; the whole text and its detail go into the legend beside the map (`legend_html`).
    """
    labels = list(labels or [])
    numbers = [str(label[4]) if len(label) > 4 else str(i + 1) for i, label in enumerate(labels)]
    texts = [as_text(label[2]) for label in labels]
    return {
        "x": [float(label[0]) for label in labels],
        "y": [float(label[1]) for label in labels],
        "text": texts,
        "detail": [as_text(label[3] if len(label) > 3 else label[2]) for label in labels],
        "number": numbers,
        "name": [f"{m}. {short_name(t)}" for m, t in zip(numbers, texts)],
    }


def short_name(text: str, chars: int = MAP_NAME_CHARS) -> str:
    """A region's label as drawn on the map: without the aspect its terms come from ("approach: "), its first
    `chars` characters, cut at a word, "…" where cut."""
    text = " ".join(str(text).split())
    text = re.sub(r"^\w+: (?=\S)", "", text)
    if len(text) <= chars:
        return text
    cut = text[:chars].rsplit(" ", 1)[0].rstrip(",;:")
    return (cut or text[:chars]) + "…"


def named_groups(groups: Sequence[str], labels) -> list[str]:
    """Each point's region ("region 7", `point_colors`) with its label's name ("region 7: translation,
    bilingual") for the hover; a group no label numbers is left as it is. The part before ":" stays the
    region's identity (the page's region picker reads it)."""
    data = label_source_data(labels)
    names = {f"region {m}": f"region {m}: {short_name(t)}" for m, t in zip(data["number"], data["text"]) if t}
    return [names.get(str(g).split(":", 1)[0], g) for g in groups]


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


def message_html(text: str) -> str:
    """A status line of the pane's readout ("Computing the new layout…"), escaped."""
    return f"<div style='color:#555'><em>{esc(text)}</em></div>"


def error_html(action: str, exc: BaseException) -> str:
    """What failed and why, escaped: shown in the pane's readout instead of raised into the kernel."""
    return (f"<div style='color:#b00020'><b>{esc(action)} failed</b>: "
            f"{esc(type(exc).__name__)}: {esc(exc)}</div>")


def weights_text(weights: dict) -> str:
    """ "method 0.60, task 0.40": aspect weights as the sliders show them (escaped)."""
    return ", ".join(f"{esc(a)} {float(w):.2f}" for a, w in weights.items())


def legend_html(labels, weights: dict | None = None, colors: list[str] | None = None,
                pending: dict | None = None) -> str:
    """What the map shows, as escaped HTML: the weights of the map drawn and each region's number, colour and label.

    labels: [(x, y, text[, detail[, number]]), ...]; colors[i]: label i's colour (the map's region
    colours when it is coloured by its regions, `region_colors`). pending: the weights a new layout is
    being computed for, said beside the drawn map's until it is drawn. Each label says what it is
    (`labels.describe_regions`: an aspect's terms, the abstracts' terms, or "mixed").
    """
    parts = []
    if weights:
        laying = f" <i>(laying the map out for {weights_text(pending)}…)</i>" if pending else ""
        parts.append(f"<p style='margin:2px 0'><b>Aspect weights of this map:</b> {weights_text(weights)}{laying}</p>")
    data = label_source_data(labels)
    if data["number"]:
        parts.append("<p style='margin:2px 0'><b>Regions</b> (numbers and colours as on the map; a region keeps "
                     "both when the weights change):</p><div style='margin:2px 0'>")
        for i, (number, short, detail) in enumerate(zip(data["number"], data["text"], data["detail"])):
            swatch = ""
            if colors and i < len(colors):
                swatch = (f"<span style='display:inline-block;width:0.8em;height:0.8em;margin-right:4px;"
                          f"background:{esc(colors[i])}'></span>")
            parts.append(f"<div class='wb-region' style='margin:2px 0'>{swatch}<b>{esc(number)}. {esc(short)}</b>"
                         f"<br><small>{esc(detail)}</small></div>")
        parts.append("</div>")
    return "".join(parts)


def region_colors(labels, color_by) -> list[str] | None:
    """Each label's colour on a map coloured by its regions: the colour of the label's region number (or, for
    labels without numbers, of its place, when there are as many labels as regions); else None."""
    labels = list(labels or [])
    if not labels or not by_cluster(color_by):
        return None
    if all(len(label) > 4 for label in labels):
        return [region_color(label[4]) for label in labels]
    return [region_color(i + 1) for i in range(len(labels))] if region_count(color_by) == len(labels) else None


# --------------------------------------------------------------------------- figure


def tooltip_template(data: dict, group_name: str) -> str:
    """The hover's HTML template: the fields the map's papers have, wrapped at TOOLTIP_WIDTH, a line or two each.

    The title (or, where no paper has one, the id), the colour's group and the year where the corpus
    has years, each aspect's summary where a paper has one, the yes-questions. A field only some papers
    have is switched off per paper by its `shown_<field>` column (`map_frame`), a CSS display value.
    A fixed width that wraps keeps the tooltip inside the window (Bokeh's default rows never wrap).
    Plain `@field`s only: Bokeh escapes their values; `{safe}` would let a title inject markup.
    """
    clamp = "-webkit-box-orient:vertical;overflow:hidden;-webkit-line-clamp:"

    def row(name: str, field: str, value: str, lines: int) -> str:
        shown = f"@{{{shown_column(field)}}}" if shown_column(field) in data else ROW_DISPLAY
        return (f"<div style='{clamp}{lines};display:{shown}'><span style='color:#666'>{esc(name)}:"
                f"</span> {value}</div>")

    heading = "title" if any(data.get("title", [])) or "doc_id" not in data else "doc_id"
    rows = [f"<div style='font-weight:bold;{clamp}2;display:{ROW_DISPLAY}'>@{heading}</div>"]
    year = ""  # on the group's line: one line fewer
    if any(data.get("year", [])):
        shown = f"@{{{shown_column('year')}}}" if shown_column("year") in data else "inline"
        year = f"<span style='display:{shown}'> · <span style='color:#666'>year:</span> @year</span>"
    # A region's group names itself ("region 7: translation, bilingual"); another grouping says what it is.
    named = "" if group_name == "region" else f"<span style='color:#666'>{esc(group_name)}:</span> "
    rows.append(f"<div>{named}@group{year}</div>")
    # A summary gets one line: the tapped paper's readout has it whole.
    rows += [row(c[len("summary_"):], c, f"@{{{c}}}", 1) for c in data if c.startswith("summary_") and any(data[c])]
    if QUESTIONS in data:
        rows.append(row("yes to", QUESTIONS, f"@{QUESTIONS}", 2))
    # Under each listed paper, empty unless more lie under the pointer (MORE_JS); Bokeh strips a <style> from
    # a template, so the line cannot be kept for the last paper alone.
    rows.append("<div style='color:#666;font-style:italic'>@x{more}</div>")
    return (f"<div style='width:{TOOLTIP_WIDTH}px;white-space:normal;overflow-wrap:anywhere;font-size:12px;"
            f"line-height:1.25'>" + "".join(rows) + "</div>")


def build_figure(data: dict, labels, group_name: str, title: str, width: int, height: int):
    """(figure, points source, label source) for map data from `map_frame`."""
    from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, LabelSet, TapTool
    from bokeh.plotting import figure

    if group_name == "region" and labels:  # the hover names each point's region as the map does
        data = {**data, "group": named_groups(data["group"], labels)}
    source = ColumnDataSource(data, name="points")
    label_source = ColumnDataSource(label_source_data(labels), name="labels")
    # WebGL draws the points (canvas still draws labels and tooltips): at 10,000 points a redraw
    # after a pan or a weight change is what the browser spends its time on. BokehJS falls back to
    # canvas where WebGL is missing (it says so in the console).
    fig = figure(title=title, width=width, height=height, tools="pan,wheel_zoom,box_zoom,reset,save",
                 active_scroll="wheel_zoom", match_aspect=True, output_backend="webgl")
    points = fig.scatter("x", "y", source=source, size="size", fill_color="color", line_color="color",
                         fill_alpha="alpha", line_alpha="alpha", name="points_glyph")
    fig.add_tools(HoverTool(renderers=[points], tooltips=tooltip_template(data, group_name), limit=HOVER_PAPERS,
                            formatters={"@x": CustomJSHover(code=MORE_JS)}),
                  TapTool(renderers=[points]))
    fig.add_layout(LabelSet(x="x", y="y", text="name", source=label_source, text_font_size="9pt",
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
    numbers = label_source_data(labels)["number"]  # the region's own number where the label carries one
    for number, label in zip(numbers, labels):
        ax.annotate(number, label[:2], fontsize=8, weight="bold", ha="center", va="center",
                    bbox=dict(boxstyle="circle,pad=0.2", fc="white", ec="0.3", alpha=0.85))
    if labels:
        listing = "\n".join(textwrap.shorten(f"{m}. {label[2]}", 90) for m, label in zip(numbers, labels))
        ax.text(0.0, -0.02, listing, transform=ax.transAxes, va="top", ha="left", fontsize=7)
    for name, (x, y) in (marks or {}).items():
        ax.scatter([x], [y], marker="*", s=260, c="gold", edgecolors="black", zorder=5)
        ax.annotate(name, (x, y), xytext=(6, 6), textcoords="offset points", fontsize=8, weight="bold")
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax
