"""The retrieval decoder (stage 04's CPU-first default): nearest statements, exclusion, rewrite, storage, LM scores.

Fast tests use a stand-in aspect model that maps known texts to fixed vectors, so the
retrieval logic is checked against brute force; the slow test scores perplexity with the
packaged SmolLM2 against an independent log-softmax computation.
"""

import json

import numpy as np
import pandas as pd
import pytest

from workbench.decode.retrieval import (FORMAT, MEMORY_NAME, RetrievalDecoder, StatementMemory,
                                         load_retrieval_decoders, save_memories)

D = 16


class TableEncoder:
    """An aspect model stand-in: each text has a fixed vector (unknown texts get a fixed random one)."""

    def __init__(self, table: dict[str, np.ndarray], aspect: str = "method"):
        self.table = table
        self.aspects = [aspect]
        self.dim = D

    def encode(self, texts, aspects=None, **_):
        rng = np.random.default_rng(123)
        rows = [self.table.get(t, rng.standard_normal(D)) for t in texts]
        rows = np.asarray(rows, dtype=np.float32)
        return {self.aspects[0]: rows / np.linalg.norm(rows, axis=1, keepdims=True)}


@pytest.fixture
def memory():
    rng = np.random.default_rng(0)
    texts = [f"statement {i}" for i in range(30)]
    vectors = rng.standard_normal((30, D)).astype(np.float32)
    docs = [f"p{i // 3}" for i in range(30)]  # three statements per paper
    return StatementMemory("method", texts, docs, ["human"] * 30, vectors)


def test_nearest_matches_brute_force_and_exclusion(memory):
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((5, D))
    idx, cos = memory.nearest(queries, k=4, exclude=[None, "p0", ["p1", "p2"], None, None])
    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    sims = unit_q @ memory.vectors.T
    for row, skip in enumerate([[], ["p0"], ["p1", "p2"], [], []]):
        allowed = [j for j in range(30) if memory.doc_ids[j] not in skip]
        expected = sorted(allowed, key=lambda j: -sims[row, j])[:4]
        assert list(idx[row]) == expected
        np.testing.assert_allclose(cos[row], sims[row, expected], rtol=1e-5)
        assert not set(memory.doc_ids[j] for j in idx[row]) & set(skip)


def test_decode_returns_the_statement_that_points_back_and_names_its_paper(memory):
    encoder = TableEncoder(dict(zip(memory.texts, memory.vectors)))
    decoder = RetrievalDecoder(memory, encoder, lm=None)
    target = memory.vectors[7] + 0.05 * np.random.default_rng(2).standard_normal(D)
    found = decoder.decode(target)[0]
    assert found["text"] == "statement 7" and found["doc_id"] == "p2" and found["source"] == "human"
    # Its cosine is the round trip: the text embedded again, against the target.
    again = encoder.encode([found["text"]])["method"][0]
    assert found["cosine"] == pytest.approx(float(again @ (target / np.linalg.norm(target))), abs=1e-5)
    # The paper being decoded may not speak for itself: another paper's statement comes back.
    hidden = decoder.decode(target, exclude=["p2"])[0]
    assert hidden["doc_id"] != "p2"
    assert decoder.describe(np.stack([target, target])) == [["statement 7"], ["statement 7"]]


def test_rewrite_is_kept_only_where_it_lands_nearer(memory, monkeypatch):
    target = memory.vectors[4] + 0.8 * memory.vectors[5]
    table = dict(zip(memory.texts, memory.vectors))
    table["a fused sentence"] = target  # lands exactly on the target
    table["a generic sentence"] = -target  # lands far away
    decoder = RetrievalDecoder(memory, TableEncoder(table), lm=None)
    monkeypatch.setattr(decoder, "_generate", lambda contexts, n: ["a fused sentence"] * len(contexts))
    best = decoder.decode(target, rewrite=True)[0]
    assert best["text"] == "a fused sentence" and best["rewritten"] and best["doc_id"] is None
    monkeypatch.setattr(decoder, "_generate", lambda contexts, n: ["a generic sentence"] * len(contexts))
    kept = decoder.decode(target, rewrite=True)[0]
    assert not kept["rewritten"] and kept["text"] in {"statement 4", "statement 5"}


def test_bad_memories_and_folders_are_named(memory, tmp_path):
    from workbench.embed.encoders import CheckpointError

    with pytest.raises(ValueError, match="3 texts, 2 doc ids"):
        StatementMemory("method", ["a", "b", "c"], ["p", "q"], ["x"] * 3, np.zeros((3, D)))
    empty = StatementMemory("method", [], [], [], np.zeros((0, D)))
    with pytest.raises(ValueError, match="holds no statement"):
        empty.nearest(np.ones(D), 3)
    with pytest.raises(FileNotFoundError, match="run stage 04"):
        load_retrieval_decoders(tmp_path / "nothing")
    folder = tmp_path / "run" / "decoders" / "retrieval"
    save_memories(folder, {"method": memory}, {"lm": "x", "k": 5, "context": 2})
    meta = json.loads((folder / MEMORY_NAME).read_text())
    assert meta["format"] == FORMAT
    with pytest.raises(FileNotFoundError, match="no memory for"):
        load_retrieval_decoders(folder, ["task"])
    (folder / MEMORY_NAME).write_text(json.dumps({**meta, "format": "something else"}))
    with pytest.raises(CheckpointError, match="not a retrieval decoder"):
        load_retrieval_decoders(folder)


def test_saved_memory_loads_back_identically(memory, tmp_path):
    folder = tmp_path / "run" / "decoders" / "retrieval"
    save_memories(folder, {"method": memory}, {"lm": "smollm2-135m-instruct", "k": 5, "context": 2})
    assert not list(tmp_path.rglob("*.pkl"))  # safetensors + JSON only
    loaded = load_retrieval_decoders(folder)["method"]
    assert loaded.memory.texts == memory.texts and loaded.memory.doc_ids == memory.doc_ids
    np.testing.assert_allclose(loaded.memory.vectors, memory.vectors, rtol=1e-6)
    assert (loaded.k, loaded.context) == (5, 2)
    q = np.random.default_rng(3).standard_normal((3, D))
    np.testing.assert_array_equal(loaded.memory.nearest(q, 5)[0], memory.nearest(q, 5)[0])


def test_describe_with_confidence_names_the_source_paper(memory):
    from workbench.decode.faithfulness import describe_with_confidence

    encoder = TableEncoder(dict(zip(memory.texts, memory.vectors)))
    decoder = RetrievalDecoder(memory, encoder, lm=None)
    table = describe_with_confidence({"method": decoder}, {"method": memory.vectors[10]}, {"method": encoder},
                                     {"method": memory.vectors}, exclude="p9")
    row = table.iloc[0]
    assert row["from paper"] != "p9" and isinstance(row["decoded"], str)
    assert row["round-trip rank"] >= 1 and "confidence" in row["confidence"]
    plain = describe_with_confidence({"method": decoder}, {"method": memory.vectors[10]})
    assert plain.iloc[0]["decoded"] == "statement 10" and plain.iloc[0]["from paper"] == "p3"


def test_decoding_report_keeps_each_paper_out_of_its_own_decoding(memory):
    from workbench.decode.faithfulness import FaithfulnessConfig, RoundTrip, decoding_report

    encoder = TableEncoder(dict(zip(memory.texts, memory.vectors)))
    decoder = RetrievalDecoder(memory, encoder, lm=None)
    decoder.perplexities = lambda requests, batch_size=8: {name: 10.0 for name in requests}  # the LM is not under test
    papers = ["p0", "p1", "p2", "p3"]
    emb = memory.vectors[[0, 3, 6, 9]]
    refs = [[memory.texts[i]] for i in (0, 3, 6, 9)]
    metrics, examples = decoding_report(decoder, emb, refs, RoundTrip(encoder), names=papers, exclude=papers,
                                        config=FaithfulnessConfig(bertscore_model="minilm", perplexity_docs=2))
    assert not set(examples["decoded"]) & {t for r in refs for t in r}  # never its own statement
    assert metrics["perplexity documents"] == 2 and metrics["documents"] == 4
    # each decoding names the paper it is taken from (never the paper itself), and Figure 3 shows it by title
    assert all(src != own for src, own in zip(examples["from paper"], papers))
    known = set(zip(memory.texts, memory.doc_ids))
    assert all((t, src) in known for t, src in zip(examples["decoded"], examples["from paper"]))
    from workbench.decode.faithfulness import figure3_table

    table = figure3_table({"a": examples}, titles={d: f"Title of {d}" for d in memory.doc_ids}, n=4)
    assert table["taken from"].str.startswith("Title of p").all()
    open_book, _ = decoding_report(decoder, emb, refs, RoundTrip(encoder),
                                   config=FaithfulnessConfig(bertscore_model="minilm"))
    assert open_book["round-trip MRR"] == pytest.approx(1.0)  # with its own statements it points straight back


@pytest.mark.slow
def test_perplexity_against_an_independent_log_softmax_and_the_controls():
    import torch

    from workbench.core.models import load_causal_lm

    lm = load_causal_lm("smollm2-135m-instruct", device="cpu")
    texts = ["We parse sentences with a graph-based dependency parser.",
             "We translate noisy user text with synthetic noise.",
             "We summarise news articles with an entailment filter."]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3, D)).astype(np.float32)
    memory = StatementMemory("method", [t.replace("We", "The paper") for t in texts], ["a", "b", "c"],
                             ["llm"] * 3, vectors)
    decoder = RetrievalDecoder(memory, None, lm=lm, context=1)
    # Independent: the whole sequence through the LM, log-softmax over every position, target tokens only.
    model, tok = lm
    prompt = tok(decoder._prompt([memory.texts[0]]), add_special_tokens=False)["input_ids"]
    target = tok(texts[0], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + target])).logits[0].float(), -1)
    nll = -sum(float(logp[len(prompt) + i - 1, t]) for i, t in enumerate(target))
    assert decoder.perplexity(vectors[:1], texts[:1]) == pytest.approx(np.exp(nll / len(target)), rel=1e-3)
    # Batched with padding gives the same token-weighted mean as one at a time.
    one_by_one = [decoder.perplexity(vectors[i:i + 1], texts[i:i + 1]) for i in range(3)]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts]
    pooled = np.exp(sum(np.log(p) * n for p, n in zip(one_by_one, lengths)) / sum(lengths))
    assert decoder.perplexity(vectors, texts, batch_size=2) == pytest.approx(pooled, rel=1e-3)
    # Reading the matching statement beats reading another paper's, and beats reading none.
    matching = decoder.perplexity(vectors, texts)
    assert matching < decoder.perplexity(vectors[[1, 2, 0]], texts)
    assert matching < decoder.perplexity(None, texts)
    # Several requests at once (each prompt read once for all) give what each gives alone.
    together = decoder.perplexities({"matching": (vectors, texts, None), "shuffled": (vectors[[1, 2, 0]], texts, None),
                                     "none": (None, texts, None)})
    assert together["matching"] == pytest.approx(matching, rel=1e-4)
    assert together["none"] == pytest.approx(decoder.perplexity(None, texts), rel=1e-4)
    # Prompts held once (cascade attention) score each text as reading prompt and text together does.
    prompts = [tok(decoder._prompt(c), add_special_tokens=False)["input_ids"] for c in ([memory.texts[0]], None)]
    rows = [(g, tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]) for g in (0, 1) for t in texts]
    assert np.allclose(decoder._nll_shared(prompts, rows, 8), decoder._nll_whole(prompts, rows, 2), rtol=1e-4)
    # A rewrite is a single line of text.
    fused = decoder._generate([[memory.texts[0]]], 16)
    assert len(fused) == 1 and "\n" not in fused[0]


def test_legend_escapes_paper_text_and_states_the_weights():
    from workbench.maps.mapview import label_source_data, legend_html

    labels = [(0.0, 1.0, "<script>alert(1)</script>", "from: <img src=x onerror=alert(2)>"), (2.0, 3.0, "plain")]
    html = legend_html(labels, {"method": 0.25, "task": 0.75}, ["#ff0000", "#00ff00"])
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert "method 0.25" in html and "task 0.75" in html and "#00ff00" in html
    data = label_source_data(labels)
    assert data["number"] == ["1", "2"] and data["detail"][1] == "plain"
    assert pd.Series(data["text"]).str.len().gt(0).all()


def test_both_decoder_kinds_offer_the_one_decoder_interface(memory):
    """Callers rely on `decoding.Decoder` (statements, describe, perplexities), not on sniffing for methods."""
    from workbench.decode.decoding import AspectDecoder, Decoder

    retrieval = RetrievalDecoder(memory, None, lm=None)
    assert isinstance(retrieval, Decoder) and retrieval.names_sources
    found = retrieval.statements(memory.vectors[10], exclude=[["p3"]], greedy=True)[0]
    assert found["doc_id"] != "p3" and found["text"] == retrieval.describe(memory.vectors[10], [["p3"]])[0][0]
    everything = [[d for d in set(memory.doc_ids)]]
    assert retrieval.statements(memory.vectors[10], exclude=everything)[0]["cosine"] == float("-inf")

    class Generator:  # a stand-in for the soft-prompt decoder's EmbeddingDecoder: one text per embedding
        aspects, chat = None, True

        def generate(self, emb, sampling, batch_size=16, aspect=None, progress=False):
            return [[f"text {i} ({sampling.max_new_tokens})"] for i in range(len(emb))]

    soft = AspectDecoder("method", Generator())
    assert isinstance(soft, Decoder) and not soft.names_sources
    rows = soft.statements(memory.vectors[:2], max_new_tokens=7)
    assert [r["text"] for r in rows] == ["text 0 (7)", "text 1 (7)"] and all(r["doc_id"] is None for r in rows)
