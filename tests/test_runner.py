"""`workbench run`: papermill execution into a run directory, HTML reports, parameter checks."""

import json
import subprocess
import sys

import pytest
import yaml

from workbench.runner import RunConfigError, available_stages, load_params, run_pipeline


def test_stages_are_found():
    assert available_stages()[0] == "01_generate"


def test_secrets_are_refused_as_parameters(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"api_key": "sk-123"}}))
    with pytest.raises(RunConfigError, match="environment variable"):
        load_params(params)
    assert load_params(None, {"api_key_env": "MY_KEY"})["parameters"]["api_key_env"] == "MY_KEY"


@pytest.mark.parametrize("text, message", [
    ("run_dir: [unclosed", "not valid YAML"),
    ("- a\n- b", "mapping"),
    ("stagez: [01]", "unknown keys"),
])
def test_malformed_parameter_files(tmp_path, text, message):
    params = tmp_path / "p.yaml"
    params.write_text(text)
    with pytest.raises(RunConfigError, match=message):
        load_params(params)


def test_unknown_stage(tmp_path):
    with pytest.raises(RunConfigError, match="available"):
        run_pipeline(None, run_dir=str(tmp_path), stages=["99_nothing"], report=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_generate_notebook_runs_through_papermill(tmp_path, monkeypatch):
    """The real CLI runs 01_generate with tiny parameters; the run dir and the HTML report appear."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test-key")
    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump({
        "run_dir": str(tmp_path / "run"), "report_dir": str(tmp_path / "reports"), "stages": ["01_generate"],
        "parameters": {"corpus": "aclsum:validation", "subset": 2, "aspect_names": ["outcome"], "k": 2,
                       "max_new_tokens": 12, "n_judge_pairs": 0},
    }))
    out = subprocess.run([sys.executable, "-m", "workbench", "run", "--params", str(params)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "summaries.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r["aspect"] for r in records} == {"outcome"}
    html = (tmp_path / "reports" / "01_generate.html").read_text()
    assert "Answers per aspect" in html or "data:image/png" in html
    assert "sk-secret-test-key" not in html
    executed = (tmp_path / "run" / "01_generate.ipynb").read_text()
    assert '"subset": 2' in executed or "subset = 2" in executed
    assert (tmp_path / "run" / "params.yaml").exists() and (tmp_path / "run" / "run.json").exists()


def test_stage_parameters_override_shared_ones(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"subset": 4, "max_length": 64},
                                      "stage_parameters": {"01_generate": {"subset": 2}}}))
    config = load_params(params, {"02_train.max_length": 32, "k": 3})
    assert config["parameters"] == {"subset": 4, "max_length": 64, "k": 3}
    assert config["stage_parameters"] == {"01_generate": {"subset": 2}, "02_train": {"max_length": 32}}
    with pytest.raises(RunConfigError, match="environment variable"):
        load_params(None, {"01_generate.api_key": "sk-1"})


def test_unknown_stage_parameter_is_an_error(tmp_path):
    with pytest.raises(RunConfigError, match="no parameters"):
        run_pipeline(None, run_dir=str(tmp_path), stages=["01_generate"], overrides={"01_generate.subsett": 3},
                     report=False)
    with pytest.raises(RunConfigError, match="unknown stage"):
        run_pipeline(None, run_dir=str(tmp_path), stages=["01_generate"], overrides={"09_nothing.k": 3},
                     report=False)
