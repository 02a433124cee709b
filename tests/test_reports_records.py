"""Reports and records a user can trust: self-contained HTML reports in a folder of one run's own, a run.json that
keeps every stage, missing artifacts said aloud, and a run directory whatever its name (issue 41)."""

import json
import re

import nbformat
import pytest

from workbench.core.progress import NOTICE
from workbench.decode.faithfulness import load_confidence
from workbench.evaluate.report import guard_section
from workbench.measures.runmetrics import RunMetrics, load_metrics, write_metrics
from workbench.run.record import record_stage
from workbench.run.reports import REPORTS_MARKER, claim_report_dir, export_html
from workbench.run.runconfig import RunConfigError
from workbench.run.runner import ExecutionOptions, run_pipeline
from workbench.run.runs import run_table

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _executed_notebook_with_widgets(path):
    """A notebook as nbclient leaves it: a tqdm widget bar, a pane widget holding a paper title, an image."""
    state = {"bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_m", "IPY_MODEL_r"]}},
             "l": {"model_name": "HTMLModel", "state": {"value": "encoding: 100%"}},
             "m": {"model_name": "FloatProgressModel", "state": {"value": 3, "max": 3}},
             "r": {"model_name": "HTMLModel", "state": {"value": " 3/3 [00:01&lt;00:00]"}},
             "pane": {"model_name": "VBoxModel", "state": {"children": []}},
             "title": {"model_name": "HTMLModel", "state": {"value": "A Secret Paper Title"}}}
    nb = nbformat.v4.new_notebook(metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "papermill": {"parameters": {"run_dir": "/somewhere/run", "seed": 0}},
        "widgets": {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0,
                                                                  "state": state}}})
    cell = nbformat.v4.new_code_cell("work()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/plain": "  0%|          | 0/3",
                                                     WIDGET_VIEW: {"version_major": 2, "model_id": "bar"}}),
        nbformat.v4.new_output("display_data", data={"text/plain": "VBox(children=(HTML(value='A Secret'),))",
                                                     WIDGET_VIEW: {"version_major": 2, "model_id": "pane"}}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})]
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · Tiny"), cell]
    nbformat.write(nb, path)
    return path


def test_a_report_runs_no_script_from_elsewhere_and_shows_widgets_as_text(tmp_path):
    """nbconvert's lab template loads require.js, MathJax, Mermaid and `@jupyter-widgets/html-manager@*` from CDNs;
    a report loads nothing, carries no widget state, and shows the progress bar and the pane as text."""
    page = export_html(_executed_notebook_with_widgets(tmp_path / "01_tiny.ipynb"), tmp_path / "01_tiny.html")
    text = page.read_text()
    tags = re.findall(r"<(?:script|link)\b[^>]*>", text, flags=re.I)
    for tag in tags:
        source = re.search(r"\b(?:src|href)\s*=\s*[\"']?([^\"' >]+)", tag, flags=re.I)
        assert source is None or source.group(1).startswith("data:"), tag
    for body in re.findall(r"<script\b[^>]*>(.*?)</script>", text, flags=re.I | re.S):
        assert not re.search(r"https?://|//unpkg|//cdn", body), body[:200]  # no import() of a module either
    assert "unpkg.com" not in text and "html-manager" not in text and "cdnjs" not in text
    assert "widget-state+json" not in text and "A Secret Paper Title" not in text  # the state is dropped
    assert "encoding: 100%|██████████| 3/3 [00:01&lt;00:00]" in text  # the bar's last state, as the terminal had it
    assert "interactive widget" in text and "01_tiny.ipynb" in text and "VBox(children" not in text
    assert "data:image/png;base64," in text  # images stay inlined


def test_two_runs_with_one_folder_name_do_not_share_a_report_folder(tmp_path, monkeypatch):
    """`x/exp` and `y/exp` both default to reports/exp/: the first claims it, the second is refused before it
    writes anything, naming both runs and how to give it a folder of its own."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "reports" / "exp"
    claim_report_dir(folder, tmp_path / "x" / "exp")
    claim_report_dir(folder, tmp_path / "x" / "exp")  # the same run again: its own folder
    assert json.loads((folder / REPORTS_MARKER).read_text())["run_dir"] == str(tmp_path / "x" / "exp")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "run_dir = None\nreport_dir = None", metadata={"tags": ["parameters"]})], metadata={"kernelspec": kernel}),
        notebooks / "01_tiny.ipynb")
    with pytest.raises(RunConfigError) as refused:
        run_pipeline(None, run_dir="y/exp", stages=["01_tiny"], log=lambda *_: None,
                     execution=ExecutionOptions(notebook_dir=notebooks))
    message = str(refused.value)
    assert str(tmp_path / "x" / "exp") in message and str(tmp_path / "y" / "exp") in message
    assert "report_dir" in message and not (tmp_path / "y").exists()


def test_a_report_folder_written_before_the_marker_is_known_by_its_reports(tmp_path):
    """Reports from before the marker name their run in their parameters table: another run is refused there."""
    page = export_html(_executed_notebook_with_widgets(tmp_path / "01_tiny.ipynb"), tmp_path / "reports" / "01_tiny.html")
    with pytest.raises(RunConfigError, match="/somewhere/run"):
        claim_report_dir(page.parent, tmp_path / "other" / "run")
    assert not (page.parent / REPORTS_MARKER).exists()
    claim_report_dir(page.parent, "/somewhere/run")  # its own run takes it over


def test_a_rerun_of_some_stages_keeps_every_stage_in_run_json_with_what_changed(tmp_path):
    """A `--stages` re-run used to replace run.json, so `workbench runs` listed a complete run as holding only the
    stages re-run; each stage is kept, with a history of its runs and the parameters each re-run changed."""
    run = tmp_path / "run"
    run.mkdir()
    first = {"k": 4, "subset": 4, "run_dir": str(run)}
    for stage in ("01_generate", "02_train", "03_distill"):
        record_stage(run, stage, {"notebook": str(run / f"{stage}.ipynb"), "seconds": 1.0}, first, at="day 1")
    record_stage(run, "01_generate", {"notebook": str(run / "01_generate.ipynb"), "seconds": 2.0},
                 {"k": 2, "subset": 4, "run_dir": str(tmp_path / "moved")}, at="day 2")
    record = json.loads((run / "run.json").read_text())
    assert list(record) == ["01_generate", "02_train", "03_distill"]
    history = record["01_generate"]["history"]
    assert [h["run"] for h in history] == [1, 2] and [h["at"] for h in history] == ["day 1", "day 2"]
    assert history[1]["changed"] == {"k": {"from": 4, "to": 2}}  # the run directory is not a parameter choice
    assert record["01_generate"]["parameters"] == {"k": 2, "subset": 4} and record["01_generate"]["seconds"] == 2.0
    assert record["02_train"]["history"] == [{"run": 1, "at": "day 1", "seconds": 1.0}]
    assert run_table(run)[0]["stages"] == ["01_generate", "02_train", "03_distill"]


def test_a_record_written_before_histories_is_carried_on(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"01_generate": {"seconds": 5.0}}))
    record = record_stage(tmp_path, "01_generate", {"seconds": 1.0}, {"k": 2}, at="now")
    assert record["01_generate"]["history"][0] == {"run": 1, "at": None, "seconds": 5.0}
    assert record["01_generate"]["history"][1]["changed"].startswith("unknown")


def test_stage_06_without_guard_json_says_so_and_warns_in_metrics(tmp_path, capsys):
    """Deleting unified_model/guard.json left metrics.json without its guard section, unsaid."""
    (tmp_path / "unified_model").mkdir()
    metrics = RunMetrics(tmp_path)
    assert guard_section(tmp_path, metrics) is None
    written = load_metrics(tmp_path)
    assert "guard" not in written and any("guard.json is missing" in w for w in written["warnings"])
    assert f"{NOTICE}" in capsys.readouterr().out  # in the notebook, and on the terminal through `workbench run`
    (tmp_path / "unified_model" / "guard.json").write_text(json.dumps({"checked": False, "reason": "few papers"}))
    metrics = RunMetrics(tmp_path)
    assert guard_section(tmp_path, metrics) == {"checked": False, "reason": "few papers"}
    assert load_metrics(tmp_path)["guard"]["reason"] == "few papers" and "warnings" not in load_metrics(tmp_path)


def test_decoders_without_confidence_json_say_their_levels_are_off(tmp_path, capsys):
    """Deleting decoders/confidence.json turned the pane's confidence levels into nothing, unsaid."""
    assert load_confidence(tmp_path) == {} and capsys.readouterr().out == ""  # no stage 04: nothing to say
    (tmp_path / "decoders" / "method").mkdir(parents=True)
    assert load_confidence(tmp_path) == {}
    said = capsys.readouterr().out
    assert said.startswith(NOTICE) and "confidence.json is missing" in said and "stage 04" in said
    assert load_confidence(tmp_path, quiet=True) == {} and capsys.readouterr().out == ""


def test_a_run_directory_named_like_a_json_file_gets_its_metrics_inside(tmp_path):
    """A run directory `x.json` made stage 06 fail with IsADirectoryError: it was taken for the metrics file."""
    run = tmp_path / "x.json"
    run.mkdir()
    metrics = RunMetrics(run)
    metrics["evaluation"] = {"documents": 3}
    assert (run / "metrics.json").is_file() and load_metrics(run)["evaluation"] == {"documents": 3}
    write_metrics(run, {"a": 1})
    assert load_metrics(run / "metrics.json")["a"] == 1  # the file itself is still read as the file


def test_a_missing_grounding_report_is_said_not_shown_as_an_empty_table(tmp_path, capsys):
    from workbench.embed.grounding import grounding_table

    table = grounding_table(tmp_path)
    assert table.empty and "grounding.json is missing" in capsys.readouterr().out
