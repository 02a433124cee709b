"""Stage 03's embeddings written part by part and read from disk by blocks (`embed/stored.py`), in process.

A unified model of two untrained pooling heads reads a hashed stand-in backbone (a word's vector is seeded by
its hash), so no encoder loads: what is under test is where the rows go, not what they mean.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from workbench.core.rundir import RunDir
from workbench.data.corpus import Corpus
from workbench.embed import embeddings as embeddings_module
from workbench.embed.embeddings import embed_corpus, embeddings_key, stored_embeddings, text_hashes
from workbench.embed.engine import LocalEngine
from workbench.embed.engine_parts import EmbeddingParts
from workbench.embed.features import FeatureCache
from workbench.embed.heads import PooledAspectModel
from workbench.measures.evaluation import aspect_space_correlations

HIDDEN = 16
ASPECTS = ["method", "result"]


class _HashedBackbone:
    """A text's vector: the unit sum of a seeded random vector per word."""

    name, pooling, max_length, hidden_size, key = "hashed", "mean", 64, HIDDEN, "hashed"

    def embed(self, texts, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), HIDDEN), np.float32)
        for i, text in enumerate(texts):
            for w in str(text).lower().split() or [""]:
                out[i] += np.random.default_rng(zlib.crc32(w.encode())).standard_normal(HIDDEN)
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-12)
        return out


class _KilledAfterOnePart(LocalEngine):
    """A local engine whose process dies (an exception here) while embedding its second part."""

    def embed_rows(self, model, model_dir, texts, pairs=None, parts=None, progress=False):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 1:
            raise KeyboardInterrupt("killed")
        return super().embed_rows(model, model_dir, texts)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """(run, model folder, corpus of 7 papers, today's whole-corpus `encode` of it)."""
    run = RunDir(tmp_path / "run")
    PooledAspectModel("hashed", ASPECTS, hidden=HIDDEN, max_length=64).save_pretrained(run.unified_model)
    real_load = embeddings_module.load_model

    def load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        model.cache = FeatureCache(None, _HashedBackbone())
        return model

    monkeypatch.setattr(embeddings_module, "load_model", load)
    corpus = Corpus(pd.DataFrame({"doc_id": [f"p{i}" for i in range(7)], "title": [f"P{i}" for i in range(7)],
                                  "abstract": [f"We study problem {i}. Method {i % 3} works. It gains {i} points."
                                               for i in range(7)]}), name="seven")
    expected = load(run.unified_model).encode(corpus.texts(), normalize=True)
    return run, run.unified_model, corpus, expected


def test_parts_read_back_as_today_in_blocks_and_memory_maps(setup):
    run, model_dir, corpus, expected = setup
    engine = LocalEngine(part_rows=3)  # three parts of 3, 3 and 1 papers
    stored = stored_embeddings(model_dir, corpus, run, progress=False, engine=engine)
    assert engine.computed == 7 and stored.ids == corpus.ids and list(stored) == ASPECTS
    assert stored.n_papers == 7 and isinstance(stored["method"], np.memmap)
    blocks = [block for _, block in stored.blocks(2)]
    for a in ASPECTS:
        assert np.abs(np.asarray(stored[a]) - expected[a]).max() <= 1e-6
        np.testing.assert_array_equal(np.concatenate([b[a] for b in blocks]), stored[a])
    assert not EmbeddingParts(run, embeddings_key(model_dir, corpus)).folder.exists()  # gone once the entry is whole
    assert aspect_space_correlations(stored).shape == (2, 2)  # stage 03's last cell reads the memory maps
    from safetensors.numpy import load_file  # the entry is the file safetensors reads

    whole = load_file(str(stored.path))
    again = embed_corpus(model_dir, corpus, run, progress=False)  # the cached entry, read whole
    for a in ASPECTS:
        np.testing.assert_array_equal(whole[a], again[a])
        np.testing.assert_array_equal(whole[a], stored[a])


def test_a_killed_run_embeds_only_the_unfinished_parts(setup):
    run, model_dir, corpus, expected = setup
    with pytest.raises(KeyboardInterrupt):
        stored_embeddings(model_dir, corpus, run, progress=False, engine=_KilledAfterOnePart(part_rows=3))
    parts = EmbeddingParts(run, embeddings_key(model_dir, corpus))
    assert len(parts.finished()) == 3  # the first part is kept
    engine = LocalEngine(part_rows=3)
    stored = stored_embeddings(model_dir, corpus, run, progress=False, engine=engine)
    assert engine.computed == 4 and stored.ids == corpus.ids
    for a in ASPECTS:
        assert np.abs(stored.arrays()[a] - expected[a]).max() <= 1e-6
    with open(stored.path, "r+b") as f:  # a torn entry is computed again, not read
        f.truncate(stored.path.stat().st_size - 4)
    engine = LocalEngine()
    stored_embeddings(model_dir, corpus, run, progress=False, engine=engine)
    assert engine.computed == 7


def test_parts_finished_out_of_order_are_read_in_corpus_order(setup):
    """Ray's actors finish parts in any order, rows within a part too: the entry still follows the corpus."""
    run, model_dir, corpus, expected = setup
    parts = EmbeddingParts(run, embeddings_key(model_dir, corpus))
    pairs = list(zip(corpus.ids, text_hashes(corpus.texts())))
    for rows in ([4, 6, 5], [3, 0, 1, 2]):
        parts.write([pairs[i] for i in rows], {a: expected[a][rows] for a in ASPECTS})
    engine = LocalEngine()
    stored = stored_embeddings(model_dir, corpus, run, progress=False, engine=engine)
    assert engine.computed == 0
    for a in ASPECTS:
        np.testing.assert_array_equal(stored[a], expected[a])
