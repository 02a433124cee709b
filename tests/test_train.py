"""Stage 02: aspect model training (batches, improvement over the baseline, checkpoints, reuse, DDP, notebook)."""

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from workbench.generate.views import AspectViews, collect_views
from workbench.core.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def aclsum():
    from workbench.data.corpus import load_corpus

    return load_corpus("aclsum")


def _views_with(counts: dict[str, int]) -> AspectViews:
    views = AspectViews("x")
    for doc, n in counts.items():
        for i in range(n):
            views.add(doc, f"view {i} of {doc}", "llm")
    return views


def test_batches_hold_distinct_documents_and_two_different_views():
    from workbench.embed.aspect_training import sample_batch

    counts = {f"d{i}": (1 if i % 5 == 0 else 2 + i % 4) for i in range(40)}  # every fifth has one view only
    views = _views_with(counts)
    ids = list(counts)
    rng = random.Random(0)
    seen = set()
    for _ in range(300):
        batch = sample_batch(views, ids, 12, rng)
        docs = [d for d, _, _ in batch]
        assert len(batch) == 12 and len(set(docs)) == len(docs)
        for doc, a, b in batch:
            assert counts[doc] >= 2, "a document with one view cannot form a pair"
            assert a != b and a in views.views[doc] and b in views.views[doc]
        seen.update(docs)
    assert seen == {d for d, n in counts.items() if n >= 2}  # every usable document gets drawn eventually
    # A batch larger than the usable documents is clipped, never padded with repeats.
    small = _views_with({"a": 2, "b": 3, "c": 1})
    batch = sample_batch(small, ["a", "b", "c"], 8, random.Random(1))
    assert sorted(d for d, _, _ in batch) == ["a", "b"]
    with pytest.raises(ValueError, match="two or more views"):
        sample_batch(_views_with({"a": 2, "b": 1}), ["a", "b"], 4, random.Random(0))


def test_process_shards_are_disjoint_and_rng_streams_stay_in_step():
    from workbench.embed.aspect_training import sample_batch

    views = _views_with({f"d{i}": 3 for i in range(30)})
    ids = list(views.views)
    rngs = [random.Random(7), random.Random(7)]
    for _ in range(20):
        shards = [sample_batch(views, ids, 5, rngs[k], process_index=k, num_processes=2) for k in (0, 1)]
        docs = [[d for d, _, _ in s] for s in shards]
        assert len(docs[0]) == len(docs[1]) == 5 and not set(docs[0]) & set(docs[1])
        assert rngs[0].getstate() == rngs[1].getstate()


def test_test_split_human_views_never_reach_training(aclsum):
    from workbench.embed.aspect_training import prepare_views

    test_ids = set(aclsum.docs.loc[aclsum.docs["split"] == "test", "doc_id"])
    assert len(test_ids) == 100
    aspects = ["challenge", "approach", "outcome"]
    views = collect_views(aspects, None, aclsum, include_human=True)
    for aspect, v in views.items():
        assert v.views, aspect
        assert not test_ids & set(v.views), f"{aspect}: test documents among the views"
        # Not even the text: no test summary appears as a view of another document.
        test_summaries = set(aclsum.docs.loc[aclsum.docs["split"] == "test", f"summary_{aspect}"])
        assert not test_summaries & {t for texts in v.views.values() for t in texts}
    views, train_ids, val_ids = prepare_views(aspects, None, aclsum, val_split="validation")
    assert not test_ids & (set(train_ids) | set(val_ids))
    val_split_ids = set(aclsum.docs.loc[aclsum.docs["split"] == "validation", "doc_id"])
    assert set(val_ids) == val_split_ids and not set(train_ids) & val_split_ids


def test_summaries_of_documents_not_in_the_corpus_are_left_out(tmp_path):
    """A summary store from an older corpus file: its extra documents never reach training, and that is said."""
    import pandas as pd

    from workbench.data.corpus import Corpus
    from workbench.embed.aspect_training import prepare_views

    corpus = Corpus(pd.DataFrame({"doc_id": [f"d{i}" for i in range(6)], "title": [""] * 6,
                                  "abstract": [f"abstract {i}" for i in range(6)]}), name="mine")
    docs = corpus.ids + ["gone1", "gone2"]
    records = [{"doc_id": d, "key": "challenge", "prompt_hash": "p", "model": "m", "sample": s, "aspect": "challenge", "status": "ok",
                "text": f"summary {s} of {d}"} for d in docs for s in range(2)]
    (tmp_path / "summaries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.warns(UserWarning, match=r"4 summaries of 2 documents that are not in the corpus 'mine'.*gone1, gone2"):
        views, train_ids, val_ids = prepare_views(["challenge"], tmp_path, corpus, include_human=False)
    assert set(views["challenge"].views) == set(corpus.ids)
    assert sorted(train_ids + val_ids) == sorted(corpus.ids)


def test_config_round_trip_and_checks():
    from workbench.embed.aspect_training import TrainConfig

    config = TrainConfig(lr=3e-5, batch_size=4, device="cpu")
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert "device" not in config.comparable()
    with pytest.raises(ValueError, match="unknown"):
        TrainConfig.from_dict({"learning_rate": 1e-5})
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_improves_validation_and_keeps_the_best_checkpoint(aclsum, tmp_path):
    """ACLSum human views of "challenge": train split for training, validation split for validation."""
    from workbench.embed.encoders import AspectEncoder
    from workbench.embed.aspect_training import TrainConfig, evaluate, prepare_views, train_aspect_model

    views, train_ids, val_ids = prepare_views(["challenge"], None, aclsum, val_split="validation")
    assert len(train_ids) == 100 and len(val_ids) == 50
    config = TrainConfig(batch_size=8, lr=1e-4, max_steps=8, eval_every=4, max_length=32, seed=0, device="cpu")
    out = tmp_path / "challenge"
    result = train_aspect_model(views["challenge"], train_ids, val_ids, out, config, progress=False)

    assert [h["step"] for h in result.history] == [0, 4, 8]
    assert result.history[0]["train_loss"] is None
    assert all(np.isfinite(h["train_loss"]) for h in result.history[1:])
    assert result.best_mrr >= result.baseline["val_mrr"] + 0.01, result.history
    assert result.best_mean_rank < result.baseline["val_mean_rank"], result.history
    assert result.best_step > 0 and result.best_mrr == max(h["val_mrr"] for h in result.history)

    # What is on disk is the best checkpoint, not the last one.
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["status"] == "finished" and saved["n_train_docs"] == 100 and saved["n_val_docs"] == 50
    assert saved["params"]["lr"] == 1e-4 and saved["seed"] == 0 and saved["aspect"] == "challenge"
    assert json.loads((out / "history.json").read_text()) == result.history
    model = AspectEncoder.from_pretrained(out, device="cpu")
    assert model.extra["step"] == result.best_step
    again = evaluate(model, views["challenge"], val_ids)
    assert again["val_mrr"] == pytest.approx(result.best_mrr, abs=1e-6)
    assert again["val_mean_rank"] == pytest.approx(result.best_mean_rank, abs=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rerun_skips_a_finished_model_and_overwrite_retrains(aclsum, tmp_path, capsys):
    from workbench.embed.aspect_training import TrainConfig, finished_result, train_aspect_models, views_fingerprint

    small = aclsum.subset(ids=list(aclsum.docs.loc[aclsum.docs["split"] == "train", "doc_id"][:8])
                          + list(aclsum.docs.loc[aclsum.docs["split"] == "validation", "doc_id"][:6]))
    config = TrainConfig(batch_size=4, max_steps=1, eval_every=1, max_length=32, device="cpu")
    kwargs = dict(val_split="validation", progress=False)
    first = train_aspect_models(["challenge"], tmp_path, small, config, **kwargs)["challenge"]
    weights = RunDir(tmp_path).aspect_model("challenge") / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert not first.skipped and first.n_train_docs == 8 and first.n_val_docs == 6
    split = json.loads((RunDir(tmp_path).split_file).read_text())
    assert len(split["train"]) == 8 and len(split["validation"]) == 6

    capsys.readouterr()
    second = train_aspect_models(["challenge"], tmp_path, small, config, **kwargs)["challenge"]
    assert second.skipped and "skipped" in capsys.readouterr().out
    assert weights.stat().st_mtime_ns == stamp
    assert second.best_mrr == first.best_mrr and second.history == first.history

    third = train_aspect_models(["challenge"], tmp_path, small, config, overwrite=True, **kwargs)["challenge"]
    assert not third.skipped and weights.stat().st_mtime_ns != stamp

    # Other settings, other views, or an unfinished run are not reused.
    out = RunDir(tmp_path).aspect_model("challenge")
    views = collect_views(["challenge"], tmp_path, small)["challenge"]
    fingerprint = views_fingerprint(views, split["train"], split["validation"])
    assert finished_result(out, config, "challenge", fingerprint) is not None
    assert finished_result(out, TrainConfig(batch_size=4, max_steps=1, eval_every=1, max_length=32, lr=2e-5),
                     "challenge", fingerprint) is None
    assert finished_result(out, config, "challenge", "another") is None
    record = json.loads((out / "train_config.json").read_text())
    (out / "train_config.json").write_text(json.dumps({**record, "status": "running"}))
    assert finished_result(out, config, "challenge", fingerprint) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_processes_through_torchrun_end_with_identical_weights(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    assert torchrun.exists(), torchrun
    out = tmp_path / "model"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    cmd = [str(torchrun), "--nproc_per_node", "2", "--master_port", str(_free_port()),
           str(ROOT / "scripts" / "train_ddp.py"), "--run-dir", str(tmp_path / "run"), "--aspect", "challenge",
           "--out", str(out), "--max-steps", "3", "--eval-every", "3", "--batch-size", "4", "--max-length", "32",
           "--lr", "1e-4", "--max-val-docs", "10", "--device", "cpu"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=500, cwd=ROOT, env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    reports = [json.loads((out / f"rank{k}.json").read_text()) for k in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1] and all(r["world_size"] == 2 for r in reports)
    assert reports[0]["param_sum"] == reports[1]["param_sum"]
    assert reports[0]["param_abs_sum"] == reports[1]["param_abs_sum"]
    assert reports[0]["sha256"] == reports[1]["sha256"]
    losses = [h["train_loss"] for h in reports[0]["history"][1:]]
    assert losses and all(np.isfinite(losses))
    record = json.loads((out / "train_config.json").read_text())
    assert record["status"] == "finished" and record["num_processes"] == 2
    assert (out / "model.safetensors").is_file()

    # The weights moved: they differ from the initial model (same seed, same init).
    import importlib.util

    from accelerate.utils import set_seed

    from workbench.embed.encoders import AspectEncoder

    spec = importlib.util.spec_from_file_location("train_ddp", ROOT / "scripts" / "train_ddp.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    set_seed(0)
    initial = script.weight_checksum(AspectEncoder.from_base("minilm", ["challenge"], device="cpu"))
    assert initial["sha256"] != reports[0]["sha256"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_notebook_runs_through_papermill(tmp_path, notebook_kernel):
    from workbench.run.runner import ExecutionOptions, run_pipeline

    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump({
        "report_dir": str(tmp_path / "reports"),
        # 30 train and 10 validation papers: their human views are what the frozen encoder reads.
        "parameters": {"corpus": "aclsum:train[:30],validation[:10]", "aspect_names": ["challenge"], "max_steps": 2,
                       "eval_every": 1, "batch_size": 4, "max_length": 32, "lr": 1e-4, "head_steps": 2},
    }))
    run = tmp_path / "run"
    results = run_pipeline(params, run_dir=str(run), stages=["02_train"], report=True, log=lambda *_: None,
                           execution=ExecutionOptions(kernel=notebook_kernel))
    model = RunDir(run).aspect_model("challenge")
    assert (model / "model.safetensors").is_file() and (model / "history.json").is_file()
    assert [h["step"] for h in json.loads((model / "history.json").read_text())] == [0, 1, 2]
    html = Path(results["02_train"]["html"]).read_text()
    assert html.count("data:image/png") >= 2  # training curves and the Table 1 heatmap
    assert "<th>MRR main model</th>" in html and "<th>MRR base encoder</th>" in html  # the Table 1 summary
    executed = (run / "02_train.ipynb").read_text()
    assert "max_steps = 2" in executed
    # On a CPU the default mode is the frozen one: a head on cached vectors, the encoder untouched.
    assert json.loads((model / "train_config.json").read_text())["mode"] == "frozen"
    assert any((run / "features").rglob("shard-*.safetensors"))


@pytest.mark.slow
def test_stage_01_skips_the_packaged_llm_s_summaries_on_auto_and_says_why(tmp_path, notebook_kernel):
    """summaries = "auto" with the packaged 135M model: stage 01 writes no summary and no sentence label, and
    its notebook says why and how to turn them on. (Here, beside stage 02's notebook test, for the kernel this
    module already holds.)"""
    from workbench.run.runner import ExecutionOptions, run_pipeline

    run = tmp_path / "run"
    run_pipeline(None, run_dir=str(run), stages=["01_generate"], report=False, log=lambda *_: None,
                 overrides={"corpus": "aclsum:train[:2]", "subset": 2, "summaries": "auto", "k": 1},
                 execution=ExecutionOptions(kernel=notebook_kernel))
    assert not RunDir(run).summaries.exists()
    assert not list(run.glob("sentence_labels*"))
    executed = (run / "01_generate.ipynb").read_text()
    assert "summaries skipped: smollm2-135m-instruct is the packaged demo LLM" in executed
    assert "backend = 'openai'" in executed  # how to turn them on


@pytest.mark.parametrize("mode, model, backend, wanted", [
    ("auto", "smollm2-135m-instruct", "transformers", False),
    ("auto", "SmolLM2", "llama_cpp", False),  # the alias, in process
    ("auto", "smollm2-135m-instruct", "openai", True),  # a served model under that name
    ("auto", "meta-llama/Llama-3.1-8B-Instruct", "transformers", True),
    ("auto", "/models/mistral-7b", "transformers", True),
    ("on", "smollm2-135m-instruct", "transformers", True),
    ("off", "meta-llama/Llama-3.1-8B-Instruct", "openai", False),
])
def test_which_generators_write_summaries(mode, model, backend, wanted):
    from workbench.generate.summaries import summaries_wanted

    assert summaries_wanted(mode, model, backend)[0] is wanted


def test_summaries_mode_is_checked():
    from workbench.generate.summaries import summaries_wanted

    with pytest.raises(ValueError, match="on, off, auto"):
        summaries_wanted("yes", "smollm2-135m-instruct", "transformers")
