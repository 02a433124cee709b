"""The notebooks stay thin: parameters, calls into workbench, plots and tables.

* Their code is clean by pyflakes: no name used before it is defined, no import left unused
  (the names of the parameters cell count as defined, as papermill injects them there).
* They write no file themselves and define no function or class: a stage's results are
  written by the package (`RunMetrics`, `evaluate_decoders`, `questionreport.write_summary`),
  where they are tested.
* The first code cell is tagged `parameters` and every stage reads its paths from `RunDir`.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from pyflakes.api import check
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|json\.dump\(|\bopen\(|\.to_csv\(|\.to_json\(|savefig\(")


def code_of(path: Path) -> tuple[str, str]:
    """(parameters cell, the other code cells joined), IPython magics and shell lines left out."""
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in cells[0].metadata.get("tags", []), f"{path.name}: first code cell not tagged parameters"
    keep = lambda src: "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
    return keep(cells[0].source), "\n\n".join(keep(c.source) for c in cells[1:])


class Collect(Reporter):
    def __init__(self):
        self.messages = []

    def flake(self, message):
        self.messages.append(str(message).split(":", 2)[-1].strip())

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.messages.append(f"syntax error line {lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.messages.append(msg)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_is_clean(path):
    parameters, body = code_of(path)
    reporter = Collect()
    check(parameters + "\n\n" + body, path.name, reporter)
    assert not reporter.messages, f"{path.name}:\n" + "\n".join(reporter.messages)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_writes_nothing_and_defines_nothing(path):
    _, body = code_of(path)
    assert not WRITES.findall(body), f"{path.name} writes a file itself: {WRITES.findall(body)}"
    defined = [n.name for n in ast.walk(ast.parse(body)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert not defined, f"{path.name} defines {defined}: logic belongs in the package"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_takes_its_paths_from_the_run_directory(path):
    _, body = code_of(path)
    assert "run_dir = RunDir(run_dir)" in body
    assert not re.search(r"run_dir\s*/\s*[\"'](aspect_models|unified_model|decoders|embeddings|features|maps|"
                         r"questions|summaries\.jsonl|metrics\.json)", body)


def test_the_lint_sees_a_broken_notebook():
    """The checks above can fail: an unused import and an undefined name are reported."""
    reporter = Collect()
    check("import json\nprint(undefined_name)\n", "x.py", reporter)
    assert any("json" in m for m in reporter.messages) and any("undefined_name" in m for m in reporter.messages)
    assert WRITES.search('path.write_text("x")')
