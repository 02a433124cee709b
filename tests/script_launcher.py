"""Run Python scripts as `python script.py args` does, each in a fresh process, without paying the imports each time.

A script of this project spends its first 6 to 8 s importing torch, transformers (and, on its first model load,
transformers' modelling code), pandas, scikit-learn, matplotlib, Bokeh and the workbench. The launcher is one
process that imports them once, computes nothing, and forks a child per script: the child has
them in memory as a fresh interpreter would after its own imports, and runs the script as `__main__` with its
argv, its folder first on sys.path, the working directory and the environment given, its output in files. A
script's failure, `sys.exit`, or crash stays in its child; the launcher only reports the exit code.

Why a fork of an idle process is safe here: no torch, BLAS or OpenMP work runs in the launcher before it forks,
so no thread pool or lock is copied half-held (the pools start in the child, at its first operation).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

# The launcher's program: import, then one JSON job per line on stdin, one JSON answer per line on stdout.
PROGRAM = r"""
import json, os, runpy, sys, traceback
import numpy, pandas, scipy.stats, sklearn.linear_model, torch, transformers  # imported, nothing computed
# What transformers imports on a first model load (1.8 s), and the plotting and workbench modules the scripts use.
import transformers.modeling_utils, transformers.models.bert.modeling_bert, matplotlib.pyplot, bokeh.plotting
import workbench.decode.decoding, workbench.embed.heads, workbench.maps.tsne, workbench.run.runner

for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()  # first: its own process group, so that a timeout kills the script and whatever it started
            out = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the launcher's stdin carries the jobs
            sys.stdin = open(0, closefd=False)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            sys.argv = [job["script"], *job["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(job["script"]))
            try:
                runpy.run_path(job["script"], run_name="__main__")
                code = 0
            except SystemExit as exc:
                if isinstance(exc.code, int) or exc.code is None:
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            import atexit, threading
            for thread in threading.enumerate():  # as the interpreter's exit does: its threads end first (a map's
                if not thread.daemon and thread is not threading.current_thread():  # background click caches)
                    thread.join()
            atexit._run_exitfuncs()  # then what it runs at exit: temporary folders removed
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@dataclass
class Finished:
    """What `subprocess.run(..., capture_output=True, text=True)` would return of a script."""
    returncode: int
    stdout: str
    stderr: str


class ScriptLauncher:
    """One launcher process; `run(script, args, env, cwd, timeout)` runs a script in a forked child of it."""

    def __init__(self, folder: Path, env: dict | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.process = subprocess.Popen([sys.executable, "-c", PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env, start_new_session=True)

    def run(self, script: Path, args: list[str], env: dict, cwd: Path, timeout: float) -> Finished:
        """Run `script` with `args` as `python script args` would, in `cwd` with `env`; kill it after `timeout` s."""
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        job = {"script": str(script), "args": list(args), "env": dict(env), "cwd": str(cwd), "stdout": str(out),
               "stderr": str(err)}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        started = self.process.stdout.readline()
        if not started:
            raise RuntimeError(f"the script launcher is gone (exit code {self.process.poll()}); {script} did not start")
        pid = json.loads(started)["pid"]
        timer = threading.Timer(timeout, lambda: _kill_group(pid))
        timer.start()
        try:
            answer = self.process.stdout.readline()
        finally:
            timer.cancel()
        if not answer:
            raise RuntimeError(f"the script launcher ended while running {script}")
        return Finished(json.loads(answer)["returncode"], out.read_text(errors="replace"),
                        err.read_text(errors="replace"))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(self.process.pid)
                self.process.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
