"""The package's shape, checked with `ast`: no import cycles, no private name of another module, a light import, short documented modules.

* Import cycles: module A imports B (at the top or inside a function) and B, directly or
  through others, imports A. Every import counts, since a function-level import only
  hides a cycle until the function runs.
* Private names: `from workbench.X import _name` and `X._name`, where X is another
  workbench module, in the package, the tests, the scripts and the benchmarks. A helper two
  modules need moves to where it belongs and gets a public name; a test checks a module
  through its public names.
* `import workbench` stays light: it does not pull in torch.
* A module a newcomer can read: at most 600 lines, and a docstring whose first line names
  the concern the module serves. A module that grows past that splits by concern.
"""

import ast
import functools
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600
PACKAGE = ROOT / "workbench"
FOLDERS = ["workbench", "tests", "scripts", "benchmarks"]


def module_name(path: Path) -> str:
    """A package file's dotted name below workbench: "embed.train", "embed" for embed/__init__.py, "" for the top."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")} - {""}


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per test run: the checks below walk the same files many times."""
    return ast.parse(path.read_text(encoding="utf-8"))


def python_files(folders=FOLDERS) -> list[Path]:
    """The .py files under the given folders of the repository."""
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _resolve(module: str, names) -> list[tuple[str, str | None]]:
    """(module, name or None) for `from workbench.<module> import names`: a name that is a submodule counts as one."""
    out = []
    for name in names:
        sub = f"{module}.{name}" if module else name
        out.append((sub, None) if sub in MODULES else (module, name))
    return [(m, n) for m, n in out if m in MODULES]


@functools.lru_cache(maxsize=None)
def workbench_imports(path: Path) -> tuple[tuple[str, str | None, int], ...]:
    """(module, imported name or None, line) for every import of a workbench module in a file, wherever it stands."""
    in_package = PACKAGE in path.parents
    package = module_name(path).split(".") if in_package else []
    if in_package and path.name != "__init__.py":
        package = package[:-1]  # a module's relative imports start from the package that holds it
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(a.name[len("workbench."):], None, node.lineno) for a in node.names
                      if a.name.startswith("workbench.") and a.name[len("workbench."):] in MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level and in_package:
                base = [p for p in package if p][:len([p for p in package if p]) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "workbench" or (node.module or "").startswith("workbench."):
                module = node.module[len("workbench."):] if node.module != "workbench" else ""
            else:
                continue
            found += [(m, n, node.lineno) for m, n in _resolve(module, [a.name for a in node.names])]
    return tuple(found)


SUBPACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
# The subpackages from the bottom layer up (docs/architecture.md): each imports only those before it.
LAYERS = ["core", "data", "generate", "measures", "embed", "teach", "decode", "questions", "maps", "evaluate", "run"]


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {module it imports: line of the first such import}} over the package."""
    graph = {}
    for path in python_files(["workbench"]):
        me = module_name(path)
        if not me:
            continue
        edges = graph.setdefault(me, {})
        for module, _, line in workbench_imports(path):
            # A module importing its own package's __init__ (or a package its own modules) is no cycle to fix.
            if module != me and not me.startswith(module + ".") and not module.startswith(me + "."):
                edges.setdefault(module, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_uses(path: Path) -> list[str]:
    """Each use of another workbench module's private name in a file, as "path:line: what"."""
    own = module_name(path) if PACKAGE in path.parents else None
    where = path.relative_to(ROOT)
    tree = parsed(path)
    imports = workbench_imports(path)  # parsed once: by statement line below
    found = [f"{where}:{line}: from {module} import {name}" for module, name, line in imports
             if name and name.startswith("_") and not name.startswith("__") and module != own]
    # The names a module is bound to in this file: `from workbench.maps import tsne as T`, `import workbench.x.y as T`.
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [m for m, n, line in imports if line == node.lineno and n is None]
            names = [a.asname or a.name for a in node.names]
            if isinstance(node, ast.Import):
                bound.update({a.asname: a.name[len("workbench."):] for a in node.names
                              if a.asname and a.name[len("workbench."):] in MODULES})
            else:
                bound.update({alias: m for alias, m in zip(names, modules)} if len(modules) == len(names) else {})
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        chain = ast.unparse(node.value)
        module = bound.get(chain) if isinstance(node.value, ast.Name) else (
            chain[len("workbench."):] if chain.startswith("workbench.") else None)
        if module in MODULES and module != own:
            found.append(f"{where}:{node.lineno}: {module}.{node.attr}")
    return found


def test_the_checks_find_what_they_look_for(tmp_path, monkeypatch):
    """A cycle and each form of private use are found (so that a silent check cannot pass)."""
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    probe = tmp_path / "probe.py"
    probe.write_text("from workbench.maps import tsne as T\nimport workbench.generate.llm\n"
                     "from workbench.core.models import _x, y\n"
                     "def f():\n    return T._a, workbench.generate.llm._b, T.public, T.__name__\n")
    assert private_uses(probe) == ["probe.py:3: from core.models import _x", "probe.py:5: maps.tsne._a",
                                   "probe.py:5: generate.llm._b"]


@pytest.mark.slow
def test_no_import_cycles_in_the_package():
    graph = import_graph()
    found = cycles(graph)
    detail = ["  " + ", ".join(f"{a} -> {b} (line {graph[a][b]})" for a in c for b in graph[a] if b in c)
              for c in found]
    assert not found, "import cycles among workbench modules:\n" + "\n".join(detail)


@pytest.mark.slow
def test_no_import_cycles_among_the_subpackages():
    """The subpackages form layers (docs/architecture.md): none imports one that imports it back, even through
    a third, so each can be read, tested and replaced from the layers below it."""
    graph = {}
    for module, targets in import_graph().items():
        for target, line in targets.items():
            a, b = module.split(".")[0], target.split(".")[0]
            if a != b and a in SUBPACKAGES and b in SUBPACKAGES:
                graph.setdefault(a, {}).setdefault(b, f"{module} -> {target}, line {line}")
    found = cycles(graph)
    detail = ["  " + "; ".join(graph[a][b] for a in c for b in graph[a] if b in c) for c in found]
    assert not found, "subpackages importing each other:\n" + "\n".join(detail)
    # ... and every import runs down the layers docs/architecture.md draws, none back up.
    assert set(LAYERS) == SUBPACKAGES, "a subpackage missing from LAYERS (and from docs/architecture.md)"
    upward = [why for a, targets in graph.items() for b, why in targets.items() if LAYERS.index(b) > LAYERS.index(a)]
    assert not upward, "imports running back up a layer:\n" + "\n".join(upward)
    drawn = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert ", ".join(f"`{p}`" for p in LAYERS[:-1]) in drawn


def test_no_module_re_exports_another_s_names():
    """A name is imported from the module where it lives: a package module imports another workbench module's
    name only to use it (an `__all__` entry is no use)."""
    found = []
    for path in python_files(["workbench"]):
        tree = parsed(path)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("workbench")):
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.asname or a.name}" for a in node.names
                          if (a.asname or a.name) not in used and a.name != "annotations"]
    assert not found, "names imported but not used (re-exports):\n" + "\n".join(found)


@pytest.mark.slow
def test_no_private_name_of_another_module_is_used():
    found = [use for path in python_files() for use in private_uses(path)]
    assert not found, "private names of other workbench modules:\n" + "\n".join(found)


RUNDIR = PACKAGE / "core" / "rundir.py"


def artifact_file_names() -> set[str]:
    """The file names `core/rundir.py` gives the run's artifacts: its module-level string constants with a suffix
    ("summaries.jsonl", "guard.json", ...; folder names such as "maps" are common words, so only files count)."""
    names = set()
    for node in parsed(RUNDIR).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if "." in node.value.value.lstrip(".") and " " not in node.value.value:
                names.add(node.value.value)
    return names


def spelled_artifacts(path: Path, names: set[str]) -> list[str]:
    """Each string in a file (docstrings aside) that is an artifact's file name or a path ending in one."""
    tree = parsed(path)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    where = path.relative_to(ROOT) if ROOT in path.parents else path.name
    return [f"{where}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            and any(n.value == name or n.value.endswith("/" + name) for name in names)]


def test_each_artifact_file_is_named_in_the_run_directory_module_only(tmp_path):
    """A stage reads another stage's files through `RunDir`, never by spelling their names: the layout is stated
    once, and no import loop is avoided by reading a file by hand."""
    names = artifact_file_names()
    assert {"summaries.jsonl", "guard.json", "metrics.json", "run.json", "params.yaml", "split.json"} <= names
    probe = tmp_path / "probe.py"  # the check finds what it looks for
    probe.write_text('"""A docstring may say run.json."""\nPATH = "unified_model/guard.json"\nNAME = "run.json"\n')
    assert [line.split(": ", 1)[1] for line in spelled_artifacts(probe, names)] == ["'unified_model/guard.json'",
                                                                                       "'run.json'"]
    found = [hit for path in python_files(["workbench"]) if path != RUNDIR for hit in spelled_artifacts(path, names)]
    assert not found, "artifact file names spelled outside core/rundir.py:\n" + "\n".join(found)


def test_import_workbench_is_fast():
    """`import workbench` in a fresh interpreter, best of three, takes under a second."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import workbench"], check=True, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
    assert best < 1.0, f"import workbench took {best:.2f} s"


def test_every_module_is_short_and_says_what_it_is_for():
    """No module of the package over MAX_LINES lines, and each opens with a docstring (its first line: the concern)."""
    too_long, undocumented = [], []
    for path in python_files(["workbench"]):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_LINES:
            too_long.append(f"{where}: {len(text.splitlines())} lines")
        doc = ast.get_docstring(ast.parse(text))
        if not doc or not doc.splitlines()[0].strip():
            undocumented.append(f"{where}: no module docstring with a first line")
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concern):\n" + "\n".join(too_long)
    assert not undocumented, "modules without a docstring that names their concern:\n" + "\n".join(undocumented)


MAX_PARAMETERS = 8  # a function needing more takes a config dataclass (not **kwargs, not an options dict)
MAX_FUNCTION_LINES = 80  # from its `def` to its last line, docstring included
# Functions allowed past those limits, each with its reason (keep it empty where possible).
FUNCTION_EXCEPTIONS: dict[str, str] = {}


def function_sizes(paths) -> list[tuple[str, int, int]]:
    """(where, parameters, lines) of every function and method: parameters count every positional,
    keyword-only, *args and **kwargs one, less `self` or `cls`."""
    out = []
    for path in paths:
        tree = parsed(path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            first = (a.posonlyargs + a.args)[:1]
            n -= bool(first and first[0].arg in ("self", "cls"))
            out.append((f"{path.relative_to(ROOT)}:{node.name}", n, node.end_lineno - node.lineno + 1))
    return out


def test_function_sizes_are_counted_as_the_rule_says(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    probe = tmp_path / "probe.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    probe.write_text("class C:\n    def m(self, a, b, *c, d, **e):\n        pass\n"
                     f"def long(a, /, b):\n{body}\n")
    assert sorted(function_sizes([probe])) == [("probe.py:long", 2, 81), ("probe.py:m", 5, 2)]


@pytest.mark.slow
def test_no_function_takes_over_8_parameters_or_runs_over_80_lines():
    over = [f"{where}: {n} parameters, {lines} lines" for where, n, lines in function_sizes(python_files(["workbench"]))
            if (n > MAX_PARAMETERS or lines > MAX_FUNCTION_LINES) and where not in FUNCTION_EXCEPTIONS]
    assert not over, (f"functions over {MAX_PARAMETERS} parameters or {MAX_FUNCTION_LINES} lines (a config "
                      "dataclass for the settings; named steps for the body):\n" + "\n".join(over))
    stale = [w for w in FUNCTION_EXCEPTIONS if not any(w == where for where, *_ in
                                                       function_sizes(python_files(["workbench"])))]
    assert not stale, f"exceptions naming no function: {stale}"


# Libraries slow to import (or optional, or platform-specific): a module imports them inside the functions that
# use them, so that `import workbench` and the light modules stay fast. Everything else is imported at the top.
LAZY_LIBRARIES = {"torch", "transformers", "bokeh", "sklearn", "matplotlib", "seaborn", "openTSNE", "accelerate",
                  "safetensors", "scipy", "ipywidgets", "papermill", "nbformat", "nbclient", "nbconvert", "llama_cpp",
                  "httpx", "bert_score", "pandas", "tqdm", "IPython", "jupyter_bokeh", "jupyter_core", "traitlets",
                  "huggingface_hub", "threadpoolctl", "rispy", "bibtexparser", "pylatexenc", "sentencex", "aclsum",
                  "fcntl", "ray", "pyarrow", "datashader", "xarray", "PIL"}


def _pulls_heavy(module: str, seen=()) -> bool:
    """Whether importing a workbench module imports one of LAZY_LIBRARIES at its top (directly or through others)."""
    path = PACKAGE / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = PACKAGE / module.replace(".", "/") / "__init__.py"
    tree = parsed(path)
    for node in tree.body:
        if isinstance(node, ast.Import) and {a.name.split(".")[0] for a in node.names} & LAZY_LIBRARIES:
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] in LAZY_LIBRARIES:
            return True
    targets = {m for m, _, line in workbench_imports(path)
               if any(getattr(n, "lineno", None) == line for n in tree.body)}
    return any(_pulls_heavy(t, seen + (module,)) for t in targets if t not in seen and t != module)


@pytest.mark.slow
def test_imports_stand_at_the_top_unless_they_are_heavy():
    """An import inside a function is of a heavy library, or of a workbench module that pulls one in while the
    importing module does not: the dependency graph reads off each module's first lines."""
    misplaced = []
    for path in python_files(["workbench"]):
        me = module_name(path)
        heavy_me = bool(me) and _pulls_heavy(me)
        tree = parsed(path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in fn.body:  # imports standing directly in a function's body
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                    if not set(names) <= LAZY_LIBRARIES:
                        misplaced.append(f"{path.relative_to(ROOT)}:{node.lineno}: import {', '.join(names)}")
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    if node.module.split(".")[0] not in LAZY_LIBRARIES | {"workbench"}:
                        misplaced.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module}")
                elif isinstance(node, ast.ImportFrom):
                    mods = {m for m, _, line in workbench_imports(path) if line == node.lineno}
                    if mods and (heavy_me or not any(_pulls_heavy(m) for m in mods)):
                        misplaced.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}"
                                         f"{node.module or ''} (light, or this module is heavy already)")
    assert not misplaced, "imports that belong at the top of their module:\n" + "\n".join(misplaced)
