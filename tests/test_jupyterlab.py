"""The map pane in a real JupyterLab, in headless Chromium: what a user sees, not what Python objects hold.

One JupyterLab on loopback serves three notebooks built on a small run (tests/lab_harness.py):
the pane as the README shows it (`explorer.pane()`), the same with BokehJS loading switched off
(the negative control: the test must see jupyter_bokeh's error there, or it could pass on a page
that draws nothing), and notebook 05 itself with the small run's parameters, run with Run All.
Every gesture is a real input event (clicks at page coordinates, typing); every check reads the
page: pixels of the map, the readout's text, the data sources BokehJS draws from, the console.

Screenshots of the pane after each interaction go to $WORKBENCH_SCREENSHOTS when it is set
(docs/ keeps a set).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from workbench.core.rundir import RunDir

from lab_harness import ASPECTS, CORPUS, TIMED, Browser, JupyterLab, chromium_paths, ink, notebook
from lab_timeline import KERNEL_CELL, PAGE_JS, summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
ABSTRACT = ("We present a dependency parser for low-resource languages that transfers syntax from related "
            "high-resource languages through cross-lingual word embeddings, and report gains on ten treebanks.")
# Console errors that are not the pane's, each with why it is allowed.
ALLOWED = {
    "favicon.ico": "the server has no favicon for a bare page",
    "api/lsp/status": "no language server is installed",
    "/lab/api/listings": "the extension manager's listing is not served offline",
}
WATCHED = ("bokeh", "jupyter_bokeh", "ipywidgets", "jupyter-widgets", "workbench", "Failed to create view")


# What both timed maps share: a slider lays the map out again (a first frame, then the settled map); a tap on a
# paper shows its title; a tap on an empty spot is inverted and read as the retrieval decoder reads it: per
# aspect, the paper whose aspect vector is nearest to the inverted one. Each map's cell defines `emb`, `meta`
# (with titles) and `state["map"]` first.
MAP_PANE = """
import html
from workbench.maps.options import PaneCallbacks
from workbench.maps.pane import MapPane

def on_weights(weights, on_frame=None):
    state["map"] = state["map"].with_weights(weights, on_frame=on_frame)
    return state["map"].coords

def on_tap(x, y, index):
    if index is not None:
        return f"<h4>Tapped: {html.escape(meta.title[index])}</h4>"
    vectors = state["map"].invert(np.array([x, y]))
    read = {a: meta.title[int(np.argmax(emb[a] @ v))] for a, v in vectors.items()}
    return "<h4>Empty spot</h4>" + "".join(f"<p>{a}: {html.escape(t)}</p>" for a, t in read.items())

pane = MapPane(state["map"].coords, meta, list(emb), state["map"].weights, on_weights=on_weights,
               callbacks=PaneCallbacks(on_tap=on_tap))
"""

# A map of 10,000 papers (3 aspects x 64 dimensions, 12 clusters per aspect, as benchmarks/maps.py), laid
# out by openTSNE with short phases to keep the test quick.
PANE_10K = """
import numpy as np, pandas as pd
from workbench.maps import tsne
tsne.EXAGGERATION_ITER = 50
rng = np.random.default_rng(0)
n, aspects = 10_000, ["task", "method", "outcome"]
emb = {}
for a in aspects:
    e = rng.normal(size=(12, 64))[rng.integers(12, size=n)] + 0.6 * rng.normal(size=(n, 64))
    emb[a] = e / np.linalg.norm(e, axis=1, keepdims=True)
meta = pd.DataFrame({"doc_id": [f"p{i}" for i in range(n)], "title": [f"Paper number {i}" for i in range(n)]})
state = {"map": tsne.AspectMap.fit(emb, {"task": 0.5, "method": 0.3, "outcome": 0.2}, method="opentsne", n_iter=50)}
""" + MAP_PANE

# A map of real abstracts: every CSAbstruct paper (`scripts/csabstruct.py`, 2,155 computer-science abstracts,
# the most real abstracts a package or this repository holds offline). Each aspect's vector is the TF-IDF of
# the paper's sentences that people marked for it (challenge ~ background + objective, approach ~ method,
# outcome ~ result; the whole abstract where none), reduced to 64 dimensions: real text and real overlap
# between papers, at no encoder's cost. Laid out as stage 05 lays out a map (`AspectMap.fit`, "auto").
PANE_REAL = f"""
import sys
import numpy as np, pandas as pd
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
sys.path.insert(0, {str(ROOT / "scripts")!r})
import csabstruct
from workbench.maps import tsne
papers = csabstruct.load()
texts = {{a: [" ".join(s for s, r in zip(ss, rr) if r in roles) or " ".join(ss)
             for ss, rr in zip(papers["sentences"], papers["roles"])] for a, roles in csabstruct.ASPECT_ROLES.items()}}
tfidf = TfidfVectorizer(sublinear_tf=True, min_df=2).fit(papers["abstract"])
emb = {{}}
for a, aspect_texts in texts.items():
    e = TruncatedSVD(64, random_state=0).fit_transform(tfidf.transform(aspect_texts))
    emb[a] = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
meta = pd.DataFrame({{"doc_id": papers["doc_id"], "title": [ss[0][:90] for ss in papers["sentences"]]}})
state = {{"map": tsne.AspectMap.fit(emb, {{"challenge": 0.4, "approach": 0.4, "outcome": 0.2}}, seed=0)}}
""" + MAP_PANE

# A map past the pane's density threshold (forced to 2,000 papers, and to 500 papers for points in a view): 20,000
# papers in 40 clusters of cheap 2-D coordinates; a weight turns the map, its first frame halfway.
DENSITY_DATA = """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
n = 20_000
centres = rng.uniform(0, 100, size=(40, 2))
coords = centres[rng.integers(40, size=n)] + rng.normal(size=(n, 2))
"""
PANE_DENSITY = DENSITY_DATA + """
import html
from workbench.maps.options import PaneCallbacks, PaneView
from workbench.maps.pane import MapPane
meta = pd.DataFrame({"doc_id": [f"p{i}" for i in range(n)], "title": [f"Paper number {i}" for i in range(n)]})

def turned(angle):
    return coords @ np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])

def on_weights(weights, on_frame=None):
    on_frame(turned(np.pi * weights["task"] / 2))
    return turned(np.pi * weights["task"])

def on_tap(x, y, index):
    return "<h4>Empty spot</h4>" if index is None else f"<h4>Tapped: {html.escape(meta.title[index])}</h4>"

pane = MapPane(coords, meta, ["task", "method"], {"task": 0.5, "method": 0.5}, on_weights=on_weights,
               callbacks=PaneCallbacks(on_tap=on_tap), view=PaneView(density_above=2_000, points_in_view=500))
"""


def _pane_cells(run: Path, load_bokehjs: bool = True) -> list[str]:
    setup = (f"from workbench.data.corpus import load_corpus\nfrom workbench.maps.explore import Explorer\nfrom workbench.maps.options import MapLayout\n"
             f"docs = load_corpus({CORPUS!r})\n"
             f"explorer = Explorer({str(run)!r}, docs, {ASPECTS!r}, layout=MapLayout(perplexity=5.0, seed=0))")
    if not load_bokehjs:
        setup = "import workbench.maps.pane\nworkbench.maps.pane.LOAD_BOKEHJS = False  # the negative control\n" + setup
    return [setup, "pane = explorer.pane(labels=3)\npane"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if chromium_paths() is None or not _has_selenium():
        if os.environ.get("CI"):
            pytest.fail("chromium, chromium-driver and selenium are required in CI (scripts/setup.sh installs them)")
        pytest.skip("chromium, chromium-driver or selenium missing: run scripts/setup.sh as root")
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    timeline = _timeline()
    notebook(root / "pane_10k.ipynb", [PANE_10K] + ([KERNEL_CELL.format(path=str(timeline / "kernel.jsonl"))]
                                                    if timeline else []) + ["pane"])
    notebook(root / "pane_real.ipynb", [PANE_REAL, "pane"])
    notebook(root / "pane_density.ipynb", [PANE_DENSITY, "pane"])
    with JupyterLab(root, base / "home") as server:
        browser = Browser(base / "profile")
        try:
            yield server, browser, base
        finally:
            browser.close()


@pytest.fixture(scope="module")
def pane_lab(lab, tiny_map_pristine):
    """The lab with a tiny run (a copy of the session's) and the notebooks that read it, made only for the tests
    that open them (the timed tests, which `make test-timed` runs on their own, need neither)."""
    server, browser, base = lab
    run = Path(shutil.copytree(tiny_map_pristine, base / "run"))
    notebook(server.root / "pane.ipynb", _pane_cells(run))
    notebook(server.root / "pane_notebook7.ipynb", _pane_cells(run))  # never opened by Lab: no stale widget outputs
    notebook(server.root / "no_bokehjs.ipynb", _pane_cells(run, load_bokehjs=False))
    _notebook_05(server.root / "05_visualize.ipynb", run, base / "reports")
    return server, browser, run


def _timeline() -> Path | None:
    """The folder WORKBENCH_PANE_TIMELINE names (made), where the 10,000-paper test writes where its time went."""
    folder = os.environ.get("WORKBENCH_PANE_TIMELINE")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder)


def _has_selenium() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


def _notebook_05(path: Path, run: Path, reports: Path) -> None:
    """Notebook 05 as shipped, with the small run's parameters injected the way papermill injects them."""
    import nbformat

    nb = nbformat.read(str(ROOT / "notebooks" / "05_visualize.ipynb"), as_version=4)
    params = {"run_dir": str(run), "report_dir": str(reports), "corpus": CORPUS, "aspect_names": ASPECTS,
              "perplexity": 5.0, "n_labels": 3, "loo_docs": 0, "fit_summaries": None, "export": False}
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    injected = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in params.items()))
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(at + 1, injected)
    nbformat.write(nb, str(path))


def _shots() -> Path | None:
    folder = os.environ.get("WORKBENCH_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return None


def _shot(browser: Browser, name: str) -> None:
    folder = _shots()
    if folder is not None:
        browser.screenshot(folder / f"pane_{name}.png")


def _scroll_to_map(browser: Browser) -> None:
    """Bring the map into view, as a user scrolls back to it (a click outside the window reaches nothing)."""
    browser.js("document.querySelector('.wb-map').scrollIntoView({block: 'center'})")
    time.sleep(0.3)


def _map_ink(browser: Browser) -> int:
    _scroll_to_map(browser)
    return ink(browser.element_png(".wb-map"))


def _readout(browser: Browser) -> str:
    return browser.js("const e = document.querySelector('.wb-readout'); return e ? e.innerText : '';")


def _weights(browser: Browser, aspects=ASPECTS) -> dict[str, float]:
    """The weights the sliders show, per aspect."""
    return {a: float(browser.js(f"return document.querySelector('.wb-weight-{a} .widget-readout').innerText"))
            for a in aspects}


def _watched_errors(browser: Browser) -> list[str]:
    out = []
    for entry in browser.drain_console():
        text = entry.get("message", "")
        if entry.get("level") != "SEVERE" or any(k in text for k in ALLOWED):
            continue
        if any(w.lower() in text.lower() for w in WATCHED):
            out.append(text)
    return out


def _tap_paper(browser: Browser, index: int | None = None) -> tuple[int, str]:
    """Tap the paper farthest from its nearest neighbour on screen (or paper `index`); returns (index, title)."""
    _scroll_to_map(browser)
    pts = browser.map_points()
    px, py = np.array(pts["px"]), np.array(pts["py"])
    if index is None:
        d = np.hypot(px[:, None] - px[None], py[:, None] - py[None])
        np.fill_diagonal(d, np.inf)
        index = int(np.argmax(d.min(axis=1)))
    browser.click_at(px[index], py[index])
    return index, pts["title"][index]


def _empty_spot(browser: Browser, count: int = 1):
    """A spot inside the map's frame far from every point (page coordinates); with count > 1, that many
    spots at least 40 px apart, the emptiest first."""
    _scroll_to_map(browser)
    pts = browser.map_points()
    left, top, right, bottom = pts["frame"]
    gx, gy = np.meshgrid(np.linspace(left + 15, right - 15, 40), np.linspace(top + 15, bottom - 15, 40))
    grid = np.stack([gx.ravel(), gy.ravel()], axis=1)
    points = np.stack([pts["px"], pts["py"]], axis=1)
    far = np.min(np.hypot(*(grid[:, None, :] - points[None]).transpose(2, 0, 1)), axis=1)
    spots = []
    for i in np.argsort(-far):
        if all(np.hypot(*(grid[i] - s)) >= 40 for s in spots):
            spots.append(grid[i])
        if len(spots) == count:
            break
    return tuple(spots[0]) if count == 1 else [tuple(s) for s in spots]


def _tallest_hover(browser: Browser) -> tuple[float, int]:
    """(height in px, papers under the pointer) of the hover over the point with the most papers within a point's
    radius of it: where Bokeh lists the most papers."""
    from workbench.maps.mapview import POINT_SIZE

    _scroll_to_map(browser)
    pts = browser.map_points()
    px, py = np.array(pts["px"]), np.array(pts["py"])
    under = np.array([int((np.hypot(px - x, py - y) <= POINT_SIZE / 2).sum()) for x, y in zip(px, py)])
    k = int(np.argmax(under))
    tips = browser.hover_at(float(px[k]), float(py[k]))
    assert tips, f"no hover over paper {k}"
    # Each listed paper may be a box of its own: the hover is all of them, top to bottom.
    return max(t["bottom"] for t in tips) - min(t["top"] for t in tips), int(under[k])


def _wait_readout(browser: Browser, *needles: str, timeout: float = 60) -> str:
    browser.wait(lambda: all(n in _readout(browser) for n in needles), timeout,
                 f"the readout did not show {needles}: {_readout(browser)[:300]!r}")
    return _readout(browser)


def _run_notebook(server: JupyterLab, browser: Browser, name: str, timeout: float = 300) -> None:
    """Open notebook `name` on a blank page with a clean console, and Run All."""
    browser.driver.get("about:blank")
    browser.drain_console()
    browser.console.clear()
    browser.open(server.notebook_url(name))
    browser.run_all(timeout=timeout)


def _no_sideways_scroll(browser: Browser) -> None:
    widths = browser.js("""
        const p = document.querySelector('.jp-WindowedPanel-outer') || document.querySelector('.jp-Notebook');
        return [p.scrollWidth, p.clientWidth];""")
    assert widths[0] <= widths[1] + 1, f"the notebook scrolls sideways: {widths}"


def test_the_pane_draws_and_every_interaction_works_in_jupyterlab(pane_lab):
    server, browser, run = pane_lab
    _drive_the_pane(server, browser, "lab", "pane.ipynb", run)


def test_the_pane_works_in_jupyter_notebook_7(pane_lab):
    """The same pane in Jupyter Notebook 7 (its pages, served by the same server): drawn, moved by a slider, a
    paper and an empty spot tapped, drawn again after a reload. What only the kernel does with the same widget
    messages (placing an abstract, marks and their fit, a selection, teaching) is the test above's."""
    server, browser, run = pane_lab
    browser.driver.get("about:blank")
    browser.drain_console()
    browser.console.clear()
    _drive_the_pane(server, browser, "notebook7", "pane_notebook7.ipynb", run)


def _drive_the_pane(server: JupyterLab, browser: Browser, app: str, name: str, run: Path) -> None:
    """The issue's gestures on notebook `name`, checked on the page (in Lab every one, `_place_mark_and_select`'s
    too); screenshots named after `app`."""
    def _shot_of(name):
        _shot(browser, f"{app}_{name}")

    frontend = "notebook" if app == "notebook7" else "lab"

    browser.open(server.notebook_url(name, frontend))
    shell = browser.js("return window.jupyterapp.name")
    assert shell == {"lab": "JupyterLab", "notebook": "Jupyter Notebook"}[frontend], shell
    browser.run_all()
    browser.wait(lambda: browser.map_points() is not None, 60, "the map's Bokeh view did not appear")
    browser.wait(lambda: _map_ink(browser) > 2000, 30, "the map drew no points")
    drawn, drawn_points = browser.element_png(".wb-map"), browser.map_points()
    _shot_of("01_opened")
    # The regions are named on the map itself ("3. translation, bilingual"), not only in the legend below it.
    drawn_labels = browser.map_labels()
    assert drawn_labels and drawn_labels["visible"] and len(drawn_labels["texts"]) == 3, drawn_labels
    assert all(re.match(r"^\d+\. \S", t) for t in drawn_labels["texts"]), drawn_labels
    _no_sideways_scroll(browser)
    # The run's verdict, in plain words, under the weights (stage 03 of the tiny run checked no aspect).
    verdict = browser.js("return document.querySelector('.wb-verdict').innerText")
    assert f"{ASPECTS[0]}: not checked against anything you gave" in verdict, verdict
    shown = browser.js("return document.querySelector('.wb-map').closest('.jp-OutputArea').innerText").lower()
    assert "selectivity" not in shown and "swap" not in shown
    # The readout of a tap stands beside the map, inside a 1,280 x 800 window.
    box = browser.js("const r = document.querySelector('.wb-readout').getBoundingClientRect();"
                     "return [r.left, r.right, r.top];")
    assert box[1] <= 1280 and box[2] < 800, box
    assert _watched_errors(browser) == []

    # A weight slider moved as a user does (its readout typed into): the map moves, weights stay normalised.
    before = _weights(browser)
    assert abs(sum(before.values()) - 1) < 0.02
    browser.type_weight(ASPECTS[0], "1.0")
    browser.wait(lambda: abs(_weights(browser)[ASPECTS[0]] - before[ASPECTS[0]]) > 0.05, 60,
                 "the weights did not change after the slider moved")
    browser.wait(lambda: "Layout:" in _readout(browser), 60, "no new layout")
    after = _weights(browser)
    assert abs(sum(after.values()) - 1) < 0.02 and after[ASPECTS[0]] > before[ASPECTS[0]]
    legend = browser.js("return document.querySelector('.wb-legend').innerText")
    assert ", ".join(f"{a} {w:.2f}" for a, w in after.items()) in legend  # one way to show the weights
    # The points moved in the page's data and on the screen (polled: a loaded machine redraws late).
    browser.wait(lambda: browser.map_points()["x"] != drawn_points["x"], 30, "the map's data did not move")
    browser.wait(lambda: ink(np.abs(browser.element_png(".wb-map").astype(int) - drawn.astype(int)).astype(np.uint8),
                             background=(0, 0, 0)) > 200, 30, "the map's pixels did not change")
    _shot_of("02_weights_moved")

    # A tap on a paper: its title and its decoded aspects.
    index, title = _tap_paper(browser)
    text = _wait_readout(browser, "Nearest known statements to its embedding")
    assert title[:40] in text and all(f"{a}:" in text for a in ASPECTS) and "confidence" in text
    _shot_of("03_paper_tapped")

    # A tap on an empty spot: decoded text with its confidence.
    browser.click_at(*_empty_spot(browser))
    text = _wait_readout(browser, "Empty spot", "confidence")
    assert all(f"{a}:" in text for a in ASPECTS)
    _shot_of("04_empty_spot")

    if app == "lab":
        _place_mark_and_select(browser, run, _shot_of)

    # After a page reload the map draws again (the widgets come back from the live kernel).
    browser.save()
    browser.driver.refresh()
    browser.open(server.notebook_url(name, frontend))
    browser.wait(lambda: browser.map_points() is not None, 60, "after a reload the map's view did not appear")
    browser.wait(lambda: _map_ink(browser) > 2000, 30, "after a reload the map drew no points")
    _shot_of("07_reloaded")
    assert _watched_errors(browser) == []


def _place_mark_and_select(browser: Browser, run: Path, shot) -> None:
    """Place an abstract, mark pairs and fit the weights to them, teach six sentences, select and clear: the
    pane's gestures whose work is the kernel's."""
    # Placing an abstract adds a marker.
    area = browser.driver.find_element("css selector", ".wb-place-text textarea")
    area.click()
    area.send_keys(ABSTRACT)
    browser.driver.find_element("css selector", ".wb-place-button").click()
    _wait_readout(browser, "Placed at")
    browser.wait(lambda: browser.source_length("placed") == 1, 30, "no marker for the placed abstract")
    shot("05_placed")

    # Similar / not similar marks, then "fit weights to my marks": the weights change.
    pts = browser.map_points()
    order = np.argsort(pts["x"])  # left and right ends of the map: pairs a user would call alike or not
    pairs = [(order[0], order[1], "similar"), (order[0], order[-1], "not-similar"),
             (order[-1], order[-2], "similar"), (order[1], order[-1], "not-similar")]
    for i, j, button in pairs:
        for k in (i, j):
            _tap_paper(browser, int(k))
            time.sleep(0.3)
            browser.wait(lambda: browser.kernel_status() == "idle", 60, "the tap was not answered")
        browser.driver.find_element("css selector", f".wb-{button}").click()
        time.sleep(0.5)
    marks = browser.js("return document.querySelector('.wb-marks').innerText")
    assert "2 similar, 2 not similar" in marks, marks
    weights_before_fit = _weights(browser)
    browser.driver.find_element("css selector", ".wb-fit").click()
    browser.wait(lambda: _weights(browser) != weights_before_fit, 90, "fitting did not change the weights")
    shot("06_fitted")
    assert _watched_errors(browser) == []
    _teach_six_sentences(browser, run, shot)

    # A selection made in the page (what the lasso sets) reaches the kernel: the pane counts it and the run
    # directory keeps it for explorer.selection after a restart. Cleared again, so the next pane starts bare.
    stored = RunDir(run).selection
    assert browser.select_points([0, 2, 5])
    browser.wait(lambda: "3 papers selected" in browser.js("return document.querySelector('.wb-selection').innerText"),
                 30, "the pane did not count the selection")
    assert len(json.loads(stored.read_text())["doc_ids"]) == 3
    assert len(json.loads(stored.read_text())["marks"]) == 4  # the marked pairs too
    assert browser.select_points([])
    browser.wait(lambda: json.loads(stored.read_text())["doc_ids"] == [], 30, "the selection was not cleared")


def _teach_six_sentences(browser: Browser, run: Path, shot) -> None:
    """Start teaching under the pane, answer 6 sentences with number keys typed into its key box (1 challenge,
    2 approach, 3 none), refit: the marks are in the run directory, the status says the heads are taught, and
    the map's points move."""
    start = time.perf_counter()
    asked = lambda: browser.js("const m = document.querySelector('.wb-teach-paper mark'); "  # noqa: E731
                               "return m ? m.innerText : null;")
    browser.js("document.querySelector('.wb-teach-start').scrollIntoView({block: 'center'})")
    browser.driver.find_element("css selector", ".wb-teach-start").click()
    browser.wait(lambda: asked() is not None, 60, "no sentence to teach was shown")
    status = browser.js("return document.querySelector('.wb-teach-status').innerText")
    assert "not taught yet" in status, status
    box = browser.driver.find_element("css selector", ".wb-teach-keys input")
    box.click()
    for key in "123123":
        shown = asked()
        box.send_keys(key)
        browser.wait(lambda: asked() != shown, 30, f"key {key} did not move on to the next sentence")
    marks = RunDir(run).marks
    browser.wait(lambda: len(marks.read_text().splitlines()) == 6, 10, "the 6 answers are not in the run directory")
    drawn = browser.map_points()["x"]
    browser.driver.find_element("css selector", ".wb-teach-refit").click()
    browser.wait(lambda: "Refit:" in browser.js("return document.querySelector('.wb-teach-message').innerText"),
                 60, "the refit did not finish")
    status = browser.js("return document.querySelector('.wb-teach-status').innerText")
    assert "taught and sure of" in status and "challenge: 2 sentences marked" in status, status
    browser.wait(lambda: browser.map_points()["x"] != drawn, 30, "the map did not move after the refit")
    browser.js("document.querySelector('.wb-teach-status').scrollIntoView({block: 'center'})")
    shot("08_taught")
    print(f"teaching: 6 sentences marked, refit and the map moved in {time.perf_counter() - start:.1f} s")


def _time_weight_change(browser: Browser, aspect: str, value: float) -> tuple[float, float, int]:
    """Type `value` into `aspect`'s slider and press Enter: (first frame painted, settled, updates of the points)
    in seconds from the key press. The first frame is timed by the page itself (a probe of a busy page waits in
    line); the settled layout is the readout's "Layout:"; the updates are counted once the kernel is idle."""
    drawn = browser.map_head()
    browser.watch_paints()
    start = browser.type_weight(aspect, f"{value:.2f}")
    browser.wait(lambda: browser.map_head() != drawn, 30, "the map did not move after the slider", every=0.05)
    browser.wait(lambda: "Layout:" in _readout(browser), 60, "no settled layout", every=0.05)
    settled = time.perf_counter() - start
    paints = browser.paints()
    first = (paints["drawn"][0] - paints["enter"][0]) / 1000
    browser.wait(lambda: browser.kernel_status() == "idle", 60, "the kernel stayed busy")
    time.sleep(1.0)  # the map's caches are built in the background after the settled frame
    return first, settled, len(browser.paints()["drawn"])


def _time_empty_spot_taps(browser: Browser, count: int = 3) -> list[float]:
    """Seconds from a click on each of `count` empty spots to its text, a paper tapped between them (so that
    each spot's tap changes the readout)."""
    taps = []
    spots = _empty_spot(browser, count) if count > 1 else [_empty_spot(browser)]
    for k, (x, y) in enumerate(spots):
        _tap_paper(browser, k)
        _wait_readout(browser, "Tapped:")
        time.sleep(0.6)  # two clicks within BokehJS's double-tap interval make one double tap, not two taps
        start = time.perf_counter()
        browser.click_at(x, y)
        browser.wait(lambda: "Empty spot" in _readout(browser), 30, "the tapped spot was not read", every=0.02)
        taps.append(time.perf_counter() - start)
    return taps


def _speed() -> float:
    """The machine's speed now in GFLOP/s, on the 1600 x 768 x 3072 fp32 product docs/results.md states: the timed
    tests scale their times to a machine at 165 GFLOP/s (time x speed / 165), since the bars are set for it."""
    import torch

    a, b = torch.randn(1600, 768), torch.randn(768, 3072)
    a @ b
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b
    return 5 * 2 * 1600 * 768 * 3072 / (time.perf_counter() - t0) / 1e9


@pytest.mark.timed  # its times are asserted under WORKBENCH_TIMED=1 (lab_harness.TIMED)
def test_a_map_of_10000_papers_moves_and_answers_taps_in_time(lab):
    """10,000 points drawn by WebGL. Scaled to 165 GFLOP/s (`_speed`): a slider typed to 1.0 paints its first frame
    within 1.75 s of the key press and settles within 6.4 s; a step of 0.05 then paints within 1.5 s and settles
    within 4.5 s, in at most two updates of the points; a tap on an empty spot is inverted and read within 1 s
    (not scaled). The times are printed for docs/results.md."""
    server, browser, _ = lab
    _run_notebook(server, browser, "pane_10k.ipynb")
    browser.wait(lambda: (browser.map_points() or {}).get("x") is not None
                 and len(browser.map_points()["x"]) == 10_000, 60, "the 10,000-point map did not appear")
    assert browser.points_webgl() is True  # the points are drawn by WebGL, not the canvas fallback
    browser.wait(lambda: _map_ink(browser) > 5000, 30, "the map drew no points")
    timeline = _timeline()
    if timeline:
        browser.on_plots(PAGE_JS)
    speed = _speed()
    scale = speed / 165.0
    # The large change (typed to 1.0) holds a time bar only: untimed, the step below is what is checked.
    first, settled, typed_updates = _time_weight_change(browser, "task", 1.0) if TIMED else (0.0, 0.0, 0)
    aspects = ("task", "method", "outcome")
    before = _weights(browser, aspects)
    step_first, step_settled, updates = _time_weight_change(browser, "outcome", before["outcome"] + 0.05)
    assert _weights(browser, aspects)["outcome"] > before["outcome"]
    taps = _time_empty_spot_taps(browser, 3 if TIMED else 1)  # three for a median
    assert all(f"{a}: Paper number" in _readout(browser) for a in aspects)
    print(f"\n10,000 papers in JupyterLab ({speed:.0f} GFLOP/s): slider typed to 1.0, first frame {first:.2f} s, "
          f"settled {settled:.2f} s ({typed_updates} updates); a step of 0.05, first frame {step_first:.2f} s, settled "
          f"{step_settled:.2f} s ({updates} updates); scaled to 165 GFLOP/s: {first * scale:.2f}, "
          f"{settled * scale:.2f}, {step_first * scale:.2f}, {step_settled * scale:.2f} s; tap to text "
          f"{', '.join(f'{t:.2f}' for t in taps)} s (3 taps; the button is released 0.1 s in)")
    if timeline:
        lines = summary(timeline / "kernel.jsonl", browser.js("return window.__wb_log;"))
        (timeline / "summary.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    assert updates <= 2, f"the map was drawn {updates} times after one step"
    assert _watched_errors(browser) == []
    if TIMED:
        assert first * scale <= 1.75, f"typed to 1.0, the first frame took {first:.2f} s at {speed:.0f} GFLOP/s"
        assert settled * scale <= 6.4, f"typed to 1.0, the map settled in {settled:.2f} s at {speed:.0f} GFLOP/s"
        # A step re-ranks each paper's searched neighbours instead of searching (docs/results.md): 0.6 s and 2.1 s
        # scaled on a quiet machine, against the bars of 1.5 s and 4.5 s.
        assert step_first * scale <= 1.5, f"a step's first frame took {step_first:.2f} s at {speed:.0f} GFLOP/s"
        assert step_settled * scale <= 4.5, f"a step settled in {step_settled:.2f} s at {speed:.0f} GFLOP/s"
        assert np.median(taps) <= 1.0, f"taps took {taps} s to be read"
    browser.command("kernelmenu:shutdown")


@pytest.mark.timed  # as the one above
def test_a_map_of_real_abstracts_moves_in_two_updates_and_answers_taps_in_time(lab):
    """On the map of every CSAbstruct abstract (PANE_REAL), a slider step of 0.05 paints a first frame within
    2 s of the key press and settles within 6 s in at most two updates of the points; once settled, the
    legend's weights are the sliders'; a tap on an empty spot is read within 0.6 s. Times are scaled to a
    machine at 165 GFLOP/s (time x speed / 165, the speed measured here on the product docs/results.md
    uses), since the budget is set for the slower machines."""
    server, browser, _ = lab
    _run_notebook(server, browser, "pane_real.ipynb")
    browser.wait(lambda: (browser.map_points() or {}).get("x") is not None, 120, "the map did not appear")
    n = len(browser.map_points()["x"])
    assert n > 2000
    browser.wait(lambda: _map_ink(browser) > 1000, 30, "the map drew no points")
    height, under = _tallest_hover(browser)
    print(f"\nthe hover over the most crowded point ({under} papers under the pointer): {height:.0f} px tall")
    assert height <= 160, f"the hover over {under} stacked papers is {height:.0f} px tall"
    speed = _speed()
    scale = speed / 165.0

    aspects = ("challenge", "approach", "outcome")
    before = _weights(browser, aspects)
    first, settled, updates = _time_weight_change(browser, "outcome", before["outcome"] + 0.05)
    legend = browser.js("return document.querySelector('.wb-legend').innerText")
    shown = _weights(browser, aspects)
    assert all(f"{x} {w:.2f}" in legend for x, w in shown.items()), (legend, shown)
    assert shown["outcome"] > before["outcome"]
    taps = _time_empty_spot_taps(browser, 3 if TIMED else 1)
    print(f"\n{n} real abstracts in JupyterLab ({speed:.0f} GFLOP/s): a step of 0.05 to first frame {first:.2f} s, "
          f"settled {settled:.2f} s, {updates} updates; taps {', '.join(f'{t:.2f}' for t in taps)} s; "
          f"scaled to 165 GFLOP/s: {first * scale:.2f}, {settled * scale:.2f}, {np.median(taps) * scale:.2f} s")
    assert updates <= 2, f"the map was drawn {updates} times after one step"
    assert _watched_errors(browser) == []
    if TIMED:
        assert first * scale <= 2.0, f"the first frame took {first:.2f} s at {speed:.0f} GFLOP/s"
        assert settled * scale <= 6.0, f"the map settled in {settled:.2f} s at {speed:.0f} GFLOP/s"
        assert np.median(taps) * scale <= 0.6, f"taps took {taps} s at {speed:.0f} GFLOP/s"
    browser.command("kernelmenu:shutdown")


@pytest.mark.timed  # as the one above
def test_a_density_map_zooms_into_points_answers_taps_and_moves_in_time(lab):
    """A map past the density threshold (DENSITY_DATA) is drawn as an image; a wheel zoom redraws it within 1 s;
    a view of few papers shows them as points, and a tap on one is read within 1 s; a weight step shows its
    first frame within 3 s (the million-point bars, here at 20,000; benchmarks/pane_million.py times the
    kernel's side at a million)."""
    server, browser, _ = lab
    _run_notebook(server, browser, "pane_density.ipynb")
    browser.wait(lambda: (browser.density_image() or {}).get("x") is not None, 60, "no density image")
    image = browser.density_image()
    assert image["visible"] and image["points"] == 0  # no paper travels as a point
    browser.wait(lambda: _map_ink(browser) > 5000, 30, "the density image drew nothing")
    _shot(browser, "density_01_opened")
    left, top, right, bottom = browser.map_points()["frame"]
    start = time.perf_counter()
    browser.zoom_map((left + right) / 2, (top + bottom) / 2, 3)
    browser.wait(lambda: browser.density_image()["x"] != image["x"], 10, "the zoom was not redrawn", every=0.02)
    zoom = time.perf_counter() - start
    # A pan of 20 mouse moves is drawn when the hand rests, not once per move: the browser asks once the ranges
    # rest for 150 ms (a busy page can space two moves further apart than that, so a few redraws may come).
    time.sleep(0.5)  # the zoom's last view has come
    drawn = browser.count_changes("density")
    browser.drag_map((left + right) / 2, (top + bottom) / 2, 120, 60)
    browser.wait(lambda: browser.count_changes("density") > drawn, 10, "the pan was not redrawn")
    time.sleep(0.5)
    redraws = browser.count_changes("density") - drawn
    data = {}
    exec(DENSITY_DATA, data)  # the notebook's map: a view of one cluster holds a few hundred papers
    cx, cy = data["centres"][0]
    browser.set_map_view(cx - 1.0, cx + 1.0, cy - 1.0, cy + 1.0)
    browser.wait(lambda: browser.density_image()["points"] > 0 and not browser.density_image()["visible"], 10,
                 "a view of few papers did not show them as points")
    _shot(browser, "density_02_points")
    _, title = _tap_paper(browser)
    start = time.perf_counter()
    browser.wait(lambda: f"Tapped: {title}" in _readout(browser), 10, "the tap was not read", every=0.02)
    tap = time.perf_counter() - start + 0.1  # the button is released 0.1 s after the press
    # A selection outlives the views it was made in: zoomed out to the image and in again, it is still there.
    selection = "return document.querySelector('.wb-selection').innerText"
    assert browser.select_points([0, 1])
    browser.wait(lambda: "2 papers selected" in browser.js(selection), 10, "the selection did not reach the kernel")
    browser.set_map_view(cx - 30.0, cx + 30.0, cy - 30.0, cy + 30.0)
    browser.wait(lambda: browser.density_image()["visible"], 10, "no image when zoomed out")
    browser.set_map_view(cx - 1.0, cx + 1.0, cy - 1.0, cy + 1.0)
    browser.wait(lambda: browser.selected_points() == [0, 1], 10, "the selection was not drawn again")
    time.sleep(0.3)  # what the page sends back has reached the kernel
    assert "2 papers selected" in browser.js(selection), browser.js(selection)
    image = browser.density_image()
    start = browser.type_weight("task", "0.90")
    browser.wait(lambda: browser.density_image()["x"] != image["x"], 10, "no first frame", every=0.02)
    first = time.perf_counter() - start
    _wait_readout(browser, "Layout:")
    print(f"\n20,000 papers drawn as density in JupyterLab: zoom redrawn in {zoom:.2f} s, tap read in {tap:.2f} s, "
          f"a weight step's first frame in {first:.2f} s; a pan of 20 moves drawn {redraws} times")
    assert _watched_errors(browser) == []
    if TIMED:  # how often a pan is drawn follows the pace of the moves too, as the rests between them do
        assert redraws <= 10, f"a pan of 20 moves was drawn {redraws} times"
        assert zoom <= 1.0 and tap <= 1.0 and first <= 3.0, (zoom, tap, first)
    browser.command("kernelmenu:shutdown")


def test_without_bokehjs_the_test_sees_jupyter_bokehs_error(pane_lab):
    """The negative control: with the loader switched off the same page shows the error the issue saw."""
    server, browser, _ = pane_lab
    _run_notebook(server, browser, "no_bokehjs.ipynb")
    # ipywidgets' error view where the map should be, and the failed view in the console: what a user saw.
    browser.wait(lambda: browser.js("return !!document.querySelector('.jupyter-widgets-error-widget')"), 120,
                 "no widget error view without BokehJS: the pane test could pass on a page that draws nothing")
    browser.wait(lambda: any(e.get("level") == "SEVERE" and "Could not create a view" in e.get("message", "")
                             for e in browser.drain_console()), 30, "no failed view in the console")
    assert browser.map_points() is None  # no Bokeh in the page, no plot view
    assert not browser.js("return !!document.querySelector('.wb-map')")
    browser.console.clear()
    browser.command("kernelmenu:shutdown")


def test_notebook_05_run_all_shows_the_map(pane_lab):
    server, browser, _ = pane_lab
    _run_notebook(server, browser, "05_visualize.ipynb", timeout=600)
    errors = browser.js("return [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="
                        "\"application/vnd.jupyter.stderr\"]')].map(e => e.innerText).filter(t => /Error/.test(t))")
    assert errors == [], errors
    browser.wait(lambda: browser.map_points() is not None, 60, "notebook 05 showed no map view")
    browser.wait(lambda: _map_ink(browser) > 2000, 30, "notebook 05's map drew no points")
    assert _watched_errors(browser) == []
