"""Question axes (workbench.questions.axes): parsing, dedupe, resumable stores, MBQA, compare, save/load.

The LLM is a scripted fake with the backends' `complete` interface, except in the one
slow test that runs the packaged SmolLM2 end to end.
"""

import json
import re

import numpy as np
import pytest
import torch

from workbench.questions import axes as Q
from workbench.questions import mbqa
from workbench.questions.settings import AxesConfig
from workbench.measures.evaluation import correlation_table
from workbench.generate.llm import Completion, Sampling
from workbench.core.vectors import unit_rows


class Scripted:
    """A backend whose answers come from `reply(messages) -> str`; it records every conversation asked."""

    kind = "scripted"
    batch_size = 4

    def __init__(self, reply, model_id="scripted-llm"):
        self.reply, self.model_id, self.asked = reply, model_id, []

    def complete(self, conversations, sampling, prefill=None):
        for i, messages in enumerate(conversations):
            self.asked.append(messages)
            yield i, Completion((prefill or "") + self.reply(messages), tokens=2, seconds=0.01)


@pytest.fixture(scope="module", autouse=True)
def warm_imports():
    """Pay once, in setup, what the first optimiser and the first KMeans import (torch._dynamo, sklearn: seconds
    on a busy machine), so each test's time is its own work."""
    import sklearn.cluster  # noqa: F401

    torch.optim.AdamW(torch.nn.Linear(2, 1).parameters())


TOPICS = ["parsing", "translation", "summarisation"]


def _topic_reply(messages):
    """CQG: questions about the first topic named in group A (plus junk); answers: yes iff the topic is in the
    statement."""
    user = messages[-1]["content"]
    if "group A" in user:
        group_a = user.split("group B")[0]
        topic = next(t for t in TOPICS if t in group_a)
        return (f" study {topic}?\n2. Is the challenge about {topic} quality?\n3. What is the paper about?\n"
                f"4. does the paper study {topic} ?\nSure, here you go")
    statement = user.split("Question:")[0]
    question = user.split("Question:")[1]
    topic = next(t for t in TOPICS if t in question)
    return " Yes." if topic in statement else " No, it does not."


def _topic_corpus(n_per=14, dim=8, seed=0):
    """Three well separated clusters of unit vectors, each with statements about one topic."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[:3] * 3
    vectors = np.concatenate([c + rng.normal(0, 0.3, (n_per, dim)) for c in centres])
    statements = [f"Paper {i} addresses a problem in {TOPICS[i // n_per]} of low-resource text."
                  for i in range(3 * n_per)]
    return [f"d{i}" for i in range(3 * n_per)], vectors, statements


# --------------------------------------------------------------------------- parsing


def test_parse_numbered_questions_drops_junk_and_non_yes_no():
    text = ("1. Does the paper study parsing?\n2) Is the challenge about  noise ?\n"
            "3. What is the main contribution?\n4. Does it use a dataset\n- Can the method run on CPUs?\n"
            "Sure! 5. Does the paper study parsing?\nYes: the paper is great.\n6. Is group A about parsing?\n"
            "7. Does the paper " + "really " * 30 + "study parsing?")
    assert Q.parse_questions(text) == ["Does the paper study parsing?", "Is the challenge about noise?",
                                      "Can the method run on CPUs?"]


def test_parse_questions_json_and_several_on_one_line():
    assert Q.parse_questions('Here: ["Does it parse?", "Is it fast?", 3, "no question"] done') == \
        ["Does it parse?", "Is it fast?"]
    assert Q.parse_questions('```json\n{"questions": ["Is the data noisy?", "how?"]}\n```') == ["Is the data noisy?"]
    assert Q.parse_questions("1. Is it about parsing? 2. Is it about translation?") == \
        ["Is it about parsing?", "Is it about translation?"]


@pytest.mark.parametrize("junk", ["", "   ", "No questions here.", "1. 1.\n2. 2.", "Does the paper study parsing",
                                  None, "[1, 2]", "{}"])
def test_parse_questions_junk_gives_nothing(junk):
    assert Q.parse_questions(junk) == []


@pytest.mark.parametrize("text,value", [("Yes", True), ("no.", False), ("Answer: Yes, because it does.", True),
                                        ("Answer: No", False), (" YES!", True), ('{"answer": "no"}', False),
                                        ('{"answer": true}', True), ("True", True), ("false", False),
                                        ("I think the answer is yes.", True)])
def test_parse_yes_no(text, value):
    parsed = Q.parse_yes_no(text)
    assert parsed.status == "ok" and parsed.value is value


@pytest.mark.parametrize("text", ["", "Answer:", "The challenge is about parsing", "Maybe: yes and no.", None])
def test_parse_yes_no_unparsed(text):
    parsed = Q.parse_yes_no(text)
    assert parsed.status == "unparsed" and parsed.value is None and parsed.error


def test_dedupe_exact_and_near_duplicates():
    qs = ["Does the paper study parsing?", "does the paper  study parsing ?", "Does the paper study parsing well?",
          "Is the data noisy?"]

    def bag(texts):  # bag of words over a tiny vocabulary: cosine counts shared words
        vocab = sorted({w for t in qs for w in re.findall(r"[a-z]+", t.lower())})
        return np.array([[t.lower().count(w) for w in vocab] for t in texts], dtype=float)

    assert Q.dedupe_questions(qs, embed=None) == [0, 2, 3]
    assert Q.dedupe_questions(qs, embed=bag, threshold=0.85) == [0, 3]  # "...parsing well?" shares 5 of 6 words
    assert Q.dedupe_questions(qs, embed=bag, threshold=0.99) == [0, 2, 3]


# --------------------------------------------------------------------------- resumable stores


def test_stores_resume_and_re_ask_on_a_changed_prompt_or_model(tmp_path):
    backend = Scripted(_topic_reply)
    prompts = [(0, Q.question_messages("challenge", ["about parsing"], ["about translation"], 3)),
               (1, Q.question_messages("challenge", ["about translation"], ["about parsing"], 3))]
    first = Q.generate_questions(backend, tmp_path, "challenge", prompts)
    assert first.written == 2 and len(backend.asked) == 2
    records = Q.question_store(tmp_path).records()
    assert records[0]["questions"][0] == "Does the paper study parsing?" and records[0]["status"] == "ok"

    again = Scripted(_topic_reply)
    assert Q.generate_questions(again, tmp_path, "challenge", prompts).skipped == 2 and again.asked == []
    changed = [(0, Q.question_messages("challenge", ["about parsing", "more parsing"], ["about translation"], 3))]
    Q.generate_questions(again, tmp_path, "challenge", changed)
    assert len(again.asked) == 1
    Q.generate_questions(Scripted(_topic_reply, "other-llm"), tmp_path, "challenge", prompts)
    assert len(Q.question_store(tmp_path)) == 5

    pairs = [("d1", "It addresses parsing.", "Does the paper study parsing?"),
             ("d2", "It addresses translation.", "Does the paper study parsing?")]
    Q.answer_questions(backend, tmp_path, "challenge", pairs)
    answers = {r["doc_id"]: r for r in Q.answer_store(tmp_path).records()}
    assert answers["d1"]["answer"] is True and answers["d2"]["answer"] is False
    assert answers["d1"]["question_id"] == Q.question_id("does the paper study  parsing?")
    silent = Scripted(_topic_reply)
    assert Q.answer_questions(silent, tmp_path, "challenge", pairs).skipped == 2 and silent.asked == []
    Q.answer_questions(silent, tmp_path, "challenge", [("d1", "It addresses parsing well.", pairs[0][2])])
    assert len(silent.asked) == 1 and len(Q.answer_store(tmp_path)) == 3


def test_unparsed_answers_are_stored_as_such(tmp_path):
    backend = Scripted(lambda m: " The challenge is hard")
    Q.answer_questions(backend, tmp_path, "challenge", [("d1", "Parsing.", "Is it about parsing?")])
    (record,) = Q.answer_store(tmp_path).records()
    assert record["status"] == "unparsed" and record["answer"] is None and record["raw"].startswith("Answer:")
    Q.answer_questions(backend, tmp_path, "challenge", [("d1", "Parsing.", "Is it about parsing?")])
    assert len(backend.asked) == 1  # an unparsed answer is an answer: not asked again


# --------------------------------------------------------------------------- MBQA


def test_classifier_learns_a_linear_task_from_masked_answers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 16)).astype(np.float32)
    w = rng.normal(size=(16, 6))
    y = (x @ w > 0.3).astype(np.float32)
    mask = (rng.random(y.shape) < 0.4).astype(np.float32)  # 40% of pairs answered
    y_seen = np.where(mask > 0, y, 0.0)  # unanswered entries hold no information
    model = Q.train_mbqa(x[:400], y_seen[:400], mask[:400], training=mbqa.MBQATraining(epochs=200))
    probs = Q.predict(model, x[400:])
    scores = Q.agreement(probs, y[400:], np.ones_like(y[400:]))
    assert scores["accuracy"] > 0.9 and scores["balanced_accuracy"] > 0.9
    hidden = Q.train_mbqa(x[:400], y_seen[:400], mask[:400], hidden=32, training=mbqa.MBQATraining(epochs=150))
    assert Q.agreement(Q.predict(hidden, x[400:]), y[400:], np.ones_like(y[400:]))["accuracy"] > 0.85


def test_masked_loss_matches_torch_bce_on_selected_entries():
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(7, 5, generator=g), (torch.rand(7, 5, generator=g) > 0.5).float()
    mask = (torch.rand(7, 5, generator=g) > 0.6).float()
    sel = mask.bool()
    expected = torch.nn.functional.binary_cross_entropy(torch.sigmoid(logits[sel]), targets[sel])
    assert torch.allclose(mbqa.masked_bce(logits, targets, mask), expected, atol=1e-6)
    weights = torch.as_tensor(mbqa.balance_weights(targets.numpy(), mask.numpy()))
    expected_w = torch.nn.functional.binary_cross_entropy_with_logits(logits[sel], targets[sel], weight=weights[sel])
    assert torch.allclose(mbqa.masked_bce(logits, targets, mask, weights), expected_w, atol=1e-6)
    # the loss ignores what unanswered entries hold
    assert torch.allclose(mbqa.masked_bce(logits, targets * mask + (1 - mask) * 0.5, mask), expected, atol=1e-6)


def test_balance_weights_equalise_yes_and_no():
    targets = np.array([[1, 0], [0, 0], [0, 1], [0, 0]], dtype=np.float32)
    mask = np.ones_like(targets)
    w = mbqa.balance_weights(targets, mask)
    assert np.allclose((w * targets).sum(0), (w * (1 - targets)).sum(0))


def _hand_axes():
    """Two-dimensional axes: q0 'x > 0', q1 'y > 0', q2 'x < 0' (less sure), sharp logits."""
    model = mbqa.make_mbqa(2, 3)
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[10.0, 0], [0, 10.0], [-5.0, 0]]))
        model[0].bias.zero_()
    qs = [{"id": Q.question_id(t), "text": t} for t in ("Is x positive?", "Is y positive?", "Is x negative?")]
    return Q.QuestionAxes("toy", qs, model, {"dim": 2, "hidden": 0, "questions": qs})


def test_compare_lists_agreement_and_disagreement():
    axes = _hand_axes()
    agree, disagree = axes.compare(np.array([1.0, 0.3]), np.array([1.0, -0.6]))
    assert [a["question"] for a in agree] == ["Is x positive?", "Is x negative?"]
    assert agree[0]["a"] > 0.99 and agree[1]["b"] < 0.05
    assert [d["question"] for d in disagree] == ["Is y positive?"] and disagree[0]["a"] > 0.5 > disagree[0]["b"]
    assert len(axes.compare(np.array([1.0, 0.3]), np.array([1.0, -0.6]), top=1)[0]) == 1


def test_region_questions_are_those_most_papers_answer_yes():
    axes = _hand_axes()
    region = np.array([[1.0, 0.5], [0.8, -0.2], [0.9, 0.4]])  # all x > 0, two of three y > 0
    assert axes.region_questions(region, top=3) == [("Is x positive?", 1.0), ("Is y positive?", pytest.approx(2 / 3))]
    assert axes.region_questions(region, top=1) == [("Is x positive?", 1.0)]


def test_save_load_round_trip_is_safetensors_and_json(tmp_path):
    model = Q.train_mbqa(np.eye(4, dtype=np.float32), np.eye(4, 3, dtype=np.float32), np.ones((4, 3)), hidden=5,
                         training=mbqa.MBQATraining(epochs=5))
    qs = [{"id": "a", "text": "Is it a?"}, {"id": "b", "text": "Is it b?"}, {"id": "c", "text": "Is it c?"}]
    Q.save_mbqa(model, tmp_path / "questions" / "toy", {"aspect": "toy", "dim": 4, "hidden": 5, "questions": qs})
    files = sorted(p.name for p in (tmp_path / "questions" / "toy").iterdir())
    assert files == ["mbqa.json", "mbqa.safetensors"]
    assert json.loads((tmp_path / "questions" / "toy" / "mbqa.json").read_text())["format"] == "workbench-mbqa"
    axes = Q.QuestionAxes.load(tmp_path, "toy")
    x = np.random.default_rng(1).normal(size=(6, 4))
    assert axes.questions == ["Is it a?", "Is it b?", "Is it c?"]
    np.testing.assert_allclose(axes.answer(x), Q.predict(model, x), atol=1e-7)
    raw = (tmp_path / "questions" / "toy" / "mbqa.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])  # safetensors: length, JSON header, tensors
    assert set(header) - {"__metadata__"} == set(model.state_dict()) and not raw.startswith(b"PK")  # no torch zip


# --------------------------------------------------------------------------- evaluation and the pipeline


def test_question_embedding_correlation_uses_the_evaluation_table():
    rng = np.random.default_rng(0)
    head = rng.normal(size=(30, 8))
    truth = unit_rows(head) @ unit_rows(head).T
    np.fill_diagonal(truth, np.nan)
    probs = 1 / (1 + np.exp(-(head[:, :4] * 3)))
    out = Q.question_embedding_correlation(probs, head, truth)
    assert out["head"] == pytest.approx(100.0)
    expected = correlation_table({"q": probs}, {"t": truth})["spearman"].loc["q", "t"]
    assert out["questions"] == pytest.approx(expected) and out["ratio"] == pytest.approx(expected / 100)
    assert Q.question_embedding_correlation(probs, head, truth, centre=True)["questions"] != out["questions"]


def test_build_axes_end_to_end_with_a_scripted_llm(tmp_path):
    ids, vectors, statements = _topic_corpus()
    backend = Scripted(_topic_reply)
    config = AxesConfig(k=3, per_cluster=3, pairs=120, embed=None, seed=0)
    axes, report = Q.build_axes(tmp_path, "challenge", ids, vectors, statements, backend, config=config)
    assert report["clusters"] == 3 and report["unique"] == 6  # 3 topics x 2 questions; junk and repeats dropped
    assert report["kept"] >= 3 and report["unparsed"] == 0
    assert report["heldout"]["accuracy"] > 0.9 and report["heldout"]["pairs"] > 10
    assert (tmp_path / "questions" / "challenge" / "mbqa.safetensors").is_file()
    loaded = Q.QuestionAxes.load(tmp_path, "challenge")
    assert loaded.questions == axes.questions
    parsing = [q for q in axes.questions if q == "Does the paper study parsing?"]
    assert parsing and axes.region_questions(vectors[:14], top=5)[0][1] == 1.0
    agree, disagree = axes.compare(vectors[0], vectors[20])  # a parsing and a translation paper
    assert any(d["question"] == "Does the paper study parsing?" for d in disagree)
    assert any("translation" in a["question"] or "summarisation" in a["question"] for a in agree)
    cost = Q.answering_cost(axes, vectors, report["llm_seconds_per_answer"])
    assert cost["llm_s_per_paper"] == pytest.approx(0.01 * len(axes.questions))

    again = Scripted(_topic_reply)
    _, report2 = Q.build_axes(tmp_path, "challenge", ids, vectors, statements, again, config=config)
    assert again.asked == [] and report2["kept"] == report["kept"]
    none, report3 = Q.build_axes(tmp_path, "challenge", ids, vectors, statements, again,
                                 config=AxesConfig(k=3, per_cluster=3, pairs=120, embed=None, seed=0,
                                                     min_rate=0.95))  # nothing passes the filter
    assert none is None and report3["kept"] == 0 and again.asked == []
    assert not (tmp_path / "questions" / "challenge" / "mbqa.json").exists()  # no stale axes left to load


def test_build_axes_keeps_the_test_split_out(tmp_path):
    ids, vectors, statements = _topic_corpus()
    usable = np.arange(len(ids)) % 3 != 0  # every third paper plays the test split
    backend = Scripted(_topic_reply)
    Q.build_axes(tmp_path, "challenge", ids, vectors, statements, backend, usable=usable,
                 config=AxesConfig(k=3, pairs=60, embed=None))
    read = " ".join(m[-1]["content"] for m in backend.asked)
    assert not any(re.search(rf"Paper {i} ", read) for i in range(0, len(ids), 3))
    assert any(re.search(rf"Paper {i} ", read) for i in range(1, len(ids), 3))


@pytest.mark.slow
def test_real_smollm_end_to_end(tmp_path):
    """The packaged SmolLM2 through every step: CQG, parsing, probing, the stores, and a classifier on its answers.

    (With 12 papers the 135M model's answers rarely pass the discrimination filter, so the
    classifier is trained here on every parsed answer it gave.)"""
    from workbench.generate.llm import make_backend

    backend = make_backend("transformers", batch_size=16, device="cpu")
    ids, vectors, statements = _topic_corpus(n_per=6)
    statements = [s.replace("low-resource text", "news") for s in statements]
    axes, report = Q.build_axes(tmp_path, "challenge", ids[:12], vectors[:12], statements[:12], backend,
                                config=AxesConfig(k=2, samples=1, per_cluster=3, n_pos=2, n_neg=2, pairs=32,
                                                    embed=None,
                                                    gen_sampling=Sampling(temperature=0.7, max_new_tokens=60,
                                                                          seed=0)))
    generated = Q.question_store(tmp_path).records()
    assert len(generated) == 2 and all(r["model"] == "smollm2-135m-instruct" for r in generated)
    assert report["unique"] >= 1, [r["raw"] for r in generated]
    answers = Q.answer_store(tmp_path).records()
    assert len(answers) == report["answers"] >= report["unique"] * 4
    assert all(r["status"] in {"ok", "unparsed"} for r in answers) and report["unparsed"] < len(answers)
    qids = sorted({r["question_id"] for r in answers})
    Y, M = np.zeros((12, len(qids)), np.float32), np.zeros((12, len(qids)), np.float32)
    for r in answers:
        if r["status"] == "ok":
            i, j = ids.index(r["doc_id"]), qids.index(r["question_id"])
            Y[i, j], M[i, j] = float(r["answer"]), 1.0
    model = Q.train_mbqa(vectors[:12], Y, M, training=mbqa.MBQATraining(epochs=50))
    assert Q.predict(model, vectors[:3]).shape == (3, len(qids))
    if axes is not None:
        assert axes.answer(vectors[:3]).shape == (3, len(axes.questions))
    again = Q.build_axes(tmp_path, "challenge", ids[:12], vectors[:12], statements[:12], backend,
                         config=AxesConfig(k=2, samples=1, per_cluster=3, n_pos=2, n_neg=2, pairs=32,
                                             embed=None))[1]
    assert again["generation"].startswith("0 written") and again["answering"].startswith("0 written")
