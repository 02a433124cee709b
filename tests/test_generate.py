"""Stage 01 with the packaged local model: records, provenance, resume, judge, displays."""

import pandas as pd
import pytest

from workbench.data.aspects import load_aspects
from workbench.data.corpus import Corpus
from workbench.core.display import summary_examples_html
from workbench.generate.summaries import (JudgeConfig, generate_summaries, judge_pairs, judgement_store,
                                          not_applicable_share, sample_pairs, summaries_frame)
from workbench.generate.llm import Sampling

pytestmark = pytest.mark.slow


def test_summaries_are_stored_with_provenance_and_resume(tiny_corpus, smollm, short_aspects, tmp_path):
    aspects = short_aspects.subset(["challenge", "approach"])
    sampling = Sampling(max_new_tokens=16, seed=0)
    report = generate_summaries(tiny_corpus.subset(ids=["a", "b"]), aspects, smollm, tmp_path, k=2,
                                sampling=sampling, progress=False)
    assert report.written == 8 and report.skipped == 0 and report.tokens > 0
    frame = summaries_frame(tmp_path)
    assert len(frame) == 8
    assert set(frame["status"]) <= {"ok", "not_applicable", "unparsed"}
    assert frame["raw"].str.len().min() > 0
    row = frame.iloc[0]
    assert row["model"] == "smollm2-135m-instruct" and row["backend"] == "transformers"
    assert row["prompt_hash"] == aspects.prompt_hash(row["key"])
    assert row["sampling"]["max_new_tokens"] == 16 and row["time"] > 0
    # ok answers carry text; unparsed ones keep only raw
    assert frame.loc[frame["status"] == "ok", "text"].notna().all()

    # a larger run over the same store only adds what is missing
    again = generate_summaries(tiny_corpus, aspects, smollm, tmp_path, k=2, sampling=sampling, progress=False)
    assert again.skipped == 8 and again.written == 4
    assert len(summaries_frame(tmp_path)) == 12
    shares = not_applicable_share(summaries_frame(tmp_path))
    assert list(shares.index) == ["approach", "challenge"] or set(shares.index) == {"approach", "challenge"}
    assert (shares.sum(axis=1).round(6) == 1).all()


def test_a_resumed_run_with_nothing_left_to_ask_never_loads_the_model(tiny_corpus, smollm, short_aspects, tmp_path,
                                                                      monkeypatch):
    """Rerunning stage 01 after a kill in a later stage finds every answer stored: the LM's weights (minutes
    for an 8B model on a GPU) are not loaded. A request left to ask loads them once."""
    import workbench.generate.llm as llm

    aspects = short_aspects.subset(["challenge"])
    sampling = Sampling(max_new_tokens=4, seed=0)
    generate_summaries(tiny_corpus.subset(ids=["a"]), aspects, smollm, tmp_path, k=1, sampling=sampling,
                       progress=False)
    loads = []
    monkeypatch.setattr(llm, "load_causal_lm", lambda *a, **k: loads.append(a) or (smollm.model, smollm.tokenizer))
    fresh = llm.TransformersBackend("smollm2-135m-instruct", batch_size=8, device="cpu")
    again = generate_summaries(tiny_corpus.subset(ids=["a"]), aspects, fresh, tmp_path, k=1, sampling=sampling,
                               progress=False)
    assert (again.written, again.skipped, loads) == (0, 1, [])
    more = generate_summaries(tiny_corpus.subset(ids=["a", "b"]), aspects, fresh, tmp_path, k=1, sampling=sampling,
                              progress=False)
    assert (more.written, len(loads)) == (1, 1)
    fresh.model, fresh.tokenizer  # noqa: B018 (loaded once, kept)
    assert len(loads) == 1
    with pytest.raises(Exception, match="not installed|not found|offline|hub"):
        llm.TransformersBackend("no-such-org/no-such-model-anywhere")  # a name that cannot be found: at once


def test_invalid_corpus_is_refused(smollm, tmp_path):
    bad = Corpus(pd.DataFrame({"doc_id": ["a", "a"], "title": ["", ""], "abstract": ["x y z", ""]}))
    with pytest.raises(ValueError, match="drop_invalid"):
        generate_summaries(bad, load_aspects("acl"), smollm, tmp_path, k=1, progress=False)


def test_judge_scores_pairs(tiny_corpus, smollm, short_aspects, tmp_path):
    aspects = short_aspects.subset(["challenge"])
    pairs = sample_pairs(tiny_corpus.ids)
    assert pairs == [("a", "b"), ("a", "c"), ("b", "c")]
    assert len(sample_pairs(tiny_corpus.ids, 2, seed=1)) == 2
    report = judge_pairs(tiny_corpus, aspects, smollm, tmp_path, pairs=pairs[:2],
                         judge=JudgeConfig(sampling=Sampling(max_new_tokens=48, seed=0), progress=False))
    assert report.written == 2
    frame = judgement_store(tmp_path).to_frame()
    assert set(frame["status"]) <= {"ok", "unparsed"}
    ok = frame[frame["status"] == "ok"]
    assert ok["score"].between(1, 5).all()
    assert (frame["scale"].map(tuple) == (1, 5)).all()
    with pytest.raises(KeyError, match="zzz"):
        judge_pairs(tiny_corpus, aspects, smollm, tmp_path, pairs=[("a", "zzz")], judge=JudgeConfig(progress=False))


def test_examples_html_escapes_paper_text(tmp_path):
    corpus = Corpus(pd.DataFrame({"doc_id": ["x"], "title": ["<b>T</b>"],
                                  "abstract": ["An abstract with <script>alert(1)</script> inside."]}))
    frame = pd.DataFrame([{"doc_id": "x", "aspect": "challenge", "status": "ok", "text": "<img src=x>", "raw": ""}])
    html = summary_examples_html(corpus, frame)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img" not in html and "&lt;b&gt;T&lt;/b&gt;" in html
