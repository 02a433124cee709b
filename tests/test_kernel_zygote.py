"""The suite's kernels (`kernel_zygote.py`): a forked kernel behaves as one the standard spec starts.

What a stage relies on: the folder and environment its kernel was started with, figures shown inline,
an interrupt that stops a cell, and a kernel that ends when Jupyter kills it. Without the zygote the same spec
starts the kernel as `python -m ipykernel_launcher` does.
"""

import os
import time

import pytest

pytestmark = pytest.mark.slow

PROBE = ("import os, sys, matplotlib\n"
         "print(os.getcwd(), os.environ.get('ZYGOTE_PROBE'), matplotlib.get_backend(), sys.argv[1], os.getpid(),"
         " os.getpgid(0) == os.getpid())")


def _kernel(cwd, env):
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd), env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def _run(client, code: str, timeout: float = 30) -> tuple[str, dict]:
    out = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(
        m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
    return "".join(out), reply["content"]


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "plain"])
def test_a_kernel_has_its_folder_environment_and_backend_stops_on_interrupt_and_dies_when_killed(forked, tmp_path,
                                                                                                forked_kernels):
    import kernel_zygote

    if forked and forked_kernels is None:
        pytest.skip("WORKBENCH_TEST_PLAIN_KERNELS=1: no zygote in this run")
    env = {**os.environ, "ZYGOTE_PROBE": "here"}
    if not forked:
        env.pop(kernel_zygote.ENV, None)
    manager, client = _kernel(tmp_path, env)
    try:
        printed, _ = _run(client, PROBE)
        cwd, probe, backend, flag, pid, own_group = printed.split()
        assert (cwd, probe, backend, flag, own_group) == (str(tmp_path), "here", kernel_zygote.INLINE, "-f", "True")
        pid = int(pid)
        figure = client.execute("import matplotlib.pyplot as plt; plt.plot([0, 1], [1, 0]); plt.show()")
        shown = []
        while True:  # the figure comes back inline, as a PNG, as stage reports need it
            message = client.get_iopub_msg(timeout=30)
            if message["parent_header"].get("msg_id") != figure:
                continue
            shown += [message["content"]["data"]] if message["msg_type"] == "display_data" else []
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
        assert any("image/png" in data for data in shown), shown
        assert client.get_shell_msg(timeout=30)["parent_header"]["msg_id"] == figure  # its reply, read
        assert (pid != manager.provisioner.pid) is forked  # forked: the shim stands in for it
        asked = client.execute("import time; time.sleep(30)")
        time.sleep(1.0)
        started = time.time()
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=10)
        assert reply["parent_header"]["msg_id"] == asked and reply["content"]["ename"] == "KeyboardInterrupt"
        while (after := _run(client, "print('on')"))[0] != "on\n" and time.time() - started < 10:
            pass  # (a cell right after an interrupt has, rarely, come back without its output)
        assert after[0] == "on\n", after  # and it goes on
        assert kernel_zygote.running(pid)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)  # a kill, as Jupyter's restart or a closed server does
    assert kernel_zygote.ends(pid)
