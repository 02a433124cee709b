"""The map view: MapPane driven without a browser, and the exported page in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.maps import mapview
from workbench.maps.mapview import cluster_labels, map_figure, map_frame
from workbench.maps.page import PageOptions, PresetDetails, export_html, page_document
from workbench.maps.options import PaneCallbacks, PaneView
from workbench.maps.pane import MapPane

N = 60
XSS_TITLE = "<script>alert(1)</script><script>document.title='PWNED'</script>"
XSS_SUMMARY = "<img src=x onerror=\"document.title='PWNED'\">"
PAGE_TITLE = "Map <script>alert(1)</script>"


@pytest.fixture(scope="module")
def meta():
    frame = pd.DataFrame({
        "title": [f"Paper {i}" for i in range(N)],
        "year": [2000.0 + i % 20 for i in range(N)],  # floats, as pandas often loads years
        "venue": ["ACL", "EMNLP", "NAACL"] * (N // 3),
        "summary_method": [f"method {i}" for i in range(N)],
        "summary_task": [f"task {i}" for i in range(N)],
    })
    frame.loc[3, "title"] = XSS_TITLE
    frame.loc[3, "summary_method"] = XSS_SUMMARY
    frame.loc[4, "year"] = np.nan
    return frame


@pytest.fixture(scope="module")
def presets():
    rng = np.random.default_rng(0)
    centres = np.repeat(rng.uniform(-20, 20, size=(6, 2)), N // 6, axis=0)
    return {"balanced": centres + rng.normal(size=(N, 2)), "method only": rng.normal(size=(N, 2)) * 10}


# --------------------------------------------------------------------------- data and figure


def test_map_frame_columns_colours_and_raw_text(meta, presets):
    coords = presets["balanced"]
    data = map_frame(coords, meta, color_by="venue")
    assert {"x", "y", "title", "year", "hover", "color", "group", "alpha", "size",
            "summary_method", "summary_task"} <= set(data)
    assert data["x"][5] == coords[5, 0] and data["year"][0] == "2000" and data["year"][4] == ""
    assert data["hover"][0] == "Paper 0 (2000) | method: method 0 | task: task 0"
    # Text stays raw in the data: Bokeh escapes it when rendering; escaping twice would show "&lt;".
    assert data["title"][3] == XSS_TITLE
    assert "questions" not in data  # no question axes: no such hover field
    venues = dict(zip(data["group"], data["color"]))
    assert len(venues) == 3 and len(set(venues.values())) == 3
    clusters = map_frame(coords, meta)
    assert clusters["group"][0].startswith("region ")  # numbered from 1, as the legend numbers regions
    assert min(int(g.split()[1]) for g in clusters["group"]) == 1
    assert list(cluster_labels(coords, 6)) == list(cluster_labels(coords, 6))  # fixed seed
    assert len(set(cluster_labels(coords, 6))) == 6
    with pytest.raises(ValueError):
        map_frame(coords[:10], meta)
    with pytest.raises(ValueError):
        map_frame(coords, meta, color_by="no such column")


def test_map_frame_hover_questions_only_when_present(meta, presets):
    from bokeh.models import HoverTool

    asked = meta.assign(questions=[f"method: Q{i}?" if i % 2 else "" for i in range(N)])
    data = map_frame(presets["balanced"], asked)
    assert data["questions"][1] == "method: Q1?" and data["questions"][0] == ""
    assert data["hover"][1].endswith(" | yes to: method: Q1?") and "yes to" not in data["hover"][0]
    tooltips = map_figure(presets["balanced"], asked).select_one(HoverTool).tooltips
    assert "yes to:</span> @questions" in tooltips
    assert "yes to" not in map_figure(presets["balanced"], meta).select_one(HoverTool).tooltips


def test_map_figure_hover_tap_and_labels(meta, presets):
    from bokeh.models import HoverTool, LabelSet, TapTool

    fig = map_figure(presets["balanced"], meta, labels=[(0.0, 1.0, "parsing")], title="t")
    hover = fig.select_one(HoverTool)
    assert "@title" in hover.tooltips and "@{summary_method}" in hover.tooltips  # a template that wraps
    assert "{safe}" not in hover.tooltips  # every field is escaped by Bokeh
    assert fig.select_one(TapTool) is not None
    labels = fig.select_one(LabelSet)
    assert labels.background_fill_color is not None and labels.source.data["text"] == ["parsing"]
    assert len(fig.select_one({"name": "points"}).data["x"]) == N


# --------------------------------------------------------------------------- MapPane without a browser


class Recorder:
    """Callbacks that record their calls and return canned answers."""

    def __init__(self, coords):
        self.coords = coords
        self.calls = {"weights": [], "tap": [], "place": [], "search": []}

    def on_weights(self, weights):
        self.calls["weights"].append(weights)
        return self.coords * 2 + 1

    def on_tap(self, x, y, index):
        self.calls["tap"].append((x, y, index))
        return f"<p>spot {index}</p>"

    def on_place(self, text):
        self.calls["place"].append(text)
        return 1.5, -2.5, "<p>placed</p>"

    def on_search(self, queries):
        self.calls["search"].append(queries)
        return pd.DataFrame({"title": [XSS_TITLE, "Paper 1"], "score": [0.9, 0.5]})


@pytest.fixture
def pane(meta, presets):
    rec = Recorder(presets["balanced"])
    p = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                on_weights=rec.on_weights,
                callbacks=PaneCallbacks(on_tap=rec.on_tap, on_place=rec.on_place, on_search=rec.on_search),
                view=PaneView(labels=[(0.0, 0.0, "region")]))
    p.rec = rec
    return p


def test_sliders_relayout_with_normalised_weights(pane, presets):
    assert all(not s.continuous_update for s in pane.sliders.values())  # recompute on release only
    pane.sliders["method"].value = 0.75
    assert pane.rec.calls["weights"] == [{"method": 0.6, "task": 0.4}]
    np.testing.assert_allclose(pane.source.data["x"], presets["balanced"][:, 0] * 2 + 1)
    np.testing.assert_allclose(pane.source.data["y"], presets["balanced"][:, 1] * 2 + 1)
    assert pane.label_source.data["text"] == []  # the old layout's labels no longer apply

    # The sliders, the legend and the status line show the same, normalised weights.
    assert pane.weights() == {"method": 0.6, "task": 0.4}
    assert "method 0.60, task 0.40" in pane.legend.value and "method 0.60, task 0.40" in pane.detail.value

    pane.set_weights({"method": 1.0, "task": 0.0})  # as a notebook cell would; sliders follow
    assert pane.rec.calls["weights"][-1] == {"method": 1.0, "task": 0.0}
    assert len(pane.rec.calls["weights"]) == 2 and pane.sliders["task"].value == 0.0

    pane.sliders["method"].value = 0.0  # all zero: a message, no call
    assert len(pane.rec.calls["weights"]) == 2
    assert "zero" in pane.detail.value


@pytest.mark.slow
def test_tap_event_on_a_point_and_on_an_empty_spot(pane, presets):
    from bokeh.events import Tap

    x, y = presets["balanced"][7] + 0.01
    pane.figure._trigger_event(Tap(pane.figure, x=float(x), y=float(y)))  # the wiring a browser tap uses
    assert pane.rec.calls["tap"] == [(float(x), float(y), 7)]
    assert pane.detail.value == "<p>spot 7</p>"
    assert pane.tap_source.data == {"x": [float(x)], "y": [float(y)]}

    pane.figure._trigger_event(Tap(pane.figure, x=500.0, y=-500.0))
    assert pane.rec.calls["tap"][-1] == (500.0, -500.0, None)
    assert pane.detail.value == "<p>spot None</p>"
    assert pane.tap_source.data == {"x": [500.0], "y": [-500.0]}  # one marker, moved


@pytest.mark.slow
def test_two_tapped_papers_and_a_paper_then_a_spot_are_compared(meta, presets):
    coords = presets["balanced"]
    rec = Recorder(coords)
    compared = []

    def on_compare(i, other):
        compared.append((i, other))
        return f"<p>compare {i} {other}</p>"

    p = MapPane(coords, meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                callbacks=PaneCallbacks(on_tap=rec.on_tap, on_compare=on_compare))
    p.tap(*coords[3])
    assert compared == [] and p.detail.value == "<p>spot 3</p>"  # one paper: nothing to compare yet
    p.tap(*coords[8])
    assert compared == [(3, 8)] and p.detail.value == "<p>spot 8</p><hr><p>compare 3 8</p>"
    p.tap(500.0, -500.0)  # an empty spot right after paper 8: paper 8 against the spot
    assert compared[-1] == (8, (500.0, -500.0)) and p.detail.value.endswith("<p>compare 8 (500.0, -500.0)</p>")
    p.tap(400.0, -400.0)  # an empty spot after an empty spot: described only
    assert len(compared) == 2 and p.detail.value == "<p>spot None</p>"
    p.tap(*coords[10])  # the pair is now (8, 10)
    assert compared[-1] == (8, 10) and p.tapped == [8, 10]

    def boom(i, other):
        raise RuntimeError("<i>no axes</i>")

    p.on_compare = boom
    assert p.tap(*coords[11]) is None  # a failed comparison leaves the description shown, and says so
    assert p.detail.value.startswith("<p>spot 11</p><hr>") and "&lt;i&gt;no axes&lt;/i&gt;" in p.detail.value
    assert MapPane(coords, meta, ["method"], {"method": 1.0},
                   callbacks=PaneCallbacks(on_tap=rec.on_tap)).on_compare is None


def test_place_adds_a_marker(pane):
    pane.place_text.value = "We parse things."
    pane.place_button.click()
    pane.place("Another abstract.")
    assert pane.rec.calls["place"] == ["We parse things.", "Another abstract."]
    assert pane.placed_source.data["x"] == [1.5, 1.5] and pane.placed_source.data["y"] == [-2.5, -2.5]
    assert pane.detail.value == "<p>placed</p>"
    pane.place("   ")
    assert len(pane.rec.calls["place"]) == 2 and "abstract" in pane.detail.value


def test_search_renders_an_escaped_table(pane):
    pane.query_texts["method"].value = "contrastive loss"
    pane.query_weights["method"].value = -0.5
    pane.search_button.click()
    assert pane.rec.calls["search"] == [{"method": ("contrastive loss", -0.5)}]  # blank queries left out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pane.results.value
    assert "<script>" not in pane.results.value and "<td" in pane.results.value
    pane.search({"method": ("", 1.0), "task": ("  ", 1.0)})
    assert len(pane.rec.calls["search"]) == 1 and "query" in pane.detail.value


@pytest.mark.parametrize("action", ["weights", "tap", "place", "search"])
def test_callback_errors_show_in_the_panel(meta, presets, action):
    def boom(*args):
        raise RuntimeError("<b>model</b> exploded")

    p = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 1.0, "task": 0.0},
                on_weights=boom, callbacks=PaneCallbacks(on_tap=boom, on_place=boom, on_search=boom))
    {"weights": lambda: p.set_weights({"task": 1.0}), "tap": lambda: p.tap(0.0, 0.0),
     "place": lambda: p.place("text"), "search": lambda: p.search({"task": ("q", 1.0)})}[action]()
    assert "failed" in p.detail.value and "RuntimeError" in p.detail.value
    assert "&lt;b&gt;model&lt;/b&gt; exploded" in p.detail.value


def test_wrong_shaped_layout_is_reported(meta, presets):
    p = MapPane(presets["balanced"], meta, ["method"], {"method": 1.0}, on_weights=lambda w: np.zeros((3, 2)),
                callbacks=PaneCallbacks(on_tap=None, on_place=None, on_search=None))
    p.set_weights({"method": 0.5})
    assert "3 points" in p.detail.value
    np.testing.assert_allclose(p.source.data["x"], presets["balanced"][:, 0])  # map left as it was


def test_display_is_an_ipywidgets_layout(pane):
    import ipywidgets
    from jupyter_bokeh import BokehModel

    layout = pane.display()
    assert isinstance(layout, ipywidgets.VBox)

    def walk(w):
        yield w
        for child in getattr(w, "children", ()):
            yield from walk(child)

    kinds = [type(w) for w in walk(layout)]
    assert kinds.count(ipywidgets.FloatSlider) == 4 and isinstance(pane.bokeh, BokehModel)
    # The map shows inside an Output that first loads BokehJS (inline, no CDN), then the map's widget view:
    # rendered in that order, also after a page reload (tests/test_jupyterlab.py checks it in a browser).
    assert ipywidgets.Output in kinds
    loader, view = pane.map_output.outputs
    script = loader["data"]["application/vnd.bokehjs_load.v0+json"]
    assert "window.Bokeh.version" in script and "cdn.bokeh.org" not in script and len(script) > 1_000_000
    assert view["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] == pane.bokeh.model_id


def test_the_verdict_stands_under_the_weights_escaped_and_read_again_after_a_refit(meta, presets, tmp_path):
    """Each aspect's verdict, in the words stage 03's guard.json gives, directly under the weight sliders; read
    again when taught aspects move the map; a failing read is said, not raised."""
    import json

    from workbench.core.rundir import RunDir
    from workbench.maps.teaching import verdict_for

    guard = RunDir(tmp_path).guard
    guard.parent.mkdir(parents=True, exist_ok=True)
    guard.write_text(json.dumps({"aspects": {"method": {"verified": False}}}))
    said = {"lines": None}
    read = verdict_for(tmp_path)
    pane = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                   on_weights=lambda w: presets["balanced"],
                   callbacks=PaneCallbacks(on_verdict=lambda: said["lines"] or read()))
    controls = pane.layout.children[1].children[0].children
    assert controls.index(pane.verdict) == 1 + controls.index(pane.sliders["task"])  # right under the sliders
    text = html.unescape(re.sub(r"<[^>]+>", " ", pane.verdict.value))
    assert "method: not checked against anything you gave; mark some sentences to check it" in text
    assert "selectivity" not in text.lower() and "swap" not in text.lower()
    said["lines"] = [f"method: checked on 4 of the papers you marked {XSS_TITLE}"]
    pane.relayout(lambda on_frame: presets["balanced"] + 1)  # what a teaching refit calls
    assert "checked on 4 of the papers" in pane.verdict.value and "<script" not in pane.verdict.value
    said["lines"] = None
    guard.write_text("{not json")
    pane.show_verdict()
    assert "no verdict" in pane.verdict.value
    assert MapPane(presets["balanced"], meta, ["method", "task"], {"method": 1.0}).verdict.value == ""  # none given


def test_a_hover_lists_two_papers_and_counts_the_others(meta, presets):
    from bokeh.models import CustomJSHover, HoverTool

    fig = map_figure(presets["balanced"], meta)
    hover = fig.select_one(HoverTool)
    assert hover.limit == mapview.HOVER_PAPERS == 2
    more = hover.formatters["@x"]
    assert isinstance(more, CustomJSHover) and "special_vars.indices.length" in more.code
    assert "@x{more}" in hover.tooltips


def test_pane_without_bokehjs_only_for_the_negative_control(meta, presets, monkeypatch):
    from workbench.maps import pane as pane_module

    monkeypatch.setattr(pane_module, "LOAD_BOKEHJS", False)
    pane = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 1.0, "task": 3.0})
    (view,) = pane.map_output.outputs
    assert "application/vnd.jupyter.widget-view+json" in view["data"]
    assert pane.weights() == {"method": 0.25, "task": 0.75}  # the sliders show the weights the map uses


def test_marked_pairs_fit_the_weights_and_relayout(meta, presets):
    from workbench.maps.weights import WeightFit

    coords = presets["balanced"]
    rec = Recorder(coords)
    fits = []

    def on_fit_weights(pairs):
        fits.append(list(pairs))
        return WeightFit(weights={"method": 0.8, "task": 0.2}, auc=0.9, auc_ci=(0.8, 0.95), equal_weights_auc=0.7,
                         grid_weights={"method": 0.8, "task": 0.2}, grid_auc=0.89, n_pairs=(1, 1),
                         warning="2 pairs are <b>not</b> enough")

    p = MapPane(coords, meta, ["method", "task"], {"method": 0.5, "task": 0.5}, on_weights=rec.on_weights,
                callbacks=PaneCallbacks(on_fit_weights=on_fit_weights))
    p.similar_button.click()  # nothing tapped yet: a hint, no mark
    assert p.marks == [] and "Tap two papers" in p.detail.value
    for i in (3, 8):
        p.tap(*coords[i])
    assert p.tapped == [3, 8] and "&lt;script&gt;" in p.mark_info.value and "<script>" not in p.mark_info.value
    p.similar_button.click()
    p.tap(*coords[10])  # the last two tapped: 8 and 10
    p.dissimilar_button.click()
    assert p.marks == [(3, 8, True), (8, 10, False)] and "1 similar, 1 not similar" in p.mark_info.value
    p.fit_button.click()
    assert fits == [[(3, 8, True), (8, 10, False)]]
    assert rec.calls["weights"] == [{"method": 0.8, "task": 0.2}]  # the map refit with the fitted weights
    assert p.sliders["method"].value == 0.8 and p.sliders["task"].value == 0.2
    np.testing.assert_allclose(p.source.data["x"], coords[:, 0] * 2 + 1)
    assert "held-out AUC 0.900" in p.detail.value and "&lt;b&gt;not&lt;/b&gt;" in p.detail.value
    assert "Layout: method 0.80" in p.detail.value
    p.clear_marks_button.click()
    assert p.marks == [] and p.tapped == []


def test_negative_fitted_weight_maps_its_positive_part(meta, presets):
    rec = Recorder(presets["balanced"])
    p = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                on_weights=rec.on_weights,
                callbacks=PaneCallbacks(on_fit_weights=lambda pairs: {"method": -0.3, "task": 0.7}))
    p.fit_marks()  # no marks yet
    assert rec.calls["weights"] == [] and "Mark a few pairs" in p.detail.value
    p.tapped = [0, 1]
    p.mark(True)
    assert p.mark(False) == (0, 1, False) and p.marks == [(0, 1, False)]  # marking again replaces
    assert p.fit_marks() == {"method": 0.0, "task": 1.0}
    assert rec.calls["weights"] == [{"method": 0.0, "task": 1.0}]
    assert "cannot be drawn" in p.detail.value and "method" in p.detail.value


def test_fit_errors_show_in_the_panel(meta, presets):
    def boom(pairs):
        raise ValueError("need at least 2 similar <i>pairs</i>")

    p = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                on_weights=lambda w: presets["balanced"], callbacks=PaneCallbacks(on_fit_weights=boom))
    p.tapped = [0, 1]
    p.mark(True)
    p.fit_button.click()
    assert "Fitting the weights failed" in p.detail.value and "&lt;i&gt;pairs&lt;/i&gt;" in p.detail.value
    assert MapPane(presets["balanced"], meta, ["method"], {"method": 1.0}).fit_button.disabled  # no callback


# --------------------------------------------------------------------------- the exported page in Chromium


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI for the exported-page tests")
        pytest.skip("chromium not installed: cannot render the exported page")
    return path


def _run_chromium(tmp_path, url: str, *mode: str, budget_ms: int = 5000) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1000,800",
           f"--virtual-time-budget={budget_ms}", *mode, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _coloured_pixels(png) -> np.ndarray:
    """RGB values of the saturated pixels of a screenshot (points are coloured; text and inputs are grey)."""
    import matplotlib.image

    # Left of x=760 px: the 800 px figure minus its toolbar, whose Bokeh logo is coloured too.
    rgb = matplotlib.image.imread(str(png))[:, :760, :3]
    saturated = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25
    return rgb[saturated]


@pytest.fixture(scope="module")
def pages(tmp_path_factory, meta, presets):
    out = tmp_path_factory.mktemp("map")
    labels = {"balanced": [(0.0, 0.0, "<b>parsing</b>")], "method only": [(1.0, 2.0, "translation")]}
    questions = {name: [f"{name} Q{i}?" for i in range(N)] for name in presets}
    questions["balanced"][3] = XSS_SUMMARY  # question text is LLM text: data, never markup
    weights = {"balanced": {"method": 0.5, "task": 0.5}, "method only": {"method": 1.0, "task": 0.0}}
    full = export_html(out / "map.html", presets, meta, labels, title=PAGE_TITLE,
                       details=PresetDetails(questions_by_preset=questions, weights_by_preset=weights))
    empty = export_html(out / "empty.html", {k: np.zeros((0, 2)) for k in presets}, meta.iloc[:0], title=PAGE_TITLE)
    return out, full, empty


def test_exported_page_is_standalone(pages):
    _, full, _ = pages
    text = full.read_text()
    assert "cdn.bokeh.org" not in text and "Bokeh.embed" in text  # BokehJS inlined, works offline
    assert "<script>alert(1)</script>" not in text


@pytest.mark.slow
def test_exported_page_draws_the_map(pages, tmp_path):
    out, full, empty = pages
    _run_chromium(tmp_path, full.as_uri(), f"--screenshot={tmp_path / 'map.png'}")
    _run_chromium(tmp_path, empty.as_uri(), f"--screenshot={tmp_path / 'empty.png'}")
    drawn, blank = _coloured_pixels(tmp_path / "map.png"), _coloured_pixels(tmp_path / "empty.png")
    # 60 markers of ~8 px: some three thousand coloured pixels; the same page without points has ~none.
    assert len(drawn) > 1000 and len(blank) < 50, (len(drawn), len(blank))
    hues = {tuple(c) for c in np.round(drawn * 4)}  # coarse colour bins: cluster colours differ
    assert len(hues) >= 4


PROBE = """
<img src="missing.png" style="display:none" onerror="document.body.dataset.control = 'ran'">
<pre id="probe"></pre>
<script>
// CustomJS callbacks run asynchronously in BokehJS 3.x, so each step waits before reading.
const pause = () => new Promise(resolve => setTimeout(resolve, 300));
(async function probe() {
  const out = {};
  try {
    const docs = (window.Bokeh && Bokeh.documents) || [];
    if (!docs.length || !docs[0].get_model_by_name("points")) { setTimeout(probe, 50); return; }
    const doc = docs[0], src = doc.get_model_by_name("points"), labels = doc.get_model_by_name("labels");
    const search = doc.get_model_by_name("search"), status = doc.get_model_by_name("search_status");
    out.x0_before = src.data.x[0];
    out.questions_before = [src.data.questions[0], src.data.questions[3]];
    out.caption_before = doc.get_model_by_name("caption").text;
    doc.get_model_by_name("preset").value = "method only";
    await pause();
    out.x0_after = src.data.x[0];
    out.caption_after = doc.get_model_by_name("caption").text;
    out.labels_after = Array.from(labels.data.text);
    out.questions_after = src.data.questions[0];
    search.value_input = "PAPER 1";
    await pause();
    out.alpha = Array.from(src.data.alpha);
    out.status = status.text;
    search.value_input = "<script>alert";
    await pause();
    out.xss_hits = Array.from(src.data.alpha).map((a, i) => a === 1 ? i : -1).filter(i => i >= 0);
    search.value_input = "";
    await pause();
    out.alpha_cleared = Array.from(src.data.alpha);
  } catch (e) { out.error = String(e); }
  document.getElementById("probe").textContent = JSON.stringify(out);
})();
</script>
"""


@pytest.mark.slow
def test_exported_page_escapes_text_and_runs_its_widgets(pages, tmp_path, presets):
    _, full, _ = pages
    # The probe drives the page's own widgets through BokehJS, as a user's clicks would.
    probed = tmp_path / "probed.html"
    head, tail = full.read_text().rsplit("</body>", 1)
    probed.write_text(head + PROBE + "</body>" + tail)
    dom = _run_chromium(tmp_path, probed.as_uri(), "--dump-dom").stdout

    assert 'data-control="ran"' in dom  # control: inline handlers do run in this browser...
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert title == "Map &lt;script&gt;alert(1)&lt;/script&gt;"  # ...yet no payload set document.title
    assert "PWNED" not in title
    assert "<script>alert(1)</script>" not in dom  # never a live script element
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # the title travels as escaped JSON data

    out = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    assert out["x0_before"] == pytest.approx(presets["balanced"][0, 0])
    assert out["x0_after"] == pytest.approx(presets["method only"][0, 0])  # preset switched on the client
    assert out["labels_after"] == ["translation"]
    # The caption says what a dot, a colour and a distance are, under the preset's weights.
    assert "Each dot is a paper" in out["caption_before"] and "method 0.50, task 0.50" in out["caption_before"]
    assert "(method 1.00)" in out["caption_after"] and "colours are regions" in out["caption_after"]
    from workbench.maps.mapview import legend_html

    legend = legend_html([(0, 0, "a <b>region</b>")], {"method": 0.3, "task": 0.7})
    # Each label says what it is (an aspect's terms, the abstracts' or "mixed"): the legend claims no aspect.
    assert "<b>1. a &lt;b&gt;region&lt;/b&gt;</b>" in legend and "method 0.30, task 0.70" in legend
    # Raw text in the data (Bokeh escapes the tooltip); the dumped <pre> escapes it once more.
    assert [html.unescape(q) for q in out["questions_before"]] == ["balanced Q0?", XSS_SUMMARY]
    assert out["questions_after"] == "method only Q0?"  # hover questions follow the preset
    hits = [i for i, a in enumerate(out["alpha"]) if a == 1]
    assert hits == [1] + list(range(10, 20))  # case-insensitive substring "paper 1"
    assert set(out["alpha"]) == {1, mapview.DIM_ALPHA} and out["status"] == "11 papers match"
    assert out["xss_hits"] == [3]  # the payload is searchable text, not markup
    assert set(out["alpha_cleared"]) == {mapview.BASE_ALPHA}


SELECTION_PROBE = """
<pre id="probe"></pre>
<script>
const pause = () => new Promise(resolve => setTimeout(resolve, 300));
// The files the page offers for download, caught as it makes them (no file I/O, which virtual time
// does not wait for).
const made = [];
const RealBlob = window.Blob;
window.Blob = function (parts, options) { made.push(parts.join("")); return new RealBlob(parts, options); };
(async function probe() {
  const out = {};
  try {
    const docs = (window.Bokeh && Bokeh.documents) || [];
    if (!docs.length || !docs[0].get_model_by_name("points")) { setTimeout(probe, 50); return; }
    const doc = docs[0], src = doc.get_model_by_name("points");
    const view = doc.get_model_by_name("points_glyph").view;
    const shown = () => view.filter.booleans.map((b, k) => b ? k : -1).filter(k => k >= 0);
    const years = doc.get_model_by_name("years"), venue = doc.get_model_by_name("filter:venue");
    const download = async name => {
      const button = doc.get_model_by_name(name);
      await button.js_event_callbacks["button_click"][0].execute(button, {});
      await pause();
      return made[made.length - 1];
    };
    out.all = shown().length;
    years.value = [2000, 2004];
    await pause();
    out.years = shown();
    out.filter_status = doc.get_model_by_name("filter_status").text;
    years.value = [years.start, years.end];
    venue.value = "ACL";
    await pause();
    out.venue = shown();
    out.csv_shown = await download("export_csv");
    out.venue_options = Array.from(venue.options);
    venue.value = "(all)";
    await pause();
    const region = doc.get_model_by_name("region");
    out.region_options = Array.from(region.options);
    region.value = region.options[1];
    await pause();
    out.region = Array.from(src.data.group).map((g, k) => g.split(":")[0] === "region 1" ? k : -1).filter(k => k >= 0);
    out.selected = Array.from(src.selected.indices);
    src.selected.indices = [0, 1, 3, 7];
    out.csv = await download("export_csv");
    out.ris = await download("export_ris");
    out.export_status = doc.get_model_by_name("export_status").text;
    doc.get_model_by_name("preset").value = "method only";
    await pause();
    out.region_options_after = Array.from(region.options);
  } catch (e) { out.error = String(e) + " " + e.stack; }
  document.getElementById("probe").textContent = JSON.stringify(out);
})();
</script>
"""


@pytest.mark.slow
def test_exported_page_filters_by_year_and_metadata_and_downloads_the_selection(meta, presets, tmp_path):
    from workbench.data.corpus import load_corpus

    records = meta.assign(doc_id=[f"d{i}" for i in range(N)],  # paper 3's title is a script element
                          abstract=[f"Abstract {i}, with a comma." for i in range(N)])
    records.loc[1, "abstract"] = 'A "quoted" claim; a second line\nand, after a blank line,\n\na second paragraph.'
    records.loc[5, "venue"] = "<b>ACL</b>"  # a metadata value is an option's text
    records.drop(columns=["summary_method", "summary_task"]).to_csv(tmp_path / "export.csv", index=False)
    records = load_corpus(tmp_path / "export.csv").docs  # as the user's export was read: what must come back
    labels = {name: [(0.0, 0.0, f"{name} one"), (1.0, 1.0, f"{name} two")] for name in presets}
    page = export_html(tmp_path / "map.html", presets, meta, labels, records=records, options=PageOptions(color_by=2))
    probed = tmp_path / "probed.html"
    head, tail = page.read_text().rsplit("</body>", 1)
    probed.write_text(head + SELECTION_PROBE + "</body>" + tail)
    dom = _run_chromium(tmp_path, probed.as_uri(), "--dump-dom", budget_ms=20000).stdout
    out = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    assert "error" not in out, out.get("error")

    years = pd.to_numeric(meta["year"], errors="coerce")
    assert out["all"] == N
    assert out["years"] == [i for i in range(N) if 2000 <= years[i] <= 2004]  # paper 4 has no year: hidden
    assert out["filter_status"] == f"{len(out['years'])} of {N} papers shown"
    assert out["venue"] == [i for i in range(N) if meta["venue"][i] == "ACL"]
    assert out["venue_options"] == ["(all)", "<b>ACL</b>", "ACL", "EMNLP", "NAACL"]  # text, never markup
    assert out["region_options"] == ["(none)", "1: balanced one", "2: balanced two"]
    assert out["selected"] == out["region"] and 0 < len(out["region"]) < N
    assert out["region_options_after"][1] == "1: method only one"
    assert out["export_status"] == "exported 4 selected papers as RIS"

    def read_back(text: str, suffix: str):
        path = tmp_path / f"selection{suffix}"
        path.write_text(text, encoding="utf-8")
        return load_corpus(path).docs

    shown = read_back(out["csv_shown"], ".csv")  # nothing selected: every paper the filter shows
    assert shown["doc_id"].tolist() == [f"d{i}" for i in out["venue"]]
    assert shown["venue"].tolist() == ["ACL"] * len(out["venue"])
    picked = [0, 1, 3, 7]
    for suffix, text in ((".csv", out["csv"]), (".ris", out["ris"])):
        docs = read_back(text, suffix)
        assert docs["doc_id"].tolist() == [f"d{i}" for i in picked], suffix
        assert docs["title"].tolist() == records["title"][picked].tolist(), suffix
        expected = records["abstract"][picked].tolist()
        if suffix == ".ris":  # a RIS tag is one line: a paragraph's line breaks become spaces, paragraphs stay
            expected = ["\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", t)) for t in expected]
        assert docs["abstract"].tolist() == expected, suffix
    records_ris = [r for r in out["ris"].split("ER  - ") if r.strip()]
    assert len(records_ris) == 4 and all(all(f"{t}  - " in r for t in ("TY", "TI", "AB", "ID")) for r in records_ris)


def test_a_first_frame_is_drawn_while_the_layout_settles(meta, presets):
    drawn = []

    def on_weights(weights, on_frame=None):
        on_frame(presets["method only"])  # what with_weights hands over after its first iterations
        drawn.append(list(pane.source.data["x"]))
        return presets["balanced"] + 1.0

    pane = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5}, on_weights=on_weights)
    pane.set_weights({"method": 1.0, "task": 0.0})
    assert drawn == [presets["method only"][:, 0].tolist()]  # the first frame reached the map's data
    assert list(pane.source.data["x"]) == (presets["balanced"][:, 0] + 1.0).tolist()  # then the settled layout


def test_a_large_first_frame_gives_the_browser_time_to_draw_it(monkeypatch):
    # The kernel rests after sending a large frame: its layout threads would otherwise starve a
    # browser that draws with its CPU, which then painted the frame only with the settled layout.
    import workbench.maps.pane as pane_module

    rests, n = [], pane_module.FRAME_PAUSE_MIN
    monkeypatch.setattr(pane_module.time, "sleep", rests.append)
    rng = np.random.default_rng(0)
    meta = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "title": [f"t{i}" for i in range(n)]})
    frame, settled = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))

    def on_weights(weights, on_frame=None):
        on_frame(frame)
        assert rests == [pane_module.FRAME_PAUSE]  # right after the frame was sent, before the settled layout
        return settled

    pane = MapPane(rng.normal(size=(n, 2)), meta, ["a", "b"], {"a": 0.5, "b": 0.5}, on_weights=on_weights)
    pane.set_weights({"a": 1.0})
    np.testing.assert_array_equal(pane.source.data["x"], settled[:, 0])
    assert rests == [pane_module.FRAME_PAUSE]

    small = MapPane(frame[:50], meta.head(50), ["a", "b"], {"a": 0.5, "b": 0.5},
                    on_weights=lambda w, on_frame=None: (on_frame(settled[:50]), settled[:50])[1])
    small.set_weights({"a": 1.0})
    assert rests == [pane_module.FRAME_PAUSE]  # a small map's settled layout follows at once: no rest


def test_a_negative_or_nan_weight_is_refused_in_the_pane(meta, presets):
    calls = []
    pane = MapPane(presets["balanced"], meta, ["method", "task"], {"method": 0.5, "task": 0.5},
                   on_weights=lambda w: calls.append(w) or presets["balanced"])
    for bad in ({"method": -0.5}, {"task": float("nan")}):
        assert pane.set_weights(bad) is None
        assert "non-negative" in pane.detail.value
    assert calls == []  # nothing was laid out


@pytest.mark.slow
@pytest.mark.timed  # its time is asserted under WORKBENCH_TIMED=1 (lab_harness.TIMED)
def test_a_page_of_10000_papers_draws_with_webgl_within_5_seconds(tmp_path):
    """The exported page at 10,000 papers (abstracts included), in headless Chromium: every point in the data
    source, drawn by WebGL, within 5 s of opening the file; its size is printed for the benchmark table."""
    import time

    from lab_harness import TIMED, Browser, chromium_paths

    if chromium_paths() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium, chromium-driver and selenium are required in CI")
        pytest.skip("chromium or chromium-driver missing")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from maps import synthetic_page_inputs  # the benchmark's page of n papers

    coords, meta, records, labels = synthetic_page_inputs(10_000)
    page = export_html(tmp_path / "map.html", coords, meta, labels, records=records, title="10,000 papers")
    size = page.stat().st_size
    assert json.loads(page_document(page))["doc"]  # the compressed document reads back
    browser = Browser(tmp_path / "profile")
    try:
        start = time.perf_counter()
        browser.driver.get(page.as_uri())
        browser.wait(lambda: (browser.map_points() or {}).get("x") is not None
                     and len(browser.map_points()["x"]) == 10_000, 30, "the 10,000 points were not drawn", every=0.05)
        drawn = time.perf_counter() - start
        assert browser.points_webgl() is True
        png = tmp_path / "page.png"
        png.write_bytes(browser.driver.get_screenshot_as_png())
        assert len(_coloured_pixels(png)) > 5000  # the points on the screen, not only in the data
    finally:
        browser.close()
    print(f"\n10,000-paper page: {size / 1e6:.1f} MB, drawn in {drawn:.2f} s")
    assert not TIMED or drawn <= 5.0, f"the page took {drawn:.1f} s to draw"
    assert size < 12e6, size  # compressed: 11.5 MB at 5,000 papers before
