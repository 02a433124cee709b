"""Losses, retrieval metrics and the AspectEncoder (with the packaged minilm), checked against independent references."""

import json
import math
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workbench.embed.encoders import AspectEncoder, CheckpointError
from workbench.embed.losses import info_nce, masked_mse
from workbench.measures.metrics import mean_rank, mrr, retrieval_ranks, retrieval_report

# ---------------------------------------------------------------- info_nce


def _mnrl(**kwargs):
    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.losses import MultipleNegativesRankingLoss
    return MultipleNegativesRankingLoss(model=None, **kwargs)


def _pair(b=6, d=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g, dtype=dtype), torch.randn(b, d, generator=g, dtype=dtype)


def test_info_nce_equals_sentence_transformers_mnrl():
    from sentence_transformers.util import cos_sim

    a, b = _pair()
    ours = info_nce(a, b, temperature=1 / 20)
    # sentence-transformers' own loss code (scale 20 = temperature 0.05), and its cos_sim + cross-entropy.
    assert torch.allclose(ours, _mnrl(scale=20.0).compute_loss_from_embeddings([a, b], None), atol=1e-5)
    assert torch.allclose(ours, F.cross_entropy(cos_sim(a, b) * 20, torch.arange(6)), atol=1e-5)
    both = _mnrl(scale=20.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    assert torch.allclose(info_nce(a, b, 1 / 20, symmetric=True), both.compute_loss_from_embeddings([a, b], None), atol=1e-5)
    assert not torch.allclose(info_nce(a, b, 1 / 20, symmetric=True), ours)


def test_info_nce_equals_python_loop():
    a, b = _pair(b=4, d=5, seed=1)
    t = 0.07

    def cos(x, y):
        return sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))

    rows, cols = a.tolist(), b.tolist()
    fwd = bwd = 0.0
    for i in range(4):
        fwd -= cos(rows[i], cols[i]) / t - math.log(sum(math.exp(cos(rows[i], cols[j]) / t) for j in range(4)))
        bwd -= cos(rows[i], cols[i]) / t - math.log(sum(math.exp(cos(rows[j], cols[i]) / t) for j in range(4)))
    assert info_nce(a, b, t).item() == pytest.approx(fwd / 4, rel=1e-5)
    assert info_nce(a, b, t, symmetric=True).item() == pytest.approx((fwd + bwd) / 8, rel=1e-5)
    # Matching pairs give a lower loss than the same vectors mismatched.
    assert info_nce(a, a + 0.01 * b, t) < info_nce(a, a.flip(0), t)
    with pytest.raises(ValueError, match="same shape"):
        info_nce(a, b[:3])


def test_info_nce_gradcheck():
    a, b = _pair(b=3, d=4, seed=2, dtype=torch.float64)
    a.requires_grad_(True)
    b.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, y: info_nce(x, y, 0.5), (a, b))
    assert torch.autograd.gradcheck(lambda x, y: info_nce(x, y, 0.5, symmetric=True), (a, b))


# ---------------------------------------------------------------- masked_mse


def test_masked_mse_hand_computation():
    pred = {"x": torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]]), "y": torch.tensor([[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]]),
            "z": torch.ones(3, 2)}
    target = {"x": torch.tensor([[0.0, 2.0], [3.0, 6.0], [9.0, 9.0]]), "y": torch.tensor([[1.0, 3.0], [2.0, 2.0], [0.0, 0.0]]),
              "z": torch.full((3, 2), float("nan"))}
    mask = {"x": torch.tensor([True, True, False]), "y": torch.tensor([True, False, True]), "z": torch.zeros(3, dtype=torch.bool)}
    loss, per = masked_mse(pred, target, mask, scale=10.0)
    mse_x = (1 + 0 + 0 + 4) / 4  # rows 0 and 1
    mse_y = (0 + 4 + 25 + 25) / 4  # rows 0 and 2
    assert set(per) == {"x", "y"}  # z has no target in this batch
    assert per["x"].item() == pytest.approx(10 * mse_x) and per["y"].item() == pytest.approx(10 * mse_y)
    assert loss.item() == pytest.approx(10 * (mse_x + mse_y) / 2)
    # mask=None: every row counts (z left out, its NaN targets would poison the loss).
    full, _ = masked_mse({"x": pred["x"]}, {"x": target["x"]})
    assert full.item() == pytest.approx(10 * (1 + 4 + 81 + 81) / 6)


def test_masked_mse_gives_exactly_zero_gradient_without_target():
    torch.manual_seed(0)
    backbone = torch.nn.Linear(4, 6)
    heads = torch.nn.ModuleDict({a: torch.nn.Linear(6, 3, bias=False) for a in ["x", "y"]})
    inputs = torch.randn(5, 4, requires_grad=True)
    hidden = backbone(inputs)
    pred = {a: head(hidden) for a, head in heads.items()}
    for p in pred.values():
        p.retain_grad()
    target = {"x": torch.randn(5, 3), "y": torch.randn(5, 3)}
    target["x"][3:] = float("nan")  # placeholders of missing targets must not leak
    mask = {"x": torch.tensor([True, True, True, False, False]), "y": torch.zeros(5, dtype=torch.bool)}
    loss, per = masked_mse(pred, target, mask)
    loss.backward()
    assert torch.isfinite(loss) and list(per) == ["x"]
    assert heads["y"].weight.grad is None or torch.all(heads["y"].weight.grad == 0)
    assert heads["x"].weight.grad.abs().sum() > 0
    assert torch.all(pred["x"].grad[3:] == 0) and torch.all(pred["x"].grad[:3].abs().sum(1) > 0)
    assert torch.all(inputs.grad[3:] == 0) and torch.all(inputs.grad[:3].abs().sum(1) > 0)
    # No target at all: a zero loss that still backpropagates (to zeros).
    none, per = masked_mse({"x": pred["x"].detach().requires_grad_()}, {"x": target["x"]}, {"x": torch.zeros(5, dtype=torch.bool)})
    assert none.item() == 0 and per == {} and none.requires_grad


# ---------------------------------------------------------------- retrieval metrics


def _brute_ranks(q, c):
    ranks = []
    for i in range(len(q)):
        sims = [float(np.dot(q[i], c[j]) / (np.linalg.norm(q[i]) * np.linalg.norm(c[j]))) for j in range(len(c))]
        ranks.append(1 + sum(s > sims[i] for s in sims))
    return np.array(ranks)


def test_retrieval_ranks_match_brute_force():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(30, 5))
    c = q + rng.normal(scale=1.5, size=(30, 5))
    c = np.concatenate([c, rng.normal(size=(7, 5))])  # extra distractors
    ranks = retrieval_ranks(q, c)
    assert np.array_equal(ranks, _brute_ranks(q, c)) and ranks.min() >= 1 and ranks.max() > 1
    assert np.array_equal(retrieval_ranks(q, c, chunk=4), ranks)  # chunking changes nothing
    assert np.array_equal(retrieval_ranks(torch.tensor(q), torch.tensor(c)), ranks)
    assert mean_rank(ranks) == pytest.approx(ranks.mean())
    assert mrr(ranks) == pytest.approx(sum(1 / r for r in ranks) / len(ranks))


def test_retrieval_ranks_ties_count_in_favour():
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # Candidate 3 points the same way as candidate 0: a tie at the top for query 0, which
    # keeps rank 1. Query 1's match (cos 0.196) is beaten by candidate 2 (cos 0.707) only.
    c = np.array([[1.0, 0.0], [1.0, 0.2], [1.0, 1.0], [2.0, 0.0]])
    ranks = retrieval_ranks(q, c)
    assert ranks.tolist() == [1, 2, 1] == _brute_ranks(q, c).tolist()
    report = retrieval_report(q, c)
    assert report == pytest.approx({"mean_rank": 4 / 3, "mrr": (1 + 1 / 2 + 1) / 3, "top1": 2 / 3, "n": 3})


# ---------------------------------------------------------------- AspectEncoder (packaged minilm)

TEXTS = ["Invasive plants alter soil nitrogen.", "Rats on islands", "A long sentence about how predators change bird nesting success.", "x"]
ASPECTS = ["hypothesis", "ecosystem"]


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return AspectEncoder.from_base("minilm", ASPECTS, dim=150, max_length=32, device="cpu")


@pytest.fixture(scope="module")
def saved(encoder, tmp_path_factory):
    return encoder.save_pretrained(tmp_path_factory.mktemp("ckpt") / "model", extra={"note": "test"})


def test_forward_gives_every_aspect_from_one_pass(encoder):
    batch = encoder.tokenize(TEXTS[:3])
    out = encoder(**batch)
    assert list(out) == ASPECTS and all(v.shape == (3, 150) for v in out.values())
    assert not torch.allclose(out["hypothesis"], out["ecosystem"])
    assert list(encoder(**batch, aspects="ecosystem")) == ["ecosystem"]
    assert encoder.pooled(**batch).shape == (3, 384)
    with pytest.raises(KeyError, match="unknown aspect"):
        encoder(**batch, aspects=["species"])


def test_encode_order_normalisation_padding_and_pooling(encoder):
    encoder.train()
    emb = encoder.encode(TEXTS, batch_size=2)
    assert encoder.training  # encode restores the training mode
    assert set(emb) == set(ASPECTS) and emb["hypothesis"].shape == (4, 150) and emb["hypothesis"].dtype == np.float32
    assert np.allclose(np.linalg.norm(emb["ecosystem"], axis=1), 1, atol=1e-5)
    rev = encoder.encode(TEXTS[::-1], batch_size=3)
    assert np.allclose(rev["hypothesis"], emb["hypothesis"][::-1], atol=1e-5)
    # One at a time (no padding) equals batched (padding masked out), for both poolings.
    alone = np.stack([encoder.encode([t], aspects="hypothesis")["hypothesis"][0] for t in TEXTS])
    assert np.allclose(alone, emb["hypothesis"], atol=1e-5)
    raw = encoder.encode(TEXTS[:2], normalize=False)["hypothesis"]
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1, atol=1e-3)
    try:
        encoder.pooling = "mean"
        mean = encoder.encode(TEXTS, batch_size=4)
        mean_alone = np.stack([encoder.encode([t])["hypothesis"][0] for t in TEXTS])
    finally:
        encoder.pooling = "cls"
    assert np.allclose(mean_alone, mean["hypothesis"], atol=1e-5)
    assert not np.allclose(mean["hypothesis"], emb["hypothesis"], atol=1e-2)
    assert encoder.encode([])["hypothesis"].shape == (0, 150)
    assert encoder.encode_pooled(TEXTS[:2]).shape == (2, 384)
    with pytest.raises(TypeError, match="list of strings"):
        encoder.encode("one text")
    with pytest.raises(TypeError, match="text 1"):
        encoder.encode(["ok", float("nan")])


def test_batches_pad_from_token_ids_like_tokenize_and_cap_long_texts(encoder):
    texts = ["short", "a somewhat longer text with more words in it than the first", "mid sized text here"] * 5
    seen = []
    for idx, batch in encoder.batches(texts, 4, max_length=16):
        ref = encoder.tokenize([texts[i] for i in idx], 16)  # the same texts through the tokenizer's own padding
        assert torch.equal(batch["input_ids"], ref["input_ids"]) and torch.equal(batch["attention_mask"], ref["attention_mask"])
        lengths = batch["attention_mask"].sum(1)
        assert list(lengths) == sorted(lengths, reverse=True)  # longest first, similar lengths together
        assert batch["input_ids"].numel() <= 4 * 64 or len(idx) == 1
        seen += idx
    assert sorted(seen) == list(range(len(texts)))
    # A batch of n texts holds at most n x 64 tokens: 4 texts of 200 tokens come one by one.
    long = [" ".join(["word"] * 200)] * 4
    assert [len(idx) for idx, _ in encoder.batches(long, 4, max_length=256)] == [1, 1, 1, 1]
    assert list(encoder.batches([], 4)) == []


@pytest.mark.slow
def test_save_and_load_round_trip(encoder, saved):
    files = {p.name for p in saved.iterdir()}
    assert {"model.safetensors", "config.json", "workbench_config.json"} <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    config = json.loads((saved / "workbench_config.json").read_text())
    assert config["format"] == "workbench-aspect-encoder" and config["version"] == 1
    assert config["aspects"] == ASPECTS and config["dim"] == 150 and config["pooling"] == "cls"
    assert config["max_length"] == 32 and config["base_model"] == "minilm" and config["extra"] == {"note": "test"}

    loaded = AspectEncoder.from_pretrained(saved, device="cpu")
    assert not loaded.training and loaded.aspects == ASPECTS
    before, after = encoder.encode(TEXTS), loaded.encode(TEXTS)
    for a in ASPECTS:
        np.testing.assert_allclose(after[a], before[a], atol=1e-6)
    only = AspectEncoder.from_pretrained(saved, device="cpu", aspects=["ecosystem"])
    assert only.aspects == ["ecosystem"]
    np.testing.assert_allclose(only.encode(TEXTS)["ecosystem"], before["ecosystem"], atol=1e-6)
    # A checkpoint as base: its backbone is reused, the heads are fresh.
    rebased = AspectEncoder.from_base(saved, ["species"], dim=8, device="cpu")
    np.testing.assert_allclose(rebased.encode_pooled(TEXTS), encoder.encode_pooled(TEXTS), atol=1e-6)


def _copy(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "copy")


@pytest.mark.slow
def test_checkpoint_errors_name_the_problem(saved, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        AspectEncoder.from_pretrained(tmp_path / "nowhere")
    from workbench.core.models import resolve_model

    with pytest.raises(CheckpointError, match="not a workbench encoder checkpoint.*from_base"):
        AspectEncoder.from_pretrained(resolve_model("minilm").path)
    with pytest.raises(CheckpointError, match=r"\['species'\].*\['hypothesis', 'ecosystem'\]"):
        AspectEncoder.from_pretrained(saved, aspects=["ecosystem", "species"])

    copy = _copy(saved, tmp_path)
    config = json.loads((copy / "workbench_config.json").read_text())
    (copy / "workbench_config.json").write_text(json.dumps({**config, "version": 99}))
    with pytest.raises(CheckpointError, match="version 99"):
        AspectEncoder.from_pretrained(copy)
    (copy / "workbench_config.json").write_text(json.dumps({**config, "aspects": ["hypothesis"]}))
    with pytest.raises(CheckpointError, match=r"unexpected keys \[heads\.ecosystem\.weight\]"):
        AspectEncoder.from_pretrained(copy, device="cpu")
    (copy / "workbench_config.json").write_text(json.dumps({**config, "dim": 64}))
    with pytest.raises(CheckpointError, match="does not match"):
        AspectEncoder.from_pretrained(copy, device="cpu")

    (copy / "workbench_config.json").write_text(json.dumps(config))
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupt or truncated"):
        AspectEncoder.from_pretrained(copy, device="cpu")
    weights.unlink()
    (copy / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(CheckpointError, match=r"no model\.safetensors.*pytorch_model\.bin"):
        AspectEncoder.from_pretrained(copy, device="cpu")
