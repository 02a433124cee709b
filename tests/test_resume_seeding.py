"""Sampling is seeded per request: a resumed run stores exactly what an uninterrupted one would.

Each request draws its tokens from its own stream, seeded by `request_seed(doc_id, prompt key,
sample, seed)`, so neither a kill and resume nor the other requests of a batch change an answer.
"""

import hashlib
import json
from collections import Counter

import pytest
import torch

from workbench.generate.summaries import generate_summaries, summary_store
from workbench.generate.http_backend import OpenAIBackend
from workbench.generate.llm import LlamaCppBackend, TransformersBackend
from workbench.generate.sampling import Completion, Sampling, draw
from workbench.generate.sampling import RetryPolicy
from workbench.generate.sampling import request_seed

SAMPLING = Sampling(max_new_tokens=10, seed=0)
DOCS = {  # the `tiny_corpus` fixture's, for the module-scoped store A
    "doc_id": ["a", "b", "c"],
    "title": ["Parsing", "Translation", "Summaries"],
    "abstract": [
        "We study dependency parsing for low-resource languages and propose a cross-lingual transfer method.",
        "Neural machine translation degrades on noisy user text; we add synthetic noise during training.",
        "Abstractive summarisers hallucinate facts; we filter training data by entailment scores.",
    ]}


def _texts(run_dir) -> dict:
    return {(r["doc_id"], r["key"], r["sample"]): r["raw"] for r in summary_store(run_dir).records()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, smollm, short_aspects):
    """Store A: the tiny corpus under two aspects, k=2, in one uninterrupted call; its texts by request."""
    import pandas as pd

    from workbench.data.corpus import Corpus

    run_dir = tmp_path_factory.mktemp("uninterrupted")
    report = generate_summaries(Corpus(pd.DataFrame(DOCS)), short_aspects.subset(["challenge", "approach"]), smollm,
                                run_dir, k=2, sampling=SAMPLING, progress=False)
    assert report.written == 12
    return _texts(run_dir)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*incomplete last line")
def test_a_killed_and_resumed_run_stores_what_an_uninterrupted_one_does(uninterrupted, tiny_corpus, smollm,
                                                                       short_aspects, tmp_path):
    want = uninterrupted
    assert any(want[(d, k, 0)] != want[(d, k, 1)] for d, k, _ in want)  # the k samples differ
    aspects = short_aspects.subset(["challenge", "approach"])
    # B: first a part (two documents, one aspect), then killed mid-line after the first record...
    part = generate_summaries(tiny_corpus.subset(ids=["b", "c"]), aspects.subset(["approach"]), smollm, tmp_path,
                              k=2, sampling=SAMPLING, progress=False)
    assert part.written == 4
    store = tmp_path / "summaries.jsonl"
    first, second = store.read_text().splitlines()[:2]
    store.write_text(first + "\n" + second[:len(second) // 2])  # one whole record and a torn one
    # ... and resumed over everything
    resumed = generate_summaries(tiny_corpus, aspects, smollm, tmp_path, k=2, sampling=SAMPLING, progress=False)
    assert (resumed.skipped, resumed.written) == (1, 11)
    got = _texts(tmp_path)
    assert got.keys() == want.keys()
    assert {key for key in want if got[key] != want[key]} == set()


@pytest.mark.slow
def test_a_request_alone_stores_what_it_does_among_others(uninterrupted, tiny_corpus, smollm, short_aspects,
                                                           tmp_path):
    """One document under one aspect, alone in its call, gets the answers it got in the whole run's batches."""
    generate_summaries(tiny_corpus.subset(ids=["c"]), short_aspects.subset(["challenge"]), smollm, tmp_path, k=2,
                       sampling=SAMPLING, progress=False)
    got = _texts(tmp_path)
    assert got == {key: uninterrupted[key] for key in [("c", "challenge", 0), ("c", "challenge", 1)]}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["cascade", "plain cache"])
def test_the_backend_gives_a_request_the_same_answer_in_any_batch(tiny_corpus, smollm, short_aspects, path, monkeypatch):
    if path == "plain cache":
        monkeypatch.setattr("workbench.generate.cascade.supports", lambda model: False)
    requests = [(doc, key, sample) for doc in tiny_corpus.ids for key in ("challenge", "approach")
                for sample in range(2)]
    texts = dict(zip(tiny_corpus.ids, tiny_corpus.texts()))
    conversations = [short_aspects.messages(key, texts[doc]) for doc, key, _ in requests]
    seeds = [request_seed(doc, key, sample, 0) for doc, key, sample in requests]

    together = dict(smollm.complete(conversations, SAMPLING, seeds=seeds))  # one call, batches of 8
    backend = TransformersBackend.__new__(TransformersBackend)  # the same model, one batch of all 12, reversed
    backend.__dict__.update(smollm.__dict__, batch_size=48)
    wide = dict(backend.complete(conversations[::-1], SAMPLING, seeds=seeds[::-1]))
    assert [wide[len(requests) - 1 - i].text for i in range(len(requests))] == \
        [together[i].text for i in range(len(requests))]
    for i in (0, len(requests) - 1):  # alone
        (_, alone), = smollm.complete([conversations[i]], SAMPLING, seeds=[seeds[i]])
        assert alone.text == together[i].text, requests[i]
    assert len({c.text for c in together.values()}) > len(requests) // 2  # sampled, not one answer


def test_request_seed_is_stable_and_distinct():
    assert request_seed("a", "challenge", 0, 0) == request_seed("a", "challenge", 0, 0)
    assert 0 <= request_seed("a", "challenge", 0, 0) < 2**31
    seeds = {request_seed(d, k, s, seed) for d in "abc" for k in ("x", "y") for s in range(4) for seed in (0, 1)}
    assert len(seeds) == 48
    # fixed: the same numbers in every process and release, or a resumed run would differ
    assert request_seed("a", "challenge", 0, 0) == int.from_bytes(hashlib.sha256(b"a|challenge|0|0").digest()[:8],
                                                                  "big") & 0x7FFFFFFF


def test_draw_follows_the_distribution_and_never_picks_a_masked_candidate():
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert draw(probs, torch.tensor([0.9999999, 0.9999999], dtype=torch.float64)).tolist() == [2, 0]
    assert draw(probs, torch.tensor([0.0, 0.5], dtype=torch.float64)).tolist() == [0, 0]
    uniform = torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts = Counter(draw(probs[:1].expand(20000, 4), uniform).tolist())
    assert abs(counts[0] / 20000 - 0.5) < 0.02 and abs(counts[2] / 20000 - 0.2) < 0.02 and 3 not in counts


def test_generation_sends_each_request_its_own_seed(tiny_corpus, short_aspects, tmp_path):
    """Backends get `request_seed(doc_id, key, sample, seed)` per request, whatever else the call asks."""
    class Recorder:
        kind, model_id, batch_size = "fake", "fake-1", 4

        def __init__(self):
            self.seeds = {}

        def complete(self, conversations, sampling, prefill=None, seeds=None):
            for i, (messages, seed) in enumerate(zip(conversations, seeds)):
                doc = next(d for d, t in zip(tiny_corpus.ids, tiny_corpus.texts()) if t in messages[-1]["content"])
                self.seeds.setdefault(doc, []).append(seed)
                yield i, Completion('{"sentence": "An answer."}', 3, 0.0)

    aspects = short_aspects.subset(["challenge"])
    backend = Recorder()
    generate_summaries(tiny_corpus.subset(ids=["b"]), aspects, backend, tmp_path, k=2, sampling=SAMPLING,
                       progress=False)
    generate_summaries(tiny_corpus, aspects, backend, tmp_path, k=2, sampling=SAMPLING, progress=False)
    assert backend.seeds == {d: [request_seed(d, "challenge", s, 0) for s in range(2)] for d in "abc"}


def test_http_and_llama_cpp_backends_pass_the_request_seed():
    http = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(timeout=0.5, retries=0))
    try:
        messages = [{"role": "user", "content": "hi"}]
        assert http._body(messages, SAMPLING, 1234)["seed"] == 1234
        assert http._body(messages, SAMPLING)["seed"] == 0  # the call's seed when none is given
        sent = []
        http.request = lambda messages, sampling, seed=None: sent.append(seed) or Completion("x")
        list(http.complete([messages] * 3, SAMPLING, seeds=[7, 8, 9]))
        assert sorted(sent) == [7, 8, 9]
    finally:
        http.close()

    class Llama:
        def __init__(self):
            self.seeds = []

        def create_completion(self, ids, seed, **options):
            self.seeds.append(seed)
            return {"choices": [{"text": "x", "finish_reason": "length"}], "usage": {"completion_tokens": 1}}

    class Tokenizer:
        def apply_chat_template(self, messages, **options):
            return json.dumps(messages)

        def __call__(self, text, **options):
            return {"input_ids": [1, 2]}

    llama = LlamaCppBackend.__new__(LlamaCppBackend)
    llama.llm, llama.tokenizer = Llama(), Tokenizer()
    list(llama.complete([[{"role": "user", "content": "hi"}]] * 2, SAMPLING, seeds=[5, 6]))
    assert llama.llm.seeds == [5, 6]
