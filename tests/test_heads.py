"""CPU-first stages 02-03: sentence splitting, the feature cache, the pooling heads and their training.

Fast: a bag-of-words stand-in for the frozen encoder (deterministic vectors per word) keeps
the transformer out; the real backbone is exercised by the slow end-to-end tests and
tests/test_synthetic_heads.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.data.corpus import Corpus
from workbench.embed.features import FeatureCache
from workbench.embed.heads import PooledAspectModel, SentencePoolingHead
from workbench.data.sentences import match_highlights, split_sentences

from stand_ins import BagOfWords
from workbench.core.rundir import RunDir


# --------------------------------------------------------------------------- sentences


def test_split_sentences_keeps_abbreviations_and_decimals():
    text = ("We follow Smith et al. (2020) and use e.g. BERT. Accuracy rose by 3.5 points (Fig. 2). "
            "The U.S. data were excluded. Results hold.")
    assert split_sentences(text) == ["We follow Smith et al. (2020) and use e.g. BERT.",
                                     "Accuracy rose by 3.5 points (Fig. 2).", "The U.S. data were excluded.",
                                     "Results hold."]
    assert split_sentences("   ") == [] and split_sentences("no full stop here") == ["no full stop here"]
    with pytest.raises(TypeError):
        split_sentences(None)


def test_match_highlights_survives_tokenisation_and_ignores_fragments():
    sentences = ["We propose models (QE) for parsing.", "Results improve by 3 points.", "Other text."]
    assert match_highlights(sentences, ["We propose models ( QE ) for parsing ."]) == [1.0, 0.0, 0.0]
    # A highlight spanning two of our sentences marks both; a tiny fragment marks nothing.
    assert match_highlights(sentences, ["Results improve by 3 points. Other text."]) == [0.0, 1.0, 1.0]
    assert match_highlights(sentences, ["3"]) == [0.0, 0.0, 0.0]


# --------------------------------------------------------------------------- feature cache


def test_cache_encodes_each_text_once_and_survives_a_restart(tmp_path):
    backbone = BagOfWords()
    cache = FeatureCache(tmp_path / "f", backbone)
    first = cache.vectors(["alpha beta", "gamma", "alpha beta"])
    assert backbone.texts == 2 and np.allclose(first[0], first[2])
    again = cache.vectors(["gamma", "alpha beta"])
    assert backbone.texts == 2 and np.allclose(again[0], first[1])

    fresh_backbone = BagOfWords()
    reopened = FeatureCache(tmp_path / "f", fresh_backbone)
    assert np.allclose(reopened.vectors(["alpha beta", "gamma"]), first[:2]) and fresh_backbone.texts == 0

    # A shard whose key file is missing was interrupted: its texts are encoded again, not trusted.
    cache.vectors(["delta"])
    newest = sorted((tmp_path / "f").glob("shard-*.json"))[-1]
    newest.unlink()
    third = BagOfWords()
    assert np.allclose(FeatureCache(tmp_path / "f", third).vectors(["delta"]), backbone.embed(["delta"]))
    assert third.texts == 1


def test_documents_and_padding():
    cache = FeatureCache(None, BagOfWords())
    docs = cache.documents(["First sentence here. Second one.", "Only one", ""])
    assert [len(s) for s in docs.sentences] == [2, 1, 0] and docs.sentence_texts[1] == ["Only one"]
    whole, sents, mask, pos = docs.padded()
    assert sents.shape == (3, 2, 48) and mask.tolist() == [[True, True], [True, False], [False, False]]
    assert pos[0, :, 0].tolist() == [0.0, 1.0] and pos[0, :, 1].tolist() == [1.0, 0.0] and pos[0, :, 2].tolist() == [0.0, 1.0]
    assert pos[1, 0].tolist() == [0.0, 1.0, 1.0]  # a lone sentence is first and last
    assert np.allclose(sents[0, 0].numpy(), cache.vectors(["First sentence here."])[0])


# --------------------------------------------------------------------------- heads


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_untrained_head_is_the_base_encoder_blend():
    """Untrained: half the whole vector, half the unit mean of the sentences; no sentences: the whole vector."""
    cache = FeatureCache(None, BagOfWords())
    docs = cache.documents(["A cat sat. A dog ran. Birds fly high.", "Single sentence only", ""])
    head = SentencePoolingHead(48)
    emb, weights, _ = head(*docs.padded())
    expected = []
    for whole, sents in zip(docs.whole, docs.sentences):
        expected.append(0.5 * whole + 0.5 * _unit(sents.mean(axis=0)) if len(sents) else whole)
    assert np.allclose(emb.detach().numpy(), np.stack(expected), atol=1e-6)
    assert np.allclose(weights[0].detach().numpy(), 1 / 3) and float(weights[2].detach().sum()) == 0.0
    ranked = SentencePoolingHead(48, rank=8)
    assert torch.allclose(ranked(*docs.padded())[0], emb)  # the residual projection starts at the identity


def test_weights_follow_the_scores():
    cache = FeatureCache(None, BagOfWords())
    docs = cache.documents(["A cat sat. A dog ran. Birds fly high."])
    head = SentencePoolingHead(48)
    with torch.no_grad():
        head.scorer.query.copy_(torch.as_tensor(cache.vectors(["A dog ran."])[0]) * 20)
    whole, sents, mask, pos = docs.padded()
    w = head(whole, sents, mask, pos)[1][0].detach().numpy()
    scores = sents[0].numpy() @ head.scorer.query.detach().numpy()
    expected = 1 / (1 + np.exp(-scores))
    assert np.allclose(w, expected / expected.sum(), atol=1e-6) and w.argmax() == 1


def test_similarity_kd_matches_a_numpy_kl():
    from workbench.embed.head_training import similarity_kd

    rng = np.random.default_rng(0)
    pred, target = rng.standard_normal((5, 6)), rng.standard_normal((5, 6))

    def softmax_rows(x):
        x = _unit(x) @ _unit(x).T / 0.1
        np.fill_diagonal(x, -np.inf)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p, q = softmax_rows(target), softmax_rows(pred)
    off = ~np.eye(5, dtype=bool)
    expected = np.sum(p[off] * (np.log(p[off]) - np.log(q[off]))) / 5
    got = similarity_kd(torch.as_tensor(pred), torch.as_tensor(target), 0.1)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    assert float(similarity_kd(torch.as_tensor(target), torch.as_tensor(target), 0.1)) == pytest.approx(0, abs=1e-9)


def test_distant_labels_mark_the_sentence_nearest_the_target():
    from workbench.embed.head_training import distant_labels

    cache = FeatureCache(None, BagOfWords())
    docs = cache.documents(["Cats purr loudly. Dogs bark at night. Fish swim.", "Alone"])
    target = cache.vectors(["dogs bark"])
    labels = distant_labels(docs, np.vstack([target, target]))
    assert labels[0].argmax() == 1 and len(labels[1]) == 0
    assert np.all((labels[0] > 0) & (labels[0] < 1))


def test_checkpoint_round_trip_and_errors(tmp_path):
    from workbench.embed.checkpoints import load_model
    from workbench.embed.encoders import CheckpointError

    model = PooledAspectModel("bag-of-words", ["challenge", "outcome"], hidden=48, rank=4)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.cache = FeatureCache(None, BagOfWords())
    texts = ["A cat sat. A dog ran.", "Single sentence only"]
    before = model.encode(texts)
    folder = model.save_pretrained(RunDir(tmp_path).unified_model, extra={"note": "x"})
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors", "workbench_config.json"]
    loaded = load_model(folder, device="cpu", run_dir=tmp_path)
    assert isinstance(loaded, PooledAspectModel) and loaded.extra["note"] == "x" and loaded.rank == 4
    loaded.cache = model.cache
    after = loaded.encode(texts)
    assert all(np.allclose(before[a], after[a], atol=1e-6) for a in model.aspects)
    assert np.allclose(np.linalg.norm(after["challenge"], axis=1), 1.0)
    only = load_model(folder, device="cpu", aspects=["outcome"])
    assert only.aspects == ["outcome"]
    with pytest.raises(CheckpointError, match="not in checkpoint"):
        load_model(folder, aspects=["method"])
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_model(folder)
    frames = model.attention(["A cat sat. A dog ran."])
    assert list(frames[0].columns) == ["sentence", "challenge", "outcome"]
    assert np.allclose(frames[0][["challenge", "outcome"]].sum().to_numpy(), 1.0)


# --------------------------------------------------------------------------- training on cached features

TOPICS = ["asthma", "diabetes", "migraine", "arthritis"]
METHODS = ["randomised trial", "cohort study", "case series", "survey"]


def _toy_corpus(n: int = 48, seed: int = 0) -> Corpus:
    """Abstracts with a disease sentence, a method sentence and filler, in random order; highlights per aspect."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        topic, method = TOPICS[rng.integers(4)], METHODS[rng.integers(4)]
        disease = f"Patients with {topic} were studied."
        design = f"We ran a {method} design."
        filler = ["This matters a great deal.", "Further work is needed."][i % 2]
        order = [disease, design, filler]
        rng.shuffle(order)
        rows.append({"doc_id": f"d{i}", "title": f"Paper {i}", "abstract": " ".join(order),
                     "split": "train" if i < n * 2 // 3 else "validation",
                     "summary_disease": f"The disease is {topic}.", "summary_method": f"The design is a {method}.",
                     "highlights_disease": [disease], "highlights_method": [design]})
    return Corpus(pd.DataFrame(rows), name="toy")


def _toy_targets(corpus, cache):
    """(each paper's summary vector as its target per aspect, the train ids, the validation ids) of a toy corpus."""
    docs = corpus.docs
    targets = {a: {d: cache.vectors([s])[0] for d, s in zip(docs["doc_id"], docs[f"summary_{a}"])}
               for a in ("disease", "method")}
    return (targets, list(docs.loc[docs["split"] == "train", "doc_id"]),
            list(docs.loc[docs["split"] == "validation", "doc_id"]))


def _train_toy(tmp_path, corpus, **overrides):
    from workbench.embed.distill import DistillConfig
    from workbench.embed.head_training import sentence_supervision, train_unified_heads

    cache = FeatureCache(tmp_path / "features", BagOfWords())
    targets, train, val = _toy_targets(corpus, cache)
    labels = sentence_supervision(corpus, ["disease", "method"])
    config = DistillConfig(mode="frozen", head_steps=60, eval_every=10, patience=20, **overrides)
    return train_unified_heads(corpus, targets, (train, val), RunDir(tmp_path).unified_model, config, cache,
                               sentence_labels=labels, progress=False), cache, labels


def test_unified_heads_learn_where_each_aspect_is_stated(tmp_path):
    corpus = _toy_corpus()
    result, cache, labels = _train_toy(tmp_path, corpus)
    assert set(labels) == {"disease", "method"} and len(labels["disease"]) == len(corpus)
    evals = result.history["eval"]
    assert evals[0]["step"] == 0 and result.best_step > 0
    for a in ("disease", "method"):
        # The kept heads agree with the teacher better than the untrained heads and than the whole abstract.
        assert result.best["aspects"][a]["agreement"] > result.baseline["aspects"][a]["agreement"] + 0.05
        assert result.best["aspects"][a]["agreement"] > result.reference["aspects"][a]["agreement"] + 0.05
    model = result.load(device="cpu")
    model.cache = cache
    frames = model.attention(["We ran a survey design. Patients with migraine were studied. This matters a great deal."])
    weights = frames[0].set_index("sentence")
    assert weights["method"].idxmax().startswith("We ran") and weights["disease"].idxmax().startswith("Patients")
    record = json.loads((RunDir(tmp_path).unified_model / "distill_config.json").read_text())
    assert record["mode"] == "frozen" and record["refit_on_train_and_validation"] is True
    assert record["docs_per_aspect"]["disease"]["labelled docs"] == result.n_train == 32
    # A one-sentence abstract and an empty one still get every aspect's embedding.
    out = model.encode(["Patients with asthma were studied.", ""])
    assert all(v.shape == (2, 48) and np.all(np.isfinite(v)) for v in out.values())


def test_the_refit_never_learns_the_validation_papers_sentence_labels(tmp_path):
    """Stage 03's check swaps the validation papers' marked sentences: the refit heads must not have learnt them.
    Scrambling those papers' labels leaves the saved heads as they were; scrambling a training paper's does not.
    (Nor do distant labels stand in for the withheld ones: a validation paper teaches through its target alone.)"""
    from workbench.embed.distill import DistillConfig
    from workbench.embed.head_training import sentence_supervision, train_unified_heads

    corpus = _toy_corpus()
    cache = FeatureCache(None, BagOfWords())
    targets, train, val = _toy_targets(corpus, cache)
    labels = sentence_supervision(corpus, ["disease", "method"])

    def heads(labelled, name):
        config = DistillConfig(mode="frozen", head_steps=30, eval_every=10, patience=20)
        result = train_unified_heads(corpus, targets, (train, val), tmp_path / name, config, cache,
                                     sentence_labels=labelled, progress=False)
        assert result.best_step > 0  # the refit ran
        return result.load(device="cpu").state_dict()

    def scrambled(ids):  # every marked sentence of these papers moved to the next sentence
        return {a: {d: (list(np.roll(lab, 1)) if d in ids else lab) for d, lab in per.items()}
                for a, per in labels.items()}

    plain = heads(labels, "plain")
    record = json.loads((tmp_path / "plain" / "distill_config.json").read_text())
    refit = record["refit_docs_per_aspect"]["disease"]
    assert refit == {"with target": len(train) + len(val), "labelled docs": len(train), "distant-labelled docs": 0}
    same = heads(scrambled(set(val)), "validation")
    other = heads(scrambled(set(train[:8])), "train")
    assert all(torch.equal(plain[k], same[k]) for k in plain)
    assert any(not torch.equal(plain[k], other[k]) for k in plain)


def test_targets_alone_teach_the_heads_through_distant_labels(tmp_path):
    """No sentence labels at all (a user's corpus with LLM summaries only): the targets still teach the heads."""
    from workbench.embed.distill import DistillConfig
    from workbench.embed.head_training import train_unified_heads

    corpus = _toy_corpus(seed=1)
    cache = FeatureCache(None, BagOfWords())
    targets, train, val = _toy_targets(corpus, cache)
    result = train_unified_heads(corpus, targets, (train, val), tmp_path / "u",
                                 DistillConfig(mode="frozen", head_steps=60, eval_every=10, patience=20), cache,
                                 progress=False)
    for a in ("disease", "method"):
        assert result.best["aspects"][a]["agreement"] > result.reference["aspects"][a]["agreement"] + 0.05


def test_test_split_highlights_never_become_labels():
    from workbench.embed.head_training import human_sentence_labels

    corpus = _toy_corpus(n=12)
    corpus.docs.loc[corpus.docs.index[:4], "split"] = "test"
    labels = human_sentence_labels(corpus, ["disease"])
    assert set(labels["disease"]) == set(corpus.docs["doc_id"][4:])


def test_an_aspect_without_any_supervision_is_named_with_why():
    """Stage 02 trains no model of it (`train_aspect_models` says so and records it; stage 03 gives it the floor)."""
    from workbench.embed.aspect_training import prepare_views
    from workbench.embed.untaught import without_supervision

    corpus = _toy_corpus(n=12)
    views, _, _ = prepare_views(["disease", "population"], None, corpus, val_split="validation")
    reasons = without_supervision(views, ["disease", "population"], corpus)
    assert list(reasons) == ["population"]
    assert reasons["population"].startswith("stage 01 wrote no answer of it; the corpus has no human summary")


def test_view_head_keeps_step_zero_unless_validation_improves(tmp_path):
    from workbench.embed.head_training import train_view_head
    from workbench.embed.aspect_training import TrainConfig, prepare_views

    corpus = _toy_corpus()
    views, train_ids, val_ids = prepare_views(["disease"], None, corpus, val_split="validation")
    cache = FeatureCache(tmp_path / "features", BagOfWords())
    config = TrainConfig(mode="frozen", head_steps=20, eval_every=5, batch_size=8, head_rank=4)
    result = train_view_head(views["disease"], train_ids, val_ids, tmp_path / "disease", config, cache,
                             progress=False)
    assert [h["step"] for h in result.history][:2] == [0, 5]
    assert result.best_mrr == max(h["val_mrr"] for h in result.history) >= result.baseline["val_mrr"]
    saved = json.loads((tmp_path / "disease" / "train_config.json").read_text())
    assert saved["status"] == "finished" and saved["mode"] == "frozen"
    loaded = PooledAspectModel.from_pretrained(tmp_path / "disease", device="cpu")
    assert loaded.extra["step"] == result.best_step and not loaded.pool
