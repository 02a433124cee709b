"""Stage 01's shared work: prompt tokens read once, finished answers leaving the batch, and
resume keys that include the prompt and the model."""

import dataclasses
import json

import pytest

from workbench.data.aspects import load_aspects
from workbench.generate.summaries import SUMMARY_PREFILL, SUMMARY_STOP, generate_summaries, summaries_frame
from workbench.generate.llm import Completion, Sampling, cut_at_stop, plan_batches
from workbench.generate.batching import common_prefix


def test_common_prefix():
    assert common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix([[5, 6]]) == 2
    assert common_prefix([[1], [2]]) == 0
    assert common_prefix([]) == 0


def test_plan_batches_groups_long_common_starts_and_respects_the_row_limit():
    instruction_a, instruction_b = list(range(100, 160)), list(range(200, 260))
    prompts = [instruction_a + [1, 2, 3], instruction_b + [1, 2, 3], instruction_a + [7, 8], instruction_b + [9],
               instruction_a + [4]]
    batches = plan_batches(prompts, repeats=[2] * 5, max_rows=4)
    # same instruction together, at most 4 answers per batch, every prompt exactly once
    assert sorted(i for b in batches for i in b) == list(range(5))
    for batch in batches:
        assert sum(2 for _ in batch) <= 4
        assert len({tuple(prompts[i][:60]) for i in batch}) == 1
    assert len(batches) == 3  # a: 3 prompts -> 2 batches; b: 2 prompts -> 1 batch
    # a prompt asked for more answers than fit gets a batch of its own
    assert plan_batches(prompts[:2], repeats=[9, 1], max_rows=4) in ([[0], [1]], [[1], [0]])
    # little in common (less than half of the shorter prompt): never batched together
    assert plan_batches([[1, 2, 3, 4], [1, 9, 9, 9]], repeats=[1, 1], max_rows=8) == [[0], [1]]


def test_cut_at_stop():
    assert cut_at_stop('Good."} trailing', ('"}', '"\n}')) == 'Good."}'
    assert cut_at_stop("no stop", ('"}',)) == "no stop"


class FakeBackend:
    """Answers every conversation with a fixed JSON sentence and counts what it was asked."""

    kind = "fake"
    batch_size = 4

    def __init__(self, model_id="fake-1"):
        self.model_id = model_id
        self.asked = 0

    def complete(self, conversations, sampling, prefill=None):
        for i, _ in enumerate(conversations):
            self.asked += 1
            yield i, Completion(f'{{"sentence": "answer by {self.model_id}."}}', 5, 0.0)


def test_resume_redoes_work_when_the_prompt_or_the_model_changes(tiny_corpus, tmp_path):
    aspects = load_aspects("acl").subset(["challenge", "approach"])
    backend = FakeBackend()
    first = generate_summaries(tiny_corpus, aspects, backend, tmp_path, k=2, progress=False)
    assert first.written == 12 and first.skipped == 0 and first.superseded == 0

    again = generate_summaries(tiny_corpus, aspects, backend, tmp_path, k=2, progress=False)
    assert again.written == 0 and again.skipped == 12 and backend.asked == 12
    assert "12 reused" in str(again)

    # an edited aspect description changes that prompt's hash: its answers are done again
    edited = dataclasses.replace(aspects["challenge"], description="A different question entirely.")
    changed = dataclasses.replace(aspects, aspects=(edited, aspects["approach"]))
    assert changed.prompt_hash("challenge") != aspects.prompt_hash("challenge")
    redo = generate_summaries(tiny_corpus, changed, backend, tmp_path, k=2, progress=False)
    assert redo.written == 6 and redo.skipped == 6 and redo.superseded == 6
    assert "done again" in str(redo)
    current = summaries_frame(tmp_path)
    assert len(current) == 12  # only the answers to the prompts as they are now
    assert set(current.loc[current["key"] == "challenge", "prompt_hash"]) == {changed.prompt_hash("challenge")}
    assert len(summaries_frame(tmp_path, current=False)) == 18  # nothing was lost

    # another model: everything is done again, and only its answers are current
    other = FakeBackend("fake-2")
    swap = generate_summaries(tiny_corpus, changed, other, tmp_path, k=2, progress=False)
    assert swap.written == 12 and swap.superseded == 12
    assert set(summaries_frame(tmp_path)["model"]) == {"fake-2"}
    # and back to the first model and prompt: its answers are reused, not asked again
    asked = backend.asked
    back = generate_summaries(tiny_corpus, changed, backend, tmp_path, k=2, progress=False)
    assert back.written == 0 and backend.asked == asked
    assert set(summaries_frame(tmp_path)["model"]) == {"fake-1"}


def test_an_answer_that_repeats_the_instructions_is_not_a_summary(tiny_corpus, tmp_path):
    """The aspect's description or an example sentence copied back is unparsed; the abstract's own words are not."""
    from workbench.generate.parsing import copies_instructions

    aspects = load_aspects("acl").subset(["challenge"])
    example = "Neural machine translation systems degrade sharply when little parallel data is available for a language pair."
    assert example in aspects.messages("challenge", "x")[-1]["content"]  # the preset's first example sentence
    answers = {"a": example, "b": "Neural machine translation degrades on noisy user text.",
               "c": "The problem or motivation the paper addresses"}

    class Echo(FakeBackend):
        def complete(self, conversations, sampling, prefill=None):
            for i, messages in enumerate(conversations):
                doc = next(d for d, t in zip(tiny_corpus.ids, tiny_corpus.texts()) if t in messages[-1]["content"])
                yield i, Completion(json.dumps({"sentence": answers[doc]}), 5, 0.0)

    generate_summaries(tiny_corpus, aspects, Echo(), tmp_path, k=1, progress=False)
    frame = summaries_frame(tmp_path).set_index("doc_id")
    assert frame.at["a", "status"] == "unparsed" and "repeats the prompt's instructions" in frame.at["a", "error"]
    assert frame.at["c", "status"] == "unparsed"  # the aspect's description
    assert frame.at["b", "status"] == "ok"  # words from the abstract, though the example shares some
    from workbench.core.display import summary_examples_html

    shown = summary_examples_html(tiny_corpus, summaries_frame(tmp_path))
    assert "[unparsed: repeats the prompt&#x27;s instructions" in shown  # the report says why
    assert not copies_instructions("Too short", "too short")


def test_a_store_from_an_older_parser_is_read_with_todays(tiny_corpus, tmp_path):
    """A placeholder that an earlier parser stored as a summary is read as unparsed, never trained on."""
    aspects = load_aspects("acl").subset(["challenge"])
    generate_summaries(tiny_corpus, aspects, FakeBackend(), tmp_path, k=1, progress=False)
    path = tmp_path / "summaries.jsonl"
    lines = path.read_text().splitlines()

    old = json.loads(lines[0])  # as the parser before the placeholder check stored it
    old.update(raw='{"sentence": "..."}', text="...", status="ok")
    path.write_text("\n".join([json.dumps(old)] + lines[1:]) + "\n")
    with pytest.warns(UserWarning, match="1 stored summaries are no longer accepted"):
        frame = summaries_frame(tmp_path)
    row = frame[frame["doc_id"] == old["doc_id"]].iloc[0]
    assert row["status"] == "unparsed" and not isinstance(row["text"], str) and "no words" in row["error"]
    with pytest.warns(UserWarning):
        ok = summaries_frame(tmp_path, status="ok")
    assert len(ok) == len(tiny_corpus) - 1 and "..." not in set(ok["text"])
    assert json.loads(path.read_text().splitlines()[0])["status"] == "ok"  # the file is not rewritten


@pytest.fixture(scope="module")
def greedy_references(smollm, short_aspects):
    """Conversations (each (abstract, aspect) once, two repeated) and `generate`'s greedy answer to each alone."""
    aspects = short_aspects
    # Two abstracts x three aspects: three instructions, each the shared start of two prompts.
    abstracts = ["We study dependency parsing for low-resource languages and propose a cross-lingual transfer method.",
                 "Abstractive summarisers hallucinate facts; we filter training data by entailment scores."]
    conversations = [aspects.messages(key, text) for text in abstracts for _, key in aspects.prompt_keys()]
    tokenizer, model = smollm.tokenizer, smollm.model
    want = []
    for messages in conversations:
        enc = tokenizer(smollm._prompt(messages, SUMMARY_PREFILL), return_tensors="pt", add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=20, do_sample=False, stop_strings=list(SUMMARY_STOP),
                             tokenizer=tokenizer, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        want.append(SUMMARY_PREFILL + cut_at_stop(text, SUMMARY_STOP))
    return conversations + conversations[:2], want  # repeated conversations (k samples) are read once


@pytest.mark.slow
@pytest.mark.parametrize("path", ["cascade", "plain cache"])
def test_shared_reading_gives_the_answers_of_plain_generate(greedy_references, smollm, path, monkeypatch):
    """Greedy answers through the shared cache and the shrinking batch equal `generate` on each prompt alone.

    Both ways: cascade attention (prefixes held once, several groups per batch) and the
    plain transformers cache that models without cascade support get.
    """
    if path == "plain cache":
        monkeypatch.setattr("workbench.generate.cascade.supports", lambda model: False)
    conversations, want = greedy_references
    greedy = Sampling(temperature=0, max_new_tokens=20, stop=SUMMARY_STOP)
    got = dict(smollm.complete(conversations, greedy, prefill=SUMMARY_PREFILL))
    assert sorted(got) == list(range(len(conversations)))
    for i, text in enumerate(want):
        assert got[i].text == text, i
    assert got[len(conversations) - 2].text == got[0].text


@pytest.mark.slow
def test_samples_of_one_prompt_differ_and_stop_on_their_own(tiny_corpus, smollm, short_aspects):
    messages = short_aspects.messages("approach", tiny_corpus.texts()[0])
    stream = list(smollm.complete([messages] * 6, Sampling(max_new_tokens=24, seed=0, stop=SUMMARY_STOP),
                                  prefill=SUMMARY_PREFILL))
    # one batch, each answer yielded as soon as it is done: shorter answers come first
    assert [c.tokens for _, c in stream] == sorted(c.tokens for _, c in stream)
    answers = dict(stream)
    texts = [answers[i].text for i in range(6)]
    assert len(set(texts)) > 1
    assert all(1 <= answers[i].tokens <= 24 for i in range(6))
    for text in texts:  # an answer that stopped on '"}' ends there
        assert '"}' not in text or text.endswith('"}')
    assert list(smollm.complete([], Sampling(max_new_tokens=4))) == []  # a resumed run with nothing to ask


@pytest.mark.slow
def test_llama_cpp_backend_samples_differ_and_end_like_transformers(tiny_corpus, short_aspects):
    pytest.importorskip("llama_cpp")
    from workbench.generate.llm import LlamaCppBackend

    backend = LlamaCppBackend("smollm2-135m-instruct", n_threads=1)
    messages = short_aspects.messages("approach", tiny_corpus.texts()[0])
    answers = dict(backend.complete([messages] * 3, Sampling(max_new_tokens=24, seed=0, stop=SUMMARY_STOP),
                                    prefill=SUMMARY_PREFILL))
    texts = [answers[i].text for i in range(3)]
    assert all(t.startswith(SUMMARY_PREFILL) for t in texts)
    assert len(set(texts)) > 1


def test_credentials_in_a_server_url_never_reach_messages():
    from workbench.core.redaction import without_credentials
    from workbench.generate.http_backend import OpenAIBackend
    from workbench.generate.sampling import RetryPolicy

    assert without_credentials("http://user:sk-secret123@host:8000/v1") == "http://***@host:8000/v1"
    assert without_credentials("http://host/v1") == "http://host/v1"
    backend = OpenAIBackend("m", base_url="http://user:sk-secret123@127.0.0.1:9/v1",
                            retry=RetryPolicy(timeout=0.5, retries=0))
    try:
        assert "sk-secret123" not in repr(backend)
        completion = backend.request([{"role": "user", "content": "hi"}], Sampling(max_new_tokens=2))
        assert completion.error and "sk-secret123" not in completion.error and "***@127.0.0.1" in completion.error
    finally:
        backend.close()


def test_examples_show_the_aspects_in_one_order_for_every_paper(tiny_corpus, tmp_path):
    from workbench.core.display import summary_examples_html

    aspects = load_aspects("acl").subset(["challenge", "approach"])
    generate_summaries(tiny_corpus, aspects, FakeBackend(), tmp_path, k=2, progress=False)
    frame = summaries_frame(tmp_path).sample(frac=1.0, random_state=3)  # answers stored in any order
    html = summary_examples_html(tiny_corpus, frame, aspects=["approach", "challenge"])
    per_paper = [part.split("</table>")[0] for part in html.split("<h4>")[1:]]
    assert len(per_paper) == 3
    assert all(p.index(">approach<") < p.index(">challenge<") for p in per_paper)


def test_a_long_prompt_does_not_size_the_batch_of_short_ones():
    """Every answer of a batch holds the batch's longest prompt: a budget of cells (answers x columns)
    keeps a 5,000-token abstract out of the short prompts' batch (stage 01 had reached 13.6 GB)."""
    from workbench.generate.llm import pack_groups

    prompts = [[1, 2, 3] + [4] * 200 + [k] for k in range(6)] + [[1, 2, 3] + [4] * 200 + [9] * 4800]
    repeats = [4] * 7
    costs = [len(p) + 64 for p in prompts]
    unlimited = plan_batches(prompts, repeats, 96)
    assert len(unlimited) == 1  # all share a start: one batch of 28 answers x 5,067 columns
    groups = plan_batches(prompts, repeats, 96, costs=costs, max_cells=30_000)
    assert sorted(map(len, groups)) == [1, 6] and [6] in groups  # the long one alone
    batches = pack_groups(groups, repeats, 96, costs=costs, max_cells=30_000)
    assert all(sum(repeats[i] for g in b for i in g) * max(costs[i] for g in b for i in g) <= 30_000
               or sum(len(g) for g in b) == 1 for b in batches)
    assert len(batches) == 2
