"""The `embeddings/` artifact of a run: every aspect of every abstract, from one model pass, cached.

Stage 03 writes it, stages 04-06 read it. The cache key hashes the model's weights and
config and the corpus's ids and abstracts, so a re-run loads it and a changed model computes
afresh. A corpus that grew (papers added to the export later) reuses the rows of the papers
already embedded by the same model and embeds only the new ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from bisect import bisect_left
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.devices import use_free_cores
from .checkpoints import is_model, load_model
from .encoders import CONFIG_NAME, WEIGHTS_NAME
from .engine import make_engine
from .engine_parts import EmbeddingParts
from .stored import StoredEmbeddings, write_rows
from ..core.files import write_json
from ..core.rundir import RunDir


def _file_digest(path: Path, _memo: dict = {}) -> str:  # noqa: B006 - the default is the memo on purpose
    """sha256 of a file's content, memoised per (path, size, mtime) so a notebook re-run does not re-read it.

    A content hash (not the mtime alone) keeps a cache valid for a copied model folder
    and invalid for a retrained one with the same size.
    """
    path = Path(path).resolve()
    stat = path.stat()
    memo_key = (str(path), stat.st_size, stat.st_mtime_ns)
    if memo_key not in _memo:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _memo[memo_key] = digest.hexdigest()
    return _memo[memo_key]


def model_key(model_dir: str | os.PathLike) -> str:
    """A short hash that changes whenever a checkpoint's weights or workbench config change."""
    folder = Path(model_dir)
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} has no {name}: not a saved workbench model")
    digest = hashlib.sha256((folder / CONFIG_NAME).read_bytes())
    digest.update(_file_digest(folder / WEIGHTS_NAME).encode())
    return digest.hexdigest()[:16]


def embed(model, texts: Sequence[str], batch_size: int = 32,
          progress: bool = True, device: str | None = None) -> dict[str, np.ndarray]:
    """Every aspect's embedding of `texts` from one backbone pass per batch: {aspect: unit rows [N, dim]}."""
    if not is_model(model):
        model = load_model(model, device=device)
    return model.encode(list(texts), batch_size=batch_size, normalize=True, progress=progress, device=device)


def embeddings_key(model_dir: str | os.PathLike, corpus) -> str:
    """The cache key of a corpus's embeddings: the model's weights and config, and the corpus's ids and texts."""
    return hashlib.sha256(f"{model_key(model_dir)}:{corpus.fingerprint()}:unit".encode()).hexdigest()[:16]


def embed_corpus(model_dir: str | os.PathLike, corpus, run_dir: str | os.PathLike, batch_size: int = 32,
                 progress: bool = True, device: str | None = None, engine: str = "auto",
                 ray_address: str | None = None) -> dict[str, np.ndarray]:
    """Embeddings {aspect: float32 [len(corpus), dim], unit rows, corpus order}, in memory: `stored_embeddings`
    (the same arguments), read whole. A large corpus is better read from disk by blocks (`stored_embeddings`)."""
    return stored_embeddings(model_dir, corpus, run_dir, batch_size, progress, device, engine, ray_address).arrays()


def stored_embeddings(model_dir: str | os.PathLike, corpus, run_dir: str | os.PathLike, batch_size: int = 32,
                      progress: bool = True, device: str | None = None, engine: str = "auto",
                      ray_address: str | None = None) -> StoredEmbeddings:
    """Embeddings of every abstract, cached in the run directory and read from disk (`stored.StoredEmbeddings`:
    aspect -> memory map [len(corpus), dim], unit rows, corpus order, with `blocks` and `arrays`).

    Stored as ``<run_dir>/embeddings/<key>.safetensors`` + ``<key>.json`` (the key hashes
    the model's weights and config and the corpus's ids and abstracts), so a notebook
    re-run loads them and any change to the model or the corpus computes afresh.
    `engine` (`engine.make_engine`): where the papers to embed go through the model, in this process
    (local) or on Ray (ray, or auto from `engine.AUTO_RAY_PAPERS` papers or with `ray_address`). Both write
    the papers as parts of `engine_parts.PART_ROWS` as they are embedded, and the entry is then written from
    the parts by blocks (`stored.write_rows`): no pass holds every paper's rows, and a killed job resumes with
    the papers no finished part holds.
    """
    run = RunDir(run_dir)
    folder, key = run.embeddings, embeddings_key(model_dir, corpus)
    tensor_path, meta_path = folder / f"{key}.safetensors", folder / f"{key}.json"
    cached = open_entry(tensor_path, meta_path, corpus.ids)
    if cached is not None:
        if progress:
            print(f"loaded cached embeddings {tensor_path}")
        return cached
    texts = corpus.texts()
    hashes = text_hashes(texts)
    pairs = [(str(d), h) for d, h in zip(corpus.ids, hashes)]
    # Papers added to a corpus later: rows of earlier entries of the same model are reused, so only the
    # new abstracts go through the model (a changed abstract has another hash and is embedded again).
    known = reusable_rows(folder, model_key(model_dir), corpus.ids, hashes)
    todo = [i for i, (d, h) in enumerate(zip(corpus.ids, hashes)) if (d, h) not in known]
    model = load_model(model_dir, device=device, run_dir=run_dir) if todo or not known else None
    if todo and known and progress:
        print(f"embedding {len(todo)} new abstracts; {len(corpus) - len(todo)} reused from the cache")
    parts = EmbeddingParts(run_dir, key)
    if model is not None:
        use_free_cores()  # two threads on a core another job keeps busy run several times slower
        runner = make_engine(engine, len(todo), ray_address, batch_size=batch_size)
        runner.write_parts(model, model_dir, [texts[i] for i in todo], [pairs[i] for i in todo], parts, progress)
        aspects, dim, max_length = list(model.aspects), int(model.dim), model.max_length
    else:
        aspects, dim, max_length = next(iter(known.values()))[2]
    from_parts = parts.rows(pairs) if todo else None
    reused = [i for i, pair in enumerate(pairs) if pair in known]  # corpus rows, in order

    def rows_of(aspect: str, start: int, stop: int) -> np.ndarray:
        rows = np.zeros((stop - start, dim), dtype=np.float32)
        if from_parts is not None:
            from_parts.fill(aspect, start, stop, rows)
        here = reused[bisect_left(reused, start):bisect_left(reused, stop)]
        groups: dict[int, tuple] = {}  # one read per earlier entry and block
        for i in here:
            entry, row, _ = known[pairs[i]]
            group = groups.setdefault(id(entry), (entry, [], []))
            group[1].append(i - start)
            group[2].append(row)
        for entry, targets, sources in groups.values():
            rows[targets] = entry[aspect][sources]
        return rows

    folder.mkdir(parents=True, exist_ok=True)
    run.record_cache(write_rows(tensor_path, aspects, len(corpus), dim, rows_of))  # the ledger: `runs --clean`
    # The JSON is written last: a cache entry without it is incomplete and ignored.
    write_json(meta_path, {
        "model_dir": str(Path(model_dir).resolve()), "model_key": model_key(model_dir), "corpus": corpus.name,
        "corpus_fingerprint": corpus.fingerprint(), "n_docs": len(corpus), "aspects": aspects,
        "dim": dim, "max_length": max_length, "normalized": True,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"), "doc_ids": corpus.ids, "text_hashes": hashes,
    }, indent=1)
    run.record_cache(meta_path)
    parts.remove()  # the whole entry is in place: the parts are not needed again
    return StoredEmbeddings(tensor_path, corpus.ids, aspects)


def open_entry(tensor_path: Path, meta_path: Path, doc_ids: Sequence[str]) -> StoredEmbeddings | None:
    """The cached entry at these paths when it is whole and holds `doc_ids` in that order, else None (a damaged
    or incomplete entry is computed again and overwritten)."""
    if not (tensor_path.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("doc_ids") != list(doc_ids):
            return None
        return StoredEmbeddings(tensor_path, meta["doc_ids"], meta["aspects"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def text_hashes(texts: Sequence[str]) -> list[str]:
    """A short sha1 per abstract: a cached row is reused only for the same paper with the same text."""
    return [hashlib.sha1(t.encode("utf-8")).hexdigest()[:16] for t in texts]


def reusable_rows(folder: Path, key: str, doc_ids: Sequence[str], hashes: Sequence[str]) -> dict:
    """{(doc_id, text hash): (entry, row, (aspects, dim, max_length))} from the folder's cache entries of the model
    `key`, for the papers asked for: `entry` an earlier entry memory-mapped (`StoredEmbeddings`), so a corpus that
    grew reads the rows it reuses by blocks, never the earlier entry whole. Entries from before text hashes were
    stored are skipped, as is a damaged one (its papers are embedded again)."""
    wanted, out = set(zip(map(str, doc_ids), hashes)), {}
    for meta_path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("model_key") != key or "text_hashes" not in meta:
                continue
            hits = [(i, pair) for i, pair in enumerate(zip(meta["doc_ids"], meta["text_hashes"]))
                    if pair in wanted and pair not in out]
            if not hits:
                continue
            entry = StoredEmbeddings(meta_path.with_suffix(".safetensors"), meta["doc_ids"], meta["aspects"])
            shape = (list(meta["aspects"]), int(meta["dim"]), meta.get("max_length"))
            for i, pair in hits:
                out[pair] = (entry, i, shape)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out
