"""A shown sentence's level reads its aspect as well as its rank (`decode.stating`); regions named on the map."""

import math

import numpy as np
import pandas as pd
import pytest

from workbench.decode import aspect_margin, stating
from workbench.decode.faithfulness import rank_thresholds
from workbench.maps.mapview import label_source_data, named_groups, short_name


def test_the_margin_is_the_log_ratio_to_the_strongest_other_aspect():
    weights = {"challenge": 0.6, "approach": 0.3, "outcome": 0.05}
    got = stating.aspect_margins(weights)
    # by hand: each aspect's weight over the largest of the others, in logs
    assert got["challenge"] == pytest.approx(math.log(0.6 / 0.3))
    assert got["approach"] == pytest.approx(math.log(0.3 / 0.6))
    assert got["outcome"] == pytest.approx(math.log(0.05 / 0.6))
    assert stating.aspect_margins({"only": 0.9}) == {"only": 0.0}


def test_a_near_sentence_of_another_aspect_reads_topic_only_and_a_far_one_stays_low():
    n = 2155
    high, low = rank_thresholds(n)
    clear, unclear, other = stating.HIGH_MARGIN, (stating.STATES_MARGIN + stating.HIGH_MARGIN) / 2, \
        stating.STATES_MARGIN - 0.5
    assert stating.stated_level(1, n, None) == "high"  # not checked: the rank's level
    assert stating.stated_level(1, n, clear) == "high"
    assert stating.stated_level(1, n, unclear) == "medium"  # near, but not clearly the aspect: not high
    assert stating.stated_level(1, n, other) == stating.TOPIC_ONLY
    assert stating.stated_level(high + 1, n, other) == stating.TOPIC_ONLY
    assert stating.stated_level(high + 1, n, unclear) == "medium"
    assert stating.stated_level(low + 1, n, other) == "low"
    assert stating.stated_level(low + 1, n, clear + 5) == "low"
    widest = int(stating.WIDEN * high)
    assert stating.stated_level(widest, n, clear) == "high"
    assert stating.stated_level(widest + 1, n, clear) == ("low" if widest + 1 > low else "medium")
    assert stating.stated_level(None, n, 1.0) is None


class _Model:
    """A pooling model's `attention` on one abstract: two sentences, the first the challenge head's."""

    pool, aspects = True, ["challenge", "outcome"]

    def __init__(self):
        self.calls = 0

    def attention(self, texts, aspects):
        self.calls += 1
        return [pd.DataFrame({"sentence": ["We ask why.", "It works."], "challenge": [0.8, 0.2],
                              "outcome": [0.01, 0.9]})[["sentence", *aspects]]]


def test_the_readout_rows_get_the_margin_of_the_sentence_in_its_own_abstract():
    model = _Model()
    reader = stating.MarginReader({"p1": "We ask why. It works."}, lambda: model)
    frame = pd.DataFrame([
        {"aspect": "challenge", "decoded": "We ask  why.", "from paper": "p1", "source": "sentence",
         "round-trip rank": 2, "corpus size": 2155, "level": "high", "confidence": "high confidence: 1 of ..."},
        {"aspect": "outcome", "decoded": "We ask why.", "from paper": "p1", "source": "sentence",
         "round-trip rank": 2, "corpus size": 2155, "level": "high", "confidence": "high confidence: 1 of ..."},
        {"aspect": "outcome", "decoded": "An LLM answer.", "from paper": "p1", "source": "llm",
         "round-trip rank": 2, "corpus size": 2155, "level": "high", "confidence": "high confidence: 1 of ..."},
    ])
    out = stating.with_stated(frame, reader)
    assert out["aspect margin"][0] == pytest.approx(math.log(0.8 / 0.01))
    assert out["level"].tolist() == ["high", stating.TOPIC_ONLY, "high"]
    assert out["confidence"][1].startswith("topic only: near (1 of ...)") and "outcome" in out["confidence"][1]
    assert pd.isna(out["aspect margin"][2]) and out["confidence"][2] == frame["confidence"][2]
    assert model.calls == 1  # the abstract is weighed once
    assert reader("unknown paper", "We ask why.", "challenge") is None
    assert reader("p1", "Not a sentence of it.", "challenge") is None


def test_a_head_taught_by_marks_reads_high_at_its_lower_line():
    """A margin between the two lines: high where marks taught the head, medium under the floor's line."""
    from types import SimpleNamespace

    class Weighed(_Model):
        def attention(self, texts, aspects):
            return [pd.DataFrame({"sentence": ["We ask why.", "It works."], "challenge": [0.8, 0.2],
                                  "outcome": [0.11, 0.9]})[["sentence", *aspects]]]

    margin = math.log(0.8 / 0.11)
    assert stating.TAUGHT_HIGH_MARGIN <= margin < stating.HIGH_MARGIN
    row = {"aspect": "challenge", "decoded": "We ask why.", "from paper": "p1", "source": "sentence",
           "round-trip rank": 1, "corpus size": 2155, "level": "high", "confidence": "high confidence: 1 of ..."}
    levels = {}
    for kind in ("taught", "floor"):
        model = Weighed()
        model.heads = {"challenge": SimpleNamespace(scorer=SimpleNamespace(kind=kind))}
        reader = stating.MarginReader({"p1": "We ask why. It works."}, lambda m=model: m)
        levels[kind] = stating.with_stated(pd.DataFrame([row]), reader)["level"][0]
    assert levels == {"taught": "high", "floor": "medium"}


def test_regions_are_named_on_the_map_and_in_the_hover():
    labels = [(0.0, 0.0, "approach: translation, bilingual", "detail", "3"),
              (1.0, 1.0, "mixed (spam 15%)", "detail", "7")]
    data = label_source_data(labels)
    assert data["name"] == ["3. translation, bilingual", "7. mixed (spam 15%)"]
    assert short_name("graph, tree, neural network models of parsing") == "graph, tree, neural…"
    assert len(short_name("x" * 60)) <= 27
    groups = ["region 3", "region 7", "region 3: an old name", "region 9"]
    assert named_groups(groups, labels) == ["region 3: translation, bilingual", "region 7: mixed (spam 15%)",
                                            "region 3: translation, bilingual", "region 9"]


# --------------------------------------------------------------------------- the memory's sentences by their margin

class _ThreeHeads:
    """A pooling model whose approach head weighs the background sentence most, as a position-mixture floor can:
    every head gives it much weight, so it is more challenge's than approach's."""

    pool, aspects = True, ["challenge", "approach", "outcome"]
    heads = {a: type("Head", (), {"scorer": type("Scorer", (), {"kind": "taught"})()})() for a in aspects}
    weights = {"challenge": [0.80, 0.15, 0.05], "approach": [0.50, 0.45, 0.05], "outcome": [0.10, 0.05, 0.85]}
    sentences = ["Parsing is hard.", "We train a graph parser.", "It beats the baseline."]

    def attention(self, texts, aspects):
        return [pd.DataFrame({"sentence": self.sentences, **{a: self.weights[a] for a in aspects}})[
            ["sentence", *aspects]] for _ in texts]


def test_the_margin_table_is_the_margin_of_every_sentence_at_once():
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(5), size=4).T  # 5 sentences x 4 heads
    got = aspect_margin.margin_table(w)
    for i in range(5):  # each row by hand: log of each weight over the largest other weight of the row
        want = [math.log(w[i, k] / max(np.delete(w[i], k))) for k in range(4)]
        assert got[i] == pytest.approx(want)
    assert np.all(aspect_margin.margin_table(w[:, :1]) == 0)  # one head: nothing to read it against


def test_the_memory_takes_the_sentence_that_states_the_aspect_not_the_one_weighed_most():
    model = _ThreeHeads()
    found = aspect_margin.stating_sentences(model, ["abstract"], model.aspects, least=-np.inf)[0]
    # by hand: approach's margin per sentence is log(its weight / the largest other weight on it)
    w = np.array([model.weights[a] for a in model.aspects]).T
    by_hand = np.log(w[:, 1]) - np.log(np.maximum(w[:, 0], w[:, 2]))
    assert int(np.argmax(w[:, 1])) == 0  # the head weighs the background sentence most ...
    assert found["approach"] == (model.sentences[1], pytest.approx(by_hand[1]))  # ... and the method states it
    assert found["challenge"][0] == model.sentences[0] and found["outcome"][0] == model.sentences[2]
    # A floor's head (no marks) keeps the sentence it weighs most, whatever its margin: there the margin tells little.
    floor = _ThreeHeads()
    floor.heads = {**model.heads, "approach": type("Head", (), {"scorer": None})()}
    assert not aspect_margin.reads_marks(floor, "approach") and aspect_margin.reads_marks(floor, "outcome")
    found = aspect_margin.stating_sentences(floor, ["abstract"], floor.aspects, least=5.0)[0]
    assert found == {"approach": (model.sentences[0], np.inf)}
    assert aspect_margin.stating_sentences(floor, ["abstract"], ["approach"], 5.0, every_head=True) == [{}]


def test_the_memory_margin_is_the_panes_own_line_for_a_sentence_of_another_aspect():
    assert aspect_margin.MEMORY_MARGIN == stating.STATES_MARGIN


def test_no_sentence_below_the_memory_margin_enters_and_those_left_out_are_counted(tmp_path, monkeypatch):
    from workbench.core.rundir import RunDir
    from workbench.decode import retrieval
    from workbench.decode.statements import Entries

    model, least = _ThreeHeads(), 1.0
    monkeypatch.setattr(retrieval, "MEMORY_MARGIN", least)
    RunDir(tmp_path).unified_model.mkdir(parents=True)
    corpus = type("Corpus", (), {"ids": ["p1", "p2"], "texts": lambda self: ["abstract one", "abstract two"]})()
    entries = {a: Entries() for a in model.aspects}
    entries["outcome"].add("p2", "A human summary.", "summary")
    entries["challenge"].add("p2", "A human challenge.", "summary")
    retrieval.add_own_sentences(tmp_path, corpus, entries, ["p1", "p2"], lambda folder: model)
    w = np.array([model.weights[a] for a in model.aspects]).T
    logs = np.log(w)
    reader = stating.MarginReader({"p1": "x", "p2": "y"}, lambda: model)
    for k, a in enumerate(model.aspects):
        others = np.delete(logs, k, axis=1).max(axis=1)
        clears = (logs[:, k] - others) >= least  # by hand: which sentences may stand for the aspect
        for doc, text, source in zip(entries[a].doc_ids, entries[a].texts, entries[a].sources):
            if source == "sentence":
                assert clears[model.sentences.index(text)] and reader(doc, text, a) >= least
    # challenge's best margin is log(0.80 / 0.50) = 0.47 < 1: p1 gives it no sentence, and is counted
    assert entries["challenge"].texts == ["A human challenge."]
    assert entries["challenge"].left_out == {aspect_margin.LEFT_OUT: 1}
    assert entries["approach"].texts == [model.sentences[1]] * 2  # log(0.45 / 0.15) = 1.10
    assert entries["outcome"].sources == ["summary", "sentence"] and entries["outcome"].doc_ids == ["p2", "p1"]
    # A memory with nothing else and no clear sentence keeps its papers' clearest ones: never empty.
    monkeypatch.setattr(retrieval, "MEMORY_MARGIN", 5.0)
    entries = {a: Entries() for a in model.aspects}
    entries["outcome"].add("p2", "A human summary.", "summary")
    retrieval.add_own_sentences(tmp_path, corpus, entries, ["p1", "p2"], lambda folder: model)
    assert entries["approach"].texts == [model.sentences[1]] * 2 and entries["approach"].left_out == {}
    assert entries["outcome"].texts == ["A human summary."]  # it has a statement: no unclear sentence joins it
    assert entries["outcome"].left_out == {aspect_margin.LEFT_OUT: 1}
