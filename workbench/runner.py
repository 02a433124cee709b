"""Run the numbered notebooks through papermill into a run directory and export HTML reports.

A parameters file (YAML) says where the run goes and what each notebook gets:

    run_dir: runs/aclsum-demo        # artifacts (summaries.jsonl, models, ...) and executed notebooks
    report_dir: reports/aclsum-demo  # HTML reports (default: reports/<run name>)
    stages: [01_generate]            # which notebooks, in order (default: all in notebooks/)
    parameters:                      # passed to every notebook that declares them
      corpus: aclsum
    stage_parameters:                # per stage, on top of `parameters`
      01_generate: {subset: 8}
      02_train: {max_steps: 30}

Each notebook receives `run_dir` too. Parameters a notebook does not declare in its
`parameters` cell are not passed to it, so one file can drive all stages. On the command
line, `-p k=v` sets a shared parameter and `-p 02_train.k=v` one stage's.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
_SECRET = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)


class RunConfigError(ValueError):
    """A parameters file that is malformed or asks for something that does not exist."""


def available_stages(notebook_dir: Path = NOTEBOOKS) -> list[str]:
    """The numbered notebooks, e.g. ["01_generate"], in pipeline order."""
    return sorted(p.stem for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))


def load_params(path: str | os.PathLike | None, overrides: dict | None = None) -> dict:
    """Read a parameters YAML file (or start empty) and apply `overrides` to its `parameters`."""
    config: dict = {}
    if path is not None:
        try:
            config = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise RunConfigError(f"parameters file {path} does not exist") from None
        except yaml.YAMLError as exc:
            raise RunConfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(config, dict):
            raise RunConfigError(f"{path}: the top level must be a mapping (run_dir, stages, parameters)")
    allowed = {"run_dir", "report_dir", "stages", "parameters", "stage_parameters", "kernel"}
    unknown = set(config) - allowed
    if unknown:
        raise RunConfigError(f"{path}: unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
    params = dict(config.get("parameters") or {})
    per_stage = {str(k): dict(v or {}) for k, v in (config.get("stage_parameters") or {}).items()}
    for key, value in (overrides or {}).items():
        stage, _, name = key.rpartition(".")
        if stage:
            per_stage.setdefault(stage, {})[name] = value
        else:
            params[name] = value
    for name, value in [*params.items(), *(kv for d in per_stage.values() for kv in d.items())]:
        # Keys belong in the environment; a notebook's parameters end up in its HTML report.
        if _SECRET.search(name) and value:
            raise RunConfigError(
                f"parameter {name!r} looks like a secret; put it in an environment variable and pass its "
                f"name instead (e.g. api_key_env: OPENAI_API_KEY). Parameters are written into the reports."
            )
    config["parameters"] = params
    config["stage_parameters"] = per_stage
    return config


def _declared_parameters(notebook: Path) -> set[str]:
    import papermill

    return set(papermill.inspect_notebook(str(notebook)).keys())


def _resolve_stage(stage, known: list[str]) -> str:
    """"02_train", "02", 2 and "train" all name the notebook 02_train."""
    text = str(stage)
    match = [s for s in known if s == text or s.split("_", 1)[0] == text.zfill(2) or s.split("_", 1)[1] == text]
    if len(match) != 1:
        raise RunConfigError(f"unknown stage {stage!r}; available: {', '.join(known)}")
    return match[0]


def export_html(notebook: Path, html: Path) -> Path:
    """Export an executed notebook as a standalone HTML report (images inlined)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    html.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(body, encoding="utf-8")
    return html


def run_pipeline(params_file: str | os.PathLike | None = None, *, run_dir: str | None = None,
                 stages: list[str] | None = None, overrides: dict | None = None, report: bool = True,
                 notebook_dir: Path = NOTEBOOKS, log=print) -> dict:
    """Execute the chosen notebooks in order with papermill; returns {stage: {"notebook", "html", "seconds"}}.

    A stage that fails stops the run; its partly executed notebook is kept in the run
    directory (papermill marks the failing cell) and the error names it.
    """
    import papermill

    config = load_params(params_file, overrides)
    run_path = Path(run_dir or config.get("run_dir") or "runs/default").resolve()
    report_path = Path(config.get("report_dir") or ROOT / "reports" / run_path.name).resolve()
    known = available_stages(notebook_dir)
    chosen = stages or config.get("stages") or known
    resolved = [_resolve_stage(stage, known) for stage in chosen]
    config["stage_parameters"] = {_resolve_stage(k, known): v for k, v in config["stage_parameters"].items()}
    run_path.mkdir(parents=True, exist_ok=True)
    (run_path / "params.yaml").write_text(yaml.safe_dump({**config, "run_dir": str(run_path)}, sort_keys=False))
    results = {}
    for stage in resolved:
        source = notebook_dir / f"{stage}.ipynb"
        declared = _declared_parameters(source)
        merged = {**config["parameters"], **config["stage_parameters"].get(stage, {})}
        undeclared = sorted(set(config["stage_parameters"].get(stage, {})) - declared)
        if undeclared:
            raise RunConfigError(f"stage {stage} has no parameters {undeclared}; it takes: {', '.join(sorted(declared))}")
        params = {k: v for k, v in merged.items() if k in declared}
        params["run_dir"] = str(run_path)
        if "report_dir" in declared:  # stages that write their own report files (05's standalone map)
            params["report_dir"] = str(report_path)
        executed = run_path / f"{stage}.ipynb"
        log(f"[workbench] {stage}: executing {source.name} -> {executed}")
        t0 = time.perf_counter()
        try:
            papermill.execute_notebook(str(source), str(executed), parameters=params,
                                       kernel_name=config.get("kernel", "python3"), cwd=str(run_path),
                                       progress_bar=False)
        except papermill.PapermillExecutionError as exc:
            raise RuntimeError(f"stage {stage} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
                               f"The executed notebook with the error is {executed}") from None
        entry = {"notebook": str(executed), "seconds": round(time.perf_counter() - t0, 1)}
        if report:
            entry["html"] = str(export_html(executed, report_path / f"{stage}.html"))
            log(f"[workbench] {stage}: report {entry['html']}")
        results[stage] = entry
        log(f"[workbench] {stage}: done in {entry['seconds']}s")
    (run_path / "run.json").write_text(json.dumps(results, indent=2))
    return results
