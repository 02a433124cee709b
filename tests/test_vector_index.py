"""The feature cache keeps keys in memory and reads vectors from its shards when asked (`embed/vector_index.py`).

Checked against an independent reading of the shards (safetensors' own loader and the JSON keys), with a
stand-in encoder whose vector of a text is a seeded function of it (no model to load).
"""

from __future__ import annotations

import os
import shutil
import tracemalloc
import zlib

import numpy as np
import pytest

from workbench.embed import features
from workbench.embed.features import FeatureCache, text_key
from workbench.embed.vector_index import ShardFile


class SeededEncoder:
    """A text's vector: standard normal draws seeded by the text (and `salt`), so two encoders can disagree."""

    name, pooling, max_length, hidden_size, key = "seeded", "mean", 256, 48, "seeded"

    def __init__(self, salt: str = ""):
        self.salt, self.calls = salt, 0

    def embed(self, texts, batch_size=32, progress=False):
        self.calls += len(texts)
        return np.stack([np.random.default_rng(zlib.crc32((self.salt + t).encode())).standard_normal(self.hidden_size)
                         .astype(np.float32) for t in texts]).reshape(len(texts), self.hidden_size)


def stored(folder) -> dict:
    """{key: vector} by safetensors' own loader and the shards' JSON keys (the first stored vector of a key)."""
    import json

    from safetensors.numpy import load_file

    out = {}
    for index in sorted(folder.glob("shard-*.json")):
        keys = json.loads(index.read_text())["keys"]
        for key, vector in zip(keys, load_file(str(index.with_suffix(".safetensors")))["vectors"]):
            out.setdefault(key, vector)
    return out


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(features, "SHARD_ROWS", 50)  # several shards from a few hundred texts
    monkeypatch.setattr(features, "FREE_CORES_MIN_TEXTS", 10**9)  # the stand-in encoder needs no thread count


def test_vectors_read_back_from_the_shards_are_what_safetensors_reads(tmp_path, small_shards):
    texts = [f"sentence number {i}" for i in range(230)]
    FeatureCache(tmp_path, SeededEncoder()).vectors(texts[:120])
    FeatureCache(tmp_path, SeededEncoder()).vectors(texts)  # a second process's shards beside the first's
    assert len(list(tmp_path.glob("shard-*.json"))) >= 4
    fresh = FeatureCache(tmp_path, SeededEncoder())
    reference = stored(tmp_path)
    order = texts[::-1] + texts[5:9]  # any order, repeats too
    got = fresh.vectors(order)
    assert np.array_equal(got, np.stack([reference[text_key(t)] for t in order]))
    assert fresh.backbone.calls == 0  # nothing encoded again
    assert all(isinstance(b, ShardFile) for b in fresh._index._blocks)  # no vector held in memory


def test_opening_a_large_cache_holds_keys_not_vectors(tmp_path, monkeypatch):
    monkeypatch.setattr(features, "SHARD_ROWS", 2048)
    n, dim = 20_000, 384
    encoder = SeededEncoder()
    encoder.hidden_size = dim
    vectors = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)  # 30.7 MB
    FeatureCache(tmp_path, encoder).add([f"t{i}" for i in range(n)], vectors)
    tracemalloc.start()
    cache = FeatureCache(tmp_path, encoder)
    _, opened = tracemalloc.get_traced_memory()
    some = cache.vectors([f"t{i}" for i in range(0, n, 97)])
    tracemalloc.stop()
    assert len(cache) == n
    assert opened < vectors.nbytes / 4, opened  # the keys' index only (it was every vector before)
    assert np.array_equal(some, vectors[::97])


def test_a_torn_shard_is_not_trusted_and_its_texts_are_encoded_again(tmp_path, small_shards):
    texts = [f"text {i}" for i in range(120)]
    FeatureCache(tmp_path, SeededEncoder()).vectors(texts)
    torn = sorted(tmp_path.glob("shard-*.safetensors"))[1]
    torn.write_bytes(torn.read_bytes()[:-100])  # a kill while the file was written
    assert ShardFile.open(torn) is None
    again = FeatureCache(tmp_path, SeededEncoder())
    assert len(again) == len(texts) - 50
    assert np.array_equal(again.vectors(texts), SeededEncoder().embed(texts))
    assert again.backbone.calls == 50


def test_a_shard_replaced_under_an_open_cache_is_never_read_as_the_old_one(tmp_path, small_shards):
    """A rerun with --clean in another process replaces shard-00001 with other texts' vectors: the open cache
    notices the file changed, forgets it, and encodes its texts again, rather than handing back another text's
    vector from the same row."""
    texts = [f"old {i}" for i in range(40)]
    live = FeatureCache(tmp_path, SeededEncoder())
    live.vectors(texts)
    shutil.rmtree(tmp_path)
    FeatureCache(tmp_path, SeededEncoder(salt="other model ")).vectors([f"new {i}" for i in range(40)])
    assert np.array_equal(live.vectors(texts), SeededEncoder().embed(texts))
    assert live.backbone.calls == 80  # encoded once before, once again after the change


def test_many_shards_read_leave_no_file_open(tmp_path, small_shards):
    texts = [f"line {i}" for i in range(1000)]  # 20 shards
    FeatureCache(tmp_path, SeededEncoder()).vectors(texts)
    cache = FeatureCache(tmp_path, SeededEncoder())
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    got = cache.vectors(texts[::-1])
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
    assert np.array_equal(got, SeededEncoder().embed(texts[::-1]))


def test_in_memory_vectors_keep_the_first_stored_vector_of_a_text():
    cache = FeatureCache(None, SeededEncoder())
    first = np.ones((1, 48), np.float32)
    cache.add(["a"], first)
    cache.add(["a", "b"], np.zeros((2, 48), np.float32))
    assert np.array_equal(cache.vectors(["a", "b"]), np.vstack([first, np.zeros((1, 48), np.float32)]))
    assert cache.vectors([]).shape == (0, 48)


def test_the_index_finds_what_a_dict_of_first_places_finds(monkeypatch):
    """Blocks of random keys with repeats, merged into the sorted array every few hundred, one block forgotten:
    every lookup agrees with a plain dict that keeps each key's first place."""
    from workbench.embed.vector_index import VectorIndex

    monkeypatch.setattr(VectorIndex, "MERGE_AT", 300)
    monkeypatch.setattr(VectorIndex, "MERGE_MIN", 100)  # merges at 100, then at a tenth of the array, then 300
    rng = np.random.default_rng(0)
    pool = [f"{i:024x}" for i in rng.choice(10**12, 3000, replace=False)]
    index, reference = VectorIndex(), {}
    for number in range(12):
        keys = [pool[i] for i in rng.integers(0, 2000, 250)]
        index.add_block(keys, rng.standard_normal((250, 4)).astype(np.float32))
        for row, key in enumerate(keys):
            reference.setdefault(key, (number, row))
        assert len(index._recent) < max(100, min(300, 0.1 * len(index._keys)))  # the dict stays small
    index.forget_block(5)
    reference = {k: w for k, w in reference.items() if w[0] != 5}
    assert len(index._keys) > 0 and len(index) == len(reference)
    found = index.find(pool)
    expected = np.array([reference.get(k, (-1, -1)) for k in pool])
    assert np.array_equal(found, expected)


def test_a_shard_that_cannot_be_opened_right_after_it_was_written_keeps_its_vectors_in_memory(
        tmp_path, small_shards, monkeypatch):
    """The fallback of `FeatureCache._save`: a shard removed between its write and its opening (a rerun with
    --clean in another process) leaves its vectors held in memory, so the call still returns every text's
    own vector and encodes none twice."""
    texts = [f"kept {i}" for i in range(80)]
    monkeypatch.setattr(features.ShardFile, "open", classmethod(lambda cls, path: None))
    cache = FeatureCache(tmp_path, SeededEncoder())
    assert np.array_equal(cache.vectors(texts), SeededEncoder().embed(texts))
    assert cache.backbone.calls == len(texts)
    assert np.array_equal(cache.vectors(texts[::-1]), SeededEncoder().embed(texts[::-1]))
    assert cache.backbone.calls == len(texts)  # read from memory, not encoded again
