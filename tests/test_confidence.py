"""The confidence shown beside a decoded text (workbench/decode/decoding.py): its rule, checked by hand."""

import json

import numpy as np
import pandas as pd
import pytest

from workbench.decode.decoding import (confidence_check, confidence_label, confidence_level, confidence_levels,
                                load_confidence, neighbour_density, save_confidence)
from workbench.core.rundir import RunDir


def test_neighbour_density_skips_the_point_itself_and_averages_the_k_nearest():
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((30, 8))
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    got = neighbour_density(corpus[4], corpus, k=5)[0]
    sims = np.delete(unit @ unit[4], 4)  # by hand: the other 29 papers
    assert got == pytest.approx(np.sort(sims)[-5:].mean(), abs=1e-6)


def test_levels_are_terciles_of_the_standardised_sum():
    rng = np.random.default_rng(1)
    cos, dens = rng.uniform(0.2, 0.8, 60), rng.uniform(0.3, 0.9, 60)
    levels = confidence_levels(cos, dens)
    score = (cos - cos.mean()) / cos.std() + (dens - dens.mean()) / dens.std()  # by hand
    assert levels["low_below"] == pytest.approx(np.quantile(score, 1 / 3))
    assert levels["high_from"] == pytest.approx(np.quantile(score, 2 / 3))
    got = [confidence_level(c, d, levels) for c, d in zip(cos, dens)]
    assert 18 <= got.count("high") <= 22 and 18 <= got.count("low") <= 22  # a third each on its own papers
    best = int(np.argmax(score))
    assert confidence_label(cos[best], 1, 60, levels, dens[best]).startswith("high confidence (round-trip cosine")
    assert confidence_label(0.5).startswith("confidence not calibrated")  # an old run: no level invented
    with pytest.raises(ValueError, match="at least 3"):
        confidence_levels([0.5, 0.6], [0.5, 0.6])


def test_calibration_file_round_trips_and_a_broken_one_is_refused(tmp_path):
    assert load_confidence(tmp_path) == {}
    saved = save_confidence(tmp_path, {"a": ([0.1, 0.5, 0.9, 0.3], [0.2, 0.4, 0.6, 0.8]), "b": ([0.5], [0.5])})
    assert set(saved) == {"a"} and load_confidence(tmp_path) == saved  # b had too few papers: left out
    assert not list((RunDir(tmp_path).decoders).glob("*.tmp"))
    (RunDir(tmp_path).confidence).write_text(json.dumps({"aspects": {"a": {"cosine": 1}}}))
    with pytest.raises(ValueError, match="re-run stage 04"):
        load_confidence(tmp_path)


def test_confidence_check_groups_bertscores_by_level():
    levels = confidence_levels([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    examples = {"a": pd.DataFrame({"round-trip cosine": [0.1, 0.6, 0.35], "bertscore": [0.4, 0.6, 0.5]})}
    table = confidence_check(examples, {"a": np.array([0.1, 0.6, 0.35])}, levels={"a": levels}).set_index("level")
    assert table.loc["high", "BERTScore vs human summary"] == 0.6 and table.loc["low", "papers"] == 1
    assert table.loc["medium", "BERTScore vs human summary"] == 0.5
