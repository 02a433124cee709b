"""What both engines of `engine.py` share: the texts of a feature pass, and stage 03's embeddings parts.

Kept apart from `engine.py` so that the Ray engine (`ray_engine.py`), which `engine.make_engine` imports only
when asked for, can use them without importing its caller.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..core.files import write_arrays, write_json
from ..core.rundir import RunDir
from ..data.sentences import split_sentences
from .stored import tensor_layout

PART_ROWS = 2048  # papers per embeddings part: a killed job loses at most this much of stage 03's pass
SCALE_EXTRA = 'pip install -e ".[scale]"'


def document_texts(texts: Sequence[str]) -> list[str]:
    """Every text the feature pass of `FeatureCache.documents` reads: each abstract, then each of its sentences."""
    return list(texts) + [s for t in texts for s in split_sentences(t)]



class EmbeddingParts:
    """The finished parts of one embeddings entry: ``part-NNNNN.safetensors`` with each aspect's rows, then
    ``part-NNNNN.json`` with their papers' (id, text hash) pairs, written last (a part without it is ignored).

    Rows are found by (id, text hash), never by position, so a rerun with the same corpus picks up
    every finished row whatever order the engine finished them in.
    """

    def __init__(self, run_dir, key: str):
        self.run = RunDir(run_dir)
        self.folder = self.run.embedding_parts(key)

    def finished(self) -> dict[tuple[str, str], tuple[Path, int]]:
        """{(doc id, text hash): (part's tensor file, row)} of every finished part."""
        out = {}
        for path, pairs in self.part_pairs():
            for row, pair in enumerate(pairs):
                out.setdefault(tuple(pair), (path, row))
        return out

    def pending(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Indices of the papers in `pairs` that no finished part holds: what an engine's pass still embeds."""
        finished = self.finished()
        return [i for i, p in enumerate(pairs) if tuple(p) not in finished]

    def part_pairs(self) -> Iterator[tuple[Path, list]]:
        """(tensor file, its papers' [id, text hash] pairs) of each finished part, in the order of their names."""
        for meta in sorted(self.folder.glob("part-*.json")) if self.folder.is_dir() else []:
            try:
                pairs = json.loads(meta.read_text())["pairs"]
            except (OSError, ValueError, KeyError):
                continue  # a damaged part: its papers are embedded again
            yield meta.with_suffix(".safetensors"), pairs

    def write(self, pairs: Sequence[tuple[str, str]], arrays: dict[str, np.ndarray]) -> Path:
        """Store one part: the rows of `arrays` belong to `pairs`, in order."""
        self.folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(p.name.split(".")[0].split("-")[-1]) for p in self.folder.glob("part-*.json")] or [0]
        stem = self.folder / f"part-{max(numbers) + 1:05d}"
        self.run.record_cache(write_arrays(Path(f"{stem}.safetensors"), arrays))
        self.run.record_cache(write_json(Path(f"{stem}.json"), {"pairs": [list(p) for p in pairs]}, indent=None))
        return stem

    def read(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """{aspect: rows [len(pairs), dim]} of the given papers, in that order; KeyError for one not finished."""
        from safetensors.numpy import load_file

        where = self.finished()
        located = [where[tuple(p)] for p in pairs]
        loaded = {path: load_file(str(path)) for path in dict.fromkeys(path for path, _ in located)}
        aspects = list(next(iter(loaded.values()))) if loaded else []
        return {a: np.stack([loaded[path][a][row] for path, row in located]) if located else
                np.zeros((0, 0), dtype=np.float32) for a in aspects}

    def rows(self, pairs: Sequence[tuple[str, str]]) -> "PartRows":
        """The rows of the given papers in the finished parts, read a block at a time (`PartRows.fill`). Each
        part's pairs are read in turn and looked up among `pairs`: no dict of every finished pair is built (at
        100,000 papers it was most of what the pass held beyond one part)."""
        where = {tuple(p): i for i, p in enumerate(pairs)}
        out = PartRows(len(pairs))
        for path, part_pairs in self.part_pairs():
            number = len(out.files)
            out.files.append(path)
            for row, pair in enumerate(part_pairs):
                i = where.get(tuple(pair), -1)
                if i >= 0 and out.part[i] < 0:  # the first part that holds a paper keeps it, as in `finished`
                    out.part[i], out.row[i] = number, row
        return out

    def remove(self) -> None:
        """Drop the parts once the whole entry is written (the ledger's notes of them go stale, harmlessly)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class PartRows:
    """Where each of some papers' rows sits in the finished parts, read a block of papers at a time: a part is
    mapped only while a block reads it, so a pass over every paper holds one block of rows, not all of them."""

    def __init__(self, n: int):
        self.files: list[Path] = []  # the parts' tensor files (`EmbeddingParts.rows` fills them in)
        self.part = np.full(n, -1, dtype=np.int32)  # each paper's part in `files`; -1: in no finished part
        self.row = np.zeros(n, dtype=np.int64)  # its row there
        self._layouts: dict[int, dict] = {}

    def fill(self, aspect: str, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Put the rows of papers start:stop that finished parts hold into `out` [stop - start, dim]; the others'
        rows are left as they are."""
        part, row = self.part[start:stop], self.row[start:stop]
        for p in np.unique(part[part >= 0]):
            if p not in self._layouts:
                self._layouts[p] = tensor_layout(self.files[p])
            offset, shape = self._layouts[p][aspect]
            at = np.flatnonzero(part == p)
            mapped = np.memmap(self.files[p], dtype=np.float32, mode="r", offset=offset, shape=shape)
            out[at] = mapped[row[at]]
            del mapped  # unmapped now: the part's pages leave this process's memory
        return out
