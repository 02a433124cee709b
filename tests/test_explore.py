"""Explorer (workbench/maps/explore.py): the map callbacks, on a run folder made of untrained models.

The untrained unified model and aspect models are real checkpoints (MiniLM with fresh 16-d
heads), so every path is the one a trained run takes; the numbers are checked against a
brute-force computation, not for quality.
"""

import dataclasses
import types

import numpy as np
import pytest
import torch
from workbench.core.rundir import RunDir

ASPECTS = ["challenge", "approach"]


@pytest.fixture(scope="module")
def explorer_run(tmp_path_factory):
    from workbench.data.corpus import load_corpus
    from workbench.embed.encoders import AspectEncoder
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    run = tmp_path_factory.mktemp("explore")
    torch.manual_seed(0)
    AspectEncoder.from_base("minilm", ASPECTS, dim=16, pooling="mean", max_length=64,
                            device="cpu").save_pretrained(RunDir(run).unified_model)
    for i, aspect in enumerate(ASPECTS):
        torch.manual_seed(i + 1)
        AspectEncoder.from_base("minilm", [aspect], dim=16, pooling="mean", max_length=32,
                                device="cpu").save_pretrained(RunDir(run).aspect_model(aspect))
    docs = load_corpus("aclsum:validation").subset(n=30, seed=0)
    docs.docs.loc[docs.docs.index[0], "title"] = "<script>alert(1)</script>"
    return run, docs, Explorer(run, docs, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0))


@pytest.mark.slow
def test_tap_escapes_paper_text(explorer_run):
    _, _, explorer = explorer_run
    html = explorer.on_tap(0.0, 0.0, 0)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "No decoders" in html  # decode=False: the map works, without words


@pytest.mark.slow
def test_search_with_a_negative_weight_matches_brute_force(explorer_run):
    from workbench.embed.encoders import AspectEncoder

    run, docs, explorer = explorer_run
    queries = {"approach": ("We train a neural parser.", 1.0), "challenge": ("Parsing is slow.", -0.5)}
    found = explorer.search(queries, k=5)
    score = np.zeros(len(docs))
    for aspect, (text, weight) in queries.items():
        model = AspectEncoder.from_pretrained(RunDir(run).aspect_model(aspect))
        q = model.encode([text], aspects=aspect)[aspect][0]
        score += weight * (explorer.embeddings[aspect] @ q)
    score /= 1.5
    assert found["doc_id"].tolist() == [docs.ids[i] for i in np.argsort(-score)[:5]]
    np.testing.assert_allclose(found["score"], np.sort(score)[::-1][:5], atol=1e-4)
    with pytest.raises(ValueError, match="unknown aspects"):
        explorer.search({"outcome": ("x", 1.0)})
    with pytest.raises(ValueError, match="at least one"):
        explorer.search({"approach": ("  ", 1.0)})


@pytest.mark.slow
def test_place_leaves_the_map_alone_and_reweight_moves_it(explorer_run):
    _, docs, explorer = explorer_run
    before = explorer.coords.copy()
    x, y, placed = explorer.on_place(docs.texts()[3])
    assert np.array_equal(explorer.coords, before) and np.isfinite([x, y]).all()
    assert "Most similar papers" in placed
    with pytest.raises(ValueError):
        explorer.on_place("   ")
    coords = explorer.reweight({"approach": 1.0})
    assert explorer.weights == {"challenge": 0.0, "approach": 1.0} and coords.shape == before.shape
    assert explorer.map_aspects() == ["approach"]


# --------------------------------------------------------------------------- question axes (stage 07) on the map

# Question q is answered from coordinate q of the unit aspect embedding alone: P(yes) = sigmoid(SCALE x_q),
# so the expected answers are computed here by hand, independently of the classifier's code.
QUESTIONS = ["Does it parse <script>alert(1)</script>?", "Is it about translation?", "Does it use a corpus?",
             "Is it about speech?", "Does it use graphs?"]
SCALE = 5.0


def _probs(vectors):
    v = np.atleast_2d(vectors)[:, :len(QUESTIONS)] / np.linalg.norm(np.atleast_2d(vectors), axis=1, keepdims=True)
    return 1 / (1 + np.exp(-SCALE * v))


def _save_axes(run, aspect, dim=16):
    """Hand-set MBQA weights saved the way stage 07 saves them (questions.save_mbqa)."""
    from workbench.questions.axes import save_mbqa
    from workbench.questions.mbqa import make_mbqa

    model = make_mbqa(dim, len(QUESTIONS))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
        for q in range(len(QUESTIONS)):
            model[0].weight[q, q] = SCALE
    save_mbqa(model, run / "questions" / aspect,
              {"aspect": aspect, "dim": dim, "questions": [{"id": str(q), "text": t} for q, t in enumerate(QUESTIONS)]})


@pytest.fixture(scope="module")
def axes_explorer(explorer_run, tmp_path_factory):
    """The same run (models and cached embeddings linked, not copied) with question axes for "challenge" only."""
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    run, docs, _ = explorer_run
    other = tmp_path_factory.mktemp("explore_axes")
    for name in ("unified_model", "aspect_models", "embeddings"):
        (other / name).symlink_to(run / name)
    _save_axes(other, "challenge")
    return Explorer(other, docs, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0))


def test_compare_html_agrees_and_disagrees_with_hand_computed_answers(tmp_path):
    from workbench.questions.overview import compare_html
    from workbench.questions.axes import QuestionAxes

    _save_axes(tmp_path, "challenge")
    axes = {"challenge": QuestionAxes.load(tmp_path, "challenge")}
    a, b = np.zeros(16), np.zeros(16)
    a[:5], b[:5] = [2, 1, -1, 1, 0.5], [1, 2, -3, -1, -1]  # agree: 0, 1 (yes), 2 (no); disagree: 3, 4
    pa, pb = _probs(a)[0], _probs(b)[0]
    html = compare_html(axes, {"challenge": a}, {"challenge": b}, ("<b>A</b>", "B"), top=5)
    agree, disagree = html.split("Disagree on:")
    esc = lambda q: q.replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    for q in (0, 1, 2):
        assert esc(QUESTIONS[q]) in agree and esc(QUESTIONS[q]) not in disagree
        assert f"({pa[q]:.2f}, {pb[q]:.2f})" in agree
    assert agree.index(f"both no: {esc(QUESTIONS[2])}") > 0 and "both yes: Is it about translation?" in agree
    for q in (3, 4):
        assert esc(QUESTIONS[q]) in disagree and f"({pa[q]:.2f}, {pb[q]:.2f})" in disagree
    # Surest first: agreement by p_a p_b (yes) or (1 - p_a)(1 - p_b) (no); disagreement by |p_a - p_b|.
    score = np.where(pa > 0.5, pa * pb, (1 - pa) * (1 - pb))
    order = sorted((0, 1, 2), key=lambda q: -score[q])
    assert [agree.index(esc(QUESTIONS[q])) for q in order] == sorted(agree.index(esc(QUESTIONS[q])) for q in order)
    first = 3 if abs(pa[3] - pb[3]) > abs(pa[4] - pb[4]) else 4
    assert disagree.index(QUESTIONS[first]) < disagree.index(QUESTIONS[7 - first])
    assert "&lt;script&gt;" in html and "<script>" not in html and "&lt;b&gt;A&lt;/b&gt;" in html
    assert "No question axes" in compare_html(axes, {"approach": a}, {"approach": b})


def _pane_arguments(explorer, monkeypatch, **options) -> dict:
    """What Explorer.pane hands MapPane (a stub: building the widgets is test_mapview's business, and slow)."""
    from workbench.maps import explore as explore_module

    seen = {}

    def flat(kwargs):  # the fields of PaneCallbacks, PaneView and PaneState as if given one by one
        return {k: v for key, given in kwargs.items()
                for k, v in (vars(given).items() if dataclasses.is_dataclass(given) else [(key, given)])}

    def stub(*args, **kwargs):  # a pane the teaching widget can be put under
        seen.update(flat(kwargs), meta=args[1])
        return types.SimpleNamespace(layout=types.SimpleNamespace(children=()))

    monkeypatch.setattr(explore_module, "MapPane", stub)
    explorer.pane(**options)
    return seen


@pytest.mark.slow
def test_no_question_axes_changes_nothing(explorer_run, monkeypatch):
    _, _, explorer = explorer_run
    assert explorer.question_axes() == {}
    assert explorer.region_labels(3, by="questions") == [] and explorer.hover_questions() is None
    assert explorer.region_labels(3, by="statements") == []  # no decoders here
    terms = explorer.region_labels(3)  # key phrases need no decoder
    aspect = max(explorer.weights, key=explorer.weights.get)
    assert len(terms) == 3 and len({t[2] for t in terms}) == 3
    # A label names the aspect only where its terms come from that aspect's statements; the detail gives shares.
    assert all(t[2].split(": ")[0] in (aspect, t[2]) and len(t[2]) <= 60 and " of its " in t[3] for t in terms)
    assert [t[4] for t in terms] == ["1", "2", "3"]  # the regions' numbers, as on the map
    seen = _pane_arguments(explorer, monkeypatch, labels=3)
    assert seen["on_compare"] is None and "questions" not in seen["meta"]
    with pytest.raises(ValueError, match="statements"):
        explorer.region_labels(3, by="titles")


@pytest.mark.slow
def test_explorer_compares_papers_and_a_tapped_spot(axes_explorer, monkeypatch):
    from workbench.questions.overview import compare_html

    ex = axes_explorer
    assert list(ex.question_axes()) == ["challenge"]  # "approach" has no axes: left out, no error
    html = ex.compare_html(0, 1, top=5)
    emb = ex.embeddings["challenge"]
    titles = ex.meta["title"].tolist()
    assert html == compare_html(ex.question_axes(), {"challenge": emb[0]}, {"challenge": emb[1]},
                                (titles[0], titles[1]), ex.weights, top=5)
    assert "<b>challenge</b>" in html and "approach" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html  # paper 0's title
    p0, p1 = _probs(emb[0])[0], _probs(emb[1])[0]
    agree = html.split("Disagree on:")[0]
    for q, text in enumerate(QUESTIONS[1:], 1):  # the escaped question 0 is checked above
        assert (text in agree) == ((p0[q] > 0.5) == (p1[q] > 0.5))

    x, y = ex.coords[5] + 3.0
    spot = ex.on_compare(0, (float(x), float(y)))
    assert "tapped spot" in spot and spot == ex.compare_html(0, vectors=ex.invert(x, y))
    assert _pane_arguments(ex, monkeypatch, labels=False)["on_compare"] == ex.on_compare


@pytest.mark.slow
def test_region_question_labels_and_hover_questions_come_from_the_papers(axes_explorer, tmp_path,
                                                                          monkeypatch):
    from workbench.maps.mapview import cluster_labels

    ex = axes_explorer
    labels = ex.region_labels(3, by="questions")
    groups = cluster_labels(ex.coords, 3)
    assert len(labels) == 3
    for g, (x, y, short, detail, number) in zip(np.unique(groups), labels):
        assert number == str(g + 1)  # a first map's regions are numbered as its clusters
        p = _probs(ex.embeddings["challenge"][groups == g])
        share, mean = (p > 0.5).mean(0), p.mean(0)
        best = max(range(len(QUESTIONS)), key=lambda q: (share[q], mean[q]))
        np.testing.assert_allclose((x, y), ex.coords[groups == g].mean(0))
        if share[best] > 0.5:
            assert short == QUESTIONS[best] and f"{QUESTIONS[best]} ({share[best]:.0%}" in detail
        else:
            assert "no question" in short

    hover = ex.hover_questions()
    p = _probs(ex.embeddings["challenge"])
    for i in range(len(hover)):
        top = [QUESTIONS[q] for q in np.argsort(-p[i], kind="stable")[:2] if p[i, q] > 0.5]
        assert hover[i] == ("challenge: " + " / ".join(top) if top else "")
    assert ex.hover_questions({"approach": 1.0}) is None  # no axes for the weighted aspect

    from workbench.maps import explore as explore_module  # what export hands export_html (the page: test_mapview)

    seen = {}
    monkeypatch.setattr(explore_module, "export_html",  # PageOptions and PresetDetails as if given one by one
                        lambda path, coords, meta, **kw: seen.update(
                            {k: v for key, given in kw.items()
                             for k, v in (vars(given).items() if dataclasses.is_dataclass(given) else [(key, given)])},
                            coords=coords))
    ex.export(tmp_path / "map.html", presets={"equal": {"challenge": 1, "approach": 1}, "approach": {"approach": 1}},
              labels=3, label_source="questions")
    asked = seen["questions_by_preset"]
    assert asked["approach"] == [""] * len(hover)  # no axes for it: the column is there, empty
    assert asked["equal"] != asked["approach"] and all(t.startswith("challenge: ") for t in asked["equal"] if t)
    drawn = seen["labels_by_preset"]["equal"]
    assert len(drawn) == 3 and all(text in QUESTIONS or "no question" in text for _, _, text, *_ in drawn)
    assert seen["labels_by_preset"]["approach"] == []  # the preset's weighted aspect has no axes


def test_the_empty_spot_is_between_regions_and_away_from_every_paper():
    from workbench.maps.tsne_math import empty_spot

    rng = np.random.default_rng(0)
    # Three blobs in a row: the midpoint of the two outer (largest) ones falls inside the middle one.
    blobs = [(-10, 0, 60), (0, 0, 20), (10, 0, 60), (0, 12, 20)]
    coords = np.concatenate([rng.normal((x, y), 0.8, size=(n, 2)) for x, y, n in blobs])
    groups = np.concatenate([[g] * n for g, (_, _, n) in enumerate(blobs)])
    spot = empty_spot(coords, groups)
    nearest = np.linalg.norm(coords - spot, axis=1).min()
    naive = (coords[groups == 0].mean(0) + coords[groups == 2].mean(0)) / 2
    assert nearest > 3 * np.linalg.norm(coords - naive, axis=1).min() and nearest > 2.0
    assert empty_spot(coords[:5], np.zeros(5, dtype=int)).shape == (2,)  # one region: its centre


@pytest.mark.slow
def test_the_selection_and_marks_survive_a_kernel_restart_and_export_as_csv_and_ris(explorer_run, tmp_path):
    """Lasso in the pane -> explorer.selection; marks too; a new Explorer on the same run (a restarted kernel)
    has both; the selection written as CSV and RIS reads back through load_corpus with the same papers."""
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    run, docs, explorer = explorer_run
    pane = explorer.pane(labels=False)
    pane.select([4, 0, 7])  # what a lasso does: the source's selection changes
    assert explorer.selection["doc_id"].tolist() == [docs.ids[i] for i in (4, 0, 7)]
    assert "3 papers selected" in pane.selection_info.value
    pane.tapped = [1, 2]
    pane.mark(True)
    assert explorer.marked_pairs[["doc_id_a", "doc_id_b", "similar"]].values.tolist() == [
        [docs.ids[1], docs.ids[2], True]]

    reordered = docs.subset(ids=list(reversed(docs.ids)))  # a re-export in another order
    again = Explorer(run, reordered, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0))
    assert again.selection["doc_id"].tolist() == [docs.ids[i] for i in (4, 0, 7)]
    assert again.marked_pairs["doc_id_a"].tolist() == [docs.ids[1]]
    restored = again.pane(labels=False)
    row = {d: i for i, d in enumerate(reordered.ids)}
    assert restored.source.selected.indices == [row[docs.ids[i]] for i in (4, 0, 7)]
    assert restored.marks == [(row[docs.ids[1]], row[docs.ids[2]], True)]

    for suffix in (".csv", ".ris"):
        back = load_corpus(again.export_selection(tmp_path / f"picked{suffix}")).docs
        want = again.selection
        assert back["doc_id"].tolist() == want["doc_id"].tolist(), suffix
        assert back["title"].tolist() == want["title"].tolist(), suffix  # paper 0's title is a script element
        assert back["abstract"].tolist() == want["abstract"].tolist(), suffix

    region = again.select_region(1, k=3)
    assert 0 < len(region) < len(docs)
    with pytest.raises(ValueError, match="region 9 does not exist"):
        again.select_region(9, k=3)
    with pytest.raises(ValueError, match="not papers of this map"):
        again.select(["nope"])
    again.select([])
    with pytest.raises(ValueError, match="nothing is selected"):
        again.export_selection(tmp_path / "none.ris")
    with pytest.raises(ValueError, match=r"\.csv or \.ris"):
        again.select([0]) is not None and again.export_selection(tmp_path / "picked.xlsx")
    RunDir(run).selection.write_text("{not json")  # a torn or hand-edited file: said, and an empty selection
    assert Explorer(run, docs, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0)).selection.empty


PAGE_CHECKS = """
const doc = Bokeh.documents[0];
const src = doc.get_model_by_name("points"), labels = doc.get_model_by_name("labels");
return {caption: doc.get_model_by_name("caption").text, legend: doc.get_model_by_name("legend").text,
        labels: Array.from(labels.data.text), names: Array.from(labels.data.name),
        color: Array.from(src.data.color), group: Array.from(src.data.group),
        shown: doc.get_model_by_name("points_glyph").view.filter.booleans.filter(b => b).length};
"""

TOOLTIP_RECT = """
const out = [];
const walk = root => { for (const el of root.querySelectorAll('*')) {
  if (el.shadowRoot) { walk(el.shadowRoot); }
  if (String(el.className).includes('bk-tooltip-content')) {
    const r = el.getBoundingClientRect();
    if (r.width) { out.push({left: r.left, top: r.top, right: r.right, bottom: r.bottom, text: el.textContent}); }
  } } };
walk(document);
return out;
"""


@pytest.mark.slow
def test_the_exported_map_explains_itself_in_a_1280_by_800_window(explorer_run, tmp_path):
    """05_map.html as Explorer.export writes it, in headless Chromium at 1,280 x 800: the caption follows the
    preset; labels are short, name their aspect, and differ; hover, colours and legend number regions alike;
    every tooltip stays inside the window; the year filter hides points (and their hover)."""
    import re
    import time

    from lab_harness import Browser, chromium_paths
    from workbench.data.corpus import Corpus
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    if chromium_paths() is None:
        pytest.fail("chromium and chromium-driver are required (scripts/setup.sh installs them)")
    run, docs, _ = explorer_run
    frame = docs.docs.assign(year=[2010 + i % 8 for i in range(len(docs))])
    explorer = Explorer(run, Corpus(frame), ASPECTS, decode=False, layout=MapLayout(perplexity=5.0))
    presets = {"challenge first": {"challenge": 3.0, "approach": 1.0}, "approach only": {"approach": 1.0}}
    page = explorer.export(tmp_path / "05_map.html", presets=presets, labels=4)
    browser = Browser(tmp_path / "profile")
    try:
        browser.driver.get(page.as_uri())
        browser.wait(lambda: browser.js("return !!(window.Bokeh && Bokeh.documents.length && "
                                        "Bokeh.documents[0].get_model_by_name('points'))"), 30, "the map loads")
        time.sleep(0.5)
        state = browser.js(PAGE_CHECKS)
        assert "Each dot is a paper (30 in all)" in state["caption"] and "challenge 0.75, approach 0.25" in state["caption"]
        for preset, aspect in (("challenge first", "challenge"), ("approach only", "approach")):
            browser.js("Bokeh.documents[0].get_model_by_name('preset').value = arguments[0];", preset)
            time.sleep(0.4)
            state = browser.js(PAGE_CHECKS)
            assert (f"({'approach 1.00' if aspect == 'approach' else 'challenge 0.75, approach 0.25'})"
                    in state["caption"])
            assert len(state["labels"]) == 4 and len(set(state["labels"])) == 4, state["labels"]
            for label in state["labels"]:  # short, of its aspect or of none (the abstracts'), no citation fragment
                assert len(label) <= 60 and label.split(": ")[0] in (aspect, label), label
                assert not re.search(r"et al|\d{4}\)|\.\.\.|…", label), label
            # The legend's swatch of region m is the colour of every point the hover calls "region m".
            swatches = re.findall(r"background:(#[0-9a-fA-F]{6})'></span><b>(\d+)\. ", state["legend"])
            assert len(swatches) == 4
            # The map itself draws each region's number and name; the hover names the region as the map does.
            drawn = dict(name.split(". ", 1) for name in state["names"])
            assert sorted(drawn) == sorted(m for _, m in swatches), state["names"]
            for colour, group in zip(state["color"], state["group"]):
                number = group.split(":")[0].split()[-1]
                assert colour == {m: c for c, m in swatches}[number], (colour, group)
                assert group == f"region {number}: {drawn[number]}", (group, drawn)

        viewport = browser.js("return [window.innerWidth, window.innerHeight]")

        def hover(k: int) -> list[dict]:
            points = browser.map_points()
            browser.js("window.scrollBy(0, arguments[0] - window.innerHeight / 2);", points["py"][k])
            time.sleep(0.2)
            points = browser.map_points()
            browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 1, "y": 1})
            time.sleep(0.2)
            browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": "mouseMoved", "x": points["px"][k], "y": points["py"][k]})
            time.sleep(0.4)
            return browser.js(TOOLTIP_RECT)

        points = browser.map_points()
        extremes = {int(np.argmin(points["px"])), int(np.argmax(points["px"])), int(np.argmin(points["py"])),
                    int(np.argmax(points["py"]))}
        for k in extremes:
            tips = hover(k)
            assert tips, f"no tooltip over paper {k}"
            for tip in tips:
                assert tip["left"] >= 0 and tip["top"] >= 0, tip
                assert tip["right"] <= viewport[0] and tip["bottom"] <= viewport[1], tip
            assert any(state['group'][k] in t["text"] for t in tips), (tips, state["group"][k])

        browser.js("Bokeh.documents[0].get_model_by_name('years').value = [2010, 2011];")
        time.sleep(0.4)
        state = browser.js(PAGE_CHECKS)
        assert state["shown"] == sum(1 for y in frame["year"] if y <= 2011)
        hidden = next(k for k, y in enumerate(frame["year"]) if y > 2011)
        assert not hover(hidden)  # a hidden paper has no hover
    finally:
        browser.close()


@pytest.mark.slow
def test_papers_added_later_are_embedded_and_placed_without_moving_the_rest(explorer_run, monkeypatch, tmp_path):
    """A corpus that grew by 6 papers (and came back in another order): only the 6 go through the model, the
    24 mapped before keep their positions, the 6 land where the frozen map places them."""
    from workbench.embed import embeddings as embeddings_module
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    shared, docs, _ = explorer_run
    run = tmp_path / "run"  # the same model, an empty embedding cache
    run.mkdir()
    (run / "unified_model").symlink_to(shared / "unified_model")
    before = docs.subset(ids=docs.ids[:24])
    first = Explorer(run, before, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0, reuse_map=None))
    first.save_map("grown")

    encoded: list[str] = []
    load = embeddings_module.load_model

    def counting(*args, **kwargs):
        model = load(*args, **kwargs)
        encode = model.encode
        model.encode = lambda texts, **kw: (encoded.extend(texts), encode(texts, **kw))[1]
        return model

    monkeypatch.setattr(embeddings_module, "load_model", counting)
    grown = docs.subset(ids=list(reversed(docs.ids)))
    later = Explorer(run, grown, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0, reuse_map="grown"))
    new_ids = docs.ids[24:]
    assert sorted(encoded) == sorted(docs.subset(ids=new_ids).texts())  # only the new abstracts
    row = {d: i for i, d in enumerate(grown.ids)}
    for i, d in enumerate(before.ids):  # nothing mapped before moved
        np.testing.assert_array_equal(later.coords[row[d]], first.coords[i])
    placed = first.map.place({a: later.embeddings[a][[row[d] for d in new_ids]] for a in ASPECTS})
    np.testing.assert_allclose(later.coords[[row[d] for d in new_ids]], placed, atol=1e-8)
    # The reused rows are the model's own embeddings of those papers.
    fresh = load(RunDir(run).unified_model).encode(grown.texts(), normalize=True, progress=False)
    for a in ASPECTS:
        np.testing.assert_allclose(later.embeddings[a], fresh[a], atol=1e-5)

    other = Explorer(run, grown, ASPECTS, weights={"challenge": 1.0, "approach": 0.0},
                     decode=False, layout=MapLayout(perplexity=5.0, reuse_map="grown"))
    assert other.weights == {"challenge": 1.0, "approach": 0.0}  # other weights: a warm refit from that layout
    wider = Explorer(run, grown, ASPECTS, decode=False, layout=MapLayout(perplexity=6.0, reuse_map="grown"))
    assert wider.map.perplexity == 6.0

    from workbench.data.corpus import Corpus

    edited = grown.docs.copy()
    edited.loc[edited.index[0], "abstract"] = "A corrected abstract of the first paper, about parsing."
    encoded.clear()
    Explorer(run, Corpus(edited), ASPECTS, decode=False, layout=MapLayout(perplexity=5.0, reuse_map=None))
    assert encoded == ["A corrected abstract of the first paper, about parsing."]  # a changed text: embedded again

    weights_file = RunDir(run).map("grown") / "map.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[:100])  # a torn saved map: said, and a new map is fitted
    torn = Explorer(run, grown, ASPECTS, decode=False, layout=MapLayout(perplexity=5.0, reuse_map="grown"))
    assert torn.coords.shape == (len(grown), 2) and np.all(np.isfinite(torn.coords))
