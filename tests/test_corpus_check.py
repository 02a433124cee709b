"""`workbench run` loads the corpus as the stages do and refuses what would make a stage fail, before any stage
runs and before the run directory (or the report folder) exists, naming the file and its lines."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.run.corpuscheck import check_corpus, corpus_settings
from workbench.run.runconfig import NOTEBOOKS, RunConfigError, check_parameters, declared_parameters, load_params
from workbench.run.runner import ExecutionOptions, run_pipeline

ROOT = Path(__file__).resolve().parents[1]
HEADER = "id,title,abstract\n"


LOADS = "corpus = 'aclsum'\nencoding = 'utf-8'\nabstract_column = None\nrun_dir = '.'"


def _stand_in(folder: Path, stage: str, parameters: str = LOADS) -> None:
    """A stand-in stage that declares the corpus as the real ones do (and `parameters`), and notes that it ran."""
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": parameters},
             {"cell_type": "code", "metadata": {}, "source": "from pathlib import Path\nPath('ran').write_text('yes')"}]
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    notebook = {"cells": [{**cell, "execution_count": None, "outputs": []} for cell in cells],
                "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 4}
    (folder / f"{stage}.ipynb").write_text(json.dumps(notebook))


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("notebooks")
    _stand_in(folder, "01_load")
    return folder


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> Path:
    """Stand-ins of the stages that a corpus of a few papers concerns, with the parameters that decide how many
    papers they read and split, at their notebooks' defaults."""
    folder = tmp_path_factory.mktemp("stages")
    _stand_in(folder, "01_generate", LOADS + "\nsubset = 6\nsubset_seed = 0")
    _stand_in(folder, "02_train", LOADS + "\nval_split = 'validation'")
    _stand_in(folder, "03_distill", LOADS + "\nsubset = None\nval_split = 'validation'\ninclude_human = True")
    _stand_in(folder, "05_visualize", LOADS)
    return folder


def _folder(path: Path) -> Path:
    path.mkdir()
    (path / "papers.csv").write_text(HEADER + "a,T,Text.\n")
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)  # exists, and reading it waits for a writer
    return path


def _file(text: str | bytes):
    def make(path: Path) -> Path:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path
    return make


BAD = {
    "a folder": (_folder, r"is a folder, not a corpus file; give the path of the export itself, e.g. .*papers\.csv"),
    "a header and no rows": (_file(HEADER), r"no documents: the file has a header \(id, title, abstract\) and no rows"),
    "bytes that are not UTF-8": (_file(HEADER.encode() + b"a,T,Caf\xe9 society.\n"),
                                 r"not valid utf-8 at line 2, column 8 .*encoding"),
    "a pipe": (_fifo, "is not a regular file"),
    "an id repeated with different texts": (
        _file(HEADER + "a,One,First text.\nb,Two,Second text.\na,Three,Third text.\na,Four,Fourth text.\n"),
        r"1 id is repeated with different texts.*'a' on lines 2, 4 and 5\. .*-p duplicate_ids=first"),
    "no usable document": (_file(HEADER + "a,One,\nb,Two,   \nc,Three,N/A\n"),
                           r"no usable document: every one of its 3 rows has an error \(1 missing_abstract, "
                           r"1 empty_abstract, 1 placeholder_abstract; lines 2, 3 and 4\)"),
}


def _refused(tmp_path: Path, notebooks: Path, corpus: Path, monkeypatch, **overrides) -> str:
    """The message of the refusal of a run on `corpus`; that no run directory and no report folder was made."""
    monkeypatch.chdir(tmp_path)  # the reports' default folder is reports/<run> from here
    with pytest.raises(RunConfigError) as caught:
        run_pipeline(None, run_dir="run", overrides={"corpus": str(corpus), **overrides}, log=lambda *_: None,
                     progress=False, execution=ExecutionOptions(notebook_dir=notebooks))
    assert not (tmp_path / "run").exists() and not (tmp_path / "reports").exists()
    return str(caught.value)


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_corpus_is_refused_before_any_stage(case, tmp_path, notebooks, monkeypatch):
    make, message = BAD[case]
    corpus = make(tmp_path / ("exports" if case == "a folder" else "papers.csv"))
    assert re.search(message, _refused(tmp_path, notebooks, corpus, monkeypatch))


def test_a_file_without_read_permission_is_refused(tmp_path, notebooks, monkeypatch):
    from workbench.data import readers

    def no_permission(path, encoding):
        raise PermissionError(13, "Permission denied", str(path))

    corpus = _file(HEADER + "a,T,Text.\n")(tmp_path / "papers.csv")
    monkeypatch.setitem(readers.READERS, "csv", no_permission)  # the tests run as root, who may read anything
    assert "papers.csv: cannot be read: Permission denied" in _refused(tmp_path, notebooks, corpus, monkeypatch)


def test_exact_duplicates_pass_with_a_notice_and_first_keeps_the_first_of_an_id(tmp_path, notebooks):
    declared = {"01_load": declared_parameters(notebooks / "01_load.ipynb")}
    exact = _file(HEADER + "a,One,First text.\nb,Two,Second text.\na,One,First  text.\n")(tmp_path / "exact.csv")
    logged: list[str] = []
    check_corpus(load_params(None, {"corpus": str(exact)}), declared, ["01_load"], logged.append)
    assert any("1 exact duplicate" in line and "line 4 repeats line 2" in line for line in logged), logged
    repeated = _file(HEADER + "a,One,First text.\na,Two,Second text.\n")(tmp_path / "repeated.csv")
    with pytest.raises(RunConfigError, match="'a' on lines 2 and 3"):
        check_corpus(load_params(None, {"corpus": str(repeated)}), declared, ["01_load"])
    check_corpus(load_params(None, {"corpus": str(repeated), "duplicate_ids": "first"}), declared, ["01_load"])


def test_the_corpus_is_the_one_each_stage_loads_and_aclsum_passes_at_once():
    declared = {p.stem: declared_parameters(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}
    config = load_params(None, {"06_evaluate.corpus": "aclsum:test", "encoding": "latin-1"})
    assert corpus_settings(config, declared, list(declared)) == [
        {"corpus": "aclsum", "encoding": "latin-1", "abstract_column": None},
        {"corpus": "aclsum:test", "encoding": "latin-1", "abstract_column": None}]
    t0 = time.perf_counter()
    check_corpus(load_params(None), declared, list(declared), log=lambda *_: pytest.fail("ACLSum has no notes"))
    assert time.perf_counter() - t0 < 2


def test_duplicate_ids_is_a_run_parameter_of_two_values():
    declared = {"01_load": {"corpus": "'aclsum'"}}
    notes: list[str] = []
    check_parameters(load_params(None, {"duplicate_ids": "first"}), declared, ["01_load"], notes.append)
    assert notes == []  # no stage receives it, and none is said to miss it
    with pytest.raises(RunConfigError, match="duplicate_ids: must be refuse or first .*got 'last'"):
        check_parameters(load_params(None, {"duplicate_ids": "last"}), declared, ["01_load"])
    with pytest.raises(RunConfigError, match="01_load.duplicate_ids: duplicate_ids is the whole run's"):
        check_parameters(load_params(None, {"01_load.duplicate_ids": "first"}), declared, ["01_load"])


def test_every_stage_drops_the_invalid_rows_of_the_corpus_it_loads():
    """So that with -p duplicate_ids=first every stage keeps the same (first) row of an id, and no stage reads a
    row that the others dropped (stage 02 once read the corpus as loaded: a missing abstract failed it)."""
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                         if c["cell_type"] == "code")
        if "load_corpus(corpus" in code:
            assert "drop_invalid(" in code, notebook.name


def test_a_corpus_too_small_for_the_stages_asked_is_refused_before_any_stage(tmp_path, stages, monkeypatch):
    """Stage 03 validates on at least two held-out papers and trains on the rest, stage 05 draws a t-SNE map:
    on one to three usable papers stage 03 died after stages 01 and 02 had run ("need documents with targets or
    sentence labels for training and validation, got 1 and 1"), which said nothing of the corpus."""
    repeated = _file(HEADER + "p1,One,First text.\np1,Two,Second text.\np1,Three,Third text.\n")(tmp_path / "one.csv")
    message = _refused(tmp_path, stages, repeated, monkeypatch, duplicate_ids="first")
    assert re.search(r"one\.csv has 1 usable paper \(2 of its 3 rows dropped, as every stage drops them: "
                     r"2 duplicate_id\), and stage 03_distill needs at least 4: it validates .* on at least 2 papers "
                     r"held out at random .*--stages 01,02\.$", message), message
    declared = {stage: declared_parameters(stages / f"{stage}.ipynb") for stage in
                ["01_generate", "02_train", "03_distill", "05_visualize"]}

    def check(corpus: Path, resolved: list[str], **overrides) -> None:
        check_corpus(load_params(None, {"corpus": str(corpus), **overrides}), declared, resolved, lambda *_: None)

    check(repeated, ["01_generate", "02_train"], duplicate_ids="first")  # they run on a single paper
    rows = "".join(f"p{i},Title {i},Text number {i}.\n" for i in range(4))
    three, four = (_file(HEADER + rows[:n * 26])(tmp_path / f"{n}.csv") for n in (3, 4))
    with pytest.raises(RunConfigError, match=r"3 usable papers, and stage 05_visualize needs at least 4: .*t-SNE"):
        check(three, ["05_visualize"])
    check(four, list(declared))
    with pytest.raises(RunConfigError, match=r"stage 01 summarises subset=3.*-p 01_generate\.subset=4 or more"):
        check(four, list(declared), **{"01_generate.subset": 3})
    # A split column decides stage 03's validation papers: two of them, and one other paper, are needed.
    split = _file("id,title,abstract,split\n" + "".join(f"p{i},T{i},Text {i}.,{s}\n" for i, s in
                                                         enumerate(["train"] * 5 + ["validation"])))(tmp_path / "s.csv")
    with pytest.raises(RunConfigError, match=r"6 usable papers, of which 1 usable paper in its 'validation' split"):
        check(split, ["03_distill"])
    check(split, ["03_distill"], val_split=None)


@pytest.mark.slow  # a `workbench run` process: its imports take a second or two
def test_workbench_run_refuses_repeated_ids_within_seconds(tmp_path):
    (tmp_path / "papers.csv").write_text(HEADER + "p1,One,First text.\np1,Two,Second text.\np1,Three,Third.\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench", "run", "-p", "corpus=papers.csv"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    seconds = time.perf_counter() - t0
    assert done.returncode == 2, done.stderr
    assert "'p1' on lines 2, 3 and 4" in done.stderr and "-p duplicate_ids=first" in done.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()
    assert seconds < 5, seconds
