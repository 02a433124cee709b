"""Issue 41: notebook parameters are checked by declared type and range before any stage runs.

A bad value used to reach the notebook: `k=0` failed late (KeyError in cell 7), `subset=.nan` ran
the whole corpus, `k=true` ran k = 1, `06_evaluate.n_permutations=-5` gave p-values of -0.25.
`-p k=2` on params/demo.yaml left stage 01 at the file's k = 4 and changed stage 06's top-k
instead; a parameters file with a YAML alias bomb kept `workbench run` busy for minutes.
"""

import ast
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.run.paramspec import SPECS, value_problem
from workbench.run.runconfig import (NOTEBOOKS, RunConfigError, available_stages, check_parameters,
                                     declared_parameters, load_params, resolve_stage_keys, stage_values)

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "params" / "demo.yaml"
# Under 460 bytes, as the issue's: nine levels of nine aliases, 9**9 strings once written out.
BOMB = "\n".join(["parameters:", "  l0: &l0 [" + ",".join(["lol"] * 9) + "]"]
                 + [f"  l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]) + "\n"

FLOW_BOMB = "[&l0 [" + ",".join(["lol"] * 9) + "], " + ", ".join(
    f"&l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)) + "]"


@pytest.fixture(scope="module")
def declared():
    """{stage: {name: default}} of the real notebooks, as the runner reads them."""
    return {stage: declared_parameters(NOTEBOOKS / f"{stage}.ipynb") for stage in available_stages()}


def _checked(declared, params_file, overrides):
    """The config `workbench run --params params_file -p ...` would run, after the checks before any stage."""
    config = load_params(params_file, overrides)
    config["stage_parameters"] = resolve_stage_keys(config["stage_parameters"], list(declared))
    check_parameters(config, declared, list(declared), log=lambda line: None)
    return config


@pytest.mark.parametrize("overrides, key, expected", [
    ({"k": -1}, "parameter k (shared, given to stage 01_generate)", "whole number >= 1"),
    ({"k": 0}, "parameter k (shared, given to stage 01_generate)", "whole number >= 1"),
    ({"k": True}, "parameter k (shared, given to stage 01_generate)", "it is true/false"),
    ({"k": [1, 2]}, "parameter k (shared, given to stage 01_generate)", "it is a list"),
    ({"subset": math.nan}, "parameter subset (shared, given to stage 01_generate)", "or null (the whole corpus)"),
    ({"01_generate.subset": math.inf}, "parameter 01_generate.subset", "NaN or infinity"),
    ({"06_evaluate.n_permutations": -5}, "parameter 06_evaluate.n_permutations", "whole number >= 1"),
    ({"06_evaluate.overlap_k": 2.5}, "parameter 06_evaluate.overlap_k", "a decimal number"),
    ({"02_train.lr": "1e-5"}, "parameter 02_train.lr", "write it with a dot"),
    ({"weights": {"task": math.nan}}, "parameter weights (shared, given to stage 05_visualize)", "NaN"),
    ({"06_evaluate.truth_encoders": "mpnet"}, "parameter 06_evaluate.truth_encoders", "a list of text"),
])
def test_each_bad_value_is_refused_naming_the_key_and_its_range(declared, overrides, key, expected):
    with pytest.raises(RunConfigError) as err:
        _checked(declared, DEMO, overrides)
    message = str(err.value)
    assert message.startswith(key + ": must be "), message
    assert expected in message


@pytest.mark.parametrize("stage, old, new", [("06_evaluate", "k", "overlap_k"), ("06_evaluate", "top_k", "overlap_k"),
                                             ("07_questions", "k", "n_clusters")])
def test_a_renamed_stage_parameter_says_its_new_name(declared, stage, old, new):
    """One name, one meaning: stages 06 and 07 no longer take `k` (stage 01's summaries per document and
    aspect), nor 06 `top_k` (stage 01's sampling); an old file is told the new name."""
    assert old not in declared[stage] and new in declared[stage]
    with pytest.raises(RunConfigError, match=f"parameter {stage}.{old}: stage {stage} calls it {new} now"):
        _checked(declared, DEMO, {f"{stage}.{old}": 3})


def test_a_shared_p_reaches_every_stage_that_declares_it_over_the_file(declared):
    """The README's own example: `-p k=2` on params/demo.yaml (which sets 01_generate.k: 4)."""
    config = _checked(declared, DEMO, {"k": 2, "01_generate.subset": 20})
    assert stage_values(config, "01_generate", declared["01_generate"])["k"] == 2
    assert stage_values(config, "01_generate", declared["01_generate"])["subset"] == 20
    evaluate = stage_values(config, "06_evaluate", declared["06_evaluate"])
    assert "k" not in evaluate and "overlap_k" not in evaluate  # the top-k overlap keeps its default
    assert evaluate["n_permutations"] == 200
    # A stage's own -p still wins over a shared one, whatever their order.
    config = _checked(declared, DEMO, {"01_generate.k": 3, "k": 2})
    assert stage_values(config, "01_generate", declared["01_generate"])["k"] == 3


def test_every_notebook_parameter_has_a_spec_that_its_default_and_the_shipped_files_pass(declared):
    for stage, names in declared.items():
        for name, default in names.items():
            assert name in SPECS, f"{stage}: {name} has no spec in workbench/run/paramspec.py"
            assert value_problem(name, ast.literal_eval(default)) is None, (stage, name, default)
    for path in sorted((ROOT / "params").glob("*.yaml")):
        config = _checked(declared, path, {"corpus": "aclsum", "aspects": "acl"})  # no export needed
        assert config["stage_parameters"]["01_generate"]["k"] >= 1


def test_an_alias_bomb_in_a_parameters_file_is_refused_at_once(tmp_path):
    """Under 460 bytes that expand to 9**9 strings: the secret check used to walk them all (45 s and more)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB.encode()) < 460
    start = time.perf_counter()
    with pytest.raises(RunConfigError, match="alias") as err:
        load_params(path)
    assert time.perf_counter() - start < 2
    assert str(err.value).startswith(f"{path}: ")
    start = time.perf_counter()
    with pytest.raises(SystemExit, match="-p weights: the value uses YAML aliases"):  # the same on the command line
        main(["run", "--params", str(DEMO), "-p", "weights=" + FLOW_BOMB, "--run-dir", str(tmp_path / "run")])
    assert time.perf_counter() - start < 2


@pytest.mark.slow
def test_the_command_line_refuses_a_bad_value_before_any_notebook_runs(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "workbench", "run", "--params", str(DEMO), "-p", "k=-1",
                             "--run-dir", str(run_dir)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "parameter k (shared, given to stage 01_generate): must be a whole number >= 1" in result.stderr
    assert "executing" not in result.stdout and not run_dir.exists()  # no notebook started, nothing written


def test_an_aspect_file_that_does_not_load_is_refused_before_any_stage(tmp_path):
    """A 300-character aspect name used to pass until stage 02 made a folder of it; now the run's checks load the
    aspect file first and name the field."""
    from workbench.run.runconfig import RunConfigError, check_inputs

    bad = tmp_path / "long.yaml"
    mine = (Path(__file__).resolve().parents[1] / "data" / "my_field.yaml").read_text()
    bad.write_text(mine.replace("  - name: task\n", "  - name: " + "a" * 300 + "\n", 1))
    with pytest.raises(RunConfigError, match=r"parameter aspects: .*aspects\[0\]\.name.*300"):
        check_inputs({"corpus": "aclsum", "aspects": str(bad)}, "")
    check_inputs({"corpus": "aclsum", "aspects": "acl"}, "")  # a preset loads


def test_a_marks_csv_that_is_missing_or_names_another_aspect_is_refused_before_any_stage(tmp_path):
    from workbench.run.runconfig import RunConfigError, check_inputs

    with pytest.raises(RunConfigError, match="marks: no such file"):
        check_inputs({"corpus": "aclsum", "marks": str(tmp_path / "gone.csv")}, "03_distill.")
    marks = tmp_path / "team.csv"
    marks.write_text("doc_id,sentence,aspect\np1,One.,challenge\np2,Two.,aproach\n")  # the acl preset's aspects
    with pytest.raises(RunConfigError, match=r"03_distill.marks: .*line 3: 'aproach'"):
        check_inputs({"marks": str(marks)}, "03_distill.", run_aspects="acl")
    marks.write_text("doc_id,sentence,aspect\np1,One.,challenge\np2,Two.,approach+outcome\n")
    check_inputs({"marks": str(marks)}, "03_distill.", run_aspects="acl")
    assert marks.read_text().count("\n") == 3  # only read


def test_reading_the_notebooks_skips_jsonschemas_iri_checker_and_still_rejects_a_broken_notebook(tmp_path):
    """The runner's process reads notebooks without importing `rfc3987_syntax` (a Lark grammar built on import,
    1.4 s of every run's start; no notebook schema uses the IRI format), and nbformat still validates."""
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [{"cell_type": "code"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    code = ("import sys\n"
            "from workbench.run.runconfig import NOTEBOOKS, declared_parameters\n"
            "assert 'seed' in declared_parameters(NOTEBOOKS / '02_train.ipynb')\n"
            "print('rfc3987_syntax' in sys.modules and sys.modules['rfc3987_syntax'] is not None)\n"
            "import nbformat\n"
            f"try:\n    nbformat.validate(nbformat.read({str(broken)!r}, as_version=4))\n"
            "except nbformat.ValidationError:\n    print('rejected')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "rejected"]
