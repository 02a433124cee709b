"""The confidence shown beside a decoded text (workbench/decode/faithfulness.py): its rule, checked by hand."""

import json

import numpy as np
import pandas as pd
import pytest

from workbench.decode.faithfulness import confidence_check, confidence_label, confidence_level, load_confidence, neighbour_density
from workbench.decode.faithfulness import rank_calibration, save_confidence
from workbench.core.rundir import RunDir


def test_neighbour_density_skips_the_point_itself_and_averages_the_k_nearest():
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((30, 8))
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    got = neighbour_density(corpus[4], corpus, k=5)[0]
    sims = np.delete(unit @ unit[4], 4)  # by hand: the other 29 papers
    assert got == pytest.approx(np.sort(sims)[-5:].mean(), abs=1e-6)


def test_levels_are_cut_on_the_rank_by_the_share_of_papers_nearer():
    # 4,205 papers: high within the 10 nearest, low beyond the 50 nearest; 100 papers: 1 and 10.
    levels = rank_calibration([1, 1, 2, 9, 10, 11, 50, 51, 300], 4205)
    assert (levels["high_within"], levels["low_beyond"]) == (10, 50)
    got = [confidence_level(r, 4205, levels) for r in (1, 10, 11, 50, 51, 300)]
    assert got == ["high", "high", "medium", "medium", "low", "low"]
    assert [confidence_level(r, 100, levels) for r in (1, 2, 10, 11)] == ["high", "medium", "medium", "low"]
    assert levels["held out"]["high"] == {"papers": 5, "median rank": 2.0, "BERTScore": None}
    assert confidence_label(1, 60, levels).startswith("high confidence: no other of the 60 papers")
    assert confidence_label(5, 60).startswith("confidence not calibrated: 4 of the 60 papers")  # no level invented
    with pytest.raises(ValueError, match="at least 3"):
        rank_calibration([1, 2], 100)


def test_calibration_file_round_trips_and_a_broken_one_is_refused(tmp_path):
    assert load_confidence(tmp_path) == {}
    frame = pd.DataFrame({"round-trip rank": [1, 5, 9, 3], "corpus size": 100})
    saved = save_confidence(tmp_path, {"a": frame, "b": frame.head(1)})
    assert set(saved) == {"a"} and load_confidence(tmp_path) == saved  # b had too few papers: left out
    assert not list((RunDir(tmp_path).decoders).glob("*.tmp"))
    (RunDir(tmp_path).confidence).write_text(json.dumps({"aspects": {"a": {"cosine": 1}}}))
    with pytest.raises(ValueError, match="re-run stage 04"):
        load_confidence(tmp_path)


def test_confidence_check_groups_bertscores_by_level():
    levels = rank_calibration([1, 2, 3], 30)
    examples = {"a": pd.DataFrame({"round-trip rank": [1, 20, 2], "corpus size": 30, "bertscore": [0.6, 0.4, 0.5]})}
    table = confidence_check(examples, levels={"a": levels}).set_index("level")
    assert table.loc["high", "BERTScore vs human summary"] == 0.6 and table.loc["low", "papers"] == 1
    assert table.loc["medium", "BERTScore vs human summary"] == 0.5 and table.loc["low", "median rank"] == 20


def test_aspects_calibrated_later_keep_the_others_levels(tmp_path):
    """Stage 04 scores the aspects with known statements, then calibrates the rest from round trips alone
    (`calibrate_confidence(merge=True)` passes the file's levels as `keep`): both end up in the file."""
    frame = lambda ranks: pd.DataFrame({"round-trip rank": ranks, "corpus size": 400})  # noqa: E731
    first = save_confidence(tmp_path, {"challenge": frame([1, 2, 30])})
    both = save_confidence(tmp_path, {"outcome": frame([5, 6, 7, 90])}, keep=load_confidence(tmp_path, quiet=True))
    assert set(both) == {"challenge", "outcome"} and both["challenge"] == first["challenge"]
    assert load_confidence(tmp_path, quiet=True) == both
    again = save_confidence(tmp_path, {"challenge": frame([3, 3, 3])}, keep=both)  # recomputed: the new one wins
    assert again["challenge"]["held out"]["high"]["median rank"] == 3.0 and "outcome" in again


def test_round_trip_papers_are_the_validation_papers_else_a_seeded_sample_of_the_trainable_ones(tmp_path):
    from workbench.data.corpus import Corpus
    from workbench.decode.faithfulness import round_trip_papers

    docs = Corpus(pd.DataFrame({"doc_id": [f"p{i}" for i in range(40)], "title": "", "abstract": [f"Text {i}." for i in range(40)],
                                "split": ["test"] * 10 + ["train"] * 30}))
    sample = round_trip_papers(docs, tmp_path, 8, seed=1)  # no split yet (no stage 02)
    assert len(sample) == 8 == len(set(sample)) and not {f"p{i}" for i in range(10)} & set(sample)  # never held out
    assert sample == round_trip_papers(docs, tmp_path, 8, seed=1) != round_trip_papers(docs, tmp_path, 8, seed=2)
    RunDir(tmp_path).write_split([f"p{i}" for i in range(10, 30)], ["p30", "p31", "p32", "p33"])
    assert round_trip_papers(docs, tmp_path, 3) == ["p30", "p31", "p32"]
