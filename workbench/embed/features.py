"""Frozen-backbone features: every text is encoded once, cached in the run directory, and reused.

The CPU-first mode of stages 02-03 never updates the pretrained encoder. Its output for a
text is therefore a fixed function of the text, and everything trained afterwards (the
pooling heads of `heads.py`) works on these vectors alone: thousands of optimiser steps
take seconds, because no step goes through the transformer.

    backbone = FrozenBackbone("minilm")                   # mean pooling, unit rows
    cache = FeatureCache.for_run(run_dir, backbone)       # <run_dir>/features/<backbone.key>/
    vectors = cache.vectors(["a text", "another"])        # [2, H]; encodes only what is new
    docs = cache.documents(corpus.texts())                # whole text + each sentence, per document

The cache is append-only: each call that meets new texts writes one more shard
(`shard-00007.safetensors` with their vectors, then `shard-00007.json` with their keys;
a shard without its JSON is unfinished and ignored). A run killed half-way keeps every
finished shard, and a re-run encodes only the rest. Keys are SHA-1 hashes of the texts, so
the same sentence in two documents, a view repeated, or an abstract placed later on a map
is encoded once.

Several processes may share one cache (a stage and the pane's `Explorer`, two notebooks): a
writer holds the folder's lock (`RunLock(folder, wait=True)`, an flock) while it reads the
shards others wrote since, numbers its shard and writes it, so two shards never share a
number and a text is stored once, with its own vector. The shard is written under a
temporary name that carries the process id (`write_arrays`). Readers take no lock: a
shard's JSON appears last and whole, so what they see is finished. A run's cache records each
file it put in place in the run's ledger (`RunDir.record_cache`): `workbench runs --clean`
deletes those and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..data.sentences import split_sentences
from ..core.files import RunLock, write_arrays, write_json
from ..core.models import local_model_identity
from ..core.vectors import unit_rows
from ..core.rundir import RunDir
from .phrases import TEMPERATURE as PHRASE_TEMPERATURE, frequencies_tag, penalties, phrases, pool_phrases
from .vector_index import ShardChanged, ShardFile, VectorIndex

# Frozen mode reads every text up to 256 tokens, whatever the stage: teachers (views) and the
# unified model (abstracts, sentences) then share one cache, and MiniLM was trained at 256.
FROZEN_MAX_LENGTH = 256
SHARD_ROWS = 2048  # texts per shard: a killed run loses at most this much work
FREE_CORES_MIN_TEXTS = 64  # encoding this many new texts first sets torch's threads to the cores free now
PHRASE_BATCH = 128  # phrases are short: larger batches encode them about 1.5x faster on 2 cores
N_POSITION = 3  # position features of a sentence: relative position, is first, is last


def position_features(n: int) -> np.ndarray:
    """[n, N_POSITION] the position features of an abstract's n sentences: relative position (0 first, 1 last),
    is first, is last (a one-sentence abstract's sentence is both)."""
    pos = np.zeros((n, N_POSITION), dtype=np.float32)
    if n:
        pos[:, 0] = np.arange(n) / max(n - 1, 1)
        pos[0, 1] = pos[n - 1, 2] = 1.0
    return pos


def text_key(text: str) -> str:
    """The cache key of a text (whitespace-normalised, so re-flowed text is the same text)."""
    return hashlib.sha1(" ".join(text.split()).encode("utf-8")).hexdigest()[:24]


LOADED: dict = {}  # backbones stay loaded for the session: a notebook re-run does not reload them


def by_length(texts: Sequence[str]) -> list[str]:
    """The texts shortest first (by characters, a proxy for tokens that needs no tokenizer).

    An encoder pads each batch to its longest text. Batches are sorted by length only within the chunk
    handed to it (a shard here, an actor's batch on Ray), so chunks taken in corpus order, where every
    abstract sits among its short sentences, pad far more: 18% more tokens for 256-text chunks of CSAbstruct
    (29% more attention), 3% for 2,048-text shards. Sorted first, 5% and 1%. The cache is keyed by text,
    so the order in which vectors are added does not matter."""
    return sorted(texts, key=len)


class FrozenBackbone:
    """A pretrained encoder used as a fixed feature extractor: pooled, L2-normalised vectors.

    `name` is a packaged short name (minilm, mpnet), a local folder or a hub id. Mean
    pooling suits sentence-transformers models (MiniLM, mpnet); "cls" suits SciDeBERTa.
    The model loads on first use, on the detected device (or `device`).
    """

    def __init__(self, name: str = "minilm", pooling: str = "mean", max_length: int = 256,
                 device: str | None = None, trust_remote_code: bool = False):
        self.name, self.pooling, self.max_length = str(name), pooling, int(max_length)
        self.device, self.trust_remote_code = device, trust_remote_code

    @property
    def key(self) -> str:
        """What the vectors depend on: the model (for a local folder, what its files hold:
        `models.local_model_identity`), its pooling and the maximum length."""
        identity = local_model_identity(self.name)
        text = f"{self.name}|{self.pooling}|{self.max_length}" + (f"|{identity}" if identity else "")
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def encoder(self):
        """The underlying model (an `AspectEncoder` whose heads are unused), loaded once per session."""
        from .encoders import AspectEncoder

        # Not keyed by max_length: every caller passes its own length to the encoder, and a second copy of the
        # same weights per length (256 for stage 03's features, 512 for BERTScore) cost seconds and memory.
        memo = (self.name, self.pooling, self.device, self.trust_remote_code)
        if memo not in LOADED:
            LOADED[memo] = AspectEncoder.from_base(self.name, ["base"], pooling=self.pooling,
                                                    max_length=self.max_length, device=self.device,
                                                    trust_remote_code=self.trust_remote_code)
        return LOADED[memo]

    @property
    def hidden_size(self) -> int:
        """The width of the vectors."""
        from .encoders import config_hidden_size

        return config_hidden_size(self.encoder().backbone.config)

    def embed(self, texts: Sequence[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Unit vectors [len(texts), H] in input order (length-sorted batches inside)."""
        return self.encoder().encode_pooled(list(texts), batch_size=batch_size, max_length=self.max_length,
                                            normalize=True, progress=progress)

    def __repr__(self) -> str:
        return f"FrozenBackbone({self.name!r}, pooling={self.pooling!r}, max_length={self.max_length})"


def frozen_backbone(name: str, pooling: str = "mean") -> FrozenBackbone:
    """The backbone of the frozen mode for a base model (one maximum length for every stage)."""
    return FrozenBackbone(name, pooling=pooling, max_length=FROZEN_MAX_LENGTH)


@dataclass
class DocumentFeatures:
    """The features of a list of documents: the whole text and each of its sentences.

    whole [N, H]; sentences[i] [n_i, H] (n_i may be 0); sentence_texts[i] the n_i sentences.
    `padded()` gives the batched tensors the heads read.
    """

    whole: np.ndarray
    sentences: list[np.ndarray]
    sentence_texts: list[list[str]]

    def __len__(self) -> int:
        return len(self.whole)

    def subset(self, rows: Sequence[int]) -> "DocumentFeatures":
        """The features of the given rows, in that order."""
        rows = list(rows)
        return DocumentFeatures(self.whole[rows], [self.sentences[i] for i in rows],
                                [self.sentence_texts[i] for i in rows])

    def padded(self, device=None):
        """(whole [N, H], sentences [N, M, H], mask [N, M], positions [N, M, 3]) as float32 torch tensors.

        M is the longest document's sentence count (at least 1, so a batch of documents
        without sentences still has a shape); padding rows are zero with mask False.
        Positions: relative position in the document (0 first, 1 last), is first, is last.
        """
        import torch

        n, h = self.whole.shape
        m = max([len(s) for s in self.sentences] + [1])
        sents = np.zeros((n, m, h), dtype=np.float32)
        mask = np.zeros((n, m), dtype=bool)
        pos = np.zeros((n, m, N_POSITION), dtype=np.float32)
        for i, s in enumerate(self.sentences):
            k = len(s)
            if not k:
                continue
            sents[i, :k], mask[i, :k], pos[i, :k] = s, True, position_features(k)
        as_tensor = lambda x: torch.as_tensor(x, device=device)  # noqa: E731
        return as_tensor(np.asarray(self.whole, dtype=np.float32)), as_tensor(sents), as_tensor(mask), as_tensor(pos)


def blend_words(sentences: np.ndarray, words: np.ndarray, share: float, mean: np.ndarray | None = None,
                stating: np.ndarray | None = None) -> np.ndarray:
    """[n, H] unit rows: unit(share x unit(words - mean) + (1 - share) x sentences), row by row (both unit rows),
    for the rows `stating` marks (None: all); the other sentences as they are. `mean`: the corpus's mean of these
    pooled phrases (`aspectfile.word_pooled_sentences`), which the phrases that state the aspect in every paper
    share; None or zero: not centred."""
    s = unit_rows(np.asarray(sentences, dtype=np.float32))
    if not len(s) or share <= 0:
        return s
    w = np.asarray(words, dtype=np.float32)
    if mean is not None:
        w = w - np.asarray(mean, dtype=np.float32)
    blended = unit_rows(share * unit_rows(w) + (1 - share) * s)
    return blended if stating is None else np.where(np.asarray(stating, dtype=bool)[:, None], blended, s)


def blend_documents(features: "DocumentFeatures", words: np.ndarray, share: float,
                    mean: np.ndarray | None = None, stating: np.ndarray | None = None) -> list[np.ndarray]:
    """Per document, its sentences blended with their pooled phrases (`blend_words`): `words` [n, H] and `stating`
    [n] (None: all) hold a row per sentence of the corpus, documents in order."""
    bounds = np.cumsum([0] + [len(t) for t in features.sentence_texts])
    return [blend_words(s, words[lo:hi], share, mean, None if stating is None else stating[lo:hi])
            for s, lo, hi in zip(features.sentences, bounds[:-1], bounds[1:])]


def marked_word_vectors(word_vectors, texts: Sequence[str], marks: Sequence[np.ndarray], directions: np.ndarray,
                        frequencies: dict[str, float] | None = None) -> np.ndarray:
    """[D, len(texts), H]: row k, the texts `marks[k]` marks read through their phrases towards `directions[k]`
    (`word_vectors` is `FeatureCache.word_vectors`), zero rows elsewhere. Each text marked for any direction
    is read once for all of them."""
    marks = [np.asarray(m, dtype=bool) for m in marks]
    read = np.flatnonzero(np.any(marks, axis=0)) if len(texts) else np.zeros(0, dtype=int)
    pooled = np.asarray(word_vectors([texts[i] for i in read], directions, frequencies), dtype=np.float32)
    out = np.zeros((len(marks), len(texts), pooled.shape[-1]), dtype=np.float32)
    out[:, read] = pooled
    for k, m in enumerate(marks):
        out[k, ~m] = 0.0
    return out


class FeatureCache:
    """Vectors of texts under one frozen backbone, kept in a folder of append-only shards.

    `folder=None` keeps them in memory only (inference on a few new abstracts). `run`: the run
    directory whose cache this is (`for_run`), whose ledger records each file written.
    """

    def __init__(self, folder: str | os.PathLike | None, backbone: FrozenBackbone, batch_size: int = 32,
                 run: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else None
        self.backbone, self.batch_size = backbone, batch_size
        self.run = RunDir(run) if run is not None else None
        self._index = VectorIndex()  # keys and where their vectors are: the vectors stay in the shards until read
        self._read_shards: set[str] = set()  # shard JSONs already read: another process's new ones are read later
        if self.folder is not None:
            self._load()

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike, backbone: FrozenBackbone, **kwargs) -> "FeatureCache":
        """The cache of `backbone` in a run directory: ``<run_dir>/features/<backbone.key>/``."""
        return cls(RunDir(run_dir).features(backbone.key), backbone, run=run_dir, **kwargs)

    def __len__(self) -> int:
        return len(self._index)

    def _load(self) -> None:
        """Read the finished shards not read yet (all of them on opening; under the lock, what others added)."""
        for index in sorted(self.folder.glob("shard-*.json")):
            if index.name in self._read_shards:
                continue
            shard = ShardFile.open(index.with_suffix(".safetensors"))  # its header only: rows are read when asked for
            try:
                keys = json.loads(index.read_text())["keys"]
            except (OSError, ValueError, KeyError, TypeError):  # a damaged shard is re-encoded, never trusted
                continue
            if shard is not None and len(keys) == shard.rows:
                self._read_shards.add(index.name)
                self._index.add_block(keys, shard)  # the first stored vector of a text is its vector

    def _next_shard(self) -> Path:
        """The stem of a new shard: one past every number in use (finished, or torn: a vector file left alone)."""
        numbers = [0]
        for path in self.folder.glob("shard-*"):
            number = path.name.split(".")[0].split("-")[-1]
            if number.isdigit():
                numbers.append(int(number))
        return self.folder / f"shard-{max(numbers) + 1:05d}"

    def _save(self, keys: list[str], vectors: np.ndarray) -> None:
        """Store the vectors of the keys that no process has stored yet, as one new shard, holding the lock."""
        with RunLock(self.folder, f"feature cache writer of {self.backbone!r}", wait=True) as lock:
            self._record(lock.path)  # the lock's file is the run's too: --clean may remove it with the shards
            self._load()  # what other processes stored since this cache was opened
            fresh = {k: v for k, v, held in zip(keys, vectors, self._index.held(keys)) if not held}
            if not fresh:
                return
            stem = self._next_shard()
            self._record(write_arrays(Path(f"{stem}.safetensors"),  # a temporary name with the pid, then renamed
                                      {"vectors": np.asarray(np.stack(list(fresh.values())), dtype=np.float32)}))
            # The keys last: a shard whose JSON is missing was interrupted and is ignored on load.
            self._record(write_json(Path(f"{stem}.json"), {"backbone": repr(self.backbone), "keys": list(fresh)},
                                    indent=None))
            self._read_shards.add(f"{stem.name}.json")
            shard = ShardFile.open(Path(f"{stem}.safetensors"))
            self._index.add_block(list(fresh), shard if shard is not None else np.stack(list(fresh.values())))

    def _record(self, *paths: Path) -> None:
        """Note the files just put in place in the run's ledger (`RunDir.record_cache`); nothing outside a run."""
        for path in paths if self.run is not None else ():
            self.run.record_cache(path)

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts not cached yet, each once, in order of first appearance."""
        return self._missing([text_key(t) for t in texts], texts)

    def _missing(self, keys: Sequence[str], texts: Sequence[str]) -> list[str]:
        """`missing` from the texts' keys, computed once by the caller."""
        return list({k: t for k, t, held in zip(keys, texts, self._index.held(keys)) if not held}.values())

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Cache vectors computed elsewhere from the same backbone (e.g. `bertscore.read`'s pooled pass)."""
        keys = [text_key(t) for t in texts]
        if self.folder is not None and keys:
            self._save(keys, vectors)  # keeps a vector another process stored first for the same text
        else:
            self._index.add_block(keys, np.asarray(vectors, dtype=np.float32))

    def _after_changes(self, compute):
        """compute(), again where a shard it read changed under this cache (a rerun with --clean in another
        process): that shard's keys are forgotten, the folder is read again, and what is missing is encoded."""
        for _ in range(3):
            try:
                return compute()
            except ShardChanged as changed:
                self._index.forget_block(changed.block)
                self._read_shards.discard(changed.path.with_suffix(".json").name)
                if self.folder is not None:
                    self._load()
        return compute()

    def _read(self, keys: list[str]) -> np.ndarray:
        if not keys:
            return np.zeros((0, self.backbone.hidden_size), dtype=np.float32)
        return self._index.get(keys)

    def word_vectors(self, texts: Sequence[str], directions: np.ndarray, frequencies: dict[str, float] | None = None,
                     temperature: float = PHRASE_TEMPERATURE, progress: bool = False) -> np.ndarray:
        """[D, len(texts), H] unit rows: each text's phrases, each embedded on its own, pooled towards each of
        `directions` [D, H] (`phrases.pool_phrases`, scores less the `frequencies` penalty of their pieces),
        cached like the texts' own vectors under keys that name the direction, temperature and table. The
        phrases' own vectors are not kept: a text's phrases are encoded once for all the directions it lacks."""
        return self._after_changes(lambda: self._word_vectors(texts, directions, frequencies, temperature, progress))

    def _word_vectors(self, texts, directions, frequencies, temperature, progress) -> np.ndarray:
        directions = np.atleast_2d(np.asarray(directions, dtype=np.float32))
        table = frequencies_tag(frequencies)
        tags = ["phrases " + hashlib.sha1(d.tobytes() + repr(float(temperature)).encode() + table.encode())
                .hexdigest()[:12] + " " for d in directions]
        tagged = [[text_key(tag + t) for t in texts] for tag in tags]  # each text's key under each direction
        every = np.logical_and.reduce([self._index.held(keys) for keys in tagged])
        todo = list({t: None for t, held in zip(texts, every) if not held})
        for start in range(0, len(todo), SHARD_ROWS):
            chunk = todo[start:start + SHARD_ROWS]
            cut = [phrases(t) for t in chunk]
            unique = list({p: None for parts in cut for p, _ in parts})
            encoded = dict(zip(unique, self.backbone.embed(unique, batch_size=max(self.batch_size, PHRASE_BATCH),
                                                           progress=progress))) if unique else {}
            vectors = [np.stack([encoded[p] for p, _ in parts]) for parts in cut]
            costs = [penalties([ps for _, ps in parts], frequencies) for parts in cut]
            for tag, d in zip(tags, directions):
                self.add([tag + t for t in chunk],
                         np.stack([pool_phrases(v, d, c, temperature) for v, c in zip(vectors, costs)]))
        if not len(texts):
            return np.zeros((len(directions), 0, self.backbone.hidden_size), dtype=np.float32)
        return np.stack([self._read(keys) for keys in tagged])

    def vectors(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """[len(texts), H] unit vectors; texts not yet cached are encoded (and saved) first."""
        return self._after_changes(lambda: self._vectors(texts, progress))

    def _vectors(self, texts: Sequence[str], progress: bool) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        todo = by_length(self._missing(keys, texts))
        if len(todo) >= FREE_CORES_MIN_TEXTS:
            from ..core.devices import use_free_cores

            use_free_cores()  # two threads on a core another job keeps busy run several times slower
        for start in range(0, len(todo), SHARD_ROWS):
            chunk = todo[start:start + SHARD_ROWS]
            self.add(chunk, self.backbone.embed(chunk, batch_size=self.batch_size, progress=progress))
        return self._read(keys)

    def documents(self, texts: Sequence[str], progress: bool = False) -> DocumentFeatures:
        """Whole-text and per-sentence vectors of each document (all new texts encoded in one go)."""
        sentence_texts = [split_sentences(t) for t in texts]
        flat = [s for sentences in sentence_texts for s in sentences]
        vectors = self.vectors(list(texts) + flat, progress=progress)
        whole, rest = vectors[:len(texts)], vectors[len(texts):]
        bounds = np.cumsum([0] + [len(s) for s in sentence_texts])
        return DocumentFeatures(whole, [rest[a:b] for a, b in zip(bounds[:-1], bounds[1:])], sentence_texts)
