"""Jupyter kernels for the suite, each a fork of one process that has already imported what a stage imports.

A stage notebook's kernel spends its first 7 to 9 s of CPU importing ipykernel, torch, transformers (its
modelling code too), pandas, scikit-learn, matplotlib, Bokeh and the workbench, before any cell computes. The
suite starts dozens of kernels: papermill's in `workbench run`, JupyterLab's and Notebook 7's. Here one
*zygote* per test session (shared by its xdist workers) imports them once and computes nothing; every kernel the suite starts is a fork of
it, running ipykernel's own `ipykernel_launcher` as `python -m ipykernel_launcher -f <connection file>` would,
with the environment, working directory and standard streams of the process Jupyter started.

How it plugs in: `start()` writes a kernel spec named `python3` whose command runs this file as a small *shim*
(standard library only, so it starts in milliseconds), and puts the spec first on `JUPYTER_PATH` for every
process the tests start. The shim hands its arguments, environment, folder and standard streams to the zygote
over a Unix socket and stands in for the kernel to the process that started it:
- it forwards the signals Jupyter sends (an interrupt, a terminate) to the kernel's process group;
- it ends with the kernel's exit status;
- if it is killed, the kernel ends too (it watches the shim's socket), and if the shim's parent dies the shim
  ends the kernel, as ipykernel's parent poller does (`JPY_PARENT_PID`).
Without the zygote's socket in the environment the shim runs `python -m ipykernel_launcher` itself.

Why a fork of an idle process is safe here: as in `script_launcher.py`, nothing computes before the fork, so no
torch, BLAS or OpenMP pool is copied half-held. matplotlib reads its backend when imported, so the zygote sets
the one ipykernel would set (`MPLBACKEND`, inline) first; numpy's global random state is reseeded in each kernel.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys

ENV = "WORKBENCH_TEST_KERNEL_ZYGOTE"  # the zygote's socket, for the shims
INLINE = "module://matplotlib_inline.backend_inline"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Imported by the zygote before it forks: the stage notebooks' own workbench imports are added (`_preload`).
PRELOAD = ["ipykernel.kernelapp", "ipykernel.ipkernel", "numpy", "pandas", "scipy.stats", "sklearn.linear_model",
           "torch", "transformers", "transformers.modeling_utils", "transformers.models.bert.modeling_bert",
           "transformers.models.llama.modeling_llama", "transformers.models.auto.tokenization_auto",
           "transformers.models.bert.tokenization_bert_fast", "transformers.convert_slow_tokenizer",
           "matplotlib.pyplot", "seaborn", "sklearn.cluster", "sklearn.decomposition", "sklearn.manifold",
           "bokeh.plotting", "ipywidgets", "jupyter_bokeh", "papermill"]
# Never preloaded: matplotlib_inline's backend module, which hooks figures into the shell only when it is first
# imported inside a kernel, and ipykernel's debugger (debugpy), which warns at import.


def start(folder, session: int) -> None:
    """Start a zygote with its socket and kernel spec in `folder`, serving until process `session` (the test
    session's pytest process, the one that starts the workers) ends. It binds its socket before importing, so a
    kernel asked for early waits for the imports, not in vain; this returns once the socket is there."""
    import subprocess
    import time
    from pathlib import Path

    folder = Path(folder)
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-S", os.path.abspath(__file__), "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python", "metadata": {"debugger": True},
        "kernel_protocol_version": "5.5"}))
    path = folder / "zygote.sock"
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", str(path), str(session)],
                               stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while not path.exists():
        if process.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the kernel zygote did not start (exit code {process.poll()})")
        time.sleep(0.02)


def environment(folder) -> dict:
    """What every process the tests start needs in its environment to have its kernels forked."""
    paths = [str(folder), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
    return {ENV: os.path.join(str(folder), "zygote.sock"), "JUPYTER_PATH": os.pathsep.join(paths)}


# ---- the shim: what Jupyter starts as the kernel ----

def shim(args: list[str]) -> None:
    path = os.environ.get(ENV)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path or "")
    except OSError:  # no zygote: the kernel as the standard spec starts it
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *args])
    request = {"argv": ["ipykernel_launcher", *args], "env": dict(os.environ), "cwd": os.getcwd()}
    socket.send_fds(sock, [b"k"], [0, 1, 2])
    sock.sendall(json.dumps(request).encode() + b"\n")
    reader = sock.makefile("rb")
    kernel = json.loads(reader.readline())["pid"]
    for sig in FORWARDED:  # Jupyter signals the shim's process group; the kernel has its own (setsid)
        signal.signal(sig, lambda number, frame: _signal_group(kernel, number))
    parent, polled = os.getppid(), "JPY_PARENT_PID" in os.environ
    while True:
        if select.select([sock], [], [], 0.2)[0]:
            line = reader.readline()
            status = json.loads(line)["status"] if line else 1
            if status < 0:  # killed by a signal: end the same way
                signal.signal(-status, signal.SIG_DFL)
                os.kill(os.getpid(), -status)
            os._exit(status)
        if polled and os.getppid() != parent:  # what ipykernel's parent poller does
            _signal_group(kernel, signal.SIGKILL)
            os._exit(1)


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        pass


# ---- the zygote ----

def serve(path: str, session: int) -> None:
    os.environ.setdefault("MPLBACKEND", INLINE)  # before matplotlib is imported: what ipykernel would set
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the name appears once connections queue
    _preload()
    gc.collect()
    gc.freeze()  # what is imported now stays out of every kernel's collections: none copies its pages to scan them
    waiting = {}  # kernel pid -> its shim's connection
    while running(session):  # the test session is over: so is the zygote
        if select.select([listener], [], [], 0.5)[0]:
            conn, _ = listener.accept()
            pid = _fork_kernel(conn, listener, waiting)
            if pid:
                waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                _send(conn, {"status": os.waitstatus_to_exitcode(status)})
                conn.close()


def running(pid: int) -> bool:
    """Whether process `pid` runs (an ended process its parent has not yet reaped counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def ends(pid: int, within: float = 5.0) -> bool:
    """Whether process `pid` has ended or ends within `within` seconds: a forked kernel ends a moment after the
    shim that Jupyter waited for."""
    import time

    deadline = time.time() + within
    while running(pid) and time.time() < deadline:
        time.sleep(0.05)
    return not running(pid)


def _preload() -> None:
    import importlib
    import re
    from pathlib import Path

    names = list(PRELOAD)
    for notebook in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        names += re.findall(r"(?:from|import) (workbench(?:\.\w+)*)", notebook.read_text())
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a kernel that needs it imports it (and says why not) itself


def _send(conn, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the shim is gone


def _fork_kernel(conn, listener, waiting: dict) -> int:
    """Read a shim's request and fork its kernel; return the kernel's pid (0 if the request was unreadable)."""
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        reader = conn.makefile("rb")
        request = json.loads(reader.readline())
    except (OSError, ValueError):
        conn.close()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in waiting.values():
            other.close()
        _run_kernel(conn, fds, request)  # never returns
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid


def _run_kernel(conn, fds: list[int], request: dict) -> None:
    import atexit
    import runpy
    import threading

    import numpy as np

    code = 1
    try:
        os.setsid()  # a group of its own, as Jupyter starts a kernel (start_new_session)
        for number, fd in enumerate(fds):
            os.dup2(fd, number)
            os.close(fd)
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it at start-up
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
        np.random.seed()  # a fresh process's global random state, not the zygote's
        threading.Thread(target=_end_with_shim, args=(conn,), daemon=True).start()
        try:
            runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        for thread in threading.enumerate():  # as the interpreter's exit does: its threads end first
            if not thread.daemon and thread is not threading.current_thread():
                thread.join()
        atexit._run_exitfuncs()  # then what it runs at exit
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _end_with_shim(conn) -> None:
    """The shim sends nothing after its request: the socket closes when it ends, killed or not."""
    while True:
        try:
            if not conn.recv(64):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.killpg(0, signal.SIGKILL)  # the kernel and what it started, as a kill of its group would


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        shim(sys.argv[1:])
