"""Stage 01 sentence labels: tolerant parsing, resumable store, per-sentence shares. No model is loaded."""

import json

import pandas as pd
import pytest

from workbench.data.aspects import load_aspects
from workbench.data.corpus import Corpus
from workbench.generate.llm import Completion
from workbench.generate.parsing import parse_sentence_labels
from workbench.generate.sentence_labels import (LABEL_PREFILL, SENTENCE_LABELS, label_messages, label_sentences,
                                       labels_table, load_sentence_labels, prompt_hash, sentence_labels_frame)
from workbench.data.sentences import split_sentences

NAMES = ["challenge", "approach", "outcome"]


@pytest.fixture
def acl():
    return load_aspects("acl")


@pytest.fixture
def corpus():
    """Two abstracts of 3 sentences and one of a single sentence."""
    return Corpus(pd.DataFrame({
        "doc_id": ["a", "b", "c"],
        "title": ["", "", ""],
        "abstract": [
            "Parsing low-resource languages is hard. We propose cross-lingual transfer. It gains two points.",
            "Translation breaks on noisy text. We add synthetic noise. Robustness improves.",
            "We filter summarisation data by entailment scores.",
        ],
    }))


class FakeBackend:
    """Answers every request with `answer(messages, sample_index)`; counts requests and records the prefill."""

    kind = "fake"

    def __init__(self, answer, model_id="fake-lm", batch_size=4):
        self.answer, self.model_id, self.batch_size = answer, model_id, batch_size
        self.requests, self.prefills = 0, []

    def complete(self, conversations, sampling, prefill=None):
        self.prefills.append(prefill)
        for i, messages in enumerate(conversations):
            self.requests += 1
            yield i, Completion(self.answer(messages), tokens=7, seconds=0.01)


# -- parsing -------------------------------------------------------------------------

@pytest.mark.parametrize("answer, expected", [
    ('{"challenge": [1], "approach": [2, 3], "outcome": []}', {"challenge": [0], "approach": [1, 2], "outcome": []}),
    ('```json\n{"challenge": [1], "approach": [3, 2], "outcome": [3]}\n```',
     {"challenge": [0], "approach": [1, 2], "outcome": [2]}),
    ('{"challenge": ["1"], "approach": "2, 3", "outcome": 3}', {"challenge": [0], "approach": [1, 2], "outcome": [2]}),
    ('{"Challenge": [1], "APPROACH": [2], "method": [3]}', {"challenge": [0], "approach": [1], "outcome": []}),
    ('Sure! {"note": 1} {"outcome": [3, 3]} bye', {"challenge": [], "approach": [], "outcome": [2]}),
    ('{"challenge": [1], "approach": [2, 3', {"challenge": [0], "approach": [1, 2], "outcome": []}),  # cut off
    ('challenge": [2], "outcome": [1, 3]}', {"challenge": [1], "approach": [], "outcome": [0, 2]}),  # prefill not echoed
])
def test_labels_are_parsed_to_zero_based_indices(answer, expected):
    parsed = parse_sentence_labels(answer, NAMES, 3)
    assert parsed.status == "ok", parsed.error
    assert parsed.value == expected


def test_out_of_range_numbers_are_dropped_and_reported():
    parsed = parse_sentence_labels('{"challenge": [0, 1], "approach": [2, 4, 9], "outcome": [-1]}', NAMES, 3)
    assert parsed.status == "ok"
    assert parsed.value == {"challenge": [0], "approach": [1], "outcome": []}
    assert "[-1, 0, 4, 9]" in parsed.error


@pytest.mark.parametrize("answer", [
    "", "The first sentence is the challenge.", '{"method": [1], "result": [2]}',
    '{"challenge": [sentence numbers], "approach": [sentence numbers]}',  # the format copied back
    '{"challenge": ["..."], "approach": "sentence numbers"}', None,
])
def test_garbage_is_unparsed(answer):
    parsed = parse_sentence_labels(answer, NAMES, 3)
    assert parsed.status == "unparsed"
    assert parsed.value is None and parsed.error


def test_aspect_set_and_multiword_names_are_matched(acl):
    assert parse_sentence_labels('{"outcome": [1]}', acl, 1).value == {"challenge": [], "approach": [], "outcome": [0]}
    parsed = parse_sentence_labels('{"Research Question": [2]}', ["research_question", "method"], 2)
    assert parsed.value == {"research_question": [1], "method": []}


# -- prompt --------------------------------------------------------------------------

def test_messages_number_the_sentences_and_list_the_aspects(acl):
    messages = label_messages(acl, ["First one.", "Second one."])
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "[1] First one.\n[2] Second one." in user
    for aspect in acl:
        assert f"- {aspect.name}: {aspect.description.strip()}" in user
    example = json.loads(user[user.rindex("{"):])
    assert list(example) == acl.names
    assert acl.domain in messages[0]["content"]


def test_prompt_hash_follows_aspect_definitions(acl):
    assert prompt_hash(acl) == prompt_hash(load_aspects("acl"))
    assert prompt_hash(acl) != prompt_hash(acl.subset(["challenge", "approach"]))


# -- generation, resume, loading -------------------------------------------------------

def test_records_are_stored_and_a_second_run_writes_nothing(acl, corpus, tmp_path):
    backend = FakeBackend(lambda m: LABEL_PREFILL + 'challenge": [1], "approach": [2, 3], "outcome": [3]}')
    report = label_sentences(corpus, acl, backend, tmp_path, k=2, progress=False)
    assert report.written == 6 and report.skipped == 0 and report.status == {"ok": 6}
    assert backend.prefills == [LABEL_PREFILL]
    frame = sentence_labels_frame(tmp_path)
    assert len(frame) == 6 and set(frame["sample"]) == {0, 1}
    row = frame[frame["doc_id"] == "a"].iloc[0]
    assert row["labels"] == {"challenge": [0], "approach": [1, 2], "outcome": [2]}
    assert row["n_sentences"] == 3 and row["model"] == "fake-lm" and row["backend"] == "fake"
    assert row["prompt_hash"] == prompt_hash(acl) and row["sampling"]["temperature"] == 0.2
    assert row["tokens"] == 7 and row["time"] > 0 and row["raw"].startswith('{"challenge"')
    one = frame[frame["doc_id"] == "c"].iloc[0]  # one sentence: 2 and 3 are out of range
    assert one["n_sentences"] == 1 and one["labels"] == {"challenge": [0], "approach": [], "outcome": []}
    assert "[2, 3]" in one["error"]

    again = label_sentences(corpus, acl, backend, tmp_path, k=2, progress=False)
    assert again.written == 0 and again.skipped == 6 and backend.requests == 6
    more = label_sentences(corpus, acl, backend, tmp_path, k=3, progress=False)
    assert more.written == 3 and more.skipped == 6


def test_changed_prompt_or_model_is_asked_again(acl, corpus, tmp_path):
    answer = lambda m: '{"challenge": [1]}'  # noqa: E731
    label_sentences(corpus, acl, FakeBackend(answer), tmp_path, progress=False)
    other_model = FakeBackend(answer, model_id="other-lm")
    assert label_sentences(corpus, acl, other_model, tmp_path, progress=False).written == 3
    other_prompt = FakeBackend(answer)
    report = label_sentences(corpus, acl.subset(["challenge", "approach"]), other_prompt, tmp_path, progress=False)
    assert report.written == 3 and other_prompt.requests == 3
    assert len(sentence_labels_frame(tmp_path)) == 9


def test_unparsed_answers_are_kept(acl, corpus, tmp_path):
    report = label_sentences(corpus, acl, FakeBackend(lambda m: "I cannot tell."), tmp_path, progress=False)
    assert report.status == {"unparsed": 3}
    frame = sentence_labels_frame(tmp_path)
    assert (frame["raw"] == "I cannot tell.").all() and frame["labels"].isna().all()
    assert load_sentence_labels(tmp_path, corpus, acl) == {"challenge": {}, "approach": {}, "outcome": {}}


def test_load_averages_samples_and_ignores_stale_records(acl, corpus, tmp_path):
    # "a" (2 samples) gets outcome [3] twice, "c" (1 sentence) gets outcome [1]
    answers = iter(['{"challenge": [1], "outcome": [%d]}' % n for n in (3, 3, 1)])
    backend = FakeBackend(lambda m: next(answers))
    label_sentences(corpus.subset(ids=["a"]), acl, backend, tmp_path, k=2, progress=False)
    label_sentences(corpus.subset(ids=["c"]), acl, backend, tmp_path, k=1, progress=False)
    labels = load_sentence_labels(tmp_path, corpus, acl)
    assert labels["challenge"] == {"a": [1.0, 0.0, 0.0], "c": [1.0]}
    assert labels["outcome"] == {"a": [0.0, 0.0, 1.0], "c": [1.0]}
    assert labels["approach"] == {"a": [0.0, 0.0, 0.0], "c": [0.0]}
    assert "b" not in labels["challenge"]  # never labelled

    # the abstract of "a" changed to 4 sentences: its 3-sentence records no longer apply
    changed = corpus.docs.copy()
    changed.loc[0, "abstract"] += " Code is public."
    assert len(split_sentences(changed.loc[0, "abstract"])) == 4
    assert "a" not in load_sentence_labels(tmp_path, Corpus(changed), acl)["challenge"]

    # filters
    assert load_sentence_labels(tmp_path, corpus, acl, model="other-lm")["challenge"] == {}
    assert load_sentence_labels(tmp_path, corpus, acl, prompt_hash=prompt_hash(acl))["challenge"]["c"] == [1.0]
    assert load_sentence_labels(tmp_path, corpus, acl, prompt_hash="0" * 12)["challenge"] == {}


def test_shares_average_over_k_samples(acl, corpus, tmp_path):
    answers = iter(['{"approach": [2]}', '{"approach": [2, 3]}', '{"approach": [3]}', '{"approach": []}'])
    label_sentences(corpus.subset(ids=["b"]), acl, FakeBackend(lambda m: next(answers)), tmp_path, k=4,
                    progress=False)
    assert load_sentence_labels(tmp_path, corpus, ["approach"])["approach"]["b"] == [0.0, 0.5, 0.5]


def test_labels_table_has_one_row_per_sentence(acl, corpus, tmp_path):
    label_sentences(corpus.subset(ids=["a"]), acl, FakeBackend(lambda m: '{"approach": [2], "outcome": [3]}'),
                    tmp_path, progress=False)
    table = labels_table(corpus, load_sentence_labels(tmp_path, corpus, acl), ["a", "c"], acl)
    assert list(table.columns) == ["doc_id", "index", "sentence", *NAMES]
    assert table["doc_id"].tolist() == ["a", "a", "a", "c"]
    assert table["sentence"].tolist()[:2] == ["Parsing low-resource languages is hard.",
                                              "We propose cross-lingual transfer."]
    assert table["approach"].tolist()[:3] == [0, 1, 0] and table["outcome"].tolist()[:3] == [0, 0, 1]
    assert table["approach"].isna().tolist() == [False, False, False, True]  # "c" was never labelled


def test_reading_an_empty_run_creates_nothing(acl, corpus, tmp_path):
    run = tmp_path / "nothing"
    assert load_sentence_labels(run, corpus, acl) == {"challenge": {}, "approach": {}, "outcome": {}}
    assert sentence_labels_frame(run).empty and not run.exists()
    assert SENTENCE_LABELS == "sentence_labels.jsonl"


def test_invalid_corpus_is_refused(acl, tmp_path):
    bad = Corpus(pd.DataFrame({"doc_id": ["a", "a"], "title": ["", ""], "abstract": ["x y z", ""]}))
    with pytest.raises(ValueError, match="drop_invalid"):
        label_sentences(bad, acl, FakeBackend(lambda m: "{}"), tmp_path, progress=False)
