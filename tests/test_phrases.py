"""The phrase of a sentence that states an aspect (`workbench/embed/phrases.py`, `FeatureCache.word_vectors`)."""
import numpy as np
from scipy.special import softmax

from workbench.embed import aspectfile
from workbench.embed.phrases import (OPENERS, penalties, phrases, piece_frequencies, pieces, pool_phrases)


def test_a_sentence_is_cut_before_its_openers_and_phrases_are_runs_of_pieces():
    sentence = "We used a blinded parallel-arm trial with concealed allocation to evaluate Bexavirin."
    assert pieces(sentence) == ["We used", "a blinded parallel-arm trial", "with concealed allocation",
                                "to evaluate Bexavirin"]
    cut = phrases(sentence, max_chunks=2)
    assert [p for p, _ in cut] == ["We used", "We used a blinded parallel-arm trial", "a blinded parallel-arm trial",
                                   "a blinded parallel-arm trial with concealed allocation",
                                   "with concealed allocation", "with concealed allocation to evaluate Bexavirin",
                                   "to evaluate Bexavirin"]
    assert cut[1][1] == ["We used", "a blinded parallel-arm trial"]
    assert len(phrases(sentence)) == 4 + 3  # one or two pieces (MAX_CHUNKS): 4 runs of one, 3 of two
    assert len(phrases(sentence, max_chunks=3)) == 4 + 3 + 2
    # Punctuation ends a piece; a piece of openers only is no phrase; a sentence of openers is its own phrase.
    assert pieces("Methods: the work was, in the end, a survey.") == ["Methods", "the work", "in the end", "a survey"]
    assert phrases("It was.") == [("It was.", [])]
    assert all(w in OPENERS for w in "was the in we".split())


def test_piece_frequencies_count_papers_not_occurrences():
    docs = [["Lumetrox was assessed in a trial.", "Lumetrox was assessed in a trial again."],
            ["Nivalta was assessed in a survey."], ["Nothing here repeats."], ["A cohort was assessed."]]
    table = piece_frequencies(docs, min_share=0.3)
    assert table["was assessed"] == 0.75  # three of four papers, twice in the first
    assert "lumetrox" not in table  # one paper only: never kept
    assert all(v >= 0.3 for v in table.values())
    assert list(piece_frequencies(docs, min_share=0.0, limit=1)) == ["was assessed"]


def test_pooled_phrases_are_a_softmax_by_scipy_less_the_frequency_penalty():
    rng = np.random.default_rng(3)
    vectors, direction = rng.normal(size=(6, 12)), rng.normal(size=12)
    cost = penalties([["was assessed"], ["a trial"], [], ["was assessed", "a trial"], ["x"], ["y"]],
                     {"was assessed": 0.4, "a trial": 0.1})
    np.testing.assert_allclose(cost, [0.4, 0.1, 0.0, 0.4, 0.0, 0.0])
    u = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = softmax((u @ direction - cost) / 0.05) @ u
    np.testing.assert_allclose(pool_phrases(vectors, direction, cost, 0.05), expected / np.linalg.norm(expected),
                               atol=1e-5)
    # A frame the corpus repeats gives way to the phrase that states the paper's own value.
    frame, value = np.eye(12)[0], np.eye(12)[1]
    d = 0.6 * frame + 0.5 * value
    both = np.stack([frame, value])
    assert pool_phrases(both, d, None, 0.02) @ frame > 0.99
    assert pool_phrases(both, d, penalties([["was assessed in"], ["a case-referent design"]],
                                           {"was assessed in": 0.2}), 0.02) @ value > 0.99


def test_the_cache_pools_each_phrase_embedded_on_its_own(tmp_path):
    from workbench.embed.features import FeatureCache, FrozenBackbone

    backbone = FrozenBackbone("minilm")
    cache = FeatureCache(tmp_path / "c", backbone)
    texts = ["Older adults with a lasting lung illness were enrolled.", "We conducted a one-off population survey."]
    directions = backbone.embed(["the people who took part", "how the study was designed"])
    table = {"were enrolled": 0.3}
    got = cache.word_vectors(texts, directions, table)
    assert got.shape == (2, 2, 384)
    for j, d in enumerate(directions):
        for i, text in enumerate(texts):
            cut = phrases(text)
            alone = backbone.embed([p for p, _ in cut])  # each phrase read without its sentence
            np.testing.assert_allclose(got[j, i], pool_phrases(alone, d, penalties([ps for _, ps in cut], table)),
                                       atol=1e-5)
    # Cached under the table: a fresh cache reads the same vectors back; another table is another key.
    again = FeatureCache(tmp_path / "c", backbone)
    np.testing.assert_allclose(again.word_vectors(texts, directions, table), got, atol=1e-6)
    assert np.abs(again.word_vectors(texts, directions, {"were enrolled": 0.9}) - got).max() > 1e-3
    # The population direction picks the older adults out of the sentence more than the sentence vector does.
    people = backbone.embed(["older adults"])[0]
    assert got[0, 0] @ people > cache.vectors(texts[:1])[0] @ people + 0.05


def test_shares_fade_with_the_structure_the_aspects_share():
    shared = {"a": 0.0, "b": 1 / 6, "c": 0.3, "d": 0.5, "e": 0.9}
    shares = aspectfile.word_shares(shared)
    assert shares["a"] == shares["b"] == 1.0 and shares["d"] == shares["e"] == 0.0
    assert shares["c"] == round(aspectfile.WORD_SHARE * 0.4, 3)


def test_only_the_sentences_that_state_an_aspect_are_read_through_their_phrases():
    from workbench.embed.phrases import stating

    assert stating(np.array([0.5, 0.1, 0.35, 0.05])).tolist() == [True, False, True, False]
    assert stating(np.array([0.25, 0.25, 0.2, 0.3])).tolist() == [False, False, False, True]  # the top one always
    assert stating(2e-13 * np.array([0.5, 0.1, 0.4])).tolist() == [True, False, True]  # shares, not raw weights
    assert stating(np.zeros(3)).tolist() == [False] * 3 and stating(np.zeros(0)).tolist() == []

    # Only the marked sentences reach the backbone's phrases, each once for all aspects; the rest stay as they are.
    class Counting:
        def __init__(self):
            self.texts = []

        def __call__(self, texts, directions, frequencies):
            self.texts += list(texts)
            return np.ones((len(directions), len(texts), 4), dtype=np.float32)

    from workbench.embed.features import DocumentFeatures
    rng = np.random.default_rng(0)
    sents = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(2, 4)).astype(np.float32)]
    feats = DocumentFeatures(rng.normal(size=(2, 4)), sents, [["a1", "a2", "a3"], ["b1", "b2"]])
    marks = {"x": np.array([True, False, False, True, False]), "y": np.array([True, False, True, False, False])}
    counting = Counting()
    words = aspectfile.pooled_words(feats, ["x", "y"], np.eye(4)[:2], {"x": 1.0, "y": 1.0}, counting, {}, marks)
    assert counting.texts == ["a1", "a3", "b1"]
    assert (words["x"][[1, 2, 4]] == 0).all() and (words["x"][[0, 3]] == 1).all()
    means = aspectfile.corpus_word_means(feats, ["x", "y"], np.eye(4)[:2], {"x": 1.0, "y": 0.0}, counting, {}, marks)
    assert list(means) == ["x"] and np.allclose(means["x"], 1.0)
