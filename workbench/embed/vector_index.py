"""Where each cached vector lives: a key -> (block, row) index over shard files read on demand.

The feature cache (`features.FeatureCache`) of a million abstracts holds about nine million texts (abstracts and
their sentences): 13.8 GB of float32 at 384 dimensions. Holding them all in memory, as a dict of arrays, made
every stage that opened the cache pay for all of it. Here only the keys and their places stay in memory
(32 bytes a text); a vector is read from its shard when asked for. Each read opens the shard as a
read-only memory map and copies the rows asked for: no file stays open, whatever the number of shards, and
the operating system's page cache keeps the shards a stage reads again and again in memory where it has room.

A shard file is safetensors (one float32 tensor "vectors", rows x dim). Its place is checked against the file
at every read (inode, size, modification time): a shard replaced under a live kernel (a rerun with --clean
in another process) raises `ShardChanged` instead of handing back another text's vector.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np


class ShardChanged(RuntimeError):
    """A shard file indexed earlier is gone or is another file now."""

    def __init__(self, block: int, path: Path):
        super().__init__(f"the feature shard {path} changed since it was read")
        self.block, self.path = block, path


@dataclass(frozen=True)
class ShardFile:
    """One shard's vectors on disk: the file, where its float32 rows start, their shape, and the file's stamp."""

    path: Path
    offset: int
    rows: int
    dim: int
    stamp: tuple

    @classmethod
    def open(cls, path: str | os.PathLike) -> "ShardFile | None":
        """The shard at `path` from its safetensors header, or None where the file is not a whole float32 shard
        (torn by a kill, damaged): such a shard is never trusted, its texts are encoded again."""
        path = Path(path)
        try:
            with path.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if not 0 < size < 1 << 20:
                    return None
                info = json.loads(f.read(size))["vectors"]
            rows, dim = (int(x) for x in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
            st = path.stat()
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if info.get("dtype") != "F32" or end - start != rows * dim * 4 or st.st_size != 8 + size + end:
            return None
        return cls(path, 8 + size + start, rows, dim, _stamp(st))

    def read(self, rows: np.ndarray, block: int) -> np.ndarray:
        """A copy of `rows` of this shard ([len(rows), dim] float32)."""
        try:
            same = _stamp(self.path.stat()) == self.stamp
        except OSError:
            same = False
        if not same:
            raise ShardChanged(block, self.path)
        mapped = np.memmap(self.path, dtype=np.float32, mode="r", offset=self.offset, shape=(self.rows, self.dim))
        try:
            return np.array(mapped[rows])
        finally:
            del mapped  # unmapped here: no shard stays mapped between reads


def _stamp(st: os.stat_result) -> tuple:
    return st.st_ino, st.st_size, st.st_mtime_ns


class VectorIndex:
    """Keys of vectors -> (block, row): blocks are in-memory arrays (vectors added without a folder) or shard
    files (`ShardFile`). The first block that holds a key keeps it, as the cache's first stored vector of a
    text is its vector.

    The keys (24 hex digits, `features.text_key`) sit in a sorted array of 24-byte strings beside their places,
    32 bytes a key (a dict of str keys and tuples takes about ten times that), looked up by binary search; keys
    added since the last merge wait in a dict, merged in one pass once they are a tenth of the sorted ones
    (at least MERGE_MIN, at most MERGE_AT). The dict stays small beside the array, so memory follows the corpus by
    32 bytes a key, not 200; each merge copies the array, and growing it by a tenth each time keeps the copies
    to about ten times the keys in all.
    """

    MERGE_MIN, MERGE_SHARE, MERGE_AT = 20_000, 0.1, 500_000

    def __init__(self):
        self._keys = np.empty(0, dtype="S24")  # sorted
        self._places = np.empty((0, 2), dtype=np.int32)  # (block, row) of each key above
        self._recent: dict[str, tuple[int, int]] = {}
        self._blocks: list = []

    def __len__(self) -> int:
        return len(self._keys) + len(self._recent)

    def find(self, keys: Sequence[str]) -> np.ndarray:
        """[len(keys), 2] int64: each key's (block, row), or (-1, -1) where it is not held."""
        out = np.full((len(keys), 2), -1, dtype=np.int64)
        if not len(keys):
            return out
        if len(self._keys):
            wanted = np.array(keys, dtype="S24")
            at = np.minimum(np.searchsorted(self._keys, wanted), len(self._keys) - 1)
            hit = self._keys[at] == wanted
            out[hit] = self._places[at[hit]]
        if self._recent:
            for i, key in enumerate(keys):
                place = self._recent.get(key)
                if place is not None:
                    out[i] = place
        return out

    def held(self, keys: Sequence[str]) -> np.ndarray:
        """A bool per key: whether it is held."""
        return self.find(keys)[:, 0] >= 0

    def add_block(self, keys: Sequence[str], block) -> None:
        """Index `block` (an array or a ShardFile, rows in the order of `keys`); keys already held keep theirs."""
        number = len(self._blocks)
        self._blocks.append(block)
        held = self.held(keys)
        for row, key in enumerate(keys):
            if not held[row]:
                self._recent.setdefault(key, (number, row))
        if len(self._recent) >= min(self.MERGE_AT, max(self.MERGE_MIN, self.MERGE_SHARE * len(self._keys))):
            self._merge()

    def _merge(self) -> None:
        """The recent keys into the sorted array: one pass over it (`np.insert` at their sorted places)."""
        new = np.array(list(self._recent), dtype="S24")
        places = np.array(list(self._recent.values()), dtype=np.int32).reshape(-1, 2)
        order = np.argsort(new)
        at = np.searchsorted(self._keys, new[order])
        self._keys = np.insert(self._keys, at, new[order])
        self._places = np.insert(self._places, at, places[order], axis=0)
        self._recent = {}

    def forget_block(self, number: int) -> None:
        """Drop a block's keys (a shard that changed): their texts count as not cached again."""
        kept = self._places[:, 0] != number
        self._keys, self._places = self._keys[kept], self._places[kept]
        self._recent = {k: w for k, w in self._recent.items() if w[0] != number}
        self._blocks[number] = None

    def get(self, keys: Sequence[str]) -> np.ndarray:
        """[len(keys), dim] float32: each key's vector (every key must be held, and one at least), one read per
        block touched."""
        places = self.find(keys)
        if (places[:, 0] < 0).any():
            raise KeyError(f"{int((places[:, 0] < 0).sum())} keys are not in the index")
        out = None
        order = np.argsort(places[:, 0], kind="stable")  # the keys grouped by block, each block read once
        for at in np.split(order, np.flatnonzero(np.diff(places[order, 0])) + 1):
            number = int(places[at[0], 0])
            block, rows = self._blocks[number], places[at, 1]
            part = block.read(rows, number) if isinstance(block, ShardFile) else block[rows]
            if out is None:
                out = np.empty((len(places), part.shape[1]), dtype=np.float32)
            out[at] = part
        return out
