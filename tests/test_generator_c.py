"""Generator c (`scripts/generator_c.py`, issue 39): what it promises, without a model, in about a second."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import generator_c as gc  # noqa: E402
import synthetic_corpus as sc  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.sentences import split_sentences  # noqa: E402


@pytest.fixture(scope="module")
def frames():
    return {seed: gc.generator_c_frame(150, seed) for seed in (0, 1, 2)}


def test_columns_are_the_presets_aspects_the_drug_and_their_highlights(frames):
    assert gc.ASPECTS == load_aspects("medicine").names
    assert list(frames[0].columns) == ["doc_id", "title", "abstract", *gc.ASPECTS, "drug",
                                       *[f"highlights_{a}" for a in gc.ASPECTS]]
    assert frames[0]["doc_id"].is_unique


def test_the_same_seed_gives_the_same_frame_and_another_seed_another(frames):
    pd.testing.assert_frame_equal(gc.generator_c_frame(150, 0), frames[0])
    assert not frames[0]["abstract"].equals(frames[1]["abstract"])


def test_factors_are_balanced_and_independent():
    frame = gc.generator_c_frame(720, 5)
    for f in gc.FACTORS:
        counts = frame[f].value_counts()
        assert len(counts) == 6 and counts.max() - counts.min() <= 1, (f, counts)
    for i, f in enumerate(gc.FACTORS):
        for g in gc.FACTORS[i + 1:]:
            table = pd.crosstab(frame[f], frame[g]).to_numpy().astype(float)
            expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
            cramers_v = np.sqrt(((table - expected) ** 2 / expected).sum() / (table.sum() * 5))
            assert cramers_v < 0.15, (f, g, cramers_v)  # about 0.08 for independent draws


def test_stating_sentences_recur_word_for_word_in_at_least_a_tenth_of_the_papers(frames):
    for seed, frame in frames.items():
        shares = gc.repeated_shares(frame)
        assert min(shares.values()) >= 0.10, (seed, shares)
        assert 0.2 <= shares["patient_group"] <= 0.35, (seed, shares)  # issue 39: a quarter; the design 11-17%


def test_highlights_are_sentences_of_the_abstract(frames):
    for frame in frames.values():
        for _, row in frame.iterrows():
            sentences = split_sentences(row["abstract"])
            for a in gc.ASPECTS:
                assert row[f"highlights_{a}"], (row["doc_id"], a)  # every paper states every aspect
                assert set(row[f"highlights_{a}"]) <= set(sentences), (row["doc_id"], a)


def test_the_drug_is_prominent_and_named_by_no_aspect(frames):
    frame = frames[0]
    assert all(d in t for d, t in zip(frame["drug"], frame["title"]))
    assert np.mean([t.count(d) for d, t in zip(frame["drug"], frame["abstract"])]) >= 4
    preset = (Path(__file__).resolve().parents[1] / "workbench" / "presets" / "medicine.yaml").read_text().lower()
    assert not any(d.lower() in preset for d in gc.DRUGS)


def test_no_wording_sentence_or_drug_of_generators_a_and_b(frames):
    theirs = [w for table in (sc.WORDINGS, sc.WORDINGS_B) for values in table.values() for ws in values.values()
              for w in ws] + sc.DRUGS + sc.DRUGS_B
    theirs += [t for table in (sc.TEMPLATES, sc.TEMPLATES_B) for ts in table.values() for t in ts if "{" not in t]
    text = " ".join(" ".join(f["title"]) + " " + " ".join(f["abstract"]) for f in frames.values()).lower()
    assert not [w for w in theirs if w.lower() in text]
