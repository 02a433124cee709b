"""The map pane at a million papers, drawn as density: the kernel's side of a zoom, a tap and a weight step.

A t-SNE layout of a million papers takes longer than this benchmark should (benchmarks/map_million.py times
that), so the map here is cheap 2-D coordinates with the structure of `_million.papers`: TOPICS topic
centres spread over the plane, SUBTOPICS subtopic clusters around each, each paper a Gaussian step from its
subtopic (seeded). The pane (`MapPane`, its default `PaneView`: density above 200,000 papers, points once a
view holds 10,000 or fewer) is built on them, coloured by its 8 regions, with titles and years; then, each
timed in the kernel (what a browser's message sets off, before the reply travels):

  build     the pane: region numbers, the hover's template, the whole map's first image;
  zoom      a view request (what the browser sends once the ranges rest) at each step of a zoom into one
            subtopic, halving the view: an image while the view holds more than 10,000 papers, then points;
  tap       a tap (the nearest paper, within the hit radius, from an exact scan of the 2-D coordinates) on
            random spots, with a stand-in `on_tap` that returns the paper's title (decoding is not the pane's);
  weight    a weight step whose layout is the map turned: its first frame (drawn as soon as `on_weights` hands
            it over; FRAME_PAUSE, the rest after it, set to 0 here) and the settled map (new region numbers
            and the whole map's image).

With --browser, the same pane in a real JupyterLab in headless Chromium (tests/lab_harness.py), each timed
from the input event: a wheel zoom (three clicks) until the image is redrawn; the ranges set, as a box zoom
ends, to the largest view around one subtopic (9 wide, or 10% narrower at a time) that holds at most
--few papers (8,821 of a million), until the page holds them as points; a tap on a
paper of a smaller view until its title is read; a weight step until its first frame, then its settled map.

    nice .venv/bin/python benchmarks/pane_million.py [--papers 1000000] [--taps 20] [--browser] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 10,000 papers, density above 2,000 and points at 500 or fewer.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import numpy as np  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _million import SUBTOPICS, TOPICS  # noqa: E402
from _smoke import add_smoke  # noqa: E402

# The map's data, as a cell of its own: the browser's notebook runs it too.
DATA = """
import numpy as np, pandas as pd
rng = np.random.default_rng({seed})
n = {papers}
topics = rng.uniform(0, 100, size=({topics}, 2))
subtopics = topics[:, None, :] + rng.normal(scale=4.0, size=({topics}, {subtopics}, 2))
paper_topic, paper_sub = rng.integers({topics}, size=n), rng.integers({subtopics}, size=n)
coords = subtopics[paper_topic, paper_sub] + rng.normal(scale=0.6, size=(n, 2))
meta = pd.DataFrame({{"doc_id": [f"p{{i}}" for i in range(n)], "title": [f"Paper number {{i}}" for i in range(n)],
                     "year": 1990 + np.arange(n) % 35}})
"""
PANE = """
import html
from workbench.maps import pane as pane_module
from workbench.maps.options import PaneCallbacks, PaneView
from workbench.maps.pane import MapPane

def turned(angle):
    return coords @ np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])

frames = []

def on_weights(weights, on_frame=None):
    frame = turned(np.pi * weights["task"] / 2)  # the stand-in layout's own time is not the pane's
    start = time.perf_counter()
    on_frame(frame)
    frames.append(time.perf_counter() - start)
    return turned(np.pi * weights["task"])

def on_tap(x, y, index):
    return "<h4>Empty spot</h4>" if index is None else f"<h4>Tapped: {{html.escape(meta.title[index])}}</h4>"

pane = MapPane(coords, meta, ["task", "method"], {{"task": 0.5, "method": 0.5}}, on_weights=on_weights,
               callbacks=PaneCallbacks(on_tap=on_tap), view=PaneView(density_above={above}, points_in_view={few}))
"""


def kernel_side(args, namespace: dict) -> dict:
    """Build the pane, zoom into one subtopic, tap, step a weight; the times in seconds."""
    import time as clock

    namespace["time"] = clock
    from workbench.maps import pane as pane_module

    pane_module.FRAME_PAUSE = 0.0  # the kernel's own time; the pause only lets a browser paint
    start = clock.perf_counter()
    exec(PANE.format(above=args.above, few=args.few), namespace)
    built = clock.perf_counter() - start
    pane, coords = namespace["pane"], namespace["coords"]
    centre = namespace["subtopics"][0, 0]
    (x0, x1), (y0, y1) = pane.drawn_view.x_range, pane.drawn_view.y_range
    half = max(x1 - x0, y1 - y0) / 2
    zooms = []
    while True:
        half /= 2
        start = clock.perf_counter()
        view = pane.request_view({"x0": [centre[0] - half], "x1": [centre[0] + half],
                                  "y0": [centre[1] - half], "y1": [centre[1] + half]})
        took = clock.perf_counter() - start
        zooms.append((2 * half, int(view.holds(coords).sum()), "points" if len(pane.shown) else "image", took))
        if len(pane.shown) or half < 1e-3:
            break
    rng = np.random.default_rng(1)
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    taps = []
    for x, y in rng.uniform(lo, hi, size=(args.taps, 2)):
        start = clock.perf_counter()
        pane.tap(float(x), float(y))
        taps.append(clock.perf_counter() - start)
    start = clock.perf_counter()
    pane.set_weights({"task": 0.55, "method": 0.45})
    settled = clock.perf_counter() - start
    return {"build": built, "zooms": zooms, "taps": taps, "first": namespace["frames"][-1], "settled": settled}


def browser_side(args, tmp: Path) -> dict:
    """The same pane in JupyterLab in headless Chromium: a zoom, a tap, a weight step, from the input event."""
    sys.path.insert(0, str(ROOT / "tests"))
    from lab_harness import Browser, JupyterLab, notebook

    root = tmp / "root"
    root.mkdir(parents=True)
    data = DATA.format(seed=args.seed, papers=args.papers, topics=TOPICS, subtopics=SUBTOPICS)
    notebook(root / "million.ipynb", ["import time\n" + data + PANE.format(above=args.above, few=args.few), "pane"])
    with JupyterLab(root, tmp / "home") as server:
        browser = Browser(tmp / "profile")
        try:
            return timed_gestures(browser, server, data, args.few)
        finally:
            browser.close()


def timed_gestures(browser, server, data: str, few: int) -> dict:
    """Open the notebook, then time a wheel zoom, a tap on a paper once points show, and a weight step."""
    browser.open(server.notebook_url("million.ipynb"), timeout=300)
    browser.run_all(timeout=600)
    browser.wait(lambda: (browser.density_image() or {}).get("x") is not None, 120, "no density image")
    out, image = {}, browser.density_image()
    browser.js("document.querySelector('.wb-map').scrollIntoView({block: 'center'})")
    time.sleep(0.5)
    left, top, right, bottom = browser.map_points()["frame"]
    start = time.perf_counter()
    browser.zoom_map((left + right) / 2, (top + bottom) / 2, 3)
    browser.wait(lambda: browser.density_image()["x"] != image["x"], 30, "the zoom was not redrawn", every=0.02)
    out["zoom"] = time.perf_counter() - start
    namespace: dict = {}
    exec(data, namespace)
    cx, cy = namespace["subtopics"][0, 0]
    coords, half = namespace["coords"], 4.5  # at a million papers 4.5 holds about 15,600 (the zoom's last step)
    while np.count_nonzero((np.abs(coords[:, 0] - cx) <= half) & (np.abs(coords[:, 1] - cy) <= half)) > few:
        half *= 0.9  # the largest view (of these) that the pane draws as points
    start = time.perf_counter()
    browser.set_map_view(cx - half, cx + half, cy - half, cy + half)  # the kernel's largest view of points
    browser.wait(lambda: browser.density_image()["points"] > 0, 30, "no points in a small view", every=0.02)
    out["points"], out["shown"] = time.perf_counter() - start, browser.density_image()["points"]
    browser.set_map_view(cx - 0.3, cx + 0.3, cy - 0.3, cy + 0.3)
    browser.wait(lambda: 0 < browser.density_image()["points"] < out["shown"], 30, "no points in a small view")
    points = browser.map_points()
    middle = ((left + right) / 2, (top + bottom) / 2)
    k = int(np.argmin(np.hypot(np.array(points["px"]) - middle[0], np.array(points["py"]) - middle[1])))
    start = time.perf_counter()
    browser.click_at(points["px"][k], points["py"][k])
    title = points["title"][k]
    readout = "const e = document.querySelector('.wb-readout'); return e ? e.innerText : '';"
    browser.wait(lambda: f"Tapped: {title}" in browser.js(readout), 30, "the tap was not read", every=0.02)
    out["tap"] = time.perf_counter() - start
    image = browser.density_image()
    start = browser.type_weight("task", "0.60")
    browser.wait(lambda: browser.density_image()["x"] != image["x"], 60, "no first frame", every=0.02)
    out["first"] = time.perf_counter() - start
    browser.wait(lambda: "Layout:" in browser.js(readout), 120, "no settled layout")
    out["settled"] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, default=1_000_000)
    parser.add_argument("--above", type=int, default=200_000, help="PaneView.density_above")
    parser.add_argument("--few", type=int, default=10_000, help="PaneView.points_in_view")
    parser.add_argument("--taps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--browser", action="store_true", help="also time the pane in JupyterLab, headless Chromium")
    add_smoke(parser, papers=10_000, above=2_000, few=500, taps=3)
    args = parser.parse_args()
    print(f"# the map pane drawn as density — {datetime.date.today()}, {args.papers} papers (cheap 2-D coordinates, "
          f"{TOPICS} x {SUBTOPICS} clusters), density above {args.above}, points at {args.few} or fewer, "
          f"load {os.getloadavg()[0]:.2f}, {matmul_gflops():.0f} GFLOP/s")
    namespace: dict = {}
    start = time.perf_counter()
    exec(DATA.format(seed=args.seed, papers=args.papers, topics=TOPICS, subtopics=SUBTOPICS), namespace)
    print(f"(map data made in {time.perf_counter() - start:.1f} s)", flush=True)
    got = kernel_side(args, namespace)
    print("\n| kernel's side | seconds |\n|---|---:|")
    print(f"| build the pane | {got['build']:.2f} |")
    for width, held, drawn, took in got["zooms"]:
        print(f"| zoom to a view {width:.3g} wide, {held} papers, as {drawn} | {took:.3f} |")
    print(f"| tap, median of {len(got['taps'])} (max {max(got['taps']):.3f}) | {np.median(got['taps']):.3f} |")
    print(f"| weight step: first frame | {got['first']:.3f} |")
    print(f"| weight step: settled (region numbers, whole map) | {got['settled']:.2f} |")
    if args.browser:
        import tempfile

        del got, namespace  # the kernel in JupyterLab holds its own copy
        with tempfile.TemporaryDirectory() as tmp:
            seen = browser_side(args, Path(tmp))
        print("\n| in JupyterLab, headless Chromium | seconds |\n|---|---:|")
        print(f"| wheel zoom to the image redrawn | {seen['zoom']:.2f} |")
        print(f"| box zoom to {seen['shown']} papers shown as points | {seen['points']:.2f} |")
        print(f"| tap on a paper to its title | {seen['tap']:.2f} |")
        print(f"| weight step: first frame | {seen['first']:.2f} |")
        print(f"| weight step: settled | {seen['settled']:.2f} |")


if __name__ == "__main__":
    main()
