"""The standalone page of a very large map: density images, a sample of points, and every paper in compact form.

Above `page.LARGE_PAGE_FROM` papers (100,000) a page with one glyph and one abstract per paper would be
hundreds of megabytes, so `page.export_html` draws it this way instead:

* the map's density, counted and shaded by Datashader (`density`), as PNG images at DENSITY_LEVELS zoom
  levels: level k covers the map with 2^k x 2^k tiles of the plot's size, shaded as one image so the tiles
  join; a zoom shows the level whose pixels match the screen's;
* a seeded sample of the papers as today's points (hover, tap, lasso), coloured by region, with the
  region labels, legend, weights and verdict lines of a small page;
* every paper's coordinates, quantised to uint16 over the map's extent (4 bytes a paper and preset), and
  its title, id and year, gzip-compressed: decoded by the page's JavaScript before BokehJS draws. A zoom
  that leaves at most `PageOptions.points_in_view` papers in view draws each of them as a point with its
  title and year on hover; a title search runs over every paper, rings the matches and, for a few,
  centres the map on them; a lasso or box picks every paper inside it, and the downloads hold those
  papers' ids, titles and years (no abstracts: at a million papers they would be a gigabyte).

Paper text travels only as base64 data in script elements of type application/octet-stream and in Bokeh's
data sources; the JavaScript never writes it into markup (status lines render as text, tooltips escape it).
"""

from __future__ import annotations

import base64
import gzip
import importlib.util
import io
import json
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .density import View, shaded
from .mapview import as_coords, as_text

SAMPLE_SEED = 0
SAMPLE_POINT_SIZE = 5  # the sample's points, smaller than a small page's so the density shows between them
DENSITY_LEVELS = 3  # 1, 4 and 16 tiles of the plot's size: a zoom of up to 4x stays sharp
QUANT = 65535  # coordinates as uint16 steps over the map's extent
CENTRE_HITS = 50  # a search with at most this many matches centres the map on them
ZOOM_ON_HIT = 16  # ... at least this far in, so the papers around a match are drawn as points
SHOWN_HITS = 2000  # matches ringed on the map (the count says how many match in all)
NO_YEAR = -32768
PNG_COLOURS = 64

# Runs before BokehJS draws the page: decodes the compact paper index into window.wbBig, with the
# functions the page's callbacks call (redraw on zoom, search, pick, download).
PREPARE_JS = r"""
const bytesOf = id => {
  const raw = atob(document.getElementById(id).textContent.trim());
  const out = new Uint8Array(raw.length);
  for (let k = 0; k < raw.length; k++) { out[k] = raw.charCodeAt(k); }
  return out;
};
const gunzip = async bytes => new Uint8Array(await new Response(
  new Response(bytes).body.pipeThrough(new DecompressionStream("gzip"))).arrayBuffer());
const lines = async id => new TextDecoder().decode(await gunzip(bytesOf(id)));
const head = JSON.parse(new TextDecoder().decode(bytesOf("wb-big-head")));
const B = window.wbBig = {n: head.n, extent: head.extent, preset: 0, picked: null, timer: null};
B.xy = head.extent.map((e, p) => { const b = bytesOf("wb-big-xy-" + p); return new Uint16Array(b.buffer, 0, 2 * head.n); });
const vocab = (await lines("wb-big-vocab")).split("\n"), codes = await gunzip(bytesOf("wb-big-titles"));
B.titles = new Array(head.n);
let words = [], t = 0, v = 0, shift = 0;
for (let i = 0; i < codes.length; i++) {  // word numbers as varints, 0 ending a title (largepage.title_codes)
  const c = codes[i];
  v += (c & 127) * 2 ** shift;
  if (c & 128) { shift += 7; continue; }
  if (v === 0) { B.titles[t++] = words.join(" "); words = []; } else { words.push(vocab[v - 1]); }
  v = 0; shift = 0;
}
B.lower = B.titles.join("\n").toLowerCase();
B.starts = [0];
for (let at = B.lower.indexOf("\n"); at >= 0; at = B.lower.indexOf("\n", at + 1)) { B.starts.push(at + 1); }
B.ids = (await lines("wb-big-ids")).split("\n");
const y = await gunzip(bytesOf("wb-big-years"));
B.years = new Int16Array(y.buffer, 0, head.n);
B.year = k => B.years[k] === head.no_year ? "" : String(B.years[k]);
B.at = (k, p) => { const e = B.extent[p], xy = B.xy[p];
  return [e[0] + xy[k] * (e[1] - e[0]) / head.quant, e[2] + xy[B.n + k] * (e[3] - e[2]) / head.quant]; };
B.columns = (rows, p) => {
  const d = {x: [], y: [], title: [], year: []};
  for (const k of rows) { const [x, y] = B.at(k, p); d.x.push(x); d.y.push(y); d.title.push(B.titles[k]); d.year.push(B.year(k)); }
  return d;
};
B.line = pos => { let lo = 0, hi = B.starts.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (B.starts[mid] <= pos) { lo = mid; } else { hi = mid - 1; } }
  return lo; };
B.search = (query, keep) => {
  const q = String(query || "").trim().toLowerCase(), rows = [];
  let count = 0;
  if (q === "" || q.includes("\n")) { return {rows, count}; }
  for (let at = B.lower.indexOf(q); at >= 0;) {
    const k = B.line(at);
    count++;
    if (rows.length < keep) { rows.push(k); }
    if (k + 1 >= B.starts.length) { break; }
    at = B.lower.indexOf(q, B.starts[k + 1]);
  }
  return {rows, count};
};
// Which density level suits the view, and which papers it holds (none when more than m.limit).
B.redraw = m => {
  const p = B.preset, e = B.extent[p], xr = m.fig.x_range, yr = m.fig.y_range;
  const zoom = Math.min((e[1] - e[0]) / (xr.end - xr.start), (e[3] - e[2]) / (yr.end - yr.start));
  const level = Math.max(0, Math.min(m.levels - 1, Math.round(Math.log2(Math.max(zoom, 1)))));
  m.density.forEach((r, i) => { r.visible = i === p * m.levels + level; });
  const sx = head.quant / (e[1] - e[0]), sy = head.quant / (e[3] - e[2]);
  const x0 = (xr.start - e[0]) * sx, x1 = (xr.end - e[0]) * sx, y0 = (yr.start - e[2]) * sy, y1 = (yr.end - e[2]) * sy;
  const xy = B.xy[p], n = B.n, found = [];
  for (let k = 0; k < n; k++) {
    const qx = xy[k];
    if (qx < x0 || qx > x1) { continue; }
    const qy = xy[n + k];
    if (qy < y0 || qy > y1) { continue; }
    found.push(k);
    if (found.length > m.limit) { break; }
  }
  const shown = found.length <= m.limit ? found : [];
  m.zoom.data = B.columns(shown, p);
  B.level = level;
  B.in_view = shown.length;
};
B.later = m => { clearTimeout(B.timer); B.timer = setTimeout(() => B.redraw(m), 40); };
// Every paper inside a box or lasso (tested in the quantised units, the polygon's box first).
B.pick = g => {
  const p = B.preset, e = B.extent[p], xy = B.xy[p], n = B.n, out = [];
  const sx = head.quant / (e[1] - e[0]), sy = head.quant / (e[3] - e[2]);
  if (g.type === "rect") {
    const x0 = (Math.min(g.x0, g.x1) - e[0]) * sx, x1 = (Math.max(g.x0, g.x1) - e[0]) * sx;
    const y0 = (Math.min(g.y0, g.y1) - e[2]) * sy, y1 = (Math.max(g.y0, g.y1) - e[2]) * sy;
    for (let k = 0; k < n; k++) { if (xy[k] >= x0 && xy[k] <= x1 && xy[n + k] >= y0 && xy[n + k] <= y1) { out.push(k); } }
    return out;
  }
  if (g.type !== "poly") { return null; }
  const px = Array.from(g.x, v => (v - e[0]) * sx), py = Array.from(g.y, v => (v - e[2]) * sy), m = px.length;
  const bx0 = Math.min(...px), bx1 = Math.max(...px), by0 = Math.min(...py), by1 = Math.max(...py);
  for (let k = 0; k < n; k++) {
    const x = xy[k], y = xy[n + k];
    if (x < bx0 || x > bx1 || y < by0 || y > by1) { continue; }
    let inside = false;
    for (let i = 0, j = m - 1; i < m; j = i++) {
      if ((py[i] > y) !== (py[j] > y) && x < (px[j] - px[i]) * (y - py[i]) / (py[j] - py[i]) + px[i]) { inside = !inside; }
    }
    if (inside) { out.push(k); }
  }
  return out;
};
"""

_ZOOM_JS = "window.wbBig && window.wbBig.later({fig, density, zoom, levels, limit});"

_PRESET_JS = """
if (!window.wbBig) { return; }
window.wbBig.preset = Math.max(0, names.indexOf(cb_obj.value));
window.wbBig.picked = null;
hits.data = {x: [], y: [], title: [], year: []};
window.wbBig.redraw({fig, density, zoom, levels, limit});
"""

# The query is never echoed into HTML (the Div renders text); matches are ringed, a few centred on.
_SEARCH_JS = """
const B = window.wbBig;
if (!B) { return; }
const found = B.search(cb_obj.value_input, shown_hits);
hits.data = B.columns(found.rows, B.preset);
status.text = found.count === 0 ? "" : found.count.toLocaleString("en") + (found.count === 1 ? " paper matches" : " papers match");
if (found.count === 0 || found.count > centre_hits) { return; }
const e = B.extent[B.preset], d = hits.data;
const xs = [Math.min(...d.x), Math.max(...d.x)], ys = [Math.min(...d.y), Math.max(...d.y)];
const w = Math.max(1.2 * (xs[1] - xs[0]), (e[1] - e[0]) / zoom_on_hit), h = Math.max(1.2 * (ys[1] - ys[0]), (e[3] - e[2]) / zoom_on_hit);
const cx = (xs[0] + xs[1]) / 2, cy = (ys[0] + ys[1]) / 2;
fig.x_range.setv({start: cx - w / 2, end: cx + w / 2});
fig.y_range.setv({start: cy - h / 2, end: cy + h / 2});
"""

_PICK_JS = """
const B = window.wbBig;
if (!B || !cb_obj.final) { return; }
const rows = B.pick(cb_obj.geometry);
if (rows === null) { return; }
B.picked = rows;
status.text = rows.length.toLocaleString("en") + (rows.length === 1 ? " paper selected" : " papers selected");
"""

_CLEAR_JS = """
if (window.wbBig) { window.wbBig.picked = null; }
source.selected.indices = [];
status.text = "";
"""

# The selection (else every paper) as CSV (doc_id, title, year; every field quoted, RFC 4180) or RIS. Titles
# and ids are one line already (`mapview.as_text`); a CSV cell a spreadsheet would run as a formula gets a
# leading "'" (plain numbers excepted), as the Python writers do (`data/writers.py`).
# The selection's text `out` saved as a file named for its `format` (both pages' downloads end with it).
SAVE_JS = r"""
const blob = new Blob([out], {type: format === "csv" ? "text/csv" : "application/x-research-info-systems"});
const a = document.createElement("a");
a.href = URL.createObjectURL(blob);
a.download = "selection." + format;
document.body.appendChild(a);
a.click();
a.remove();
"""

_EXPORT_JS = r"""
const B = window.wbBig;
if (!B) { return; }
const picked = B.picked && B.picked.length ? B.picked : null;
const rows = picked || [...Array(B.n).keys()];
const guarded = /^'*[=+\-@\t\r]/, number = /^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const guard = s => (guarded.test(s) && !number.test(s)) ? "'" + s : s;
let out;
if (format === "csv") {
  const q = v => '"' + guard(String(v)).replace(/"/g, '""') + '"';
  out = ['"doc_id","title","year"'].concat(rows.map(k => [B.ids[k], B.titles[k], B.year(k)].map(q).join(","))).join("\r\n") + "\r\n";
} else {
  out = rows.map(k => ["TY  - JOUR", "ID  - " + B.ids[k], "TI  - " + B.titles[k]]
      .concat(B.year(k) ? ["PY  - " + B.year(k)] : []).concat(["ER  - "]).join("\r\n")).join("\r\n\r\n") + "\r\n";
}
""" + SAVE_JS + r"""status.text = "exported " + rows.length.toLocaleString("en") + (picked ? " selected" : "") + (rows.length === 1 ? " paper" : " papers") + " as " + format.toUpperCase();
"""


def density_available() -> bool:
    """Whether Datashader, which draws the large page's density (the scale extra), is installed."""
    return importlib.util.find_spec("datashader") is not None


def sample_rows(n: int, size: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """The rows of the papers drawn as points: `size` of n at random (seeded), in order; all when n <= size."""
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def extent(coords: np.ndarray, aspect: float) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1): a margin around every point, widened to the plot's width/height `aspect` so the
    map is not stretched and density pixels are square."""
    view = View.around(coords)
    (x0, x1), (y0, y1) = view.x_range, view.y_range
    w, h = x1 - x0, y1 - y0
    if w / h < aspect:
        grow = (h * aspect - w) / 2
        x0, x1 = x0 - grow, x1 + grow
    else:
        grow = (w / aspect - h) / 2
        y0, y1 = y0 - grow, y1 + grow
    return float(x0), float(x1), float(y0), float(y1)


def quantised(coords: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """Coordinates as uint16 steps over `box`: all x, then all y (little-endian), as the page decodes them."""
    x0, x1, y0, y1 = box
    qx = np.rint((coords[:, 0] - x0) / (x1 - x0) * QUANT)
    qy = np.rint((coords[:, 1] - y0) / (y1 - y0) * QUANT)
    return np.concatenate([qx, qy]).clip(0, QUANT).astype("<u2")


def palette_png(rgba: np.ndarray) -> bytes:
    """A shaded tile (uint32 RGBA, row 0 at the bottom) as a PNG of PNG_COLOURS palette colours, top row first:
    half the bytes of a full-colour PNG of a two-colour ramp, and written in a fifth of the time of an
    optimised one."""
    from PIL import Image

    pixels = np.ascontiguousarray(np.flipud(rgba)).view(np.uint8).reshape(rgba.shape[0], rgba.shape[1], 4)
    image = Image.fromarray(pixels, "RGBA").quantize(colors=PNG_COLOURS, method=Image.Quantize.FASTOCTREE)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def density_tiles(coords: np.ndarray, box: tuple[float, float, float, float], width: int, height: int,
                  level: int) -> dict[str, list]:
    """One zoom level of the map's density: the extent shaded as one image of (2^level x width) x (2^level x
    height) pixels, cut into tiles of width x height; the tiles with any paper, as image_url data (url: a PNG
    data URL; x, y: the top-left corner; w, h: the size in map units)."""
    k = 2 ** level
    x0, x1, y0, y1 = box
    rgba = shaded(coords, View((x0, x1), (y0, y1), width * k, height * k))
    dx, dy = (x1 - x0) / k, (y1 - y0) / k
    tiles: dict[str, list] = {"url": [], "x": [], "y": [], "w": [], "h": []}
    for j in range(k):  # row 0 of the image is the bottom of the map
        for i in range(k):
            tile = rgba[j * height:(j + 1) * height, i * width:(i + 1) * width]
            if not (tile >> 24).any():  # fully transparent: no paper there
                continue
            tiles["url"].append("data:image/png;base64," + base64.b64encode(palette_png(tile)).decode("ascii"))
            tiles["x"].append(x0 + i * dx)
            tiles["y"].append(y0 + (j + 1) * dy)
            tiles["w"].append(dx)
            tiles["h"].append(dy)
    return tiles


def title_codes(titles: list[str]) -> tuple[list[str], bytes]:
    """Titles as word codes: (the words, most frequent first; the bytes). Each title is its words' numbers
    (1 for the first word), each a little-endian base-128 varint, then a 0. Titles must be one line with single
    spaces (`mapview.as_text`). Gzip of the codes is about half the size of gzip of the text, on synthetic
    titles (a million papers: 14.9 MB against 30.2 MB)."""
    words = [w for t in titles for w in (t.split(" ") if t else [])]
    lengths = np.array([t.count(" ") + 1 if t else 0 for t in titles], dtype=np.int64)
    codes, vocab = pd.factorize(pd.Series(words, dtype=object))
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[np.argsort(-np.bincount(codes, minlength=len(vocab)), kind="stable")] = np.arange(len(vocab))
    ids = np.zeros(len(words) + len(titles), dtype=np.int64)  # a 0 after each title's words
    ends = np.cumsum(lengths + 1) - 1
    word_slots = np.ones(len(ids), dtype=bool)
    word_slots[ends] = False
    ids[word_slots] = rank[codes] + 1
    digits = np.stack([(ids >> (7 * k)) & 127 for k in range(4)], axis=1)
    size = 1 + (ids >= 1 << 7) + (ids >= 1 << 14) + (ids >= 1 << 21)
    used = np.arange(4)[None, :] < size[:, None]
    digits[:, :3] |= (np.arange(1, 4)[None, :] < size[:, None]) * 128  # "more bytes follow"
    order = np.asarray(vocab, dtype=object)[np.argsort(rank)].tolist()
    return order, digits[used].astype(np.uint8).tobytes()


def _packed(data: bytes, compress: bool = False) -> str:
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0) if compress else data).decode("ascii")


def year_numbers(meta: pd.DataFrame) -> np.ndarray:
    """Each paper's year as int16 (NO_YEAR where missing or not a whole year in range)."""
    if "year" not in meta.columns:
        return np.full(len(meta), NO_YEAR, dtype="<i2")
    years = pd.to_numeric(meta["year"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(years) & (years == np.round(years)) & (np.abs(years) < 32000)
    return np.where(ok, years, NO_YEAR).astype("<i2")


def paper_index(coords_by_preset: dict, meta: pd.DataFrame, records: pd.DataFrame | None,
                aspect: float) -> tuple[list[tuple], dict[str, str]]:
    """Every paper in compact form: (each preset's extent, {script element id: base64 text}) holding the
    quantised coordinates per preset, and the titles, ids and years (gzip), as PREPARE_JS reads them."""
    n = len(meta)
    boxes = [extent(as_coords(c), aspect) for c in coords_by_preset.values()]
    # One line each: as_text folds every whitespace run (line breaks included) into one space.
    titles = [as_text(v) for v in meta["title"]] if "title" in meta.columns else [""] * n
    source = records if records is not None and "doc_id" in records.columns else meta
    ids = [as_text(v) for v in source["doc_id"]] if "doc_id" in source.columns else [""] * n
    words, codes = title_codes(titles)
    head = {"n": n, "extent": boxes, "quant": QUANT, "no_year": NO_YEAR}
    blobs = {"wb-big-head": _packed(json.dumps(head).encode("ascii")),
             "wb-big-vocab": _packed("\n".join(words).encode("utf-8"), True),
             "wb-big-titles": _packed(codes, True),
             "wb-big-ids": _packed("\n".join(ids).encode("utf-8"), True),
             "wb-big-years": _packed(year_numbers(meta).tobytes(), True)}
    for p, (c, box) in enumerate(zip(coords_by_preset.values(), boxes)):
        blobs[f"wb-big-xy-{p}"] = _packed(quantised(as_coords(c), box).tobytes())
    return boxes, blobs


@dataclass
class LargeLayers:
    """What `add_layers` put on the figure: the density renderers (preset by preset, level by level), the
    source of the papers drawn on zoom, the source of the search's matches, and the per-preset extents."""

    density: list
    zoom: object
    hits: object
    boxes: list
    points_in_view: int

    def args(self, fig) -> dict:
        """The CustomJS arguments of the zoom redraw."""
        return dict(fig=fig, density=self.density, zoom=self.zoom, levels=DENSITY_LEVELS, limit=self.points_in_view)


def add_layers(fig, coords_by_preset: dict, boxes: list, points_in_view: int) -> LargeLayers:
    """Put the density levels under the sample's points, and the zoom's points and the search's rings over
    them; fix the map's ranges to the first preset's extent and redraw on every zoom or pan."""
    from bokeh.models import ColumnDataSource, CustomJS, HoverTool, Range1d

    renderers = list(fig.renderers)
    width, height = fig.width, fig.height
    density = []
    for p, coords in enumerate(coords_by_preset.values()):
        for level in range(DENSITY_LEVELS):
            tiles = ColumnDataSource(density_tiles(as_coords(coords), boxes[p], width, height, level))
            density.append(fig.image_url(url="url", x="x", y="y", w="w", h="h", anchor="top_left", source=tiles,
                                         visible=p == 0 and level == 0, name=f"density_{p}_{level}"))
    empty = {"x": [], "y": [], "title": [], "year": []}
    zoom = ColumnDataSource(dict(empty), name="zoom_points")
    zoomed = fig.scatter("x", "y", source=zoom, size=5, color="#444444", alpha=0.55, name="zoom_glyph")
    hits = ColumnDataSource(dict(empty), name="search_hits")
    ringed = fig.scatter("x", "y", source=hits, size=16, marker="circle", fill_alpha=0, line_color="#d62728",
                         line_width=2.5, name="hits_glyph")
    # Bokeh escapes @field values in tuple tooltips: a title cannot inject markup.
    fig.add_tools(HoverTool(renderers=[zoomed, ringed], tooltips=[("title", "@title"), ("year", "@year")]))
    fig.renderers = density + [zoomed] + renderers + [ringed]  # density under everything, rings on top
    x0, x1, y0, y1 = boxes[0]
    fig.x_range, fig.y_range = Range1d(x0, x1, name="x_range"), Range1d(y0, y1, name="y_range")
    layers = LargeLayers(density, zoom, hits, boxes, points_in_view)
    redraw = CustomJS(args=layers.args(fig), code=_ZOOM_JS)
    for r in (fig.x_range, fig.y_range):
        r.js_on_change("start", redraw)
        r.js_on_change("end", redraw)
    return layers


def large_controls(fig, layers: LargeLayers, source, select, names: list[str]):
    """The search box over every paper, the selection's status, Clear and the two downloads, wired to the
    page's JavaScript (PREPARE_JS); the preset picker also switches density and coordinates. Returns
    (search, search status, [clear, csv, ris], selection status)."""
    from bokeh.models import Button, CustomJS, Div, TextInput

    select.js_on_change("value", CustomJS(args=dict(names=names, hits=layers.hits, **layers.args(fig)),
                                          code=_PRESET_JS))
    status = Div(text="", name="search_status", width=200, render_as_text=True)
    search = TextInput(title="Search every title", placeholder="substring, any case", name="search", width=300)
    search.js_on_change("value_input", CustomJS(args=dict(
        fig=fig, hits=layers.hits, status=status, shown_hits=SHOWN_HITS, centre_hits=CENTRE_HITS,
        zoom_on_hit=ZOOM_ON_HIT), code=_SEARCH_JS))
    picked = Div(text="", name="export_status", width=300, render_as_text=True)
    fig.js_on_event("selectiongeometry", CustomJS(args=dict(status=picked), code=_PICK_JS))
    clear = Button(label="Clear selection", name="clear_selection", width=200)
    clear.js_on_click(CustomJS(args=dict(source=source, status=picked), code=_CLEAR_JS))
    buttons = [clear]
    for fmt in ("csv", "ris"):
        button = Button(label=f"Download selection ({fmt.upper()})", name=f"export_{fmt}", width=200)
        button.js_on_click(CustomJS(args=dict(format=fmt, status=picked), code=_EXPORT_JS))
        buttons.append(button)
    return search, status, buttons, picked


def hint_html(n: int, sample: int, points_in_view: int) -> str:
    """What the large page says under its buttons."""
    return (f"<small>{n:,} papers, drawn as density with {min(sample, n):,} of them as points. Zoom in until "
            f"at most {points_in_view:,} are in view to see each paper there. The search covers every title. "
            "Lasso or box-select an area: the buttons download its papers' ids, titles and years (every paper "
            "when nothing is selected).</small>")


def sample_details(details, keep: np.ndarray):
    """`details` (a page.PresetDetails) with each per-paper list cut to the sampled rows `keep`."""
    def cut(by, dtype):
        return None if by is None else {k: np.asarray(v, dtype=dtype)[keep] for k, v in by.items()}

    return replace(details, questions_by_preset=cut(details.questions_by_preset, object),
                   regions_by_preset=cut(details.regions_by_preset, None))
