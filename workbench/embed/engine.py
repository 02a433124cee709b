"""Where stages 02-03's encoder passes run: in this process, or on Ray Data across processes or a cluster.

Two passes grow with the corpus: the frozen backbone reading every abstract and every sentence into the
feature cache (`features.FeatureCache`), and stage 03's unified model embedding every paper
(`embeddings.embed_corpus`). An engine runs either; both give the same vectors, in the same order:

    engine = make_engine("auto", n_papers=len(corpus))      # local below AUTO_RAY_PAPERS, else Ray
    engine.encode_documents(cache, corpus.texts())           # the feature cache holds every text afterwards
    engine.write_parts(model, model_dir, texts, pairs, parts)  # every paper's rows in parts (`EmbeddingParts`)

`LocalEngine` is the in-process path the stages always had. `RayEngine` (`ray_engine.py`, the `scale` extra)
reads the texts in Parquet blocks and runs `map_batches` with an actor class that loads the encoder once per
actor. Its results come back to this process, which writes them as they arrive: feature vectors as shards of
the feature cache, embeddings as parts (`EmbeddingParts`); `LocalEngine` writes the same parts, a part per
PART_ROWS papers. A killed job keeps every finished shard and part, and a rerun computes only the rest.
"""

from __future__ import annotations

import importlib.util
from typing import Sequence

import numpy as np

from .engine_parts import PART_ROWS, SCALE_EXTRA, EmbeddingParts, document_texts
from .features import FeatureCache, frozen_backbone
from .ray_engine import RayEngine  # light: Ray itself is imported only when a RayEngine runs

# Below this many papers the in-process path is faster on one machine: starting Ray and its actors costs about
# 25 s on 2 cores (`ray.init` 13 s, two encoder actors 12 s), which a 50,000-paper pass (about an hour here)
# does not notice, and a 5,000-paper pass (5 minutes) would. `engine="ray"` takes Ray at any size.
AUTO_RAY_PAPERS = 50_000
ENGINES = ("auto", "local", "ray")


def ray_available() -> bool:
    """Whether Ray is installed (the `scale` extra), checked without importing it."""
    return importlib.util.find_spec("ray") is not None


def resolve_engine(engine: str = "auto", n_papers: int = 0, ray_address: str | None = None) -> str:
    """"local" or "ray" for a pass over `n_papers` papers: `auto` takes Ray from AUTO_RAY_PAPERS papers on, or
    whenever `ray_address` names a cluster to join, and stays in process below, or where Ray is not installed."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine != "auto":
        return engine
    wanted = ray_address is not None or n_papers >= AUTO_RAY_PAPERS
    if wanted and not ray_available():
        print(f"engine auto: {n_papers} papers would run on Ray, which is not installed ({SCALE_EXTRA}); "
              "running in this process")
    return "ray" if wanted and ray_available() else "local"


def make_engine(engine: str = "auto", n_papers: int = 0, ray_address: str | None = None, workers: int | None = None,
                batch_size: int = 32):
    """The engine `resolve_engine` picks, or an engine object (`LocalEngine`, `RayEngine`) as it is."""
    if not isinstance(engine, str):
        return engine
    if resolve_engine(engine, n_papers, ray_address) == "local":
        return LocalEngine(batch_size=batch_size)
    return RayEngine(address=ray_address, workers=workers, batch_size=batch_size)


def encode_features(run_dir, texts: Sequence[str], base_model: str = "minilm", pooling: str = "mean",
                    engine: str = "auto", ray_address: str | None = None, progress: bool = True) -> int:
    """Stage 03's encoder pass: every abstract of `texts` and each of its sentences into the run's feature cache
    of the frozen backbone (`features.frozen_backbone`), on the engine `make_engine` picks; returns how many
    texts were encoded (0 when the cache held them all). The stages' own reads then find every vector cached."""
    cache = FeatureCache.for_run(run_dir, frozen_backbone(base_model, pooling))
    runner = make_engine(engine, len(texts), ray_address)
    n = runner.encode_documents(cache, texts, progress=progress)
    if progress and n:
        print(f"features: {n} texts encoded ({runner.name} engine)")
    return n


class LocalEngine:
    """Today's path: the passes run in this process (`FeatureCache.vectors`, the model's `encode`)."""

    name = "local"

    def __init__(self, batch_size: int = 32, part_rows: int = PART_ROWS):
        self.batch_size, self.part_rows = batch_size, part_rows
        self.computed = 0  # papers the last `write_parts` embedded: a resumed pass embeds only the rest

    def encode_documents(self, cache: FeatureCache, texts: Sequence[str], progress: bool = False) -> int:
        """Put every abstract and sentence of `texts` in the cache; returns how many texts were encoded."""
        todo = cache.missing(document_texts(texts))
        cache.vectors(todo, progress=progress)
        return len(todo)

    def embed_rows(self, model, model_dir, texts: Sequence[str], pairs=None, parts: EmbeddingParts | None = None,
                   progress: bool = False) -> dict[str, np.ndarray]:
        """{aspect: unit rows [len(texts), dim]} from the loaded `model`, in this process (the rest is unused)."""
        return model.encode(list(texts), batch_size=self.batch_size, normalize=True, progress=progress)

    def write_parts(self, model, model_dir, texts: Sequence[str], pairs: Sequence[tuple[str, str]],
                    parts: EmbeddingParts, progress: bool = False) -> None:
        """Embed the papers no finished part holds, `part_rows` at a time in corpus order, each batch written
        as a part as soon as it is done: memory holds one part's rows, and a killed run keeps what it wrote."""
        pending = parts.pending(pairs)
        self.computed = len(pending)
        for start in range(0, len(pending), self.part_rows):
            rows = pending[start:start + self.part_rows]
            parts.write([tuple(pairs[i]) for i in rows], self.embed_rows(model, model_dir, [texts[i] for i in rows]))
            if progress and len(pending) > self.part_rows:
                print(f"embeddings: {start + len(rows)} of {len(pending)} papers written")
