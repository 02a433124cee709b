"""The `embeddings/` artifact of a run: every aspect of every abstract, from one model pass, cached.

Stage 03 writes it, stages 04-06 read it. The cache key hashes the model's weights and
config and the corpus's ids and abstracts, so a re-run loads it and any change to the
model or the corpus computes afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.devices import use_free_cores
from .checkpoints import is_model, load_model
from .encoders import CONFIG_NAME, WEIGHTS_NAME
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
                 progress: bool = True, device: str | None = None) -> dict[str, np.ndarray]:
    """Embeddings {aspect: float32 [len(corpus), dim], unit rows, corpus order}, cached in the run directory.

    Stored as ``<run_dir>/embeddings/<key>.safetensors`` + ``<key>.json`` (the key hashes
    the model's weights and config and the corpus's ids and abstracts), so a notebook
    re-run loads them and any change to the model or the corpus computes afresh.
    """
    from safetensors.numpy import load_file, save_file

    folder = RunDir(run_dir).embeddings
    key = embeddings_key(model_dir, corpus)
    tensor_path, meta_path = folder / f"{key}.safetensors", folder / f"{key}.json"
    if tensor_path.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            arrays = load_file(str(tensor_path))
            if meta.get("doc_ids") == corpus.ids and all(a in arrays for a in meta["aspects"]):
                if progress:
                    print(f"loaded cached embeddings {tensor_path}")
                return {a: arrays[a] for a in meta["aspects"]}
        except Exception:  # a damaged cache entry is recomputed and overwritten
            pass
    model = load_model(model_dir, device=device, run_dir=run_dir)
    use_free_cores()  # two threads on a core another job keeps busy run several times slower
    vectors = model.encode(corpus.texts(), batch_size=batch_size, normalize=True, progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{key}.safetensors.tmp"
    save_file({a: np.ascontiguousarray(v) for a, v in vectors.items()}, str(tmp))
    os.replace(tmp, tensor_path)
    # The JSON is written last: a cache entry without it is incomplete and ignored.
    write_json(meta_path, {
        "model_dir": str(Path(model_dir).resolve()), "model_key": model_key(model_dir), "corpus": corpus.name,
        "corpus_fingerprint": corpus.fingerprint(), "n_docs": len(corpus), "aspects": list(vectors),
        "dim": int(model.dim), "max_length": model.max_length, "normalized": True,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"), "doc_ids": corpus.ids,
    }, indent=1)
    return vectors
