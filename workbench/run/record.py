"""A run's record, run.json: every stage the run directory ever completed, and what each re-run of a stage changed.

    {"01_generate": {"notebook", "seconds", "artifacts", "notices", "html", "at", "parameters",
                     "history": [{"run": 1, "at", "seconds"},
                                 {"run": 2, "at", "seconds", "changed": {"k": {"from": 4, "to": 2}}}]},
     "02_train": {...}}

One entry per stage, in stage order: the latest run of it, with the parameters it ran with, and its
history, one item per time it completed. A `--stages` re-run updates its own stages' entries and
keeps the others, so `workbench runs` lists a complete run as complete; `changed` says which
parameters differ from the stage's run before (a stage re-run with other parameters leaves the
stages after it computed from its earlier results until they are re-run too). The record is
written after each stage that completes, so a run that fails later keeps what it finished.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..core.files import write_json
from ..core.rundir import RUN_FILE

# Set by the runner for every stage and every run (where the run and its reports are): not a choice the
# record compares between runs.
NOT_COMPARED = ("run_dir", "report_dir")
UNKNOWN = "unknown: the run before did not record its parameters"


def read_record(run_path) -> dict:
    """The run's record {stage: entry}; {} when there is none, or when it cannot be read as one."""
    try:
        record = json.loads((Path(run_path) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in record.items() if isinstance(v, dict)} if isinstance(record, dict) else {}


def parameter_changes(before: dict | None, now: dict) -> dict | str:
    """{name: {"from": old, "to": new}} of the parameters that differ; UNKNOWN when `before` is not known.

    A name given in one run only shows null for the other (the notebook's default was used there).
    """
    if before is None:
        return UNKNOWN
    names = list(before) + [n for n in now if n not in before]
    return {n: {"from": before.get(n), "to": now.get(n)} for n in names if before.get(n) != now.get(n)}


def record_stage(run_path, stage: str, entry: dict, parameters: dict, at: str | None = None) -> dict:
    """Add a completed stage to the run's record (run.json) and write it; returns the whole record.

    entry: what the runner knows of this run of the stage (notebook, seconds, artifacts, notices,
    html); parameters: the values papermill injected. Every other stage's entry is kept as it was.
    """
    at = at or time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    given = {k: v for k, v in parameters.items() if k not in NOT_COMPARED}
    record = read_record(run_path)
    before = record.get(stage)
    history = list(before.get("history") or []) if before else []
    if before and not history:  # a record written before histories: its one run, as far as it is known
        history.append({"run": 1, "at": before.get("at"), "seconds": before.get("seconds")})
    this_run = {"run": len(history) + 1, "at": at, "seconds": entry.get("seconds")}
    if before:
        this_run["changed"] = parameter_changes(before.get("parameters"), given)
    record[stage] = {**entry, "at": at, "parameters": given, "history": history + [this_run]}
    record = dict(sorted(record.items()))  # stage order (the stages are numbered), however they were run
    write_json(Path(run_path) / RUN_FILE, record)
    return record
