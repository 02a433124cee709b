"""A user's own corpus from file to map, in miniature: the path of `params/own-corpus.yaml`.

A messy CSV export (no id column, quoted commas and line breaks, years written several
ways, latin-1 bytes, the abstract under a column name the loader does not know) and an
aspect file of one's own go through all seven stages with `workbench run`, started from the
folder the files are in and named by relative paths, as the README shows, with an API key
in the environment that must not reach any notebook or report. A messy RIS export (a
record without ER, an abstract over two AB tags) goes through `workbench validate` and
stage 01's generation. The numbers are meaningless at this size; the tests check that
every stage runs on a corpus with no splits and no human summaries, that ids are derived
from the content and survive a re-export in another order, that nothing is generated
twice, and that the same command, killed in stages 01 and 05 and started again, ends with
what the uninterrupted run stored.
"""

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from workbench.core.rundir import RunDir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[1]


def _export(out: Path, n: int, messy: bool = True) -> None:
    # The first three sentences of each abstract: reading the prompts is most of stage 01's time.
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_aclsum.py"), str(out), "--n", str(n),
                    "--sentences", "3"] + (["--messy"] if messy else []), check=True, capture_output=True)


ABSTRACT_COLUMN = "Zusammenfassung"
SECRET = "sk-secret-test-key"


# Hostile text in a paper and in the aspect file: an element, an attribute breakout, a javascript: URL in
# Markdown, a script element, an svg handler. Each would set window.__pwned if a report rendered it as markup.
PAYLOADS = ["<img src=x onerror=\"window.__pwned='img'\">", "\" onmouseover=\"window.__pwned='attr'\" data-x=\"",
            "[read more](javascript:window.__pwned='url')", "<script>window.__pwned='script'</script>",
            "**bold** <svg onload=\"window.__pwned='svg'\">"]


def _as_latin1(path: Path) -> None:
    """Rewrite a UTF-8 export as latin-1 with the abstract under ABSTRACT_COLUMN, as an older tool writes it."""
    rows = list(csv.reader(path.open(newline="", encoding="utf-8")))
    rows[0] = [ABSTRACT_COLUMN if h == "Abstract" else h for h in rows[0]]
    rows[1][0] = "Übersetzung: " + rows[1][0]  # bytes that UTF-8 cannot read
    for row in rows[2:4]:  # two papers carry the payloads, in their titles and abstracts
        row[0] = f"{row[0]} {PAYLOADS[0]} {PAYLOADS[1]}"
        row[1] = f"{row[1]} {' '.join(PAYLOADS)}"
    _write_latin1(path, rows)


def _write_latin1(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="latin-1", errors="replace") as fh:
        csv.writer(fh).writerows(rows)


def _env() -> dict:
    # One thread per process, in and out of xdist: the kill-and-resume test compares its run with this one.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENAI_API_KEY": SECRET,
            "WORKBENCH_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _workbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True)


# The user's command for the export (relative paths, from the folder the files are in), less the stages to run.
RUN = ["run", "--params", "params.yaml", "-p", "encoding=latin-1", "-p", f"abstract_column={ABSTRACT_COLUMN}"]


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("own")
    _export(home / "papers.csv", 8)
    _as_latin1(home / "papers.csv")
    aspects = yaml.safe_load((ROOT / "data" / "my_field.yaml").read_text())
    aspects["aspects"] = aspects["aspects"][:2]  # two aspects keep it quick; every table keeps an off-diagonal
    aspects["aspects"][1]["prompts"][0]["template"] = aspects["aspects"][0]["prompts"][0]["template"]
    aspects["aspects"][0]["description"] = f"{aspects['aspects'][0].get('description', '')} {PAYLOADS[2]} {PAYLOADS[0]}"
    (home / "aspects.yaml").write_text(yaml.safe_dump(aspects, sort_keys=False))
    quick = yaml.safe_load((ROOT / "params" / "own-corpus-quick.yaml").read_text())  # every cell, smallest settings
    (home / "params.yaml").write_text(yaml.safe_dump({
        "run_dir": "run",
        "parameters": {"corpus": "papers.csv", "aspects": "aspects.yaml", "seed": 0},
        # The optional stage 07 too, at its smallest: every report of a run is under test (the payloads below).
        "stage_parameters": {**quick["stage_parameters"], "07_questions": {
            "n_clusters": 2, "per_cluster": 2, "samples": 1, "question_tokens": 24, "pairs": 12,
            "truth_encoders": ["minilm"], "n_regions": 2, "region_top": 1, "time_encoder": False}},
    }))
    result = _workbench(home, *RUN, "--stages", "01,02,03,04,05,06,07")
    return home, result


def test_every_stage_runs_on_an_own_corpus_from_relative_paths(own_run):
    home, result = own_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = home / "run"
    for artifact in ["summaries.jsonl", "aspect_models", "unified_model", "embeddings", "decoders", "maps",
                     "metrics.json"]:
        assert (run / artifact).exists(), artifact
    # the end summary says what each stage wrote and where its report is
    assert "summaries.jsonl (" in result.stdout and "report reports/run/06_evaluate.html" in result.stdout
    closing = result.stdout[result.stdout.index("[workbench] the map:"):]  # the map first in the closing summary
    assert closing.startswith("[workbench] the map: reports/run/05_map.html") and "stage(s) in" in closing
    params = yaml.safe_load((run / "params.yaml").read_text())
    assert Path(params["parameters"]["corpus"]) == home / "papers.csv"  # resolved from where the user stands
    assert str(home / "papers.csv") in (run / "01_generate.ipynb").read_text()  # made absolute: the kernel runs in run/
    written = [p for p in [*run.rglob("*"), *(home / "reports").rglob("*")] if p.suffix in {".ipynb", ".html", ".yaml",
                                                                                           ".json", ".log"}]
    assert len(written) > 10 and not [p for p in written if SECRET in p.read_text(errors="replace")]
    # the ids are derived from the content: the stored summaries name them
    from workbench.data.corpus import load_corpus
    from workbench.generate.summaries import summaries_frame

    corpus = load_corpus(home / "papers.csv", encoding="latin-1", abstract_column=ABSTRACT_COLUMN)
    assert corpus.docs["title"].str.startswith("Übersetzung").any()
    assert all(d.startswith("h") for d in corpus.ids)
    stored = summaries_frame(run)
    assert set(stored["doc_id"]) <= set(corpus.ids) and len(stored) == 8 * 2 * 2
    # Two held-out papers, no highlights or sentence labels: the health check says why it measured nothing.
    metrics = json.loads((run / "metrics.json").read_text())
    health = metrics["health"]
    assert health["probe"] is None and "too few" in health["reading"][0]
    # No label columns, summaries or judge: stage 06 says which tables need a ground truth and skips them,
    # instead of empty tables, a NaN matrix and matplotlib's warnings about empty axes.
    evaluated = (run / "06_evaluate.ipynb").read_text()
    assert "No ground truth on these papers" in evaluated and "label_method" in evaluated
    assert "UserWarning" not in evaluated and not metrics["heads_vs_backbone"]
    # No held-out split: stage 06 evaluates on the validation papers, which the heads were never trained on.
    split = json.loads((RunDir(run).split_file).read_text())
    distill = json.loads((RunDir(run).unified_model / "distill_config.json").read_text())
    assert metrics["evaluation"]["documents"] == len(split["validation"])
    if distill["mode"] == "frozen":
        assert distill["config"]["head_refit"] is False and distill["refit_on_train_and_validation"] is False
    # Stage 03 checked each head against its encoder (or said why not), and stage 06 passes the verdict on.
    guard = json.loads((RunDir(run).unified_model / "guard.json").read_text())
    assert metrics["guard"] == guard and (guard["checked"] or guard["reason"])
    if guard["checked"]:
        assert all(r["verdict"] for r in guard["aspects"].values())
    report = (home / "reports" / "run" / "06_evaluate.html").read_text()
    assert "against its encoder" in report


TOLERANCE = 1e-5  # checkpoint tensors and metrics of a resumed run (see the test below)


def _run_until_killed(home: Path, command: list[str], reached) -> None:
    """Start the run and SIGKILL its whole process group (runner and kernel) once `reached()` holds."""
    proc = subprocess.Popen(command, cwd=home, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while not reached():
            assert proc.poll() is None, "the run ended before the kill point"
            assert time.time() < deadline, "the kill point was not reached"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _summaries(run: Path) -> dict:
    out = {}
    for line in (run / "summaries.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[(record["doc_id"], record["key"], record["sample"])] = (record["status"], record["text"])
    return out


def _numbers(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{prefix}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, float(value)
    else:
        yield prefix, value


def test_kills_in_stages_01_and_05_resume_to_what_an_uninterrupted_run_stores(own_run):
    """The same command killed with SIGKILL (the runner and its kernel, as the OOM killer or a closed laptop
    does) in stages 01 and 05, and started again each time, ends with what the uninterrupted run (`own_run`)
    stores: the same summaries, checkpoints and metrics. The second start resumes stage 01's summaries and runs
    02-04 on them; the last skips the stages the command finished before (01 to 04) and runs 05 and 06.

    Both runs pin one thread per process and use the same batch sizes. Summaries are compared exactly;
    checkpoint tensors and metrics within 1e-5, since a resumed run encodes some texts in other batches than
    the uninterrupted one (the feature cache keeps what was encoded before the kill), which may change the
    last float bits.
    """
    from safetensors.numpy import load_file

    home, result = own_run
    assert result.returncode == 0
    clean, resumed = home / "run", home / "resumed"
    command = [sys.executable, "-m", "workbench", *RUN, "--stages", "01,02,03,04,05,06", "--run-dir", "resumed",
               "--no-report"]

    def lines() -> int:
        path = resumed / "summaries.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    _run_until_killed(home, command, lambda: lines() >= 5)  # in stage 01, a few summaries stored
    assert 5 <= lines() < len(_summaries(clean))
    _run_until_killed(home, command, lambda: (resumed / ".05_visualize.running.ipynb").exists())
    done = subprocess.run(command, cwd=home, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    skipped = [s for s in ("01_generate", "02_train", "03_distill", "04_decode", "05_visualize")
               if f"{s}: finished before this command was interrupted; skipped" in done.stdout]
    assert skipped == ["01_generate", "02_train", "03_distill", "04_decode"], done.stdout[-2000:]

    assert _summaries(resumed) == _summaries(clean)  # exactly: per-request seeds, whatever the kill left
    stored = {"aspect_models", "unified_model", "decoders", "maps"}
    checkpoints = sorted(p.relative_to(clean) for p in clean.rglob("*.safetensors")
                         if p.parts[len(clean.parts)] in stored)
    assert checkpoints and checkpoints == sorted(p.relative_to(resumed) for p in resumed.rglob("*.safetensors")
                                                 if p.parts[len(resumed.parts)] in stored)
    for name in checkpoints:
        a, b = load_file(str(clean / name)), load_file(str(resumed / name))
        assert a.keys() == b.keys(), name
        for key in a:
            np.testing.assert_allclose(a[key], b[key], atol=TOLERANCE, rtol=TOLERANCE, err_msg=f"{name}:{key}")
    metrics_a = dict(_numbers(json.loads((clean / "metrics.json").read_text())))
    metrics_b = dict(_numbers(json.loads((resumed / "metrics.json").read_text())))
    assert metrics_a.keys() == metrics_b.keys()
    for key, value in metrics_a.items():
        if key.startswith("/written"):
            continue
        other = metrics_b[key]
        if isinstance(value, float) and not math.isnan(value):
            assert abs(value - other) <= TOLERANCE * max(1.0, abs(value)), (key, value, other)
        else:
            assert value == other or (value != value and other != other), (key, value, other)


def test_a_reordered_reexport_with_one_more_paper_generates_only_that_paper(own_run, smollm, tmp_path):
    """Ids survive a re-export: a new record at the top does not file summaries under the wrong papers.

    Stage 01's resume, in process (the runner's path is the fixture's): the same aspect file
    and model as the run, so only the new paper's 2 aspects x k = 2 summaries are written.
    """
    home, result = own_run
    assert result.returncode == 0
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.generate.summaries import SUMMARY_STOP, generate_summaries
    from workbench.generate.llm import Sampling

    rows = list(csv.reader((home / "papers.csv").open(newline="", encoding="latin-1")))
    _export(home / "more.csv", 9)
    extra = list(csv.reader((home / "more.csv").open(newline="", encoding="utf-8")))[9]
    _write_latin1(home / "papers2.csv", [rows[0], extra] + rows[1:][::-1])
    docs, _ = load_corpus(home / "papers2.csv", encoding="latin-1", abstract_column=ABSTRACT_COLUMN).drop_invalid()
    store = tmp_path / "run"  # a copy of the run's store: the run itself stays as its command left it
    store.mkdir()
    for name in ("summaries.jsonl", "summaries.current.json"):
        shutil.copy(home / "run" / name, store / name)
    again = generate_summaries(docs, load_aspects(home / "aspects.yaml"), smollm, store, k=2,
                               sampling=Sampling(max_new_tokens=16, seed=0, stop=SUMMARY_STOP), progress=False)
    assert "4 written" in str(again) and "32 reused from the store" in str(again)


def test_a_messy_ris_export_goes_through_generation(tmp_path, smollm, short_aspects, capsys):
    """A record without ER and an abstract over two AB tags: reported, repaired, and every paper summarised once."""
    from workbench.cli import main
    from workbench.data.corpus import load_corpus
    from workbench.generate.summaries import SUMMARY_STOP, generate_summaries
    from workbench.generate.llm import Sampling

    _export(tmp_path / "papers.ris", 6)
    assert main(["validate", str(tmp_path / "papers.ris")]) == 0  # warnings, no errors
    out = capsys.readouterr().out
    assert "missing_er" in out and "repeated_tag" in out
    docs, _ = load_corpus(tmp_path / "papers.ris").drop_invalid()
    generate_summaries(docs, short_aspects.subset(["challenge"]), smollm, tmp_path / "run", k=1,
                       sampling=Sampling(max_new_tokens=8, seed=0, stop=SUMMARY_STOP), progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "summaries.jsonl").read_text().splitlines()]
    assert len(records) == 6 and len({r["doc_id"] for r in records}) == 6


def test_no_payload_runs_in_any_report_or_the_map(own_run, tmp_path):
    """Every exported report and the standalone map, opened in headless Chromium, hovered and clicked:
    the payloads of the corpus and the aspect file show as text and none runs."""
    from lab_harness import Browser, chromium_paths

    home, result = own_run
    assert result.returncode == 0
    if chromium_paths() is None:
        pytest.fail("chromium and chromium-driver are required (scripts/setup.sh installs them)")
    pages = sorted((home / "reports" / "run").glob("*.html"))
    assert [p.name for p in pages] == ["01_generate.html", "02_train.html", "03_distill.html", "04_decode.html",
                                       "05_map.html", "05_visualize.html", "06_evaluate.html", "07_questions.html"]
    from workbench.maps.page import page_document

    # The map page holds its document gzip-compressed: read it as the browser unpacks it.
    carrying = [p.name for p in pages if "__pwned" in (page_document(p) if p.name == "05_map.html"
                                                       else p.read_text(encoding="utf-8"))]
    assert {"01_generate.html", "05_map.html"} <= set(carrying), carrying  # the payloads reached the pages
    browser = Browser(tmp_path / "profile")
    try:
        for page in pages:
            browser.driver.get(page.as_uri())
            browser.wait(lambda: browser.js("return document.readyState") == "complete", 30, f"{page.name} loads")
            time.sleep(0.5)
            points = browser.map_points() if page.name == "05_map.html" else None
            if points:  # hover over and click every paper of the map: tooltips render the payload titles
                for x, y in list(zip(points["px"], points["py"]))[:12]:
                    browser.driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
                    time.sleep(0.15)
                    browser.click_at(x, y)
                assert browser.js("return document.body.innerHTML.length") > 1000
            assert browser.js("return window.__pwned === undefined"), f"a payload ran in {page.name}"
            assert browser.js("return document.querySelectorAll('a[href^=\"javascript:\" i]').length") == 0, page.name
    finally:
        browser.close()
