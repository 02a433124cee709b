"""Stage 03's encoder passes on Ray Data against the in-process path: same numbers, a real head, loopback only, resume.

One Ray head for the module (`ray start --head`, started here, joined by address), kept on loopback by
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 and RAY_USAGE_STATS_ENABLED=0 (../shared/OFFLINE_ASSETS.md). The
backbone reads at most 64 tokens here (the engines take the cache's backbone as it is), so the passes
cost seconds; the numbers compared are the engines', not the length's. Stage 03's embeddings are compared on an
untrained one-layer BERT with MiniLM's tokenizer: their test kills its driver at a fixed point, so no pass has to
outlast a watcher, and the feature passes keep MiniLM, which does (the workers are killed while blocks remain).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# Before Ray is first imported: it reads these once. Without the first, it swaps 127.0.0.1 for this machine's
# network address and connects through it (../shared/OFFLINE_ASSETS.md). Token authentication is on for the
# head, its workers and every driver alike (a driver whose Ray was imported before token auth was turned on sends
# no token and is refused), with a token made here for this module: `ray start` does not make one where
# ~/.ray/auth_token is missing, as on a fresh machine, and the user's own file is left alone.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
os.environ.update(RAY_ENV)
if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (the scale extra)", allow_module_level=True)

from workbench.core.rundir import RunDir  # noqa: E402
from workbench.data.corpus import Corpus  # noqa: E402
from workbench.embed.embeddings import embed_corpus, embeddings_key, text_hashes  # noqa: E402
from workbench.embed.engine import LocalEngine, make_engine  # noqa: E402
from workbench.embed.engine_parts import EmbeddingParts, document_texts  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone, text_key  # noqa: E402
from workbench.embed.heads import PooledAspectModel  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
N_DOCS = 200
FIRST_DOCS = 60  # run A's papers: the shard a killed job left, and the two-node test's texts
MAX_LENGTH = 64
WIDTH = 64  # the tiny backbone's vectors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_processes(temp_dir: str) -> list:
    """The head's processes (their command line names its own temp dir) and all they started (workers, actors)."""
    import psutil

    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        if temp_dir in " ".join(proc.info["cmdline"] or []):
            roots.append(proc)
    found = {p.pid: p for p in roots}
    for proc in roots:
        try:
            found.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.Error:
            pass
    return list(found.values())


@pytest.fixture(scope="module")
def head():
    """A Ray head started as a user would (`ray start --head`, its own temp dir), yielding its address; its
    processes are ended by id at the end (never `ray stop`, which would end every Ray session on the machine)."""
    import psutil

    port, temp_dir = _free_port(), tempfile.mkdtemp(prefix="wbray", dir="/tmp")  # short: Ray's socket paths
    env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(ROOT)}
    ray_bin = str(Path(sys.executable).with_name("ray"))
    started = subprocess.run([ray_bin, "start", "--head", "--port", str(port), "--num-cpus", "2",
                              "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp_dir],
                             env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}", temp_dir
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        procs = _session_processes(temp_dir)
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """An untrained, seeded one-layer BERT (WIDTH wide) with MiniLM's tokenizer, saved as a local model folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel
    from workbench.core.models import resolve_model

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm").path)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=WIDTH,
                         num_hidden_layers=1, num_attention_heads=2, intermediate_size=2 * WIDTH,
                         max_position_embeddings=512)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def corpus():
    """The first N_DOCS CSAbstruct abstracts (text only: no label is read)."""
    rows = [json.loads(line) for line in (ROOT / "data" / "csabstruct" / "csabstruct.jsonl").open()][:N_DOCS]
    return Corpus(pd.DataFrame({"doc_id": [r["doc_id"] for r in rows], "title": "",
                                "abstract": [" ".join(r["sentences"]) for r in rows]}), name="csabstruct-200")


def _kill_workers_after_first_shard(head, folder: Path, pass_thread: threading.Thread) -> list[int]:
    """SIGKILL every encoder actor of the head once the pass has stored a shard of its own (beyond the one copied
    in); returns their process ids."""
    deadline = time.time() + 120
    while len(list(folder.glob("shard-*.json"))) < 2:
        assert pass_thread.is_alive() and time.time() < deadline, "the pass stored no shard of its own"
        time.sleep(0.05)
    workers = [p for p in _session_processes(head[1]) if "MapWorker" in " ".join(p.cmdline())]
    for proc in workers:
        proc.send_signal(signal.SIGKILL)
    return [p.pid for p in workers]


@pytest.fixture(scope="module")
def passes(tmp_path_factory, head, corpus):
    """The feature pass in process (run A, the first FIRST_DOCS papers: one shard) and on the head with 2 workers
    (run B, every paper), and the Ray engine used. Run B starts with run A's shard, as a killed job would leave
    it: the Ray pass resumes from there and encodes the rest.
    Both workers are killed -9 once the Ray pass has stored its first shard: Ray restarts them and the pass
    ends with every text (the test below checks the numbers)."""
    runs = [RunDir(tmp_path_factory.mktemp(name)) for name in ("local", "ray")]
    backbone = FrozenBackbone("minilm", max_length=MAX_LENGTH)
    with pytest.MonkeyPatch.context() as patch:  # shards of 500 texts: run A's texts are one
        patch.setattr("workbench.embed.features.SHARD_ROWS", 500)
        LocalEngine().encode_documents(FeatureCache.for_run(runs[0], backbone), corpus.texts()[:FIRST_DOCS])
    folder = runs[1] / "features" / backbone.key
    folder.mkdir(parents=True)
    for suffix in (".safetensors", ".json"):
        shutil.copy(runs[0] / "features" / backbone.key / f"shard-00001{suffix}", folder / f"shard-00001{suffix}")
    engine = make_engine("ray", ray_address=head[0], workers=2)
    failed = []
    with pytest.MonkeyPatch.context() as patch:  # shards of 300 texts: the pass stores one before it ends
        patch.setattr("workbench.embed.ray_engine.SHARD_ROWS", 300)
        t0 = time.perf_counter()
        pass_thread = threading.Thread(target=lambda: _record_failure(failed, engine.encode_documents,
                                                                      FeatureCache.for_run(runs[1], backbone),
                                                                      corpus.texts()))
        pass_thread.start()
        killed = _kill_workers_after_first_shard(head, folder, pass_thread)
        pass_thread.join(300)
    assert not pass_thread.is_alive() and failed == [], failed
    print(f"ray feature pass: {time.perf_counter() - t0:.1f}s, workers {killed} killed after its first shard")
    return runs, backbone, engine, killed


def _record_failure(failed: list, fn, *args) -> None:
    try:
        fn(*args)
    except Exception as exc:  # raised in the test's thread, not lost in this one
        failed.append(exc)


def test_features_same_numbers_on_a_real_head_and_resume_by_shard(passes, corpus):
    """Same vectors as in process, after a resume from a finished shard and with both workers killed -9 after
    the pass's first shard; every text stored once."""
    (_, run_b), backbone, engine, killed = passes
    assert len(killed) == 2  # both encoder actors were found and killed
    texts = document_texts(corpus.texts())
    kept = json.loads((run_b / "features" / backbone.key / "shard-00001.json").read_text())["keys"]
    assert set(kept) == {text_key(t) for t in document_texts(corpus.texts()[:FIRST_DOCS])}
    assert 0 < len(kept) < len(set(texts))
    assert engine.computed == len(set(texts)) - len(kept)  # the finished shard was not encoded again
    shards = sorted((run_b / "features" / backbone.key).glob("shard-*.json"))
    assert len(shards) > 2  # today's cache format, a shard per 300 texts
    stored = [k for shard in shards for k in json.loads(shard.read_text())["keys"]]
    assert len(stored) == len(set(stored)) == len(set(texts))  # nothing lost, nothing stored twice
    fresh = FeatureCache.for_run(run_b, backbone)  # read back from the shards alone
    assert fresh.missing(texts) == []
    assert fresh.vectors(texts).shape == (len(texts), 384)
    # Same numbers as in process: the backbone itself, one text at a time, on every 25th text the actors encoded
    # (abstracts and sentences, in the corpus's order) and the last.
    ray_made = [t for t in texts if text_key(t) not in set(kept)]
    sample = ray_made[::25] + ray_made[-1:]
    alone = np.stack([backbone.embed([t])[0] for t in sample])
    assert np.abs(alone - fresh.vectors(sample)).max() <= 1e-5
    leftover = RunDir(run_b).engine_input("x").parent
    assert not leftover.exists() or not any(leftover.iterdir())  # the Parquet blocks are removed


def _model(run: RunDir, backbone: str) -> Path:
    """A unified model of two pooling heads (seeded, untrained) on the test's backbone, saved in the run."""
    PooledAspectModel(backbone, ["method", "result"], hidden=WIDTH, max_length=MAX_LENGTH,
                      pool=True).save_pretrained(run.unified_model)
    return run.unified_model


def test_blocks_of_length_sorted_texts_cost_alike_and_keep_each_batch_of_one_length():
    from workbench.embed.ray_engine import blocks

    lengths = np.sort(np.random.default_rng(0).integers(10, 300, size=5000))  # texts sorted by length
    parts = blocks(len(lengths), 600, 256, lengths)
    assert sorted(j for p in parts for j in p) == list(range(len(lengths)))  # every row once
    costs = [int(lengths[list(p)].sum()) for p in parts]
    assert max(costs) <= 1.2 * min(costs)  # cut in order, the last block would cost several times the first
    assert costs == sorted(costs, reverse=True)  # the heaviest first: none is left alone at the end
    in_order = [int(lengths[list(p)].sum()) for p in blocks(len(lengths), 600)]
    assert max(in_order) > 3 * min(in_order)
    for p in parts:  # each actor batch (256 rows of a block, in order) is one chunk of consecutive sorted rows
        for start in range(0, len(p), 256):
            batch = p[start:start + 256]
            assert batch == list(range(batch[0], batch[0] + len(batch)))


def test_a_wrong_head_address_is_said_at_once():
    """Ray retries an address where nothing listens for minutes; the engine tries it first and says so."""
    from workbench.embed.ray_engine import reach_head

    port = _free_port()  # nothing listens there once the probe socket is closed
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match=f"no Ray head answers at 127.0.0.1:{port}.*ray start --head"):
        reach_head(f"127.0.0.1:{port}")
    with pytest.raises(ConnectionError, match="not host:port"):
        reach_head("127.0.0.1")
    assert time.perf_counter() - t0 < 5


def test_embeddings_same_numbers_and_resume_after_kill(passes, corpus, head, tiny):
    """Stage 03's embeddings: in process vs Ray (same rows, same order); a driver killed -9 right after its first
    part is written (it kills itself there: no race with a poll) leaves that part, and the rerun embeds only the
    papers no finished part holds. One actor each (every actor loads torch and the model: seconds): the features
    pass above is the one with two."""
    (run_a, run_b), _, _, _ = passes
    local = embed_corpus(_model(run_a, tiny), corpus, run_a, progress=False, engine="local")
    model_dir = _model(run_b, tiny)
    key = embeddings_key(model_dir, corpus)
    parts = EmbeddingParts(run_b, key)
    script = (f"from workbench.embed.checkpoints import load_model\n"
              f"from workbench.embed.engine import EmbeddingParts\n"
              f"from workbench.embed.ray_engine import RayEngine\n"
              f"import json, os, signal, sys\n"
              f"write = EmbeddingParts.write\n"
              f"def write_then_die(self, *a, **k):\n"
              f"    write(self, *a, **k)\n"
              f"    os.kill(os.getpid(), signal.SIGKILL)\n"
              f"EmbeddingParts.write = write_then_die\n"
              f"texts, pairs = json.load(sys.stdin)\n"
              f"RayEngine({head[0]!r}, workers=1, part_rows=40).embed_rows(load_model({str(model_dir)!r}), "
              f"{str(model_dir)!r}, texts, [tuple(p) for p in pairs], EmbeddingParts({str(run_b)!r}, {key!r}))\n")
    pairs = [list(p) for p in zip(corpus.ids, text_hashes(corpus.texts()))]
    driver = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, cwd=ROOT, text=True,
                              env={**os.environ, **RAY_ENV, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver.stdin.write(json.dumps([corpus.texts(), pairs]))
    driver.stdin.close()
    try:
        assert driver.wait(timeout=180) == -signal.SIGKILL  # it died by the kill, after writing its first part
    finally:
        driver.kill()
    done = len(parts.finished())
    assert 0 < done < N_DOCS, done  # killed after a part and before the last
    engine = make_engine("ray", ray_address=head[0], workers=1)  # one actor: the features pass holds two
    remote = embed_corpus(model_dir, corpus, run_b, progress=False, engine=engine)
    assert engine.computed == N_DOCS - done
    assert list(local) == list(remote) == ["method", "result"]
    for aspect in local:
        assert local[aspect].shape == (N_DOCS, WIDTH)
        assert np.abs(local[aspect] - remote[aspect]).max() <= 1e-5
    meta = json.loads((run_b.embeddings / f"{key}.json").read_text())
    assert meta["doc_ids"] == corpus.ids  # same ids, same order
    assert not parts.folder.exists()  # the parts are gone once the entry is whole


def _on_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_every_ray_socket_is_on_loopback(passes, head):
    """Every socket of the head's processes, their workers and this driver: TCP/UDP, listening or connected,
    on 127.0.0.0/8 or ::1 only."""
    import psutil

    procs = _session_processes(head[1]) + [psutil.Process()]
    checked, outside = 0, []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in conns:
            for addr in (c.laddr, c.raddr):
                if addr:
                    checked += 1
                    if not _on_loopback(addr.ip):
                        outside.append((proc.pid, proc.name(), addr, c.status))
    assert len(procs) >= 4 and checked >= 4, (len(procs), checked)  # the head's processes were found
    assert not outside, outside


def test_the_ray_benchmark_runs_in_smoke_mode_on_the_head(head, passes, monkeypatch, capsys):
    """benchmarks/ray_engine.py --smoke, run as `__main__` as tests/test_benchmarks.py runs every other script, but
    in this process, joined to this module's head (`--address`): the suite pays for one Ray start, one driver
    and one MiniLM load, not two."""
    import runpy

    from test_benchmarks import RESULT

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["ray_engine.py", "--smoke", "--address", head[0]])
    runpy.run_path(str(ROOT / "benchmarks" / "ray_engine.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert RESULT.search(out) and "every text once: True" in out, out[-3000:]
    assert "Ray, with its join" in out, out[-3000:]  # it joined the head rather than starting its own


# Two Ray nodes and a driver in a network namespace of their own, whose only interface is its loopback: Ray may
# then run as a cluster (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1) and still reach nothing outside it. A process
# namespace of their own too: every process the nodes start ends when the script does.
TWO_NODES = """set -e
ip link set lo up
"$RAY" start --head --port 6379 --num-cpus 1 --include-dashboard=false --disable-usage-stats --temp-dir "$TEMP" >/dev/null
"$RAY" start --address 127.0.0.1:6379 --num-cpus 1 --disable-usage-stats >/dev/null
"$PYTHON" -c "$DRIVER"
"""
TWO_NODES_DRIVER = """
import json, os, sys, psutil, ray
from workbench.embed.features import FeatureCache, FrozenBackbone
from workbench.embed.ray_engine import RayEngine
engine = RayEngine("127.0.0.1:6379", workers=2)
texts = json.load(open(os.environ["TEXTS"]))
backbone = FrozenBackbone(os.environ["BACKBONE"], max_length=64)
engine.encode_documents(FeatureCache.for_run(os.environ["RUN"], backbone), texts)
print(json.dumps({"nodes": sum(n["Alive"] for n in ray.nodes()), "rows_per_node": engine.rows_per_node,
                  "addresses": [a.ip for c in psutil.net_connections("inet") for a in (c.laddr, c.raddr) if a]}))
"""


def _namespaces_allowed() -> bool:
    try:
        return shutil.which("ip") is not None and subprocess.run(
            ["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def test_two_nodes_in_a_network_namespace_share_the_feature_pass(passes, corpus, tmp_path):
    """A head and a second node (one CPU each) in a network namespace made here, joined by a driver in it: each
    node's actor encodes at least a quarter of the texts, the vectors are the in-process ones, and every socket
    in the namespace is on loopback. Skipped where this machine allows no namespaces (unshare needs root).
    MiniLM, not the tiny backbone: its pass outlasts the start of the second node's actor, where the tiny one's
    whole pass ended on the first node's actor before that (the blocks go to whichever actor is ready)."""
    if not _namespaces_allowed():
        pytest.skip("this machine allows no network namespaces here (unshare -n needs root, and ip)")
    (run_a, _), backbone, _, _ = passes
    texts = corpus.texts()[:FIRST_DOCS]  # run A's papers: the vectors to compare with
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    temp_dir = tempfile.mkdtemp(prefix="wbns", dir="/tmp")  # short: Ray's socket paths
    env = {**os.environ, **RAY_ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "PYTHONPATH": str(ROOT),
           "RAY": str(Path(sys.executable).with_name("ray")), "PYTHON": sys.executable, "TEMP": temp_dir,
           "DRIVER": TWO_NODES_DRIVER, "BACKBONE": backbone.name, "TEXTS": str(tmp_path / "texts.json"),
           "RUN": str(tmp_path / "run")}
    try:
        done = subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "bash", "-c", TWO_NODES], env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"two nodes in a namespace: rows per node {report['rows_per_node']}")
    every = document_texts(texts)
    assert report["nodes"] == 2 and len(report["rows_per_node"]) == 2
    assert sum(report["rows_per_node"].values()) == len(set(every))
    assert min(report["rows_per_node"].values()) >= len(set(every)) / 4  # each node did a quarter or more
    assert report["addresses"] and all(_on_loopback(a) for a in report["addresses"]), report["addresses"]
    ours = FeatureCache.for_run(tmp_path / "run", backbone)
    assert ours.missing(every) == []
    assert np.abs(ours.vectors(every) - FeatureCache.for_run(run_a, backbone).vectors(every)).max() <= 1e-5
