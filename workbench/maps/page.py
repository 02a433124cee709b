"""The map as one standalone HTML page (`05_map.html`): presets, search, filters and a selection to take away.

Everything runs in the browser, without a kernel: BokehJS is inlined, so the file works
offline and can be mailed. The page holds

* the scatter of `mapview.build_figure` (hover, tap, lasso and box selection);
* a Select switching between precomputed weight presets (coordinates, colours, region
  labels, legend and caption swapped by CustomJS);
* a title search that highlights matches;
* filters: a year range and one choice per metadata column (`filters`); a hidden
  paper cannot be hovered, tapped or selected;
* "select a region" and two buttons that download the selection (or, with none, every
  paper the filters show) as CSV and RIS, by the rules of the Python writers (`data/writers.py`):
  the CSV reads back through `load_corpus` with the same ids, titles and abstracts, the RIS with
  line breaks folded into spaces, and a cell a spreadsheet would run as a formula gets a leading
  "'" that `load_corpus` removes; so a region goes back into a reference manager.

Paper text travels as JSON in the data source or is escaped (`display.esc`); the JavaScript
builds files from that data and never writes it into the page's markup.

The Bokeh document is stored gzip-compressed (base64, in a script element of type
application/octet-stream) and unpacked by the browser's DecompressionStream before BokehJS
draws it: paper text compresses about 3x, so a map of 10,000 papers with their abstracts
is a few megabytes rather than tens. Above PAGE_ABSTRACTS_MAX papers the abstracts stay out
of the page (the downloads then hold ids, titles and the metadata columns), which keeps a
map of 100,000 papers under 30 MB. Above LARGE_PAGE_FROM papers the page is drawn as density with a sample
of points, every paper's coordinates, title, id and year in compact form (`largepage`).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..core.display import esc
from ..core.files import write_text
from ..data.writers import LINE_BREAKS, WHITESPACE
from . import largepage
from .density import POINTS_IN_VIEW, SCALE_EXTRA
from .mapview import (BASE_ALPHA, DIM_ALPHA, HIT_SIZE, POINT_SIZE, QUESTIONS, as_text, build_figure, caption_html,
                      by_cluster, group_title, label_source_data, legend_html, map_frame, named_groups,
                      region_colors, shown_column)

MAX_FILTER_VALUES = 40  # a column with more distinct values is text, not a category to filter by
PAGE_ABSTRACTS_MAX = 20000  # above this many papers the page leaves the abstracts out (see the module doc)
LARGE_PAGE_FROM = 100_000  # above this many papers the page is drawn as density (`largepage`)
SAMPLE_POINTS = 20_000  # ... with this many papers, drawn at random (seeded), as points
NO_REGION = "(none)"
ALL = "(all)"

_PRESET_JS = """
const i = names.indexOf(cb_obj.value);
if (i < 0) { return; }
const d = Object.assign({}, source.data);
for (const c of columns) { d[c] = d[c + "__" + i]; }
source.data = d;
labels.data = label_data[i];
legend.text = legends[i];
caption.text = captions[i];
if (region) { region.options = region_options[i]; region.value = region_options[i][0]; }
"""

# The query is never echoed into HTML (the Div renders markup); only a count is shown.
_SEARCH_JS = """
const q = (cb_obj.value_input || "").trim().toLowerCase();
const titles = source.data.title;
const n = titles.length;
const alpha = new Array(n), size = new Array(n);
let hits = 0;
for (let k = 0; k < n; k++) {
  const hit = q !== "" && String(titles[k]).toLowerCase().includes(q);
  if (hit) { hits++; }
  alpha[k] = q === "" ? base_alpha : (hit ? 1.0 : dim_alpha);
  size[k] = hit ? hit_size : point_size;
}
source.data = Object.assign({}, source.data, {alpha: alpha, size: size});
status.text = q === "" ? "" : hits + (hits === 1 ? " paper matches" : " papers match");
"""

# Shown: year within the range (a paper without a year only while the range is the whole span) and, per
# metadata filter with a value chosen, that value.
_FILTER_JS = """
const d = source.data, n = d.title.length;
const mask = new Array(n);
let lo = -Infinity, hi = Infinity, whole = true;
if (years) { lo = years.value[0]; hi = years.value[1]; whole = lo <= years.start && hi >= years.end; }
let shown = 0;
for (let k = 0; k < n; k++) {
  const y = d.year_value ? d.year_value[k] : null;
  let ok = (y === null || Number.isNaN(y)) ? whole : (y >= lo && y <= hi);
  for (const f of filters) {
    if (ok && f.value !== all) { ok = String(d["filter:" + f.name.slice(7)][k]) === f.value; }
  }
  mask[k] = ok;
  if (ok) { shown++; }
}
view.filter.booleans = mask;
source.selected.indices = source.selected.indices.filter(k => mask[k]);
status.text = shown === n ? "" : shown + " of " + n + " papers shown";
"""

_REGION_JS = """
const v = cb_obj.value;
if (!v || v === none) { source.selected.indices = []; return; }
const group = "region " + v.split(":")[0];  // a point's group is "region 7" or "region 7: its name"
const mask = view.filter.booleans;
const picked = [];
for (let k = 0; k < source.data.group.length; k++) {
  if (String(source.data.group[k]).split(":")[0] === group && (!mask || mask[k])) { picked.push(k); }
}
source.selected.indices = picked;
"""

# Selected papers (else every paper shown) as a file: CSV with every field quoted (RFC 4180), or RIS with
# one AB tag per paragraph. Downloaded through a Blob link; nothing is written into the page. The rules are
# those of the Python writers (`data/writers.py`), which hand over their character lists (`breaks`,
# `spaces`) because JavaScript's \s is not Python's: a CSV cell a spreadsheet would run as a formula gets a
# leading "'" (plain numbers excepted); a RIS value folds every line break Python's splitlines knows into
# one space, so no value can start a line ("ER  - ", "TY  - JOUR"). `exact` (a data source both buttons share)
# holds the papers' own text where the page's one-line text differs (a title or id with a line break), so the
# CSV gives it back exactly.
_EXPORT_JS = r"""
const d = source.data, mask = view.filter.booleans;
let rows = source.selected.indices.filter(k => !mask || mask[k]);
const what = rows.length ? "selected" : "shown";
if (!rows.length) { rows = [...Array(d.title.length).keys()].filter(k => !mask || mask[k]); }
const text = v => (v === null || v === undefined || (typeof v === "number" && Number.isNaN(v))) ? "" : String(v);
const own = new Map();
for (let i = 0; i < exact.data.text.length; i++) { own.set(exact.data.column[i] + "\0" + exact.data.row[i], exact.data.text[i]); }
const cell = (name, k) => { const v = own.get(name + "\0" + k); return v === undefined ? d[name][k] : v; };
const guarded = /^'*[=+\-@\t\r]/, number = /^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const guard = s => (guarded.test(s) && !number.test(s)) ? "'" + s : s;
const cls = chars => "[" + Array.from(chars, c => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")).join("") + "]";
const WS = cls(spaces), BR = cls(breaks);
const fold = new RegExp(WS + "*" + BR + WS + "*", "g"), ends = new RegExp("^" + WS + "+|" + WS + "+$", "g");
const paragraph = new RegExp(BR + WS + "*" + BR);
const risValue = s => s.replace(fold, " ").replace(ends, "");
let out;
if (format === "csv") {
  const q = v => '"' + guard(text(v)).replace(/"/g, '""') + '"';
  const head = ["doc_id", "title", "abstract", "year"].concat(extra);
  out = [head.map(q).join(",")].concat(rows.map(k => [cell("doc_id", k), cell("title", k), d.abstract[k], d.year[k]]
      .concat(extra.map(c => cell("filter:" + c, k))).map(q).join(","))).join("\r\n") + "\r\n";
} else {
  const line = (tag, v) => tag + "  - " + risValue(text(v));
  out = rows.map(k => {
    const lines = ["TY  - JOUR", line("ID", cell("doc_id", k)), line("TI", cell("title", k))];
    for (const para of text(d.abstract[k]).replace(/\r\n/g, "\n").split(paragraph)) {
      const value = risValue(para);
      if (value) { lines.push("AB  - " + value); }
    }
    if (text(d.year[k])) { lines.push(line("PY", d.year[k])); }
    lines.push("ER  - ");
    return lines.join("\r\n");
  }).join("\r\n\r\n") + "\r\n";
}
""" + largepage.SAVE_JS + r"""status.text = "exported " + rows.length + " " + what + (rows.length === 1 ? " paper" : " papers") + " as " + format.toUpperCase();
"""


def exact_texts(records: pd.DataFrame, data: dict, filters: Sequence[str]) -> dict[str, list]:
    """The papers' own texts where the page's one-line text (`as_text`) differs, e.g. a title with a line
    break, as data-source columns: `column` (doc_id, title, filter:<name>), `row`, `text`. The CSV download
    writes these instead of the page's text."""
    exact: dict[str, list] = {"column": [], "row": [], "text": []}
    for key, column in [("doc_id", "doc_id"), ("title", "title")] + [(f"filter:{f}", f) for f in filters]:
        if column not in records.columns or key not in data:
            continue
        for row, (own, shown) in enumerate(zip(records[column], data[key])):
            if isinstance(own, str) and own != shown:
                exact["column"].append(key)
                exact["row"].append(row)
                exact["text"].append(own)
    return exact


def filter_columns(records: pd.DataFrame) -> list[str]:
    """The metadata columns worth a filter: 2 to MAX_FILTER_VALUES distinct values, not text or ids."""
    skip = {"doc_id", "title", "abstract", "year", "sentences"}
    out = []
    for c in records.columns:
        if c in skip or str(c).startswith(("summary_", "highlights_")):
            continue
        values = records[c].dropna().map(as_text)
        if 2 <= values.nunique() <= MAX_FILTER_VALUES:
            out.append(str(c))
    return out


def year_values(meta: pd.DataFrame) -> list[float]:
    """Each paper's year as a number (NaN when missing or not a year)."""
    if "year" not in meta.columns:
        return [math.nan] * len(meta)
    return pd.to_numeric(meta["year"], errors="coerce").astype(float).tolist()


@dataclass(frozen=True)
class PageOptions:
    """How `export_html` draws the page: `color_by` (a column, or a region count, as
    `mapview.build_figure` takes it), the map's `width` and `height` in pixels, and `filters`:
    the metadata columns of the records to filter by (None: `filter_columns`). Above `large_from` papers
    the page is drawn as density, with `sample` papers as points and every paper in view as a point once
    at most `points_in_view` are (`largepage`)."""

    color_by: object = None
    width: int = 800
    height: int = 520
    filters: Sequence[str] | None = None
    large_from: int = LARGE_PAGE_FROM
    sample: int = SAMPLE_POINTS
    points_in_view: int = POINTS_IN_VIEW


@dataclass(frozen=True)
class PresetDetails:
    """What each preset of the page says besides its points and labels, as {preset name: ...}:
    `weights_by_preset` the aspect weights, said in the caption and legend; `questions_by_preset`
    one text per paper, an extra hover line; `regions_by_preset` each paper's region number
    (`mapview.MapRegions`), so that a region keeps its number and colour from preset to preset
    (None: each preset's clusters numbered from 1); `verdicts` each aspect's verdict in words
    (`teach.verdict.verdict_lines`), said under the weights (None: nothing said)."""

    weights_by_preset: dict | None = None
    questions_by_preset: dict | None = None
    regions_by_preset: dict | None = None
    verdicts: Sequence[str] | None = None


def verdicts_html(lines: Sequence[str] | None) -> str:
    """Each aspect's verdict, one line each, escaped (empty: nothing)."""
    if not lines:
        return ""
    return ("<div style='font-size:90%'><b>How far each aspect is checked</b><br>"
            + "<br>".join(esc(str(t)) for t in lines) + "</div>")


def export_html(path, coords_by_preset: dict[str, np.ndarray], meta: pd.DataFrame,
                labels_by_preset: dict | None = None, title: str = "", records: pd.DataFrame | None = None,
                options: PageOptions = PageOptions(), details: PresetDetails = PresetDetails()) -> Path:
    """Write the standalone map page (see the module doc) and return its path.

    coords_by_preset: {preset name: (n, 2)}; meta: one row per paper (`readout.hover_meta`);
    labels_by_preset: {name: [(x, y, text[, detail]), ...]}. records: the papers' doc_id, title,
    abstract and year (and metadata), row for row with meta, for the selection export; None: the
    export holds ids and titles only. options: colours, size and filters (`PageOptions`);
    details: each preset's weights, hover questions and region numbers (`PresetDetails`).
    """
    from bokeh.layouts import column, row
    from bokeh.models import BooleanFilter, BoxSelectTool, CDSView, CustomJS, Div, LassoSelectTool, TextInput

    if not coords_by_preset:
        raise ValueError("export_html needs at least one preset")
    if len(meta) > options.large_from and not largepage.density_available():
        # Without Datashader the page is drawn as before (every point, large) rather than not at all.
        warnings.warn(f"a page of {len(meta):,} papers is drawn as density only with Datashader: "
                      f"{SCALE_EXTRA}", stacklevel=2)
    elif len(meta) > options.large_from:
        return _export_large(Path(path), coords_by_preset, meta, labels_by_preset or {}, title, records, options,
                             details)
    names = [str(name) for name in coords_by_preset]
    labels_by_preset = labels_by_preset or {}
    data, columns = _preset_columns(coords_by_preset, meta, options.color_by, details, labels_by_preset)
    records, filters, with_abstracts = _add_records(data, meta, records, options.filters)

    fig, source, label_source = build_figure(data, labels_by_preset.get(names[0]), group_title(options.color_by),
                                              "", options.width, options.height)
    points = fig.select_one({"name": "points_glyph"})
    view = CDSView(filter=BooleanFilter(booleans=[True] * len(meta)))
    points.view = view
    fig.add_tools(LassoSelectTool(renderers=[points]), BoxSelectTool(renderers=[points]))

    select, legend, caption, region = _preset_controls(coords_by_preset, labels_by_preset, details, options,
                                                       (source, view, label_source, columns, len(meta)))
    status = Div(text="", name="search_status", width=200, render_as_text=True)
    search = TextInput(title="Search by title", placeholder="substring, any case", name="search", width=300)
    search.js_on_change("value_input", CustomJS(args=dict(
        source=source, status=status, base_alpha=BASE_ALPHA, dim_alpha=DIM_ALPHA,
        point_size=POINT_SIZE, hit_size=HIT_SIZE), code=_SEARCH_JS))
    years, choices, filter_status = _filter_controls(data, filters, source, view)
    buttons, export_status = _export_buttons(records, data, filters, source, view)

    header = Div(text=f"<h2 style='margin:4px 0'>{esc(title)}</h2>" if title else "", name="header")
    left_out = ("" if with_abstracts or "abstract" not in records else
                f" With {len(meta):,} papers the abstracts are not in this page: the files hold ids and titles.")
    hint = Div(text="<small>Lasso or box-select papers on the map (toolbar), or pick a region; the buttons "
                    f"download the selection, or every paper shown when nothing is selected.{left_out}</small>",
               width=360)
    # Named so that page scripts (and the browser test) can find models with get_model_by_name.
    layout = column(header, row(select, search, status, name="controls"),
                    row(*([years] if years is not None else []), *choices, filter_status, name="filters"),
                    caption, Div(text=verdicts_html(details.verdicts), name="verdicts", width=options.width + 360),
                    row(fig, column(legend, region, *buttons, export_status, hint)), name="page")
    # Written whole or not at all: a full disk leaves the earlier page, not a torn one.
    return write_text(Path(path), standalone_html(layout, title or "Map"))


def _export_large(path: Path, coords_by_preset: dict, meta: pd.DataFrame, labels_by_preset: dict, title: str,
                  records: pd.DataFrame | None, options: PageOptions, details: PresetDetails) -> Path:
    """The page of a map too large for a point and an abstract per paper (`largepage`): a sample as the
    points of a small page, density under them, every paper's place, title, id and year in compact form."""
    from bokeh.layouts import column, row
    from bokeh.models import BooleanFilter, BoxSelectTool, CDSView, Div, LassoSelectTool

    n, names = len(meta), [str(name) for name in coords_by_preset]
    keep = largepage.sample_rows(n, options.sample)
    shown = {k: np.asarray(c, dtype=float)[keep] for k, c in coords_by_preset.items()}
    data, columns = _preset_columns(shown, meta.iloc[keep].reset_index(drop=True), options.color_by,
                                    largepage.sample_details(details, keep), labels_by_preset)
    data["size"] = [largepage.SAMPLE_POINT_SIZE] * len(keep)  # smaller: the density shows between them
    fig, source, label_source = build_figure(data, labels_by_preset.get(names[0]), group_title(options.color_by),
                                              "", options.width, options.height)
    points = fig.select_one({"name": "points_glyph"})
    fig.add_tools(LassoSelectTool(renderers=[points]), BoxSelectTool(renderers=[points], name="box_select"))
    boxes, blobs = largepage.paper_index(coords_by_preset, meta, records, options.width / options.height)
    layers = largepage.add_layers(fig, coords_by_preset, boxes, options.points_in_view)
    view = CDSView(filter=BooleanFilter(booleans=[True] * len(keep)))
    select, legend, caption, _ = _preset_controls(coords_by_preset, labels_by_preset, details, options,
                                                  (source, view, label_source, columns, None))  # the hint says n
    search, status, buttons, picked = largepage.large_controls(fig, layers, source, select, names)
    header = Div(text=f"<h2 style='margin:4px 0'>{esc(title)}</h2>" if title else "", name="header")
    hint = Div(text=largepage.hint_html(n, options.sample, options.points_in_view), width=360)
    layout = column(header, row(select, search, status, name="controls"), caption,
                    Div(text=verdicts_html(details.verdicts), name="verdicts", width=options.width + 360),
                    row(fig, column(legend, *buttons, picked, hint)), name="page")
    return write_text(path, standalone_html(layout, title or "Map", blobs, largepage.PREPARE_JS))


def _preset_columns(coords_by_preset: dict, meta: pd.DataFrame, color_by, details: PresetDetails,
                    labels_by_preset: dict) -> tuple[dict, list]:
    """The page's point data: the first preset's columns, and every preset's as indexed columns (x__0, y__0, ...)
    so that any preset name is safe, each region named by its preset's labels; returns (data, the per-preset
    column names)."""
    questions_by_preset = details.questions_by_preset
    metas = {k: meta if questions_by_preset is None else meta.assign(**{QUESTIONS: questions_by_preset[k]})
             for k in coords_by_preset}
    frames = [map_frame(c, metas[k], color_by, (details.regions_by_preset or {}).get(k))
              for k, c in coords_by_preset.items()]
    columns = ["x", "y", "color", "group"] + ([QUESTIONS, shown_column(QUESTIONS)] if questions_by_preset is not None
                                              else [])
    # The plain-text "hover" one-liner repeats the title and summaries the tooltip shows from their own
    # columns; the page has no use for it (a tenth of a 100,000-paper page).
    frames = [{k: v for k, v in frame.items() if k != "hover"} for frame in frames]
    for frame, name in zip(frames, coords_by_preset):  # the hover names each point's region as the map does
        if by_cluster(color_by) and labels_by_preset.get(name):
            frame["group"] = named_groups(frame["group"], labels_by_preset[name])
    data = dict(frames[0])
    for i, frame in enumerate(frames):
        for c in columns:
            data[f"{c}__{i}"] = frame[c]
    return data, columns


def _add_records(data: dict, meta: pd.DataFrame, records: pd.DataFrame | None,
                 filters: Sequence[str] | None) -> tuple[pd.DataFrame, list[str], bool]:
    """Put the records' ids, abstracts, years and filter columns into `data`; returns the records (row for row
    with meta), the filter columns and whether the abstracts are in the page."""
    records = (records if records is not None else meta[[c for c in ("doc_id", "title") if c in meta]])
    records = records.reset_index(drop=True)
    if len(records) != len(meta):
        raise ValueError(f"{len(records)} records for {len(meta)} papers on the map")
    filters = filter_columns(records) if filters is None else [str(f) for f in filters]
    data["doc_id"] = [as_text(v) for v in records.get("doc_id", meta.get("doc_id", pd.Series([""] * len(meta))))]
    # The abstract as read (paragraph breaks kept, which RIS writes as one AB tag each), not as_text's one line.
    with_abstracts = "abstract" in records and len(meta) <= PAGE_ABSTRACTS_MAX
    data["abstract"] = ([v if isinstance(v, str) else as_text(v) for v in records["abstract"]]
                        if with_abstracts else [""] * len(meta))
    data["year_value"] = year_values(meta)
    for f in filters:
        data[f"filter:{f}"] = [as_text(v) for v in records[f]]
    return records, filters, with_abstracts


def _preset_controls(coords_by_preset: dict, labels_by_preset: dict, details: PresetDetails, options: PageOptions,
                     drawn: tuple):
    """The preset picker, with the legend, caption and region picker it switches; drawn = (source, view,
    label_source, columns, papers) of the figure. Returns (select, legend, caption, region)."""
    from bokeh.models import CustomJS, Div, Select

    source, view, label_source, columns, papers = drawn
    names = [str(name) for name in coords_by_preset]
    weights_by_preset = details.weights_by_preset or {}
    legends = [legend_html(labels_by_preset.get(name), weights_by_preset.get(name),
                           region_colors(labels_by_preset.get(name), options.color_by)) for name in coords_by_preset]
    legend = Div(text=legends[0], name="legend", width=360)
    captions = [caption_html(weights_by_preset.get(name), options.color_by, papers) for name in coords_by_preset]
    caption = Div(text=captions[0], name="caption", width=options.width + 360)

    region_options = [[NO_REGION] + [f"{m}: {t}" for m, t in zip(*(label_source_data(labels_by_preset.get(name))[c]
                                                                     for c in ("number", "text")))]
                      for name in coords_by_preset]
    region = Select(title="Select a region", value=NO_REGION, options=region_options[0], name="region", width=260)
    region.js_on_change("value", CustomJS(args=dict(source=source, view=view, none=NO_REGION), code=_REGION_JS))
    select = Select(title="Weight preset", value=names[0], options=names, name="preset", width=220)
    select.js_on_change("value", CustomJS(args=dict(source=source, labels=label_source, names=names,
                                                    columns=columns, label_data=label_data(labels_by_preset, names),
                                                    legend=legend, legends=legends, caption=caption,
                                                    captions=captions, region=region,
                                                    region_options=region_options),
                                          code=_PRESET_JS))
    return select, legend, caption, region


def _filter_controls(data: dict, filters: list[str], source, view):
    """The year range and one picker per filter column, all hiding the papers outside them; returns
    (years or None when fewer than two years are known, the pickers, their status line)."""
    from bokeh.models import CustomJS, Div, RangeSlider, Select

    filter_status = Div(text="", name="filter_status", width=220, render_as_text=True)
    known = [y for y in data["year_value"] if not math.isnan(y)]
    years = (RangeSlider(title="Years", start=min(known), end=max(known), value=(min(known), max(known)), step=1,
                         name="years", width=260) if len(set(known)) >= 2 else None)
    # A Select, not a MultiChoice: its options are text, where MultiChoice's widget reads them as HTML.
    choices = [Select(title=f, options=[ALL] + sorted(set(data[f"filter:{f}"]) - {""}), value=ALL,
                      name=f"filter:{f}", width=200) for f in filters]
    on_filter = CustomJS(args=dict(source=source, view=view, years=years, filters=choices, status=filter_status,
                                   all=ALL),
                         code=_FILTER_JS)
    if years is not None:
        years.js_on_change("value", on_filter)
    for choice in choices:
        choice.js_on_change("value", on_filter)
    return years, choices, filter_status


def _export_buttons(records: pd.DataFrame, data: dict, filters: list[str], source, view):
    """The CSV and RIS download buttons of the selection and their status line."""
    from bokeh.models import Button, ColumnDataSource, CustomJS, Div

    export_status = Div(text="", name="export_status", width=300, render_as_text=True)
    exact = ColumnDataSource(data=exact_texts(records, data, filters), name="exact_texts")
    buttons = []
    for fmt in ("csv", "ris"):
        button = Button(label=f"Download selection ({fmt.upper()})", name=f"export_{fmt}", width=200)
        button.js_on_click(CustomJS(args=dict(source=source, view=view, format=fmt, extra=filters,
                                              status=export_status, exact=exact, breaks=LINE_BREAKS,
                                              spaces=WHITESPACE), code=_EXPORT_JS))
        buttons.append(button)
    return buttons, export_status


_LOADER_JS = """
(async () => {
  const text = document.getElementById("wb-map-data").textContent.trim();
  const bytes = new Uint8Array(text.length * 3 / 4 + 3);
  const raw = atob(text);
  for (let k = 0; k < raw.length; k++) { bytes[k] = raw.charCodeAt(k); }
  const stream = new Response(bytes.subarray(0, raw.length)).body.pipeThrough(new DecompressionStream("gzip"));
  const item = JSON.parse(await new Response(stream).text());
  { /*PREPARE*/ }
  await Bokeh.embed.embed_item(item, "wb-page");
  window.wbEmbedded = performance.now();
})().catch(error => {
  document.getElementById("wb-page").textContent = "This map could not be drawn in this browser: " + error;
});
"""


def page_document(path) -> str:
    """The Bokeh document (JSON text) inside a page written by `export_html`: what the browser unpacks."""
    found = re.search(r'<script type="application/octet-stream" id="wb-map-data">([^<]*)</script>',
                      Path(path).read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{path} holds no map document (not a page written by export_html)")
    return gzip.decompress(base64.b64decode(found.group(1))).decode("utf-8")


def standalone_html(layout, title: str, blobs: dict[str, str] | None = None, prepare: str = "") -> str:
    """One HTML file that draws `layout` offline: the BokehJS bundles it needs, inlined, and the document
    gzip-compressed (see the module doc). The title is escaped; the document's text is base64 data.
    blobs: {element id: base64 text} put in script elements beside the document; prepare: JavaScript run
    (in the loader's async function) before BokehJS draws, e.g. to decode them."""
    from bokeh.embed import json_item
    from bokeh.resources import INLINE

    try:  # only the bundles the layout uses (BokehJS, GL, widgets): 1.9 MB instead of 3.9 MB
        from bokeh.embed.bundle import bundle_for_objs_and_resources

        scripts = "\n".join(f"<script>{raw}</script>" for raw in bundle_for_objs_and_resources([layout], INLINE).js_raw)
    except (ImportError, AttributeError):  # another Bokeh: every bundle
        scripts = INLINE.render_js()
    item = json.dumps(json_item(layout, "wb-page"), separators=(",", ":"))
    payload = base64.b64encode(gzip.compress(item.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")
    extra = ""
    for key, text in (blobs or {}).items():
        if not re.fullmatch(r"[A-Za-z0-9_-]+", key) or not re.fullmatch(r"[A-Za-z0-9+/=]*", text):
            raise ValueError(f"page data {key!r} must be base64 under a plain id")
        extra += f"<script type=\"application/octet-stream\" id=\"{key}\">{text}</script>\n"
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n{scripts}\n</head>\n<body>\n<div id=\"wb-page\"></div>\n"
            f"<script type=\"application/octet-stream\" id=\"wb-map-data\">{payload}</script>\n{extra}"
            f"<script>{_LOADER_JS.replace('/*PREPARE*/', prepare)}</script>\n</body>\n</html>\n")


def label_data(labels_by_preset: dict, names: Sequence[str]) -> list[dict]:
    """Per preset, its region labels as LabelSet data."""
    return [label_source_data(labels_by_preset.get(name)) for name in names]
