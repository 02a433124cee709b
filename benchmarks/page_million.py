"""The standalone map page at a million papers: its size, its opening in headless Chromium, a zoom, a search.

Papers: `_million.papers` (seeded, three aspects of 384 dimensions, two-level clusters). A t-SNE layout of a
million papers takes longer than this benchmark should, so each preset's 2-D coordinates are a cheap linear
projection of one aspect's vectors: the 384 x 2 matrix that sends each of the generator's 30 topic centres
to a seeded point of a disc (least squares), so topics land apart and subtopics spread around them, as a
map's clusters do. One preset per aspect (--presets). Titles: 6 to 14 words drawn (Zipf) from 20,000 random
words, about 90 characters as real titles are; ids "W0000001"...; years 1950 to 2026. Regions: k-means of
the map (8), labelled "region k".

Measured: the export's time, the page's size (bar: 50 MB), the time from opening the file until BokehJS has
drawn the page, the density image and the sample's points included (bar: 10 s), a zoom onto a random paper
at 1/16 of the map's width (bar: every paper in view drawn as a point), and a title search for 20 random
papers outside the drawn sample (bar: all 20 found: the search box's matches hold the paper; each search
timed from typing to the matches in the page's data, through Selenium's round trips).

    nice .venv/bin/python benchmarks/page_million.py [--papers 1000000] [--presets 3] [--sample 20000]
        [--searches 20] [--seed 0] [--smoke [--browser]]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 3,000 papers of 16 dimensions, one preset, drawn as a large page from
1,000 papers with a sample of 300 on a 400 x 260 map, and no browser (tests/test_largepage.py opens such a
page in Chromium); --smoke --browser opens it too. Outside smoke the browser part runs when Chromium is installed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

import _million  # noqa: E402

from workbench.maps.largepage import sample_rows  # noqa: E402
from workbench.maps.page import PageOptions, export_html  # noqa: E402


def projected(n: int, aspect: int, seed: int, dim: int) -> np.ndarray:
    """One aspect's papers projected to 2-D (the module doc): topic centres sent to points of a disc."""
    vectors = _million.papers(n, seed=seed + aspect, dim=dim, aspects=("a",))["a"]
    # The generator's first draw is its topic centres (`_million.papers`): the same seed gives them again.
    rng = np.random.default_rng(seed + aspect)
    centres = rng.standard_normal((_million.TOPICS, dim)).astype(np.float32) / np.sqrt(dim)
    place = np.random.default_rng(100 + seed + aspect)
    angle, radius = place.uniform(0, 2 * np.pi, _million.TOPICS), 40 * np.sqrt(place.uniform(0, 1, _million.TOPICS))
    anchors = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    matrix = np.linalg.lstsq(centres, anchors, rcond=None)[0].astype(np.float32)  # dim x 2
    return np.asarray(vectors @ matrix, dtype=np.float64)


def titles(n: int, seed: int, vocabulary: int = 20_000) -> list[str]:
    """n random titles of 6 to 14 words, Zipf-distributed over `vocabulary` random lowercase words."""
    rng = np.random.default_rng(seed)
    letters = rng.integers(ord("a"), ord("z") + 1, size=(vocabulary, 10), dtype=np.uint8)
    words = np.array([bytes(row[:k]).decode("ascii") for row, k in zip(letters, rng.integers(3, 11, size=vocabulary))])
    weights = 1 / np.arange(1, len(words) + 1)
    lengths = rng.integers(6, 15, size=n)
    picks = rng.choice(len(words), size=int(lengths.sum()), p=weights / weights.sum())
    ends = np.cumsum(lengths)
    return [" ".join(words[picks[e - k:e]]).capitalize() for e, k in zip(ends, lengths)]


def inputs(n: int, presets: int, seed: int, dim: int):
    """(coordinates by preset, meta, region numbers by preset, labels by preset) of n synthetic papers."""
    import pandas as pd

    from workbench.maps.mapview import cluster_labels

    coords = {f"{a} first": projected(n, i, seed, dim) for i, a in enumerate(_million.ASPECTS[:presets])}
    rng = np.random.default_rng(seed)
    meta = pd.DataFrame({"doc_id": [f"W{i:07d}" for i in range(1, n + 1)], "title": titles(n, seed),
                         "year": rng.integers(1950, 2027, size=n)})
    regions, labels = {}, {}
    for name, c in coords.items():
        numbers = cluster_labels(c, 8) + 1
        regions[name] = numbers
        labels[name] = [(float(c[numbers == m, 0].mean()), float(c[numbers == m, 1].mean()), f"region {m}")
                        for m in range(1, 9)]
    return coords, meta, regions, labels


def in_browser(page: Path, meta, coords: dict, keep: np.ndarray, searches: int, seed: int) -> dict:
    """Open the page in headless Chromium: time to drawn, a zoom's points, and the searches found."""
    from lab_harness import Browser, chromium_paths

    if chromium_paths() is None:
        print("chromium or chromium-driver missing: no browser figures")
        return {}
    browser = Browser(Path(tempfile.mkdtemp(prefix="page-million-")) / "profile")
    browser.driver.set_script_timeout(120)
    out = {}
    try:
        start = time.perf_counter()
        browser.driver.get(page.as_uri())
        browser.wait(lambda: browser.js("return window.wbEmbedded !== undefined")
                     and browser.images_drawn("density_0_0") and browser.map_points(), 120,
                     "the page was not drawn", every=0.05)
        out["drawn_s"] = time.perf_counter() - start
        out["embedded_ms"] = browser.js("return window.wbEmbedded")
        first = next(iter(coords.values()))
        rng = np.random.default_rng(seed)
        k = int(rng.integers(len(first)))
        box = browser.js("return window.wbBig.extent[0]")
        w, h = (box[1] - box[0]) / 16, (box[3] - box[2]) / 16
        t = time.perf_counter()
        browser.js("""const d = Bokeh.documents[0], [x, y, w, h] = arguments;
            d.get_model_by_name('x_range').setv({start: x - w, end: x + w});
            d.get_model_by_name('y_range').setv({start: y - h, end: y + h});""",
                   float(first[k, 0]), float(first[k, 1]), w / 2, h / 2)
        browser.wait(lambda: browser.js("return window.wbBig.in_view") > 0, 30, "the zoom drew no points", every=0.02)
        out["zoom_s"] = time.perf_counter() - t
        out["zoom_points"] = browser.js("return Bokeh.documents[0].get_model_by_name('zoom_points').data.x.length")
        outside = np.setdiff1d(np.arange(len(meta)), keep)
        found, times = 0, []
        for row in rng.choice(outside, size=min(searches, len(outside)), replace=False):
            title = str(meta["title"].iloc[row])
            t = time.perf_counter()
            browser.js("Bokeh.documents[0].get_model_by_name('search').value_input = arguments[0];", title)
            browser.wait(lambda: title in browser.js(
                "return Bokeh.documents[0].get_model_by_name('search_hits').data.title"), 30, "no match", every=0.02)
            times.append(time.perf_counter() - t)
            hit = browser.js("return window.wbBig.search(arguments[0], 2000).rows.includes(arguments[1])", title,
                             int(row))
            found += bool(hit)
        out["searched"], out["found"] = len(times), found
        out["search_s"] = (float(np.median(times)), max(times)) if times else (float("nan"),) * 2
    finally:
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, default=1_000_000)
    parser.add_argument("--presets", type=int, default=3)
    parser.add_argument("--sample", type=int, default=20_000)
    parser.add_argument("--searches", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--browser", action="store_true", help="with --smoke: open the page in Chromium too")
    args = parser.parse_args()
    smoke = args.smoke or os.environ.get("WORKBENCH_BENCH_SMOKE") == "1"
    n, dim = (3_000, 16) if smoke else (args.papers, _million.DIM)
    args.presets = 1 if smoke else args.presets
    options = (PageOptions(large_from=1_000, sample=300, points_in_view=300, width=400, height=260) if smoke
               else PageOptions(sample=args.sample))
    print(f"date {datetime.date.today()}, load {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs; "
          f"{n:,} papers, {args.presets} presets, sample {options.sample:,}")
    t = time.perf_counter()
    coords, meta, regions, labels = inputs(n, args.presets, args.seed, dim)
    print(f"inputs {time.perf_counter() - t:.1f} s")
    from workbench.maps.page import PresetDetails

    page = Path(tempfile.mkdtemp(prefix="page-million-")) / "map.html"
    t = time.perf_counter()
    export_html(page, coords, meta, labels, title=f"{n:,} synthetic papers", options=options,
                details=PresetDetails(regions_by_preset=regions))
    export_s = time.perf_counter() - t
    size = page.stat().st_size / 1e6
    got = (in_browser(page, meta, coords, sample_rows(n, options.sample), 3 if smoke else args.searches, args.seed)
           if args.browser or not smoke else {})
    print("| papers | presets | export s | page MB | drawn s | zoom s | points in zoom | searches found | "
          "search s, median / slowest |")
    print("|---|---|---|---|---|---|---|---|---|")
    search = got.get("search_s", (float("nan"),) * 2)
    print(f"| {n:,} | {args.presets} | {export_s:.1f} | {size:.1f} | {got.get('drawn_s', float('nan')):.2f} | "
          f"{got.get('zoom_s', float('nan')):.2f} | {got.get('zoom_points', 0)} | "
          f"{got.get('found', 0)} of {got.get('searched', 0)} | {search[0]:.2f} / {search[1]:.2f} |")
    print(f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
