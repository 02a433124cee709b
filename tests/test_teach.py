"""The teaching loop's parts on tiny synthetic sentence vectors (no encoder): the marks store, the chooser, the learner.

The corpus here is planted: 8-dimensional unit sentence vectors, aspect "a" along e0 and aspect "b" along e1 as
the aspect file reads them, so which sentence is clearest, and what a regression must recover, are known.
"""

from dataclasses import replace

import numpy as np
import pytest

from workbench.core.vectors import unit_rows
from workbench.embed.aspectfile import TEMPERATURE, AspectPrototypes
from workbench.embed.features import DocumentFeatures
from workbench.embed.floor import AspectFileFloor
from workbench.teach import chooser
from workbench.teach.learner import LOG_FLOOR, TAUGHT_BLEND, TRUST_YES, fit_taught, sentence_inputs
from workbench.teach.loop import TeachLoop
from workbench.teach.marks import Marks, highlight_answers

H, ASPECTS = 8, ["a", "b"]


def corpus(papers=12, sentences=5, seed=0):
    """DocumentFeatures of `papers` abstracts of `sentences` random unit vectors each, with ids and texts."""
    rng = np.random.default_rng(seed)
    sents = [unit_rows(rng.normal(size=(sentences, H)).astype(np.float32)) for _ in range(papers)]
    texts = [[f"paper {i} sentence {k}." for k in range(sentences)] for i in range(papers)]
    whole = unit_rows(np.stack([s.mean(0) for s in sents]))
    return DocumentFeatures(whole, sents, texts), [f"p{i}" for i in range(papers)]


def floor():
    """A zero-shot floor reading aspect a along e0 and b along e1: no boilerplate, no blend, no phrases."""
    queries = np.eye(H, dtype=np.float32)[:2]
    protos = AspectPrototypes(ASPECTS, queries.copy(), queries, np.zeros_like(queries))
    return AspectFileFloor(protos, protos, np.zeros((0, H), np.float32), {a: 1.0 for a in ASPECTS},
                           {a: 0.0 for a in ASPECTS}, queries)


def test_marks_survive_a_restart_and_travel_as_csv_with_formulas_guarded(tmp_path):
    marks = Marks.of_run(tmp_path)
    marks.add("p1", "The  method\nworks.", "a")
    marks.add("p1", "Both at once.", ["a", "b"])
    marks.add("p2", "=HYPERLINK(\"x\")", "none")
    marks.add("-3", "Skipped one.", "skip")
    marks.add("p1", "The method works.", "b")  # the same sentence (whitespace folded): the latest answer wins
    marks.add("p2", "=HYPERLINK(\"x\")", "a", source="llm")  # a person's answer wins over an LLM's
    marks.close()
    again = Marks.of_run(tmp_path)  # a restart: the file alone
    answers = [(m.doc_id, m.sentence, m.answer, m.source) for m in again.current()]
    assert answers == [("p1", "The method works.", "b", "person"), ("p1", "Both at once.", "a+b", "person"),
                       ("p2", "=HYPERLINK(\"x\")", "none", "person"), ("-3", "Skipped one.", "skip", "person")]
    assert again.counts(ASPECTS) == {"a": {"yes": 1, "no": 2}, "b": {"yes": 2, "no": 1}}
    text = again.to_csv(tmp_path / "marks.csv")
    assert "'=HYPERLINK" in text and "\n-3," in text  # a formula guarded, a plain number left alone
    shared = Marks()
    assert shared.read_csv(tmp_path / "marks.csv") == 5  # four person sentences and the LLM's one
    assert [(m.doc_id, m.sentence, m.answer) for m in shared.current()] == [a[:3] for a in answers]
    with pytest.raises(ValueError):
        shared.add("p9", "x", ["a", "none"])


def test_a_csv_naming_another_aspect_or_cut_short_or_not_utf8_is_refused_whole_by_line(tmp_path):
    good = "doc_id,sentence,aspect\np1,One.,a\np1,Two.,none\np2,Three.,a+b\n"
    (tmp_path / "good.csv").write_text(good)
    assert Marks().read_csv(tmp_path / "good.csv", aspects=ASPECTS) == 3
    (tmp_path / "typo.csv").write_text(good + "p3,Four.,chalenge\np3,Five.,a+zzz\n")
    marks = Marks()
    with pytest.raises(ValueError, match=r"line 5: 'chalenge'.*line 6: 'zzz'"):
        marks.read_csv(tmp_path / "typo.csv", aspects=ASPECTS)
    assert len(marks) == 0  # nothing read from a refused file
    assert Marks().read_csv(tmp_path / "typo.csv") == 5  # without the run's aspects nothing is checked
    (tmp_path / "short.csv").write_text(good + "p4,Six.\n")
    with pytest.raises(ValueError, match="line 5: fewer fields"):
        Marks().read_csv(tmp_path / "short.csv", aspects=ASPECTS)
    (tmp_path / "semicolons.csv").write_text(good.replace(",", ";").replace("One.", '"One; really."'))
    shared = Marks()
    assert shared.read_csv(tmp_path / "semicolons.csv", aspects=ASPECTS) == 3  # a European spreadsheet's export
    assert shared.current()[0].sentence == "One; really."
    (tmp_path / "latin1.csv").write_bytes("doc_id,sentence,aspect\np1,Übersetzung.,a\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        Marks().read_csv(tmp_path / "latin1.csv", aspects=ASPECTS)


def test_a_mark_naming_none_of_the_loop_s_aspects_is_not_read_as_none():
    """A sentence marked with another aspect set's name would otherwise be a "no" for every aspect here."""
    features, ids = corpus()
    heads = []
    for foreign in (False, True):
        loop = TeachLoop(features, floor(), ids)
        for i in range(6):
            loop.answer(ids[i], "a", sentence=features.sentence_texts[i][0])
            loop.answer(ids[i], "b", sentence=features.sentence_texts[i][1])
            loop.answer(ids[i], "none", sentence=features.sentence_texts[i][3])
        if foreign:
            for i in range(6, 12):
                loop.answer(ids[i], "species", sentence=features.sentence_texts[i][0])
        loop.refit()
        heads.append(loop.scorer)
    for a in ASPECTS:
        np.testing.assert_array_equal(heads[0].coef[a], heads[1].coef[a])


def test_a_restarted_loop_refits_the_same_heads_from_the_marks_on_disk(tmp_path):
    features, ids = corpus()
    loop = TeachLoop(features, floor(), ids, marks=Marks.of_run(tmp_path))
    for i in range(6):
        loop.answer(ids[i], "a" if i % 2 else ["a", "b"], sentence=features.sentence_texts[i][0])
        loop.answer(ids[i], "none", sentence=features.sentence_texts[i][3])
    loop.answer(ids[7], "skip", sentence=features.sentence_texts[7][1])
    loop.refit()
    loop.marks.close()
    again = TeachLoop(features, floor(), ids, marks=Marks.of_run(tmp_path))  # the kernel restarted
    assert again.status() == loop.status() and set(again.scorer.coef) == {"a", "b"}
    for a in ("a", "b"):
        np.testing.assert_array_equal(again.scorer.coef[a], loop.scorer.coef[a])


def test_marks_follow_paper_ids_and_texts_through_a_re_export():
    features, ids = corpus()
    loop = TeachLoop(features, floor(), ids)
    loop.answer("p3", "a", sentence="paper 3   sentence 2.")
    order = [5, 3, 0, 1, 2, 4, 6, 7, 8, 9, 10, 11]  # the same papers exported in another order
    moved = TeachLoop(features.subset(order), floor(), [ids[i] for i in order], marks=loop.marks)
    (row,), _ = moved.marked_rows()
    assert (moved.doc_ids[moved.doc[row]], moved.index[row]) == ("p3", 2)


def test_the_chooser_asks_each_aspect_s_clearest_sentence_first_then_draws_uncertain_ones_spread_over_papers():
    features, ids = corpus(papers=30)
    loop = TeachLoop(features, floor(), ids, askable=ids[:20])
    first = loop.next_questions(6)
    assert [q.why for q in first[:2]] == ["clearest a", "clearest b"]
    S = np.concatenate(features.sentences[:20])  # independent: the largest log-odds of e0 over e1 and back
    for q, j in zip(first, (0, 1)):
        best = int(np.argmax(S[:, j] - S[:, 1 - j]))
        assert (q.doc_id, q.index) == (ids[best // 5], best % 5)
    assert len({q.doc_id for q in first}) == 6 and all(q.doc_id in ids[:20] for q in first)
    for q in first:
        loop.answer(q, "a" if q.sentence.endswith("0.") else "none")
    loop.refit()
    later = loop.next_questions(5)
    assert all(q.why == "uncertain" for q in later) and all(q.doc_id in ids[:20] for q in later)
    assert len({q.doc_id for q in later}) == 5  # one per paper
    assert loop.status()["b"] == {"yes": 0, "no": 6, "taught": False, "sure": pytest.approx(
        float(chooser.certainty(loop.scorer.read(loop.inputs[loop.askable]))[1]))}


def test_the_draw_favours_uncertain_sentences_and_papers_asked_less():
    rng = np.random.default_rng(0)
    doc = np.arange(400) // 4
    score = np.where(doc % 2 == 0, 0.2, 0.0)  # even papers uncertain, odd ones sure
    open_rows, asked = np.ones(400, bool), np.zeros(100)
    picks = [r for _ in range(200) for r in chooser.draw(score, open_rows, doc, asked, 4, rng)]
    share = np.mean(doc[picks] % 2 == 0)  # chance 1.5 against 0.5 (UNCERTAIN_SHARE 0.5): three in four
    assert abs(share - 0.75) < 0.05
    asked[::2] = 2  # the uncertain papers asked twice before: a third of their chance
    picks = [r for _ in range(200) for r in chooser.draw(score, open_rows, doc, asked, 4, rng)]
    assert abs(np.mean(doc[picks] % 2 == 0) - 0.5) < 0.05


def test_the_learner_recovers_a_planted_direction_the_floor_does_not_read():
    rng = np.random.default_rng(1)
    planted = unit_rows(np.array([[0, 0, 0.6, -0.8, 0, 0, 0, 0]], np.float32))[0]  # orthogonal to e0 and e1
    S = unit_rows(rng.normal(size=(400, H)).astype(np.float32))
    positions = np.zeros((400, 3), np.float32)
    positions[:, 0] = rng.random(400)
    X = sentence_inputs(floor().scorer, S, positions)
    states = S @ planted > 0
    answers = np.stack([states, ~states], 1)
    scorer = fit_taught(floor().scorer, X[:60], answers[:60], c=10.0)
    p = scorer.read(X[60:])[:, 0]
    auc = (p[states[60:]][:, None] > p[~states[60:]][None, :]).mean()
    assert auc > 0.95
    assert float(unit_rows(scorer.coef["a"][None, :H])[0] @ planted) > 0.8


def test_the_head_pools_by_the_taught_probabilities_as_an_independent_computation_does():
    features, ids = corpus(papers=10)
    half = replace(floor(), blends={a: 0.5 for a in ASPECTS})  # a floor that keeps half of the whole abstract
    loop = TeachLoop(features, half, ids)
    for i in range(10):  # aspect a: the first sentence of each paper
        for k in range(3):
            loop.answer(ids[i], "a" if k == 0 else "none", sentence=features.sentence_texts[i][k])
    loop.refit()
    emb = loop.embeddings()
    assert set(loop.scorer.coef) == {"a"}  # b has no "yes": the floor's weights stand for it
    # independent: the inputs by hand, the regression's optimum (its gradient is zero there: scikit-learn's
    # objective, C = 1), the weighted mean of the unit sentences
    scores = lambda S: S[:, :2] / TEMPERATURE  # noqa: E731
    rows = []
    for S in features.sentences:
        rel = np.linspace(0, 1, len(S))[:, None]
        belief = np.exp(scores(S)) / np.exp(scores(S)).sum(1, keepdims=True)
        weight = np.exp(scores(S) - scores(S).max(0)) / np.exp(scores(S) - scores(S).max(0)).sum(0)
        edge = np.zeros((len(S), 2))
        edge[0, 0] = edge[-1, 1] = 1
        logs = np.log(np.clip(np.hstack([belief, weight]), np.exp(LOG_FLOOR), 1))
        rows.append(np.hstack([S, rel, rel ** 2, edge, logs]))
    X = np.concatenate([r[:3] for r in rows])
    y = np.tile([True, False, False], 10)
    w, b = loop.scorer.coef["a"].astype(np.float64), loop.scorer.intercept["a"]
    p = 1 / (1 + np.exp(-(X @ w + b)))
    assert np.abs(X.T @ (p - y) + w).max() < 1e-3 and abs((p - y).sum()) < 1e-3
    t = 10 ** 4 / (10 ** 4 + TRUST_YES ** 4)  # a's trust: its 10 "yes" marks
    for i, (S, R) in enumerate(zip(features.sentences, rows)):
        p = 1 / (1 + np.exp(-(R @ w + b)))
        e = np.exp(scores(S)[:, 0] - scores(S)[:, 0].max())
        expected = (t * p / p.sum() + (1 - t) * e / e.sum()) @ S  # t of the taught weights, the rest the floor's
        share = t * TAUGHT_BLEND + (1 - t) * 0.5
        expected = share * expected / np.linalg.norm(expected) + (1 - share) * features.whole[i]
        np.testing.assert_allclose(emb["a"][i], expected / np.linalg.norm(expected), atol=2e-3)  # the taught blend
        e = np.exp(scores(S)[:, 1] - scores(S)[:, 1].max())
        floor_b = (e / e.sum()) @ S
        floor_b = floor_b / np.linalg.norm(floor_b) + features.whole[i]  # the floor's half and half
        np.testing.assert_allclose(emb["b"][i], floor_b / np.linalg.norm(floor_b), atol=1e-5)


def test_a_marked_boilerplate_sentence_is_pooled_again_in_every_paper_that_repeats_it():
    features, ids = corpus(papers=8)
    recurring = unit_rows(np.array([[0.1, 0.2, 0.9, 0, 0, 0, 0, 0]], np.float32))[0]  # near no query
    for i in range(4):  # the same sentence, word for word, closes papers 0 to 3
        features.sentences[i][-1] = recurring
        features.sentence_texts[i][-1] = "Patients were aged 65 or over."
    kept = replace(floor(), boilerplate=recurring[None])
    loop = TeachLoop(features, kept, ids)
    assert ("p2", "Patients were aged 65 or over.") not in loop.row_of  # boilerplate: never asked
    before = loop.embeddings()
    loop.answer("p0", "b", sentence="Patients were aged 65 or over.")
    loop.refit()
    assert len(loop.taught().boilerplate) == 0
    after = loop.embeddings()
    e = np.exp(features.sentences[2][:, 1] / TEMPERATURE)  # b untaught: the floor's weights, now over all 5
    expected = (e / e.sum()) @ features.sentences[2]
    np.testing.assert_allclose(after["b"][2], expected / np.linalg.norm(expected), atol=1e-5)
    assert not np.allclose(before["b"][2], after["b"][2])
    np.testing.assert_allclose(after["b"][5], before["b"][5], atol=1e-6)  # a paper without it: unchanged


def test_highlight_columns_become_marks_of_their_own_source_and_a_person_s_answer_wins():
    abstracts = ["We study parsing of long texts. Our parser uses a stack. It is 3 points better.", "No marks here."]
    highlights = {"a": [["We study parsing of long texts."], None], "b": [["It is 3 points better than before"], []]}
    answers = highlight_answers(["p1", "p2"], abstracts, highlights)
    assert answers == [("p1", "We study parsing of long texts.", ["a"]), ("p1", "Our parser uses a stack.", []),
                       ("p1", "It is 3 points better.", ["b"])]  # p2: no list in column a, left out
    marks = Marks()
    marks.add_many(answers, source="highlights")
    marks.add("p1", "Our parser uses a stack.", "b")
    assert [(m.answer, m.source) for m in marks.current()] == [("a", "highlights"), ("b", "person"),
                                                                ("b", "highlights")]


def test_an_aspect_s_trust_in_its_marks_pools_between_the_floor_and_its_regression_as_computed_by_hand():
    from workbench.teach.learner import taught_floor, trust

    assert trust(10, 10.0, 2.0) == 0.5 and trust(30, 10.0, 2.0) == 0.9 and trust(0, 10.0, 2.0) == 0.0
    assert trust(20, 10.0, 4.0) == 16 / 17 and trust(3, 0.0) == 1.0  # half 0: the regression alone
    features, ids = corpus(papers=10)
    flo = replace(floor(), blends={a: 0.5 for a in ASPECTS})
    S, positions = features.sentences[0], np.zeros((5, 3), np.float32)
    positions[:, 0] = np.linspace(0, 1, 5)
    X = sentence_inputs(flo.scorer, S, positions).astype(np.float64)
    scorer = fit_taught(flo.scorer, X[:4], np.array([[1, 0], [0, 1], [0, 0], [1, 1]], bool))
    w, b = scorer.coef["a"].astype(np.float64), scorer.intercept["a"]
    floor_w = np.asarray(flo.scorer.pool_weights(S, positions), np.float64)[:, 0]
    for t in (0.0, 0.3, 1.0):
        scorer.trust = {"a": t}
        # by hand: t of the regression's probabilities normalised over the abstract, 1 - t of the floor's weights
        p = 1 / (1 + np.exp(-(X @ w + b)))
        np.testing.assert_allclose(scorer.pool_weights(S, positions)[:, 0], t * p / p.sum() + (1 - t) * floor_w,
                                   atol=1e-6)
        assert taught_floor(flo, scorer).blends["a"] == pytest.approx(t * TAUGHT_BLEND + (1 - t) * 0.5)
    q = scorer.read(X.astype(np.float32))[:, 1]  # b: no trust given, its regression alone
    np.testing.assert_allclose(scorer.pool_weights(S, positions)[:, 1], q / q.sum(), atol=1e-6)
