"""Stage 06's sections take the notebook's decisions: what each shows and records with and without a ground truth.

The sections read only arrays here (no run of the earlier stages): random heads, and truths that are the heads'
own similarities, so Table 2's diagonal must read 100.
"""

import json

import numpy as np
import pandas as pd
import pytest

from workbench.evaluate import sections
from workbench.measures.evaluation import cosine_similarity_matrix
from workbench.measures.runmetrics import RunMetrics

NAMES = ["challenge", "approach"]


def _evaluation(tmp_path, truths_by_encoder):
    rng = np.random.default_rng(0)
    unified = {a: rng.normal(size=(12, 8)) for a in NAMES}
    metrics = RunMetrics(tmp_path, {"evaluation": {"documents": 12}})
    ev = sections.Evaluation(tmp_path, held=None, names=NAMES, by_encoder=truths_by_encoder,
                             truth_encoders=list(truths_by_encoder), metrics=metrics, n_permutations=5)
    ev.rows = {"unified": unified}
    return ev, unified


def _own_truths(unified):
    return {a: cosine_similarity_matrix(v) for a, v in unified.items()}


def test_without_a_ground_truth_each_section_says_so_and_records_empty_tables(tmp_path):
    ev, _ = _evaluation(tmp_path, {"mpnet": {}, "minilm": {}})
    corr, shown = sections.correlations(ev)
    assert shown == [sections.NO_TRUTH]
    assert sections.diagonal_p_values(ev) == [sections.NO_TRUTH]
    assert sections.other_truths(ev) == [] and ev.metrics["other_truth_encoders"] == {}
    assert sections.headline_bars(ev, corr) == [] and len(ev.metrics["headline"]) == 0
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert {"spearman", "top10", "truth_correlation", "diagonal_p_values"} <= set(written)


def test_with_truths_the_sections_show_tables_and_figures_and_name_an_encoder_without_summaries(tmp_path):
    import matplotlib.pyplot as plt

    ev, unified = _evaluation(tmp_path, {"mpnet": None, "minilm": {}})
    ev.by_encoder["mpnet"] = _own_truths(unified)
    corr, shown = sections.correlations(ev)
    assert isinstance(shown[0], plt.Figure) and all(isinstance(t, pd.DataFrame) for t in shown[1:])
    assert shown[1].loc["unified:challenge", "challenge"] == pytest.approx(100.0)  # the truth is the head itself
    assert sections.other_truths(ev) == ["No human-summary truths under minilm."]
    p_values = sections.diagonal_p_values(ev)[0]
    assert p_values.shape == (2, 2) and ev.metrics["diagonal_p_values"] is not None
    assert isinstance(sections.headline_bars(ev, corr)[0], plt.Figure)
    plt.close("all")


def test_decoding_is_skipped_without_being_asked_or_without_decoders(tmp_path, capsys):
    ev, _ = _evaluation(tmp_path, {"mpnet": {}})
    assert sections.decoding(ev, corpus=None, decode=False) == (None, [])
    table, shown = sections.decoding(ev, corpus=None, decode=True)  # stage 04 never ran here
    assert (table, shown) == (None, []) and "decoding table skipped" in capsys.readouterr().out
    assert "decoding" not in ev.metrics
