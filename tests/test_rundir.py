"""`RunDir` names every artifact once; `RunMetrics` has each stage-06 section on disk as soon as it is set."""

import json
from pathlib import Path

import pytest

from workbench.core.rundir import STAGE_ARTIFACTS, RunDir, aspect_model_dir, read_split
from workbench.measures.runmetrics import RunMetrics, load_metrics


def test_run_dir_is_a_path_and_names_the_artifacts(tmp_path):
    run = RunDir(tmp_path / "r")
    assert Path(run) == tmp_path / "r" and str(run) == str(tmp_path / "r") and run.name == "r"
    assert run / "x" == tmp_path / "r" / "x"
    assert run.unified_model == tmp_path / "r" / "unified_model"
    assert run.aspect_model("method") == tmp_path / "r" / "aspect_models" / "method"
    assert run.confidence == tmp_path / "r" / "decoders" / "confidence.json"
    assert run.map() == tmp_path / "r" / "maps" / "current"
    assert not run.exists() and not run.is_run()
    run.mkdir()
    assert run.is_dir() and not run.is_run()


def test_split_round_trip_and_clear_errors(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(FileNotFoundError, match="run stage 02"):
        read_split(tmp_path)
    with pytest.raises(FileNotFoundError, match="method"):
        aspect_model_dir(tmp_path, "method")
    run.write_split([1, "b"], ["c"])
    assert read_split(tmp_path) == (["1", "b"], ["c"])
    assert json.loads(run.split_file.read_text())["val_split"] == "validation"
    assert run.stages_done()["02_train"] and not run.stages_done()["03_distill"] and run.is_run()


def test_stages_done_follows_the_artifacts(tmp_path):
    run = RunDir(tmp_path)
    assert list(run.stages_done()) == list(STAGE_ARTIFACTS)
    run.summaries.write_text("")
    run.unified_model.mkdir()
    done = run.stages_done()
    assert done["01_generate"] and done["03_distill"] and not done["06_evaluate"]


def test_run_metrics_writes_each_section_at_once(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"old": 1}))
    metrics = RunMetrics(tmp_path, {"evaluation": {"documents": 3}})
    metrics["spearman"] = {"a": float("nan"), "b": 1.5}
    on_disk = load_metrics(tmp_path)
    assert "old" not in on_disk  # replaced, not merged: a stale section would read as current
    assert on_disk["spearman"] == {"a": None, "b": 1.5} and on_disk["evaluation"] == {"documents": 3}
    assert on_disk["written"]["complete"] is False
    metrics["evaluation"]["backbone"] = "minilm"  # in place: written with the next save
    metrics.save(complete=True)
    on_disk = load_metrics(tmp_path)
    assert on_disk["evaluation"]["backbone"] == "minilm" and on_disk["written"]["complete"] is True


def test_tensors_are_written_whole_or_not_at_all(tmp_path):
    """write_tensors / write_arrays read back what they wrote, and a failed write leaves no file behind."""
    import numpy as np
    import torch
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file as load_torch

    from workbench.core.files import write_arrays, write_tensors

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()  # not contiguous: written contiguous
    write_tensors(tmp_path / "m.safetensors", {"w": t}, metadata={"format": "pt"})
    assert torch.equal(load_torch(str(tmp_path / "m.safetensors"))["w"], t)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]
    write_arrays(tmp_path / "a.safetensors", {"x": a})
    np.testing.assert_array_equal(load_numpy(str(tmp_path / "a.safetensors"))["x"], a)
    with pytest.raises(Exception):
        write_arrays(tmp_path / "bad.safetensors", {"x": np.array(["text"], dtype=object)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "m.safetensors"]
