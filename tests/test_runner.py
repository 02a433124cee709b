"""`workbench run`: papermill execution into a run directory, HTML reports, parameter checks."""

import io
import json
import os
import time
from pathlib import Path

import pytest
import yaml
from kernel_zygote import ends, running

import workbench
from workbench.run.runner import NOTEBOOKS, ExecutionOptions, available_stages, load_params, run_pipeline
from workbench.core.rundir import RunDir
from workbench.run.runconfig import RunConfigError


def test_stages_are_found():
    assert available_stages()[0] == "01_generate"
    from workbench.run.runner import OPTIONAL_STAGES

    assert set(OPTIONAL_STAGES) <= set(available_stages())  # named only on request, but real notebooks


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


@pytest.mark.parametrize("text", ["", "\n  \n", "# run_dir: runs/mine\n# parameters: {corpus: x.csv}\n"])
def test_an_empty_parameters_file_is_refused(tmp_path, text):
    """Empty, blank or only comments: not the defaults on ACLSum into runs/default, as it once ran."""
    params = tmp_path / "params.yaml"
    params.write_text(text)
    nothing = tmp_path / "notebooks"  # no stage to run, should the file ever be taken again
    nothing.mkdir()
    with pytest.raises(RunConfigError, match="params.yaml: the parameters file is empty .*leave out --params"):
        run_pipeline(params, run_dir=str(tmp_path / "run"), report=False,
                     execution=ExecutionOptions(notebook_dir=nothing))
    assert not (tmp_path / "run").exists()


def test_unknown_stage(tmp_path):
    with pytest.raises(RunConfigError, match="available"):
        run_pipeline(None, run_dir=str(tmp_path), stages=["99_nothing"], report=False)


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


# --------------------------------------------------------------------------- issue 11: the way in


@pytest.fixture
def no_execution(monkeypatch):
    """Checks must refuse before papermill starts a notebook; executing would be the bug."""
    import papermill

    def refuse(*args, **kwargs):
        raise AssertionError("papermill.execute_notebook was called")

    monkeypatch.setattr(papermill, "execute_notebook", refuse)


def test_relative_paths_are_taken_from_the_current_directory(tmp_path, monkeypatch):
    """`-p corpus=data/my_papers.csv` reached the notebooks relative to the run directory: no such file."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "my_papers.csv").write_text("doc_id,abstract\na,An abstract.\n")
    (tmp_path / "my_field.yaml").write_text((Path(__file__).resolve().parents[1] / "data" / "my_field.yaml").read_text())
    (tmp_path / "conf").mkdir()
    params = tmp_path / "conf" / "p.yaml"  # paths in a parameters file are also taken from where the user stands
    params.write_text(yaml.safe_dump({"parameters": {"aspects": "my_field.yaml"},
                                      "stage_parameters": {"06_evaluate": {"baselines": ["minilm", "data"]}}}))
    monkeypatch.chdir(tmp_path)
    config = load_params(params, {"corpus": "data/my_papers.csv", "02_train.corpus": "./data/my_papers.csv",
                                  "model": "smollm2-135m-instruct", "base_model": "allenai/specter2_base"})
    shared = config["parameters"]
    assert shared["corpus"] == str(tmp_path / "data" / "my_papers.csv")
    assert shared["aspects"] == str(tmp_path / "my_field.yaml")
    assert config["stage_parameters"]["02_train"]["corpus"] == str(tmp_path / "data" / "my_papers.csv")
    # Names that are not paths stay names, even when a folder of that name exists here.
    assert shared["model"] == "smollm2-135m-instruct" and shared["base_model"] == "allenai/specter2_base"
    assert config["stage_parameters"]["06_evaluate"]["baselines"] == ["minilm", "data"]
    assert load_params(None, {"corpus": "aclsum:validation", "aspects": "medicine"})["parameters"] == {
        "corpus": "aclsum:validation", "aspects": "medicine"}


@pytest.mark.parametrize("name, value", [("corpus", "data/missing.csv"), ("aspects", "missing.yaml"),
                                         ("02_train.corpus", "missing.ris")])
def test_missing_corpus_or_aspect_file_is_an_error_before_running(tmp_path, monkeypatch, name, value):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunConfigError, match=r"no such file.*current directory") as err:
        load_params(None, {name: value})
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("name, value, secret", [
    ("api_key_env", "sk-proj-a8Fq2Zr91LmXcV7tYb3N", "a8Fq2Zr91LmXcV7tYb3N"),
    ("api_key_env", "hf_QmZt8LsXr2VbNc9WqAe4KyPd", "QmZt8LsXr2VbNc9WqAe4KyPd"),
    ("api_key_env", "a81f3c9d0e7b44f2a6c85d19e03b7f6a", "a81f3c9d0e7b44f2a6c85d19e03b7f6a"),
    ("01_generate.api_key_env", "not a name!", "not a name!"),
])
def test_a_key_given_as_api_key_env_is_refused_without_echoing_it(name, value, secret):
    with pytest.raises(RunConfigError, match="environment variable") as err:
        load_params(None, {name: value})
    message = str(err.value)
    assert "NAME" in message and secret not in message and value not in message


@pytest.mark.parametrize("value", ["http://user:sk-a8Fq2Zr91LmXcV7tYb3N@host/v1", "https://token123secret@host:8000/v1"])
def test_credentials_in_a_url_are_refused_before_anything_is_written(tmp_path, value, no_execution):
    with pytest.raises(RunConfigError, match="user:password@") as err:
        run_pipeline(None, run_dir=str(tmp_path / "run"), stages=["01_generate"], overrides={"base_url": value},
                     report=False)
    assert "sk-a8Fq2Zr91LmXcV7tYb3N" not in str(err.value) and "token123secret" not in str(err.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(RunConfigError, match="looks like a key"):  # a key anywhere else in a value
        load_params(None, {"01_generate.model": "sk-a8Fq2Zr91LmXcV7tYb3N"})
    ok = load_params(None, {"api_key_env": "OPENAI_API_KEY", "base_url": "http://127.0.0.1:8000/v1",
                            "new_abstract": "A sk-learn-compatible pipeline; see https://doi.org/10.1/x or mail a@b.org"})
    assert ok["parameters"]["base_url"] == "http://127.0.0.1:8000/v1"


def test_an_undeclared_shared_parameter_is_refused_with_close_matches(tmp_path, no_execution):
    with pytest.raises(RunConfigError, match="subst") as err:
        run_pipeline(None, run_dir=str(tmp_path / "run"), stages=["01_generate"], overrides={"subst": 3},
                     report=False)
    assert "did you mean 'subset'" in str(err.value) and "max_new_tokens" in str(err.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(RunConfigError, match="did you mean 'max_steps'"):
        run_pipeline(None, run_dir=str(tmp_path / "run"), stages=["02"], overrides={"02_train.max_step": 3},
                     report=False)
    with pytest.raises(RunConfigError, match="--run-dir"):
        load_params(None, {"run_dir": "elsewhere"})


@pytest.mark.parametrize("config, message", [
    ({"run_dir": 12345}, r"run_dir must be text \(a path\), got 12345 \(int\)"),
    ({"report_dir": ["a"]}, r"report_dir must be text"),
    ({"stages": {"01": True}}, r"stages must be a list"),
    ({"parameters": ["corpus", "aclsum"]}, r"parameters must be a mapping .* got a list"),
    ({"stage_parameters": {"02_train": ["max_steps", 3]}}, r"stage_parameters\.02_train must be a mapping .* list"),
    ({"stage_parameters": ["02_train"]}, r"stage_parameters must be a mapping"),
])
def test_wrong_types_in_the_parameters_file_say_which_key(tmp_path, config, message):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(config))
    with pytest.raises(RunConfigError, match=message):
        load_params(params)


def test_stages_may_be_numbers_or_a_comma_separated_string(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("stages: 01,02\n")
    assert load_params(params)["stages"] == ["01", "02"]
    params.write_text("stages: [01, 2, train]\n")
    assert load_params(params)["stages"] == [1, 2, "train"]


def test_a_run_directory_holding_source_notebooks_is_refused(tmp_path, monkeypatch):
    """run_dir = notebooks/ wrote the executed notebooks over the sources."""
    import shutil

    import papermill

    def fake_execute(source, executed, **kwargs):  # what papermill would do: write the output
        shutil.copy(source, executed)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    sources = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, sources)
    before = (sources / "01_generate.ipynb").read_bytes()
    for run_dir in [sources, sources / "sub", Path(workbench.__file__).parent]:
        with pytest.raises(RunConfigError, match="overwrite"):
            run_pipeline(None, run_dir=str(run_dir), stages=["01_generate"], report=False,
                         execution=ExecutionOptions(notebook_dir=sources))
    mine = tmp_path / "my-project"  # a folder with a copy of a source notebook, edited by its user
    mine.mkdir()
    shutil.copy(sources / "01_generate.ipynb", mine)
    with pytest.raises(RunConfigError, match="not a notebook executed by an earlier run"):
        run_pipeline(None, run_dir=str(mine), stages=["01_generate"], report=False,
                     execution=ExecutionOptions(notebook_dir=sources))
    assert (sources / "01_generate.ipynb").read_bytes() == before
    assert not (sources / "params.yaml").exists() and not (mine / "params.yaml").exists()


def test_every_notebook_passes_encoding_and_abstract_column_to_the_loader():
    """`workbench run -p encoding=latin-1 -p abstract_column=X`: the loader's own advice, through the runner."""
    import papermill

    for stage in available_stages():
        source = NOTEBOOKS / f"{stage}.ipynb"
        declared = papermill.inspect_notebook(str(source))
        assert {"encoding", "abstract_column"} <= set(declared), stage
        code = "".join("".join(c["source"]) for c in json.loads(source.read_text())["cells"])
        assert code.count("load_corpus(") == code.count(
            "load_corpus(corpus, encoding=encoding, abstract_column=abstract_column)") == 1, stage


# --------------------------------------------------------------------------- issue 11: a runner that shows where it is


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_shows_cells_time_and_the_cells_own_bar():
    import nbformat

    from workbench.run.runner import Progress

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1"), nbformat.v4.new_code_cell("  "),
                                         nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("b = 2")])
    screen = _Terminal()
    with Progress("02_train", screen, every=0.01) as progress:
        progress.begin(nb)
        progress.cell_start(cell=nb.cells[0], cell_index=0)
        time.sleep(0.05)
        progress.write("loading 4 documents\n")  # the last line of a cell's output
        assert progress.detail == "loading 4 documents"
        progress.write("\rtrain:  40%|####      | 4/10 [00:01<00:02]\rtrain:  50%|#####     | 5/10 [00:01<00:01]")
        assert progress.detail == "train:  50%|#####     | 5/10 [00:01<00:01]"  # a text tqdm bar: its latest state
        # tqdm.auto in a kernel draws an ipywidgets bar: an HBox of (text, progress, text), updated by messages.
        widgets = {"l": {"value": "train:\u2007\u200760%"}, "p": {"value": 6.0, "max": 10.0},
                   "r": {"value": "\u20076/10\u2007[00:01&lt;00:01,\u20073.2it/s]"}}
        progress.message({"msg_type": "comm_open", "content": {"comm_id": "h", "data": {"state": {
            "_model_name": "HBoxModel", "children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}}}}, widgets)
        assert progress.detail == "train:  60%|######    | 6/10 [00:01<00:01, 3.2it/s]"
        progress.message({"msg_type": "status", "content": {}}, widgets)
        progress.cell_done(cell=nb.cells[0], cell_index=0)
        assert progress.line().startswith("[workbench] 02_train: 1/2 cells, 0s | train:  60%")
        time.sleep(0.05)
    drawn = screen.getvalue()
    assert "\r[workbench] 02_train: 0/2 cells, 0s" in drawn and "\r[workbench] 02_train: 1/2 cells" in drawn
    assert drawn.endswith("\r\x1b[K") and "\n" not in drawn  # redrawn in place, cleared at the end

    log = io.StringIO()  # not a terminal (CI logs, pipes): plain lines
    with Progress("01_generate", log, every=0.01):
        time.sleep(0.05)
    assert "\r" not in log.getvalue() and log.getvalue().startswith("[workbench] 01_generate: starting the kernel")
    assert Progress("01_generate", io.StringIO()).every == 30.0


TINY_PARAMETERS = "run_dir = '.'\ncorpus = 'aclsum'\nsteps = 3"
TINY_CODE = """import os, sys, time
from pathlib import Path
from tqdm.auto import tqdm
text = Path(corpus).read_text()
for _ in tqdm(range(steps), desc='tiny'):
    time.sleep(0.05)
print('read', len(text), 'characters'); print('a warning', file=sys.stderr)
Path('out.txt').write_text(text)
Path('models').mkdir(exist_ok=True)
Path('models/a.bin').write_bytes(b'0' * 2000)
Path('store.jsonl.lock').touch()
os.write(2, b'straight to the kernel process stderr')
"""


@pytest.mark.slow
def test_a_tiny_notebook_through_the_engine_shows_progress_and_sums_up(tmp_path, monkeypatch, capsys):
    """One kernel, one tiny notebook: the engine feeds cells and the widget bar to the progress line, a
    relative corpus path arrives absolute, and the summary lists what the stage wrote and its report."""
    import nbformat

    from workbench.run import runner

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cells = [nbformat.v4.new_code_cell(TINY_PARAMETERS, metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell(TINY_CODE)]
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    for stage in ("01_tiny", "07_questions"):  # 07_questions is optional: a run without a stage list skips it
        nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernel}),
                       notebooks / f"{stage}.ipynb")
    (tmp_path / "papers.csv").write_text("id,abstract\n1,Four words of text.\n")  # 34 characters, a corpus
    seen = []

    class Recording(runner.Progress):
        def message(self, msg, widgets):
            super().message(msg, widgets)
            seen.append(self.detail)

    monkeypatch.setattr(runner, "Progress", Recording)
    monkeypatch.chdir(tmp_path)
    results = run_pipeline(None, run_dir="run", overrides={"corpus": "papers.csv"},
                           execution=ExecutionOptions(notebook_dir=notebooks))
    assert list(results) == ["01_tiny"]
    entry = results["01_tiny"]
    assert entry["artifacts"] == {"models/": {"files": 1, "bytes": 2000}, "out.txt": {"files": 1, "bytes": 34}}
    assert any(d.startswith("tiny: 100%|") and "3/3" in d for d in seen), seen[-5:]
    printed = capsys.readouterr().out
    assert "01_tiny: done in" in printed and "3 cells" in printed  # the injected parameters, the defaults, the code
    assert "models/ (2.0 kB, 1 files), out.txt (34 B)" in printed
    assert entry["html"] == str(tmp_path / "reports" / "run" / "01_tiny.html")  # from here, like run_dir
    assert "report reports/run/01_tiny.html" in printed
    assert json.loads((tmp_path / "run" / "run.json").read_text())["01_tiny"]["artifacts"] == entry["artifacts"]
    runner.check_run_dir(tmp_path / "run", notebooks, ["01_tiny"])  # its own executed notebook may be rerun
    # What the kernel process writes itself (C libraries, its warnings) goes to a file, not over the line.
    assert "straight to the kernel process stderr" in (tmp_path / "run" / "kernel.log").read_text()


def _stage_notebooks(folder: Path, code: dict[str, str], parameters: str = "run_dir = '.'") -> None:
    """One notebook per stage in `folder`: the `parameters` cell, then the stage's code."""
    import nbformat

    folder.mkdir()
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    for stage, source in code.items():
        cells = [nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}),
                 nbformat.v4.new_code_cell(source)]
        nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernel}),
                       folder / f"{stage}.ipynb")


def _two_stage_notebooks(folder: Path) -> None:
    _stage_notebooks(folder, {
        "01_first": "import os\nfrom pathlib import Path\nleft_behind = 1\nPath('pid_01').write_text(str(os.getpid()))",
        "02_second": "import os\nfrom pathlib import Path\nPath('pid_02').write_text(str(os.getpid()))\n"
                     "Path('seen').write_text(str('left_behind' in dir()))"})


@pytest.mark.slow
@pytest.mark.parametrize("per_stage", [False, True], ids=["shared", "per stage"])
def test_stages_share_one_kernel_each_from_an_empty_namespace(tmp_path, per_stage):
    """Shared (the default): one kernel process, yet a name the first stage left is gone in the second,
    and the kernel is shut down at the end. kernel_per_stage: one process each, with its own log."""
    _two_stage_notebooks(tmp_path / "notebooks")
    run = tmp_path / "run"
    run_pipeline(None, run_dir=str(run), report=False, progress=False,
                 log=lambda *a: None,
                 execution=ExecutionOptions(notebook_dir=tmp_path / "notebooks", kernel_per_stage=per_stage))
    first, second = int((run / "pid_01").read_text()), int((run / "pid_02").read_text())
    assert (first != second) == per_stage
    assert (run / "seen").read_text() == "False"  # the shell's reset between stages; a fresh kernel anyway
    assert ends(first) and ends(second)  # forked kernels end a moment later
    logs = sorted(p.name for p in run.glob("*kernel.log"))
    assert logs == (["01_first.kernel.log", "02_second.kernel.log"] if per_stage else ["kernel.log"])


@pytest.mark.slow
def test_a_kernel_passed_in_serves_two_runs_and_stays_up(tmp_path):
    """run_pipeline(kernel=...): the second run's stages run in the same process, in its own run
    directory (the kernel started in the first) and from an empty namespace; the caller closes it."""
    from workbench.run.runner import Kernel

    _two_stage_notebooks(tmp_path / "notebooks")
    kernel = Kernel()
    try:
        for run in ["run1", "run2"]:
            run_pipeline(None, run_dir=str(tmp_path / run), report=False,
                         progress=False, log=lambda *a: None,
                         execution=ExecutionOptions(notebook_dir=tmp_path / "notebooks", kernel=kernel))
        pids = {int((tmp_path / run / f"pid_0{i}").read_text()) for run in ["run1", "run2"] for i in (1, 2)}
        assert len(pids) == 1 and running(pid := pids.pop())  # relative paths landed in each run directory
        assert (tmp_path / "run2" / "seen").read_text() == "False"
        # The kernel's own output stays in the log of the run that started it.
        assert kernel.log_path == tmp_path / "run1" / "kernel.log" and not (tmp_path / "run2" / "kernel.log").exists()
        with pytest.raises(ValueError, match="kernel per stage"):
            run_pipeline(None, run_dir=str(tmp_path / "run3"), report=False,
                         progress=False, log=lambda *a: None,
                         execution=ExecutionOptions(notebook_dir=tmp_path / "notebooks", kernel=kernel,
                                                    kernel_per_stage=True))
    finally:
        kernel.close()
    assert ends(pid, within=10)


def _resumable_notebooks(folder: Path) -> None:
    """Three stages that append their name to `ran` in the run directory; the second fails until `fixed` exists."""
    failing = "if not Path('fixed').exists():\n    raise ValueError('not yet')\n"
    _stage_notebooks(folder, {stage: f"from pathlib import Path\n{failing if stage == '02_two' else ''}"
                                     f"with open('ran', 'a') as fh:\n    fh.write('{stage}\\n')"
                              for stage in ("01_one", "02_two", "03_three")}, parameters="run_dir = '.'\nsource = None")


@pytest.mark.slow
def test_the_same_command_goes_on_from_the_stage_it_did_not_finish(tmp_path, notebook_kernel):
    """A command stopped in stage 02 and started again skips 01 (said in the log) and runs 02 and 03; once it
    completed, the same command runs every stage again. A changed input file, or redo, runs every stage."""
    _resumable_notebooks(tmp_path / "notebooks")
    run, source = tmp_path / "run", tmp_path / "input.txt"
    source.write_text("one version")
    said = []

    def command(redo: bool = False):
        return run_pipeline(None, run_dir=str(run), report=False, progress=False, log=said.append,
                            overrides={"source": str(source)},
                            execution=ExecutionOptions(notebook_dir=tmp_path / "notebooks", kernel=notebook_kernel,
                                                       redo=redo))

    def ran() -> list[str]:
        lines = (run / "ran").read_text().splitlines()
        (run / "ran").unlink()
        return lines

    with pytest.raises(RuntimeError, match="stage 02_two failed"):
        command()
    assert ran() == ["01_one"] and RunDir(run).unfinished.is_file()
    (run / "fixed").write_text("")
    assert list(command()) == ["02_two", "03_three"]
    assert ran() == ["02_two", "03_three"] and not RunDir(run).unfinished.exists()
    assert any("01_one: finished before this command was interrupted; skipped" in s for s in said)
    assert list(command()) == ["01_one", "02_two", "03_three"]  # completed: asked again, it runs again
    ran()
    (run / "fixed").unlink()
    for change in ("input", "redo"):
        with pytest.raises(RuntimeError, match="stage 02_two failed"):
            command()
        assert ran() == ["01_one"]
        (run / "fixed").write_text("")
        if change == "input":
            source.write_text("another version, another size")
            assert list(command()) == ["01_one", "02_two", "03_three"]
        else:
            assert list(command(redo=True)) == ["01_one", "02_two", "03_three"]
        ran()
        (run / "fixed").unlink()


def test_the_command_fingerprint_follows_what_the_stages_compute_from(tmp_path):
    """Same command, same fingerprint; another parameter, stage list, report choice, input file's content or the
    run's marks: another. A parameter that no path can be (a NUL byte, a long prompt) is only a parameter."""
    from workbench.run.resume import command_fingerprint

    corpus, run = tmp_path / "papers.csv", RunDir(tmp_path / "run")
    corpus.write_text("title,abstract\n")
    config = {"parameters": {"corpus": str(corpus), "prompt": "a\x00b" + "x" * 5000}, "stage_parameters": {}}
    first = command_fingerprint(config, ["01_generate"], True, run)
    assert command_fingerprint(config, ["01_generate"], True, run) == first
    assert command_fingerprint({**config, "stage_parameters": {"01_generate": {"k": 2}}}, ["01_generate"], True,
                               run) != first
    assert command_fingerprint(config, ["01_generate", "02_train"], True, run) != first
    assert command_fingerprint(config, ["01_generate"], False, run) != first
    corpus.write_text("title,abstract\nA,An abstract.\n")
    second = command_fingerprint(config, ["01_generate"], True, run)
    assert second != first
    run.path.mkdir()
    run.marks.write_text('{"sentence": "We propose X."}\n')
    assert command_fingerprint(config, ["01_generate"], True, run) != second
