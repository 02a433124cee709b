"""The page of a large map (`largepage`): 20,000 papers drawn as a large page (the sample forced to 2,000),
its compact paper index read back in Python, and one headless-Chromium test of zoom, search and download."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re

import numpy as np
import pandas as pd
import pytest

from workbench.maps import largepage
from workbench.maps.mapview import as_text
from workbench.maps.page import PageOptions, export_html, page_document

N, SAMPLE, IN_VIEW = 20_000, 2_000, 1_500
HOSTILE = "<script>document.title='PWNED'</script> & \"quoted\"\nsecond line"
OPTIONS = PageOptions(large_from=10_000, sample=SAMPLE, points_in_view=IN_VIEW, width=500, height=320)


def papers(n: int = N, seed: int = 0):
    """n papers in 12 clusters: coordinates, and meta with ids, titles (one hostile), years (some missing)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-40, 40, size=(12, 2))
    coords = centres[rng.integers(12, size=n)] + rng.normal(size=(n, 2)) * 3
    words = np.array([f"w{k}" for k in range(400)])
    titles = [f"paper {i} " + " ".join(words[rng.integers(400, size=5)]) for i in range(n)]
    titles[7] = HOSTILE
    years = rng.integers(1990, 2026, size=n).astype(float)
    years[::50] = np.nan
    meta = pd.DataFrame({"doc_id": [f"id{i}" for i in range(n)], "title": titles, "year": years})
    meta.loc[9, "doc_id"] = "=HYPERLINK(1)"
    return coords, meta


def blob(html: str, key: str, compressed: bool) -> bytes:
    found = re.search(rf'<script type="application/octet-stream" id="{key}">([^<]*)</script>', html)
    raw = base64.b64decode(found.group(1))
    return gzip.decompress(raw) if compressed else raw


def read_titles(vocab: list[str], codes: bytes) -> list[str]:
    """The titles back from `largepage.title_codes`, as the page's JavaScript reads them."""
    titles, words, value, shift = [], [], 0, 0
    for c in codes:
        value += (c & 127) << shift
        if c & 128:
            shift += 7
            continue
        if value == 0:
            titles.append(" ".join(words))
            words = []
        else:
            words.append(vocab[value - 1])
        value, shift = 0, 0
    return titles


def test_titles_travel_as_word_codes():
    titles = ["", "a b", "b"] + [f"w{k} b" for k in range(20_000)] + ["<i>x</i> b"]
    vocab, codes = largepage.title_codes(titles)
    assert vocab[0] == "b" and len(vocab) == 20_003  # the most frequent word first: one byte
    assert read_titles(vocab, codes) == titles
    assert len(codes) < sum(len(t) + 1 for t in titles)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    coords, meta = papers()
    labels = [(float(x), float(y), f"region {k} <b>") for k, (x, y) in enumerate(coords[:4], start=1)]
    presets = {"only": coords, "mirrored": coords * [-1, 1]}
    path = export_html(tmp_path_factory.mktemp("large") / "map.html", presets, meta,
                       {"only": labels, "mirrored": labels}, title="Large <map>", options=OPTIONS)
    return path, coords, meta


def test_a_large_map_is_a_sample_of_points_and_every_paper_in_compact_form(large):
    path, coords, meta = large
    html = path.read_text(encoding="utf-8")
    assert path.stat().st_size < 3e6  # 20,000 papers: every title, id, year and place, and the density
    doc = json.loads(page_document(path))
    assert doc["doc"]  # BokehJS's document reads back
    head = json.loads(blob(html, "wb-big-head", False))
    assert head["n"] == N and len(head["extent"]) == 2
    vocab = blob(html, "wb-big-vocab", True).decode("utf-8").split("\n")
    assert read_titles(vocab, blob(html, "wb-big-titles", True)) == [as_text(t) for t in meta["title"]]
    ids = blob(html, "wb-big-ids", True).decode("utf-8").split("\n")
    assert ids == meta["doc_id"].tolist()
    years = np.frombuffer(blob(html, "wb-big-years", True), dtype="<i2")
    assert (years[::50] == largepage.NO_YEAR).all() and years[1] == meta["year"][1]
    xy = np.frombuffer(blob(html, "wb-big-xy-0", False), dtype="<u2").astype(float)
    x0, x1, y0, y1 = head["extent"][0]
    back = np.stack([x0 + xy[:N] * (x1 - x0) / 65535, y0 + xy[N:] * (y1 - y0) / 65535], axis=1)
    assert np.abs(back - coords).max() <= (x1 - x0) / 65535  # quantised to a 65,535th of the map
    # Paper text only as base64 data and in the Bokeh document: never as markup.
    assert "PWNED" not in html and "<map>" not in html and "Large &lt;map&gt;" in html


def test_the_sample_is_seeded_and_the_tiles_cover_the_papers():
    keep = largepage.sample_rows(N, SAMPLE)
    assert len(set(keep)) == SAMPLE and (np.diff(keep) > 0).all()
    assert (keep == largepage.sample_rows(N, SAMPLE)).all() and len(largepage.sample_rows(10, SAMPLE)) == 10
    coords = np.array([[0.0, 0.0], [1.0, 1.0], [0.1, 0.05]])
    box = largepage.extent(coords, 2.0)
    assert (box[1] - box[0]) / (box[3] - box[2]) == pytest.approx(2.0)
    tiles = largepage.density_tiles(coords, box, 40, 20, level=1)
    # Four tiles of 40 x 20 pixels; the papers sit in the bottom-left and top-right ones only.
    assert len(tiles["url"]) == 2 and all(u.startswith("data:image/png;base64,") for u in tiles["url"])
    assert tiles["w"][0] == pytest.approx((box[1] - box[0]) / 2)


def test_below_the_threshold_or_without_datashader_the_page_is_the_small_page(tmp_path, monkeypatch):
    coords, meta = papers(200)
    path = export_html(tmp_path / "map.html", {"only": coords}, meta, options=PageOptions(large_from=200))
    assert "wb-big-head" not in path.read_text(encoding="utf-8")
    monkeypatch.setattr(largepage, "density_available", lambda: False)
    with pytest.warns(UserWarning, match="scale"):
        path = export_html(tmp_path / "map.html", {"only": coords}, meta, options=PageOptions(large_from=100))
    assert "wb-big-head" not in path.read_text(encoding="utf-8")


# Run in the page: zoom onto a paper, search a title, pick a box, download it; hand back what each showed.
GESTURES = """
const done = arguments[arguments.length - 1], [x, y, w, h, title, row] = arguments;
const settle = () => new Promise(ok => setTimeout(ok, 150));
(async () => {
  const d = Bokeh.documents[0], B = window.wbBig, out = {};
  const zoom = d.get_model_by_name("zoom_points"), hits = d.get_model_by_name("search_hits");
  out.full_view = [zoom.data.x.length, d.get_model_by_name("points").data.x.length];
  d.get_model_by_name("x_range").setv({start: x - w, end: x + w});
  d.get_model_by_name("y_range").setv({start: y - h, end: y + h});
  await settle();
  out.zoomed = [zoom.data.x.length, B.level];
  d.get_model_by_name("search").value_input = title;
  await settle();
  out.search = [hits.data.title, d.get_model_by_name("search_status").text, B.search(title, 10).rows];
  out.centre = [d.get_model_by_name("x_range").start, d.get_model_by_name("x_range").end];
  B.picked = B.pick({type: "rect", x0: x - w, x1: x + w, y0: y - h, y1: y + h});
  const made = [], RealBlob = window.Blob;
  window.Blob = function (parts, options) { made.push(parts.join("")); return new RealBlob(parts, options); };
  HTMLAnchorElement.prototype.click = function () {};
  const button = d.get_model_by_name("export_csv");
  await button.js_event_callbacks["button_click"][0].execute(button, {});
  out.csv = made[0];
  out.status = d.get_model_by_name("export_status").text;
  return out;
})().then(done, error => done({error: String(error) + " " + error.stack}));
"""


@pytest.mark.slow
def test_in_chromium_a_zoom_shows_points_and_search_finds_papers_outside_the_sample(large, tmp_path):
    from lab_harness import Browser, chromium_paths

    if chromium_paths() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium, chromium-driver and selenium are required in CI")
        pytest.skip("chromium or chromium-driver missing")
    path, coords, meta = large
    keep = set(largepage.sample_rows(N, SAMPLE).tolist())
    row = next(k for k in range(100, N) if k not in keep)
    box = largepage.extent(coords, OPTIONS.width / OPTIONS.height)
    w, h = (box[1] - box[0]) / 32, (box[3] - box[2]) / 32
    x, y = coords[row]
    browser = Browser(tmp_path / "profile")
    try:
        browser.driver.get(path.as_uri())
        browser.wait(lambda: browser.js("return window.wbEmbedded !== undefined")
                     and browser.images_drawn("density_0_0"), 20, "the page was not drawn", every=0.05)
        browser.driver.set_script_timeout(20)
        assert not browser.images_drawn("density_0_2")  # the finest level waits for a zoom
        out = browser.driver.execute_async_script(GESTURES, float(x), float(y), w, h, meta["title"][row], row)
        browser.wait(lambda: browser.images_drawn("density_0_2"), 10, "the zoom's density level was not drawn")
        hostile = browser.js("return window.wbBig.search(arguments[0], 5).rows", "document.title='PWNED'")
        picked, in_view = box_select(browser)
        browser.js('Bokeh.documents[0].get_model_by_name("preset").value = "mirrored";')
        browser.wait(lambda: browser.js("return window.wbBig.preset") == 1, 5, "the preset did not switch", every=0.05)
        preset = browser.js("""const d = Bokeh.documents[0];
            const shown = p => [0, 1, 2].some(k => d.get_model_by_name(`density_${p}_${k}`).visible);
            return [window.wbBig.preset, shown(1), shown(0)]""")
        page_title = browser.driver.title
    finally:
        browser.close()
    assert "error" not in out, out.get("error")
    assert out["full_view"] == [0, SAMPLE]  # the whole map: density and the sample's points only
    inside = ((np.abs(coords[:, 0] - x) <= w) & (np.abs(coords[:, 1] - y) <= h)).sum()
    assert 0 < inside <= IN_VIEW and abs(out["zoomed"][0] - inside) <= 2 and out["zoomed"][1] == 2
    titles, status, rows = out["search"]
    assert meta["title"][row] in titles and row in rows and status.endswith(("matches", "match"))
    assert out["centre"][0] < x < out["centre"][1]  # the map centred on the one match
    lines = out["csv"].strip("\r\n").split("\r\n")
    assert lines[0] == '"doc_id","title","year"' and abs(len(lines) - 1 - inside) <= 2
    year = meta["year"][row]
    assert f'"id{row}","{meta["title"][row]}","{"" if np.isnan(year) else int(year)}"' in lines
    assert out["status"] == f"exported {len(lines) - 1:,} selected papers as CSV"
    assert hostile == [7] and page_title == "Large <map>"  # found as text, never run
    assert re.fullmatch(r"[\d,]+ papers selected", picked) and 0 < int(picked.split()[0].replace(",", "")) <= in_view
    assert preset == [1, True, False]  # the other preset's places and density


def box_select(browser) -> tuple[str, int]:
    """Drag the box-select tool over the middle of the map with real mouse events; (the selection's status,
    how many papers the view holds)."""
    import time

    browser.js('Bokeh.documents[0].get_model_by_name("box_select").active = true;')
    left, top, right, bottom = browser.map_points()["frame"]
    path = [(left + (right - left) * f, top + (bottom - top) * f) for f in (0.3, 0.4, 0.5, 0.6, 0.7)]
    for i, (x, y) in enumerate(path):
        kind = "mousePressed" if i == 0 else ("mouseReleased" if i == len(path) - 1 else "mouseMoved")
        for event in (["mouseMoved"] if i == 0 else []) + [kind]:
            browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": event, "x": x, "y": y, "button": "left", "buttons": 1 if event != "mouseReleased" else 0,
                "clickCount": 1})
        time.sleep(0.05)
    time.sleep(0.3)
    return (browser.js('return Bokeh.documents[0].get_model_by_name("export_status").text'),
            browser.js("return window.wbBig.in_view"))
