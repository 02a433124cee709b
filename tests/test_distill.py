"""Stage 03: targets, masked distillation, checkpoints, the embedding cache and notebook 03.

The teachers are untrained aspect models (MiniLM with a fresh 16-dim head, as stage 02
would save them): enough for the mechanics, and cheap. Everything is tiny, because the
suite runs on two shared CPU cores.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from workbench.embed import distill
from workbench.embed.distill import DistillCollate, DistillConfig, distill_loss, evaluate_distill, train_unified_baseline, train_unified_model
from workbench.embed.targets import MissingTeachersError, check_teachers, compute_targets, load_targets
from workbench.measures.evaluation import aspect_space_correlations
from workbench.embed.embeddings import embed_corpus
from workbench.embed.encoders import AspectEncoder, CheckpointError
from workbench.embed.training import stack_targets
from workbench.core.rundir import RunDir

ASPECTS = ["challenge", "approach", "outcome"]
DIM = 16


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """An aspect_models folder as stage 02 leaves it: one single-head model per aspect."""
    root = tmp_path_factory.mktemp("teachers") / "aspect_models"
    for i, aspect in enumerate(ASPECTS):
        torch.manual_seed(i)
        AspectEncoder.from_base("minilm", [aspect], dim=DIM, max_length=32, device="cpu").save_pretrained(root / aspect)
    return root


def _run_dir(tmp_path: Path, teachers: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (RunDir(run).aspect_models).symlink_to(teachers, target_is_directory=True)
    return run


@pytest.fixture(scope="module")
def aclsum_small():
    """20 train + 6 validation ACLSum papers, with at most two human views per aspect (small and fast)."""
    from workbench.data.corpus import load_corpus
    from workbench.generate.views import collect_views

    corpus = load_corpus("aclsum:train,validation")
    train = [d for d, s in zip(corpus.ids, corpus.docs["split"]) if s == "train"][:20]
    val = [d for d, s in zip(corpus.ids, corpus.docs["split"]) if s == "validation"][:6]
    corpus = corpus.subset(ids=train + val)
    views = {a: {d: v[:2] for d, v in av.views.items()} for a, av in collect_views(ASPECTS, None, corpus).items()}
    # One paper without any challenge view: it must train the other heads only.
    views["challenge"].pop(train[0])
    return corpus, views, train, val


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, teachers, aclsum_small):
    """A tiny distillation on the ACLSum papers, shared by the tests that need a trained checkpoint."""
    corpus, views, train, val = aclsum_small
    run = _run_dir(tmp_path_factory.mktemp("distill"), teachers)
    targets = compute_targets(run, views, ASPECTS, progress=False)
    config = DistillConfig(max_length=32, batch_size=4, max_steps=8, eval_every=4, patience=5, device="cpu",
                           mode="finetune")
    result = train_unified_model(corpus, targets, (train, val), RunDir(run).unified_model, config, progress=False)
    return run, targets, result


# --------------------------------------------------------------------------- targets


@pytest.mark.slow
def test_targets_are_the_mean_of_unit_teacher_embeddings(tmp_path, teachers, monkeypatch):
    run = _run_dir(tmp_path, teachers)
    views = {
        "challenge": {"d1": ["Parsers fail on long sentences.", "Long inputs hurt parsing."],
                      "d2": ["Data is scarce."]},
        "outcome": {"d1": ["Accuracy rises by a lot."],
                    "d3": ["Results improve.", "Fewer errors.", "Faster training."]},
    }
    targets = compute_targets(run, views, ["challenge", "outcome"], progress=False)
    assert set(targets["challenge"]) == {"d1", "d2"} and set(targets["outcome"]) == {"d1", "d3"}
    for aspect, docs in views.items():
        teacher = AspectEncoder.from_pretrained(teachers / aspect, device="cpu")
        for doc_id, texts in docs.items():
            # Independent recomputation: one text at a time, raw head output, normalised by hand.
            raw = np.stack([teacher.encode([t], normalize=False)[aspect][0] for t in texts])
            expected = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).mean(axis=0)
            np.testing.assert_allclose(targets[aspect][doc_id], expected, atol=1e-5)
    index = json.loads((run / "targets.json").read_text())
    assert index["aspects"]["outcome"]["doc_ids"] == ["d1", "d3"] and (run / "targets.safetensors").is_file()
    assert not list(run.glob("*.pkl")) and not list(run.glob("*.pt"))

    # A re-run loads the cache: no teacher is loaded at all.
    def no_model(*args, **kwargs):
        raise AssertionError("a teacher was loaded although the targets are cached")

    monkeypatch.setattr(distill.AspectEncoder, "from_pretrained", no_model)
    again = compute_targets(run, views, ["challenge", "outcome"], progress=False)
    np.testing.assert_array_equal(again["outcome"]["d3"], targets["outcome"]["d3"])
    np.testing.assert_array_equal(load_targets(run)["challenge"]["d1"], targets["challenge"]["d1"])
    # Changed views are recomputed (so here the guard fires).
    views["outcome"]["d3"] = ["Something else entirely."]
    with pytest.raises(AssertionError, match="a teacher was loaded"):
        compute_targets(run, views, ["challenge", "outcome"], progress=False)


@pytest.mark.slow
def test_missing_teachers_and_mismatched_sizes_fail_clearly(tmp_path, teachers):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(MissingTeachersError, match="02_train") as err:
        compute_targets(run, {"challenge": {"d": ["x"]}}, progress=False)
    assert str(RunDir(run).aspect_models) in str(err.value)
    (RunDir(run).aspect_models).mkdir()
    (RunDir(run).aspect_model("challenge")).symlink_to(teachers / "challenge", target_is_directory=True)
    with pytest.raises(MissingTeachersError, match=r"no aspect model for \['outcome'\].*02_train"):
        check_teachers(run, ["challenge", "outcome"])
    # A teacher of another size: caught from its config alone, before any model is loaded.
    odd = RunDir(run).aspect_model("outcome")
    odd.mkdir()
    config = json.loads((teachers / "outcome" / "workbench_config.json").read_text())
    (odd / "workbench_config.json").write_text(json.dumps({**config, "dim": 8}))
    with pytest.raises(ValueError, match="different embedding sizes.*'outcome': 8"):
        check_teachers(run, ["challenge", "outcome"])


# --------------------------------------------------------------------------- masking


def _head_grads(model, collate, doc_ids):
    model.zero_grad(set_to_none=True)
    loss, _ = distill_loss(model, collate(doc_ids))
    loss.backward()
    return {a: None if h.weight.grad is None else h.weight.grad.clone() for a, h in model.heads.items()}


def test_masked_documents_and_absent_aspects_give_no_gradient():
    torch.manual_seed(0)
    model = AspectEncoder.from_base("minilm", ["x", "y"], dim=8, max_length=24, head_std=0.01, device="cpu").eval()
    rng = np.random.default_rng(0)
    texts = {"d1": "We parse sentences.", "d2": "We translate noisy text into English.", "d3": "A corpus."}
    targets = {"x": {"d1": rng.normal(size=8).astype(np.float32)},
               "y": {d: rng.normal(size=8).astype(np.float32) for d in ("d1", "d2", "d3")}}
    collate = DistillCollate(model.tokenizer, 24, texts, targets, 8)

    alone = _head_grads(model, collate, ["d1"])
    mixed = _head_grads(model, collate, ["d1", "d2"])
    # d2 has no x target: head x's gradient is d1's alone (eval mode, so rows are independent;
    # padding d1 to d2's length changes only float rounding).
    assert (mixed["x"] - alone["x"]).norm() < 1e-4 * alone["x"].norm()
    assert not torch.allclose(mixed["y"], alone["y"])  # whereas d2 does move head y
    # Whatever sits in a masked row's target slot never reaches the loss.
    batch = collate(["d1", "d2"])
    batch["target"]["x"][1] = 1e6
    model.zero_grad(set_to_none=True)
    distill_loss(model, batch)[0].backward()
    torch.testing.assert_close(model.heads["x"].weight.grad, mixed["x"])
    # A batch with no x target at all: head x gets no gradient (None, so AdamW skips it).
    only_y = _head_grads(model, collate, ["d2", "d3"])
    assert only_y["x"] is None and only_y["y"] is not None and only_y["y"].abs().sum() > 0


# --------------------------------------------------------------------------- training and checkpoints


@pytest.mark.slow
def test_tiny_distillation_learns_the_held_out_targets(distilled):
    run, targets, result = distilled
    history = result.history
    evals = history["eval"]
    assert [e["step"] for e in evals] == [0, 4, 8] and result.steps == 8
    # The validation MSE to the held-out papers' targets falls well below the untrained heads'
    # (with untrained teachers the ranks among near-identical targets stay close to chance).
    assert min(e["loss"] for e in evals[1:]) < 0.5 * evals[0]["loss"]
    losses = [r["loss"] for r in history["train"]]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    # The paper with no challenge target trained the other heads only, and every aspect was validated.
    assert set(evals[0]["aspects"]) == set(ASPECTS) and all(m["n"] == 6 for m in evals[0]["aspects"].values())
    record = json.loads((result.out_dir / "distill_config.json").read_text())
    assert record["seed"] == 0 and record["n_train"] == 20 and record["n_val"] == 6
    assert record["config"]["lr"] == 1e-4 and record["docs_per_aspect"]["challenge"]["train"] == 19
    assert json.loads((result.out_dir / "history.json").read_text())["eval"][-1]["step"] == 8
    assert DistillConfig.from_dict(record["config"]) == result.config
    with pytest.raises(ValueError, match="unknown DistillConfig field"):
        DistillConfig.from_dict({**record["config"], "learning_rate": 1e-3})


@pytest.mark.slow
def test_checkpoint_round_trip(distilled, aclsum_small):
    run, targets, result = distilled
    corpus, _, _, val = aclsum_small
    model = AspectEncoder.from_pretrained(result.out_dir, device="cpu")
    assert model.aspects == ASPECTS and model.dim == DIM and model.extra["step"] == result.best_step
    # The saved checkpoint reproduces the validation of the step it was kept at, exactly.
    dense, masks = stack_targets(targets, val, DIM)
    texts = [corpus[d]["abstract"] for d in val]
    again = evaluate_distill(model, texts, dense, masks)
    assert again["mean_rank"] == pytest.approx(result.best["mean_rank"])
    assert again["loss"] == pytest.approx(result.best["loss"], rel=1e-4)
    # A second save/load gives identical embeddings.
    model.save_pretrained(run / "copy")
    first = model.encode(texts[:3])
    second = AspectEncoder.from_pretrained(run / "copy", device="cpu").encode(texts[:3])
    for aspect in ASPECTS:
        np.testing.assert_array_equal(first[aspect], second[aspect])
    with pytest.raises(CheckpointError, match="method"):
        AspectEncoder.from_pretrained(result.out_dir, aspects=["challenge", "method"])


@pytest.mark.slow
def test_embed_cache_hit_and_miss(distilled, aclsum_small, monkeypatch):
    run, _, result = distilled
    corpus = aclsum_small[0].subset(ids=aclsum_small[3][:4])
    first = embed_corpus(result.out_dir, corpus, run, progress=False)
    assert set(first) == set(ASPECTS) and first["outcome"].shape == (4, DIM)
    np.testing.assert_allclose(np.linalg.norm(first["approach"], axis=1), 1.0, rtol=1e-5)
    assert len(list((run / "embeddings").glob("*.safetensors"))) == 1
    records = RunDir(run).cache_records()  # each file recorded as written: `workbench runs --clean` may delete it
    assert all(p.stat().st_size in records[f"embeddings/{p.name}"] for p in (run / "embeddings").iterdir())

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded: cache miss")

    monkeypatch.setattr(distill.AspectEncoder, "from_pretrained", no_model)
    second = embed_corpus(result.out_dir, corpus, run, progress=False)  # hit: the guard never fires
    for aspect in ASPECTS:
        np.testing.assert_array_equal(second[aspect], first[aspect])
    changed = corpus.subset(ids=corpus.ids)
    changed.docs.loc[0, "abstract"] = changed.docs.loc[0, "abstract"] + " One more sentence."
    with pytest.raises(AssertionError, match="cache miss"):
        embed_corpus(result.out_dir, changed, run, progress=False)


@pytest.mark.slow
def test_unified_baseline_trains_every_head(tmp_path, aclsum_small):
    corpus, views, train, val = aclsum_small
    config = DistillConfig(max_length=32, batch_size=3, max_steps=2, eval_every=2, dim=DIM, device="cpu")
    result = train_unified_baseline(views, corpus, (train, val), tmp_path / "baseline", config, progress=False)
    assert result.kind == "unified-baseline" and [e["step"] for e in result.history["eval"]] == [0, 2]
    assert set(result.history["train"][0]["aspects"]) == set(ASPECTS)
    assert all(np.isfinite(r["loss"]) and r["loss"] > 0 for r in result.history["train"])
    assert result.load(device="cpu").aspects == ASPECTS


def test_aspect_space_correlations():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 8))
    frame = aspect_space_correlations({"a": a, "same": a * 3.0, "other": rng.normal(size=(30, 8))})
    np.testing.assert_allclose(np.diag(frame), 1.0)
    assert frame.loc["a", "same"] == pytest.approx(1.0) and abs(frame.loc["a", "other"]) < 0.3
    # Brute force for one pair: Spearman per document over the other documents, averaged.
    b = rng.normal(size=(30, 8))
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    sa, sb = unit(a) @ unit(a).T, unit(b) @ unit(b).T
    expected = np.mean([spearmanr(np.delete(sa[i], i), np.delete(sb[i], i))[0] for i in range(30)])
    assert aspect_space_correlations({"a": a, "b": b}).loc["a", "b"] == pytest.approx(expected, abs=1e-10)


# --------------------------------------------------------------------------- notebook


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_distill_notebook_runs_through_papermill(tmp_path, teachers, notebook_kernel):
    from workbench.run.runner import ExecutionOptions, run_pipeline

    run = _run_dir(tmp_path, teachers)
    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump({"report_dir": str(tmp_path / "reports"), "parameters": {
        "corpus": "aclsum:train,validation", "subset": 10, "subset_seed": 1, "max_length": 32, "batch_size": 4,
        "max_steps": 2, "eval_every": 1, "embed_batch_size": 16, "mode": "finetune"}}))  # teachers are fine-tuned
    run_pipeline(params, run_dir=str(run), stages=["03_distill"], log=lambda *a: None,
                 execution=ExecutionOptions(kernel=notebook_kernel))
    assert (RunDir(run).unified_model / "model.safetensors").is_file()
    assert (RunDir(run).unified_model / "history.json").is_file() and (run / "targets.safetensors").is_file()
    cached = list((run / "embeddings").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["n_docs"] == 10
    html = (tmp_path / "reports" / "03_distill.html").read_text()
    assert "data:image/png" in html and "mean off-diagonal correlation" in html


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_distill_notebook_without_aspect_models_says_run_02(tmp_path, notebook_kernel):
    from workbench.run.runner import ExecutionOptions, run_pipeline

    with pytest.raises(RuntimeError) as err:
        run_pipeline(None, run_dir=str(tmp_path / "run"), stages=["03_distill"], report=False, log=lambda *a: None,
                     execution=ExecutionOptions(kernel=notebook_kernel))
    assert "aspect_models does not exist" in str(err.value) and "02_train" in str(err.value)


@pytest.mark.slow
def test_distill_curves_put_the_validation_mse_on_its_own_axis():
    import matplotlib

    matplotlib.use("Agg")
    from workbench.core.display import plot_distill_curves

    evals = [{"step": s, "loss": 0.002 - s * 1e-5, "mrr": 0.9, "train_loss": 4.0 - s / 100,
              "aspects": {"a": {"mrr": 0.9}}, "best": s == 20} for s in (0, 10, 20)]
    fig = plot_distill_curves({"train": [{"step": s, "loss": 4.0 - s / 100} for s in range(1, 21)], "eval": evals})
    left, right = fig.axes[0], fig.axes[-1]
    assert right.get_ylabel() == "validation MSE" and left.get_ylabel() == "training loss"
    assert right.get_ylim()[1] < 0.01 < left.get_ylim()[1]  # a scale of its own, not flat at zero beside 4.0
