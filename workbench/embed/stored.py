"""Stage 03's embeddings on disk, written and read by blocks of rows: never one whole array in memory.

An entry of `embeddings/` (`embeddings.stored_embeddings`) is one safetensors file, each aspect's unit rows
[N, dim] float32 in corpus order, beside its JSON (ids, aspects, dim). The engines embed the papers in parts of
`engine_parts.PART_ROWS` (`engine_parts.EmbeddingParts`, the unit a killed run resumes by); `write_rows` then
writes the entry block by block from them, and `StoredEmbeddings` reads it back without loading it:

    stored = stored_embeddings(model_dir, corpus, run_dir)  # a Mapping aspect -> read-only memory map [N, dim]
    stored["method"]                                         # np.memmap: the OS reads pages as rows are used
    for start, block in stored.blocks(BLOCK_ROWS): ...      # {aspect: [<= BLOCK_ROWS, dim]} copies, one at a time
    stored.arrays()                                          # {aspect: in-memory array}: what embed_corpus returns

A memory map passes through the maps' checks as it is (`maps.tsne_math.unit32` keeps float32 unit rows bit for
bit), so stage 05 lays out a large map reading the rows by blocks (`AspectMap.feature_rows`), no copy of them.
The file is the format `safetensors.numpy.load_file` reads: entries written before stay readable, and the other way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

BLOCK_ROWS = 16_384  # rows per block written or read (16,384 x 384 floats: 25 MB a block of one aspect)
_HEADER_MAX = 100 << 20  # safetensors' own limit on a header (a million ids are not in it: they are in the JSON)


def tensor_layout(path: str | os.PathLike) -> dict[str, tuple[int, tuple[int, int]]]:
    """{name: (byte offset of its data in the file, (rows, cols))} of a safetensors file of 2-d float32 tensors;
    ValueError where the file is not one whole (torn, damaged, another dtype)."""
    path = Path(path)
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if not 0 < size < _HEADER_MAX:
            raise ValueError(f"{path}: not a safetensors file")
        header = json.loads(f.read(size))
    out, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape, (lo, hi) = tuple(int(x) for x in info["shape"]), (int(x) for x in info["data_offsets"])
        if info["dtype"] != "F32" or len(shape) != 2 or hi - lo != 4 * shape[0] * shape[1]:
            raise ValueError(f"{path}: {name} is not a 2-d float32 tensor")
        out[name], end = (8 + size + lo, shape), max(end, hi)
    if path.stat().st_size != 8 + size + end:
        raise ValueError(f"{path}: {path.stat().st_size} bytes, its header says {8 + size + end}")
    return out


def write_rows(path: str | os.PathLike, aspects: Sequence[str], n: int, dim: int,
               rows_of: Callable[[str, int, int], np.ndarray], block: int = BLOCK_ROWS) -> Path:
    """Write the safetensors file {aspect: [n, dim] float32} from `rows_of(aspect, start, stop)`, asked for
    `block` rows at a time: memory holds one block, whatever n. Written beside `path`, then moved onto it."""
    path, size = Path(path), 4 * n * dim
    header = {a: {"dtype": "F32", "shape": [n, dim], "data_offsets": [i * size, (i + 1) * size]}
              for i, a in enumerate(aspects)}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads its header to 8 bytes, so the data stays aligned
    tmp = path.with_name(f"{path.name}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for a in aspects:
                for start in range(0, n, block):
                    stop = min(start + block, n)
                    rows = np.ascontiguousarray(rows_of(a, start, stop), dtype="<f4")
                    if rows.shape != (stop - start, dim):
                        raise ValueError(f"rows {start}:{stop} of {a}: shape {rows.shape}, not {(stop - start, dim)}")
                    f.write(rows.tobytes())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return path


class StoredEmbeddings(Mapping):
    """One embeddings entry read from disk: a Mapping aspect -> read-only memory map [N, dim] (rows in the order
    of `ids`), with `blocks` for passes that copy a block of rows at a time and `arrays` for the whole in memory.

    len() is the number of aspects, as for the dict of arrays it stands in for; `n_papers` the number of rows."""

    def __init__(self, path: str | os.PathLike, ids: Sequence[str], aspects: Sequence[str]):
        self.path, self.ids = Path(path), list(ids)
        layout = tensor_layout(self.path)
        missing = [a for a in aspects if a not in layout]
        if missing:
            raise ValueError(f"{self.path} holds no aspect {missing}")
        self.layout = {a: layout[a] for a in aspects}
        if any(shape[0] != len(self.ids) for _, shape in self.layout.values()):
            raise ValueError(f"{self.path}: rows and ids differ in number")

    @property
    def n_papers(self) -> int:
        return len(self.ids)

    def __getitem__(self, aspect: str) -> np.memmap:
        offset, shape = self.layout[aspect]
        if not shape[0]:  # numpy cannot map zero bytes
            return np.zeros(shape, np.float32)
        return np.memmap(self.path, dtype=np.float32, mode="r", offset=offset, shape=shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout)

    def __len__(self) -> int:
        return len(self.layout)

    def block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """{aspect: rows start:stop} read from the file into fresh arrays (no mapping left behind)."""
        stop = min(stop, self.n_papers)
        out = {}
        with self.path.open("rb") as f:
            for a, (offset, (_, dim)) in self.layout.items():
                f.seek(offset + 4 * start * dim)
                out[a] = np.fromfile(f, dtype="<f4", count=max(stop - start, 0) * dim).reshape(-1, dim)
        return out

    def blocks(self, rows: int = BLOCK_ROWS) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(start, `block(start, start + rows)`) over the whole entry, in order."""
        for start in range(0, self.n_papers, rows):
            yield start, self.block(start, start + rows)

    def arrays(self) -> dict[str, np.ndarray]:
        """{aspect: [N, dim]} in memory (writable copies), as `embeddings.embed_corpus` always returned."""
        return self.block(0, self.n_papers)
