"""A run killed with SIGKILL (the runner and its kernel, as the OOM killer or a closed laptop does) in
stages 01, 03 and 05, and resumed each time with the same command, ends with what an uninterrupted
run of the same settings stores: the same summaries, the same checkpoints, the same metrics.

Both runs pin one thread per process (WORKBENCH_THREADS=1) and use the same batch sizes. Tolerance:
summaries and stored texts are compared exactly; checkpoint tensors and metrics within 1e-5, since a
resumed run encodes some texts in other batches than the uninterrupted one (the feature cache keeps
what was encoded before the kill), which may change the last float bits.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5


def _setup(home: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_aclsum.py"), str(home / "papers.csv"),
                    "--n", "8", "--sentences", "3"], check=True, capture_output=True)
    aspects = yaml.safe_load((ROOT / "data" / "my_field.yaml").read_text())
    aspects["aspects"] = aspects["aspects"][:2]
    (home / "aspects.yaml").write_text(yaml.safe_dump(aspects, sort_keys=False))
    quick = yaml.safe_load((ROOT / "params" / "own-corpus-quick.yaml").read_text())
    (home / "params.yaml").write_text(yaml.safe_dump({
        "parameters": {"corpus": "papers.csv", "aspects": "aspects.yaml", "seed": 0},
        "stage_parameters": quick["stage_parameters"]}))


def _command(run: str) -> list[str]:
    return [sys.executable, "-m", "workbench", "run", "--params", "params.yaml", "--run-dir", run, "--no-report"]


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WORKBENCH_THREADS": "1",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _run_to_the_end(home: Path, run: str) -> None:
    done = subprocess.run(_command(run), cwd=home, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _run_until_killed(home: Path, run: str, reached) -> None:
    """Start the run and SIGKILL its whole process group (runner and kernel) once `reached()` holds."""
    proc = subprocess.Popen(_command(run), cwd=home, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
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


def _tensors(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path))


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


def test_kills_in_stages_01_03_and_05_resume_to_what_an_uninterrupted_run_stores(tmp_path):
    home = tmp_path
    _setup(home)
    _run_to_the_end(home, "clean")
    clean, resumed = home / "clean", home / "resumed"

    def lines() -> int:
        path = resumed / "summaries.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    _run_until_killed(home, "resumed", lambda: lines() >= 5)  # in stage 01, a few summaries stored
    assert 5 <= lines() < len(_summaries(clean))
    _run_until_killed(home, "resumed", lambda: (resumed / ".03_distill.running.ipynb").exists())
    _run_until_killed(home, "resumed", lambda: (resumed / ".05_visualize.running.ipynb").exists())
    _run_to_the_end(home, "resumed")

    assert _summaries(resumed) == _summaries(clean)  # exactly: per-request seeds, whatever the kill left
    checkpoints = sorted(p.relative_to(clean) for p in clean.rglob("*.safetensors")
                         if p.parts[len(clean.parts)] in {"aspect_models", "unified_model", "decoders", "maps"})
    assert checkpoints and checkpoints == sorted(p.relative_to(resumed) for p in resumed.rglob("*.safetensors")
                                                 if p.parts[len(resumed.parts)] in
                                                 {"aspect_models", "unified_model", "decoders", "maps"})
    for name in checkpoints:
        a, b = _tensors(clean / name), _tensors(resumed / name)
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
