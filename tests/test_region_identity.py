"""Regions a user can trust: labels that name what a quarter of the region shares (or say "mixed"), regions that
keep their number and colour when a weight moves, a legend that states the weights of the map drawn, and a hover
that shows only the fields a paper has.

The labels are computed on real abstracts (CSAbstruct, in the repository) over regions of a cheap map of them
(the 2-D projection of their TF-IDF vectors); every share is counted again here with a regular expression, not
with the labeller's tokeniser. The weight change is a real warm one (`AspectMap.with_weights`) on a map of 4,000
papers, started from the layout of the papers' latent positions rather than from a t-SNE fit (which costs some
15 s here) and given 40 iterations.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.data.corpus import Corpus
from workbench.maps.labels import aspect_texts, label_regions, paper_texts, term_index
from workbench.maps.mapview import (MapRegions, fine_regions, map_frame, match_regions, region_color,
                                    tooltip_template)
from workbench.maps.options import PaneCallbacks
from workbench.maps.pane import MapPane

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import csabstruct  # noqa: E402


def share(term: str, texts) -> float:
    """The share of `texts` in which `term` stands as words (a phrase: its words in a row), counted by regex."""
    pattern = re.compile(r"(?<![\w-])" + r"\s+".join(map(re.escape, term.split())) + r"(?![\w-])")
    return float(np.mean([bool(pattern.search(str(t or "").lower())) for t in texts]))


@pytest.fixture(scope="module", params=["CSAbstruct", "ACLSum"])
def csab(request):
    """Real abstracts as a corpus whose approach sentences are its `approach` highlights (as a person marks them),
    and a cheap map of them: the first two SVD components of their TF-IDF vectors. CSAbstruct's dev and test
    papers (method sentences), and the demo's corpus, ACLSum's 250 papers (their approach highlights)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    if request.param == "ACLSum":
        from workbench.data.corpus import load_corpus

        docs = load_corpus("aclsum").docs[["doc_id", "title", "abstract", "highlights_approach"]]
    else:
        frame = csabstruct.load(("dev", "test"))
        docs = pd.DataFrame({"doc_id": frame["doc_id"], "title": "", "abstract": frame["abstract"],
                             "highlights_approach": [[s for s, r in zip(ss, rr) if r == "method"]
                                                     for ss, rr in zip(frame["sentences"], frame["roles"])]})
    vectors = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit_transform(docs["abstract"])
    coords = TruncatedSVD(3, random_state=0).fit_transform(vectors)[:, 1:]  # the first component is the mean
    return Corpus(docs), coords


def test_each_label_names_terms_a_quarter_of_its_region_shares_or_says_mixed(csab):
    corpus, coords = csab
    abstracts = np.array([a.lower() for a in paper_texts(corpus)], dtype=object)
    approach = np.array(aspect_texts(corpus, "approach"), dtype=object)
    assert sum(t is not None for t in approach) > 0.8 * len(approach)  # the method sentences a person marked
    index = term_index(approach, "approach", abstracts)
    numbers = MapRegions().numbers(coords, 8)
    for groups in (numbers, fine_regions(coords, numbers)):  # the regions, then their sub-regions ("3.2")
        described = label_regions(index, groups)
        assert len(described) == len(set(groups.tolist())) and len({r.text for r in described.values()}) == len(
            described)
        for g, region in described.items():
            members = groups == g
            if region.mixed:  # said, with the best term and its true share
                assert "mixed" in region.text and all(s < 0.25 for s in region.shares)
                for t, s in zip(region.terms, region.shares):
                    assert share(t, abstracts[members]) == pytest.approx(s) and f"{s:.0%}" in region.text
                continue
            for t in region.terms:  # every term in a quarter of the region's abstracts
                assert share(t, abstracts[members]) >= 0.25, (region.text, t, share(t, abstracts[members]))
            if region.text.startswith("approach: "):  # ... and of its approach statements, where it names them
                assert all(share(t, approach[members]) >= 0.25 for t in region.terms), region.text
            else:
                assert region.aspect is None and ": " not in region.text, region.text
        fine = groups is not numbers
        assert len(described) > 16 if fine else len(described) == 8
        passed = sum(not r.mixed for r in described.values()) / len(described)
        assert passed >= 0.5, [r.text for r in described.values()]  # most regions share a term on real abstracts


def test_a_term_must_reach_a_quarter_of_the_region_else_the_label_says_mixed():
    def label(spam_papers: int):  # region 1: ten papers, `spam_papers` of them on spam filtering
        texts = ["Spam filtering."] * spam_papers + [f"topic{i}" for i in range(20 - spam_papers)]
        return label_regions(term_index(texts), np.repeat([1, 2], 10))[1]

    three = label(3)
    assert three.text == "spam filtering" and three.shares == [pytest.approx(0.3)] and not three.mixed
    two = label(2)  # 20%: a minority topic, not what the region shares
    assert two.mixed and two.text in {f"mixed ({t} 20%)" for t in ("filtering", "spam", "spam filtering")}
    assert two.detail().startswith("no distinctive term is in a quarter of its 10 papers' abstracts")


# --------------------------------------------------------------------------- identity across a weight change


def test_matching_keeps_numbers_of_continuing_regions_and_gives_new_ones_fresh_numbers():
    before = np.repeat([1, 2, 3, 4], 25)
    shuffled = np.repeat([7, 0, 5, 9], 25)  # the same regions under other ids
    assert match_regions(before, shuffled).tolist() == before.tolist()
    split = before.copy()
    split[75:] = 3  # region 4 swallowed by region 3 ...
    split[:10] = 8  # ... and a new region cut out of region 1
    after = match_regions(before, split)
    assert (after[10:25] == 1).all() and (after[25:50] == 2).all()
    assert len(set(after[50:])) == 1 and after[50] in (3, 4)  # the merged region keeps one of its two numbers
    assert (after[:10] == 5).all()  # fresh: a number neither map uses
    assert region_color(5) == region_color("5.2") != region_color(6) and region_color(1) != region_color(11)


def test_sub_regions_keep_their_numbers_when_their_sizes_change_order():
    """A region of three blobs, A (40 papers) > B (30) > C (20): "1.1", "1.2", "1.3". Then 15 of A's papers move
    into C, so that C > B > A: cut afresh, the names follow size and every blob is renamed; through
    `MapRegions.fine` each blob keeps its number, and the moved papers take C's."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 6.0]])
    blob = np.repeat([0, 1, 2], [40, 30, 20])
    far = np.full((90, 2), 200.0) + rng.normal(scale=0.5, size=(90, 2))  # region 2, far away
    before = np.vstack([centres[blob] + rng.normal(scale=0.4, size=(90, 2)), far])
    after = before.copy()
    after[:15] = centres[2] + rng.normal(scale=0.4, size=(15, 2))  # 15 of A's papers now sit in C
    regions = MapRegions()
    first = regions.fine(before, k=2)
    a, b, c = first[20], first[50], first[80]
    assert len({a, b, c}) == 3 and a.endswith(".1") and c.endswith(".3")
    again = regions.fine(after, k=2)
    assert again[20] == a and again[50] == b and again[80] == c and (again[:15] == c).all()
    fresh = fine_regions(after, MapRegions().numbers(after, k=2))
    assert fresh[20] != a  # cut afresh, A (now the smallest) is renamed
    assert regions.fine(after, k=2).tolist() == again.tolist()  # the same map again: the same names


def _manifold(n: int, seed: int = 0):
    """Papers with a 2-D latent position in 10 groups; each aspect a different smooth map of it."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 10
    z = rng.uniform(-6, 6, size=(10, 2))[labels] + 0.9 * rng.normal(size=(n, 2))
    emb = {}
    for name, d in zip(("challenge", "approach", "outcome"), (16, 12, 8)):
        a, b = rng.normal(size=(2, d)), rng.uniform(0, 2 * np.pi, size=d)
        emb[name] = np.sin(0.5 * z @ a + b) + 0.05 * rng.normal(size=(n, d))
    return emb, z


WEIGHTS = {"challenge": 0.40, "approach": 0.35, "outcome": 0.25}
MOVED = {"challenge": 0.45, "approach": 0.30, "outcome": 0.25}  # one weight up by 0.05 (renormalised)


@pytest.fixture(scope="module")
def weight_change():
    """(map before, map after) of a 0.05 step on one weight, 4,000 papers, warm (see the module docstring)."""
    from workbench.maps.tsne import AspectMap

    emb, z = _manifold(4000)
    before = AspectMap(emb, WEIGHTS, 3.0 * z, method="opentsne", seed=0)
    return before, before.with_weights(MOVED, n_iter=40)


def continuing(old: np.ndarray, new_ids: np.ndarray) -> np.ndarray:
    """The papers of an old region and a new one whose members overlap by more than half of each (a mask)."""
    mask = np.zeros(len(old), dtype=bool)
    for a in np.unique(old):
        for b in np.unique(new_ids):
            both = (old == a) & (new_ids == b)
            if both.sum() > 0.5 * (old == a).sum() and both.sum() > 0.5 * (new_ids == b).sum():
                mask |= both
    return mask


@pytest.mark.slow
def test_a_weight_step_of_005_on_4000_papers_keeps_regions_numbers_and_colours(weight_change):
    from workbench.maps.mapview import cluster_labels

    before, after = weight_change
    regions = MapRegions()
    old = regions.numbers(before.coords, 8)
    new = regions.numbers(after.coords, 8)
    counted = continuing(old, cluster_labels(after.coords, 8))
    assert counted.mean() > 0.5 and (new[counted] == old[counted]).mean() >= 0.8, (counted.mean(), new[counted])
    assert regions.numbers(after.coords, 8).tolist() == new.tolist()  # the same map: the same numbers

    # Through the pane: the points' colours and groups, the legend's weights and swatches, while and after.
    meta = pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(old))], "title": [f"Paper {i}" for i in range(4000)]})
    seen = {}

    def on_weights(weights, on_frame=None):
        seen["during"] = pane.legend.value
        return after.coords

    def on_labels():
        numbers = pane.regions.numbers(pane.coords, 8)
        return [(*pane.coords[numbers == m].mean(axis=0), f"region {m}", "", str(m)) for m in np.unique(numbers)]

    pane = MapPane(before.coords, meta, list(WEIGHTS), WEIGHTS, on_weights=on_weights,
                   callbacks=PaneCallbacks(on_labels=on_labels))
    pane.set_labels(on_labels())
    colours_before = list(pane.source.data["color"])
    pane.set_weights(MOVED)
    assert "this map:</b> challenge 0.40, approach 0.35, outcome 0.25 <i>(laying the map out for challenge 0.45, " \
           "approach 0.30, outcome 0.25" in seen["during"]  # the drawn map's weights while the new one is computed
    legend = pane.legend.value
    assert "this map:</b> challenge 0.45, approach 0.30, outcome 0.25</p>" in legend  # once drawn, the new ones
    assert pane.weights() == pytest.approx(MOVED)  # ... as the sliders
    groups = np.array([int(g.split()[-1]) for g in pane.source.data["group"]])
    assert groups.tolist() == new.tolist()
    same = np.array(colours_before) == np.array(pane.source.data["color"])
    assert same[old == new].all() and same[counted].mean() >= 0.8
    swatches = dict((m, c) for c, m in re.findall(r"background:(#[0-9a-fA-F]{6})'></span><b>(\d+)\. ", legend))
    assert all(swatches[str(g)] == c for g, c in zip(groups, pane.source.data["color"]))


def test_a_failed_relayout_leaves_the_weights_of_the_map_drawn():
    coords = np.random.default_rng(0).normal(size=(40, 2))
    meta = pd.DataFrame({"title": [f"p{i}" for i in range(40)]})

    def boom(weights):
        raise RuntimeError("no memory")

    pane = MapPane(coords, meta, ["a", "b"], {"a": 0.5, "b": 0.5}, on_weights=boom)
    pane.set_weights({"a": 0.8, "b": 0.2})
    assert "failed" in pane.detail.value and pane.weights() == {"a": 0.5, "b": 0.5}
    assert "a 0.50, b 0.50" in pane.legend.value and "laying" not in pane.legend.value


# --------------------------------------------------------------------------- the hover


def test_the_hover_shows_only_the_fields_a_corpus_and_a_paper_have():
    n = 20
    coords = np.random.default_rng(1).normal(size=(n, 2))
    no_year = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "title": [f"Paper {i}" for i in range(n)],
                            "year": [None] * n, "summary_challenge": [None] * n,
                            "summary_approach": ["we parse"] + [None] * (n - 1)})
    data = map_frame(coords, no_year)
    template = tooltip_template(data, "region")
    assert "@year" not in template and "year:" not in template  # no paper has a year
    assert "summary_challenge" not in template  # no paper has a challenge summary
    assert "@{summary_approach}" in template and "display:@{shown_summary_approach}" in template
    assert data["shown_summary_approach"] == ["-webkit-box"] + ["none"] * (n - 1)  # shown for paper 0 only
    some_years = no_year.assign(year=[2001] * 5 + [None] * (n - 5), title="")
    data = map_frame(coords, some_years)
    template = tooltip_template(data, "region")
    assert "display:@{shown_year}" in template and data["shown_year"][4:6] == ["inline", "none"]
    assert "@doc_id" in template and "@title" not in template  # no titles: the id names the paper
    assert data["year"] == ["2001"] * 5 + [""] * (n - 5)  # the page's CSV still reads every paper's year


@pytest.mark.slow
def test_the_hover_leaves_the_tapped_point_and_most_of_the_map_in_view(tmp_path):
    """In headless Chromium: the tooltip of a paper with every field sits beside the paper, not on it, and covers
    under a tenth of a 480 x 420 map (the pane's size); a paper without the fields gets no rows for them."""
    from lab_harness import Browser, chromium_paths
    from workbench.maps.page import PageOptions, export_html

    if chromium_paths() is None:
        pytest.fail("chromium and chromium-driver are required (scripts/setup.sh installs them)")
    n = 30
    coords = np.c_[np.arange(n) % 6, np.arange(n) // 6].astype(float) * 10
    long = "a summary of the paper that runs on and on over the width of the tooltip " * 3
    meta = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "title": ["A title that is long enough to wrap "
                                                                          "over two lines of the tooltip box"] * n,
                         "year": [2001] * 10 + [None] * (n - 10),
                         **{f"summary_{a}": [long] * 10 + [None] * (n - 10) for a in ("challenge", "approach",
                                                                                      "outcome")}})
    page = export_html(tmp_path / "map.html", {"all": coords}, meta, options=PageOptions(width=480, height=420))
    browser = Browser(tmp_path / "profile")
    try:
        browser.driver.get(page.as_uri())
        browser.wait(lambda: browser.map_points() is not None, 30, "the map loads")
        points = browser.map_points()
        frame = points["frame"]

        def hover(k: int) -> dict:
            browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 1, "y": 1})
            browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {
                "type": "mouseMoved", "x": points["px"][k], "y": points["py"][k]})
            browser.wait(lambda: browser.js(TOOLTIP), 5, "the tooltip")
            return browser.js(TOOLTIP)

        full, bare = hover(7), hover(20)
        area = (frame[2] - frame[0]) * (frame[3] - frame[1])
        assert full["width"] * full["height"] < 0.125 * area, (full, area)  # every field: an eighth at most
        x, y = points["px"][7], points["py"][7]
        assert not (full["left"] <= x <= full["right"] and full["top"] <= y <= full["bottom"])  # beside the paper
        assert "year:" in full["text"] and "outcome:" in full["text"]
        assert "year:" not in bare["text"] and "challenge:" not in bare["text"]
        assert re.search(r"\bregion \d+\b", bare["text"]), bare["text"]  # the region names itself ("region 2")
        assert bare["width"] * bare["height"] < 0.08 * area, (bare, area)  # title and region: a twelfth
    finally:
        browser.close()


TOOLTIP = """
const find = root => {
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { const found = find(el.shadowRoot); if (found) { return found; } }
    if (String(el.className).includes('bk-tooltip-content') && el.getBoundingClientRect().width) { return el; }
  }
  return null;
};
const el = find(document);
if (!el) { return null; }
const r = el.getBoundingClientRect();
const shown = [...el.querySelectorAll('div')].filter(d => getComputedStyle(d).display !== 'none'
                                                          && !d.querySelector('div'));
return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height,
        text: shown.map(d => d.innerText).join(' | ')};
"""
