"""The notebooks stay thin: parameters, calls into workbench, plots and tables.

* Their code is clean by pyflakes: no name used before it is defined, no import left unused
  (the names of the parameters cell count as defined, as papermill injects them there).
* They write no file themselves and define no function or class: a stage's results are
  written by the package (`RunMetrics`, `evaluate_decoders`, `questions.overview.write_summary`),
  where they are tested.
* The first code cell is tagged `parameters` and every stage reads its paths from `RunDir`.
* Every name they import from `workbench` is there, read from the package's files without importing it: a
  module renamed in the package fails here, in the fast tier, not in a pipeline run minutes into the suite.
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


def _module_file(dotted: str) -> Path | None:
    """The file of a `workbench` module or package, or None where the package has none."""
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _top_level_names(path: Path) -> set[str]:
    """What a module defines at its top level (functions, classes, assignments, imports, inside if and try too)."""
    names, todo = set(), list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "finalbody", []) + \
                [s for h in getattr(node, "handlers", []) for s in h.body]
    return names


def missing_workbench_imports(code: str) -> list[str]:
    """The `workbench` modules and names that `code` imports and the package does not have."""
    missing = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            missing += [a.name for a in node.names if a.name.startswith("workbench") and not _module_file(a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
            module = _module_file(node.module)
            if module is None:
                missing.append(node.module)
                continue
            defined = _top_level_names(module)
            missing += [f"{node.module}.{a.name}" for a in node.names
                        if a.name not in defined and not _module_file(f"{node.module}.{a.name}")]
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_imports_only_what_the_package_has(path):
    _, body = code_of(path)
    assert not missing_workbench_imports(body), f"{path.name} imports {missing_workbench_imports(body)}"


def test_the_import_check_sees_a_renamed_module_and_a_missing_name():
    assert missing_workbench_imports("from workbench.questions import overview as QR\n"
                                     "from workbench.evaluate.report import register_table") == []
    assert missing_workbench_imports("from workbench.questions import report as QR\n"
                                     "from workbench.evaluate.report import no_such_name\n"
                                     "import workbench.embed.headtrain") == \
        ["workbench.questions.report", "workbench.evaluate.report.no_such_name", "workbench.embed.headtrain"]


def test_the_lint_sees_a_broken_notebook():
    """The checks above can fail: an unused import and an undefined name are reported."""
    reporter = Collect()
    check("import json\nprint(undefined_name)\n", "x.py", reporter)
    assert any("json" in m for m in reporter.messages) and any("undefined_name" in m for m in reporter.messages)
    assert WRITES.search('path.write_text("x")')
