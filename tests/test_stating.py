"""A shown sentence's level reads its aspect as well as its rank (`decode.stating`); regions named on the map."""

import math

import pandas as pd
import pytest

from workbench.decode import stating
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
