"""The Ray engine of stages 02-03's encoder passes (`engine.py`): Ray Data over Parquet blocks, one encoder per actor.

    engine = RayEngine()                       # ray.init(): a local instance, no set-up needed
    engine = RayEngine(address="10.0.0.1:6379")  # joins a running cluster (the run directory on shared storage)

The texts to encode go to Parquet blocks in the run directory (`RunDir.engine_input`), Ray Data reads them,
and `map_batches` runs an actor class that loads the encoder once per actor: one actor per GPU where the
cluster has GPUs (`num_gpus=1`), else one per CPU given to the engine. The vectors stream back to this
process, which writes them as they come (feature-cache shards, embeddings parts), so a killed job keeps
what it finished. Ray is imported here only, and only when this engine is used: `pip install -e ".[scale]"`.

Network: Ray sends usage statistics unless told not to; the workbench always tells it not to
(RAY_USAGE_STATS_ENABLED=0). A local instance is also kept on loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0:
without it Ray's processes reach each other through the machine's own address); a cluster's nodes need its
network, so joining one leaves that to the cluster's own settings.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.rundir import RunDir
from .engine_parts import PART_ROWS, SCALE_EXTRA, EmbeddingParts, document_texts
from .features import SHARD_ROWS, FeatureCache, FrozenBackbone, by_length

BLOCK_ROWS = 4096  # texts per Parquet block at most (a million abstracts and their sentences: about 2,000 blocks)
MIN_BLOCK_ROWS = 64
ACTORS_READY_S = 600  # seconds a pass waits for its actors to load their encoders (a large model, a busy cluster)
ACTOR_BATCH = 256  # texts per `map_batches` call of an actor: a killed actor loses at most this much
HEAD_TIMEOUT = 10.0  # seconds a head's address may take to accept a connection
READ_CPUS = 0.1  # reading Parquet is light: the read tasks must not wait for a CPU the encoders hold
# Read tasks at once, cluster-wide. A block of 4,096 texts reads in milliseconds and encodes in seconds, so two
# readers keep any pool of encoders fed; each more reader is one more Ray worker process started (about 2.5 s of
# CPU and 100 MB each: with Ray's default, a 2-CPU head started 8 of them for two passes).
READ_CONCURRENCY = 2


def on_this_machine(address: str | None) -> bool:
    """Whether a session at `address` stays on this machine: a local instance (None), or a head on loopback."""
    if address is None:
        return True
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def blocks(n: int, rows: int, batch: int | None = None, cost=None) -> list[range | list[int]]:
    """The rows of each Parquet block: `rows` consecutive rows each, or, with `batch` and `cost` (each row's cost,
    the rows sorted by it), the rows' batches of `batch` spread over ceil(n / rows) blocks, each batch to the block
    that costs least so far (heaviest batch first), and the blocks heaviest first (Ray hands them out in order).
    Sorted and cut in order, the last block held every long text: a 2,000-abstract pass ran at 0.70x the in-process
    one, an actor idle at the end. Each actor batch is still of one length."""
    if batch is None or cost is None:
        return [range(start, min(start + rows, n)) for start in range(0, n, rows)]
    chunks = [range(start, min(start + batch, n)) for start in range(0, n, batch)]
    weight = np.add.reduceat(np.asarray(cost, dtype=np.float64), [c.start for c in chunks]).tolist()
    k = -(-n // rows) if n else 0
    load, held = [0.0] * k, [[] for _ in range(k)]
    for c in sorted(range(len(chunks)), key=lambda c: -weight[c]):
        b = min(range(k), key=load.__getitem__)
        load[b] += weight[c]
        held[b].append(c)
    order = sorted(range(k), key=lambda b: -load[b])
    # Each block's batches in row order: the short last batch (the longest texts) ends its block.
    return [[j for c in sorted(held[b]) for j in chunks[c]] for b in order if held[b]]


def reach_head(address: str, timeout: float = HEAD_TIMEOUT) -> None:
    """Raise ConnectionError, naming `address`, where no Ray head accepts a connection there within `timeout`
    seconds ("auto" and Ray Client's ray:// addresses are left to Ray)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.strip().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
            return
    except ValueError:
        raise ConnectionError(f"ray_address {address!r} is not host:port (the head's GCS port, 6379 by "
                              f"default)") from None
    except OSError as exc:
        raise ConnectionError(f"no Ray head answers at {address} ({exc.strerror or exc}): start one there with "
                              f"`ray start --head --port {port or 6379}`, or fix ray_address (the head prints "
                              f"its address when it starts)") from None


def ray_session(address: str | None = None, num_cpus: int | None = None):
    """The `ray` module with a session started (`ray.init()`, local) or joined (`address`); reused if one is up."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    local = on_this_machine(address)
    if local:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        from ray._private import ray_constants
    except ImportError as exc:
        raise ImportError(f"engine 'ray' needs Ray, which is not installed: {SCALE_EXTRA} (the scale extra)") from exc
    if local and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        # Ray reads the variable once, when it is first imported: a Ray imported before this call (by the user,
        # by a test) would still put this machine's own network address in place of 127.0.0.1, both to start a
        # local instance and to join a head on loopback, and connect through it.
        ray_constants.ENABLE_RAY_CLUSTER = False
    if not ray.is_initialized():
        if address is None:
            # One CPU more than the encoders take: Ray Data's reads need one free (`RayEngine._pool`).
            ray.init(num_cpus=(num_cpus or os.cpu_count()) + 1, include_dashboard=False, log_to_driver=False)
        else:
            reach_head(address)  # Ray itself would retry a wrong address for minutes, saying little
            ray.init(address=address, log_to_driver=False)
    from ray.data import DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = False
    # Ray Data's newer Parquet reader (2.60's default) hands a small dataset's files to the actors as one input,
    # so one actor did all the work and every result came back at once; the first reader keeps a block per file.
    context.use_datasource_v2 = False
    # A pass starts once every actor has loaded its encoder: otherwise the first one ready takes the blocks while
    # the others still load (on two nodes, the first node's actor encoded all of a 500-text pass). Past
    # ACTORS_READY_S Ray says that the cluster could not start them.
    context.wait_for_min_actors_s = ACTORS_READY_S
    return ray


class BackboneActor:
    """A Ray actor holding the frozen backbone: {"text"} in, {"text", "vector"} out (unit rows)."""

    def __init__(self, name: str, pooling: str, max_length: int, batch_size: int, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        self.backbone, self.batch_size = FrozenBackbone(name, pooling=pooling, max_length=max_length), batch_size
        self.backbone.encoder()  # loaded once per actor, before the first batch

    def __call__(self, batch: dict) -> dict:
        texts = [str(t) for t in batch["text"]]
        return {"text": batch["text"], "vector": self.backbone.embed(texts, batch_size=self.batch_size),
                "node": node_column(len(texts))}


class EmbedActor:
    """A Ray actor holding stage 03's unified model: {"row", "text"} in, {"row", <aspect>...} out (unit rows)."""

    def __init__(self, model_dir: str, batch_size: int, threads: int):
        import torch

        from .checkpoints import load_model

        torch.set_num_threads(max(1, threads))
        self.model = load_model(model_dir, run_dir=None)
        self.batch_size = batch_size

    def __call__(self, batch: dict) -> dict:
        if hasattr(self.model, "cache"):
            self.model.cache = None  # an in-memory cache per batch: an actor's memory stays bounded
        out = self.model.encode([str(t) for t in batch["text"]], batch_size=self.batch_size, normalize=True)
        return {"row": batch["row"], "node": node_column(len(batch["row"])),
                **{f"aspect:{a}": v for a, v in out.items()}}


def node_column(n: int) -> np.ndarray:
    """The id of the Ray node this actor runs on, once per row: the engine counts the rows each node did."""
    import ray

    return np.full(n, ray.get_runtime_context().get_node_id())


class RayEngine:
    """Stages 02-03's passes on Ray Data (`engine.py` says what each pass writes and how a rerun resumes)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, batch_size: int = 32,
                 part_rows: int = PART_ROWS):
        self.address, self.workers, self.batch_size, self.part_rows = address, workers, batch_size, part_rows
        self.computed = 0  # texts (or papers) the last pass sent to the actors: a resumed pass sends only the rest
        self.rows_per_node: Counter = Counter()  # rows each Ray node's actors returned in the last pass

    def _tally(self, batch: dict) -> None:
        self.rows_per_node.update(str(n) for n in batch["node"])

    def _said(self, progress: bool, what: str) -> None:
        if progress and len(self.rows_per_node) > 1:  # a cluster: say how the work was spread
            print(f"{what} per Ray node: " + ", ".join(f"{n[:8]} {c}" for n, c in self.rows_per_node.most_common()))

    def _pool(self, ray) -> tuple[int, dict]:
        """(actors, resources of each) for `map_batches`: one per GPU where the cluster has any, else `workers` (default:
        one per CPU but one). Ray Data's file listing and reads need a whole free CPU of the cluster's count, so
        the CPU actors share the count less one: two actors on a 2-CPU head ask for half a CPU each."""
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), float(resources.get("CPU", 1))
        if gpus:
            return self.workers or gpus, {"num_gpus": 1, "num_cpus": 1}
        n = self.workers or max(1, int(cpus) - 1)
        return n, {"num_cpus": max(cpus - 1, 0.5) / n}

    def _dataset(self, folder: Path, columns: dict, actor, kwargs: dict, by_length: bool = False):
        """Parquet blocks of `columns` in `folder`, read by Ray Data and mapped by `actor` (a stream of batches).
        by_length: the rows are sorted by length, and the blocks are dealt so that each costs alike (`blocks`)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ray = ray_session(self.address, self.workers)
        shutil.rmtree(folder, ignore_errors=True)  # blocks a killed job left: its texts are listed again
        folder.mkdir(parents=True)
        size, resources = self._pool(ray)
        n = len(next(iter(columns.values())))
        rows = min(BLOCK_ROWS, max(MIN_BLOCK_ROWS, n // (4 * size)))  # some blocks per actor, so all of them work
        batch = min(ACTOR_BATCH, rows)
        parts = blocks(n, rows, batch, [len(t) for t in columns["text"]] if by_length else None)
        for i, part in enumerate(parts):
            pq.write_table(pa.table({k: [v[j] for j in part] for k, v in columns.items()}),
                           folder / f"block-{i:05d}.parquet")
        # One block per file: Ray would otherwise merge small files into fewer blocks than there are actors.
        ds = ray.data.read_parquet(str(folder), num_cpus=READ_CPUS, override_num_blocks=len(parts),
                                   concurrency=min(READ_CONCURRENCY, len(parts)))
        return ds.map_batches(actor, fn_constructor_kwargs={**kwargs, "threads": max(1, round(resources["num_cpus"]))},
                              batch_size=batch, batch_format="numpy",
                              compute=ray.data.ActorPoolStrategy(size=size), **resources)

    def _input(self, run, tag: str) -> Path:
        """Where the Parquet blocks go: the run directory (every node sees it), else a temporary folder."""
        return RunDir(run).engine_input(tag) if run is not None else Path(tempfile.mkdtemp(prefix="engine-"))

    def encode_documents(self, cache: FeatureCache, texts: Sequence[str], progress: bool = False) -> int:
        """Put every abstract and sentence of `texts` in the cache, a shard per SHARD_ROWS vectors as they arrive."""
        todo = by_length(cache.missing(document_texts(texts)))  # each actor's batches pad little
        self.computed, self.rows_per_node = len(todo), Counter()
        if not todo:
            return 0
        b = cache.backbone
        folder = self._input(cache.run, f"features-{b.key}-{os.getpid()}")
        ds = self._dataset(folder, {"text": todo}, BackboneActor,
                           {"name": b.name, "pooling": b.pooling, "max_length": b.max_length,
                            "batch_size": self.batch_size}, by_length=True)
        done, got, vectors = 0, [], []
        try:
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                self._tally(batch)
                got += [str(t) for t in batch["text"]]
                vectors.append(np.asarray(batch["vector"], dtype=np.float32))
                if len(got) >= SHARD_ROWS:
                    cache.add(got, np.concatenate(vectors))
                    done, got, vectors = done + len(got), [], []
                    if progress:
                        print(f"features: {done} of {len(todo)} texts encoded")
            if got:
                cache.add(got, np.concatenate(vectors))
            self._said(progress, "texts encoded")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return len(todo)

    def embed_rows(self, model, model_dir, texts: Sequence[str], pairs: Sequence[tuple[str, str]],
                   parts: EmbeddingParts, progress: bool = False) -> dict[str, np.ndarray]:
        """{aspect: unit rows [len(texts), dim]}: `write_parts`, then every row read back from the parts, in the
        order given (in memory: `embeddings.stored_embeddings` reads the parts by blocks instead)."""
        self.write_parts(model, model_dir, texts, pairs, parts, progress)
        return parts.read(pairs)

    def write_parts(self, model, model_dir, texts: Sequence[str], pairs: Sequence[tuple[str, str]],
                    parts: EmbeddingParts, progress: bool = False) -> None:
        """The papers no finished part holds, embedded by the actors and written as parts of PART_ROWS papers."""
        pending = parts.pending(pairs)
        self.computed, self.rows_per_node = len(pending), Counter()
        if pending:
            folder = self._input(parts.run, f"embeddings-{parts.folder.name}-{os.getpid()}")
            ds = self._dataset(folder, {"row": pending, "text": [texts[i] for i in pending]}, EmbedActor,
                               {"model_dir": str(Path(model_dir).resolve()), "batch_size": self.batch_size})
            try:
                self._write_parts(ds, pairs, parts, self.part_rows, progress)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    def _write_parts(self, ds, pairs, parts: EmbeddingParts, part_rows: int, progress: bool) -> None:
        """Collect the actors' rows and write a part whenever `part_rows` papers are in hand, and the rest at the end."""
        rows, chunks, done = [], [], 0

        def flush():
            arrays = {k[len("aspect:"):]: np.concatenate([c[k] for c in chunks]).astype(np.float32)
                      for k in chunks[0] if k.startswith("aspect:")}
            parts.write([pairs[r] for r in rows], arrays)

        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            self._tally(batch)
            rows += [int(r) for r in batch["row"]]
            chunks.append(batch)
            if len(rows) >= part_rows:
                flush()
                done, rows, chunks = done + len(rows), [], []
                if progress:
                    print(f"embeddings: {done} papers written")
        if rows:
            flush()
        self._said(progress, "papers embedded")
