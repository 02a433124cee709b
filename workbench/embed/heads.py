"""Pooling heads on a frozen backbone: the CPU-first aspect models and unified model of stages 02-03.

A general sentence encoder already places abstracts well; what it cannot know is which
*part* of an abstract a user's aspect lives in. A `SentencePoolingHead` learns exactly
that, for one aspect, composed of four parts, one per line:

    score_i  = q . s_i + p . position_i + c            `LinearScorer` (s_i: unit vector of sentence i)
    w_i      = sigmoid(score_i) / sum_j sigmoid(score_j)     `SentencePooling` (boilerplate left out)
    pooled   = unit(sum_i w_i s_i)
    mixed    = g * whole + (1 - g) * pooled              `GatedBlend` (g = sigmoid(gate), learned per aspect)
    output   = mixed + (mixed U) V                       `LowRankProjection` (V = 0 at start)

Untrained (q = p = c = 0, V = 0) it returns the abstract's own embedding blended half and
half with the mean of its sentences' embeddings, which is itself an embedding of the same
text: a head starts from the base encoder, and training can only move it where the data
say. The aspect-file floor is the same head with its scorer's numbers read from the aspect
file (`floor.floor_state`); another scorer plugs in as `scorer=`. A head that does not pool (`pool=False`: a stage-02 teacher, which reads one
short view) is the residual projection alone.

`PooledAspectModel` holds one head per aspect on one frozen backbone and has the
interface the rest of the workbench uses for any aspect model (`encode`, `aspects`,
`dim`, `save_pretrained`, `from_pretrained`), so stages 04-06 need not know which mode
made it. Its checkpoint holds only the heads (a few kB per aspect) and names the
backbone; loading resolves that name as any model argument is resolved (packaged name,
folder or hub id).
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .boilerplate import NEAR as BOILERPLATE_NEAR
from .encoders import AspectModel, CheckpointError, read_config, valid_aspects
from .features import (N_POSITION, DocumentFeatures, FeatureCache, FrozenBackbone, blend_documents,
                       marked_word_vectors)
from .taught_head import TaughtHeadScorer
from .mixture import MixtureScorer
from .phrases import stating
from ..core.files import write_json, write_tensors
from ..core.devices import best_device

FORMAT = "workbench-pooled-encoder"
VERSION = 1
WEIGHTS_NAME = "model.safetensors"  # the same names as AspectEncoder's, so caches key on them alike
CONFIG_NAME = "workbench_config.json"


class LinearScorer(nn.Module):
    """The logit that sentence i states the aspect: q . s_i + p . position_i + c.

    The trained heads' scorer, and the aspect-file floor's: `floor.floor_state` sets q, p and c from the aspect
    file (its prototypes, calibration and position prior), so the floor is this scorer with other numbers. Any
    module with the same call, sentences [B, M, H] and positions [B, M, N_POSITION] to logits [B, M], can take
    its place in a head (`SentencePoolingHead(..., scorer=...)`); training and the floor need this one."""

    kind = "linear"

    def __init__(self, hidden: int, n_position: int = N_POSITION):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(int(hidden)))
        self.position = nn.Parameter(torch.zeros(n_position))
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, sentences: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return sentences @ self.query + positions @ self.position + self.bias

    def penalty(self) -> torch.Tensor:
        """The squared distance from the untrained scorer's weights (training's L2 prior: uniform weights)."""
        return self.query.pow(2).sum() + self.position.pow(2).sum()

    def config(self) -> dict:
        return {"kind": self.kind}


def scorer_config(scorer: nn.Module) -> dict:
    """What a checkpoint's config says of a head's scorer: its own `config()`, else its class's name (a plug-in
    scorer a checkpoint cannot rebuild: loading it names the class)."""
    return scorer.config() if hasattr(scorer, "config") else {"kind": type(scorer).__name__}


def scorer_from_config(hidden: int, config: dict) -> nn.Module:
    """The (untrained) scorer a checkpoint's config names: `LinearScorer`, `mixture.MixtureScorer` or
    `taught_head.TaughtHeadScorer` (a scorer taught by marks, holding the floor's scorers)."""
    config = dict(config)
    kind = config.pop("kind", "linear")
    if kind == "linear":
        return LinearScorer(hidden)
    if kind == MixtureScorer.kind:
        return MixtureScorer(hidden, **config)
    if kind == TaughtHeadScorer.kind:
        floors = [scorer_from_config(hidden, c) for c in config.pop("floors")]
        return TaughtHeadScorer(hidden, floors, **config)
    raise CheckpointError(f"unknown sentence scorer {kind!r} in the checkpoint's config "
                          "(known: linear, mixture, taught)")


class SentencePooling(nn.Module):
    """Pools a document's sentences by their scores: sigmoid weights, normalised, boilerplate never pooled, and
    where the floor says so a stating sentence read through its phrases.

    The sigmoid weights (rather than a softmax) let several sentences share an aspect without competing, and
    are the probabilities of the per-sentence classifier that the sentence labels train (`head_training.py`). The
    buffers are empty or zero unless the guard's floor sets them (`floor.floor_state`)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = int(hidden)
        # Sentences the corpus shares nearly word for word (`boilerplate.py`): never pooled. Its size is the
        # corpus's, so loading resizes it (`_load_from_state_dict`).
        self.register_buffer("boilerplate", torch.zeros(0, self.hidden))
        # The aspect's direction among a sentence's phrases and the pooled phrases' share of each sentence
        # (`aspectfile.word_pooled_sentences`; named "words" since checkpoints hold them by these names);
        # share 0 (the default, and every trained head) pools the sentence vectors as they are.
        self.register_buffer("words", torch.zeros(self.hidden))
        self.register_buffer("word_share", torch.zeros(()))
        self.register_buffer("word_mean", torch.zeros(self.hidden))  # the corpus's mean of the pooled phrases

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "boilerplate"
        if key in state_dict:
            self.boilerplate = torch.zeros_like(state_dict[key], device=self.boilerplate.device)
        else:  # a checkpoint written before heads held boilerplate
            state_dict[key] = torch.zeros(0, self.hidden)
            self.boilerplate = torch.zeros(0, self.hidden, device=self.boilerplate.device)
        # A checkpoint written before heads could pool words: no word pooling.
        state_dict.setdefault(prefix + "words", torch.zeros(self.hidden))
        state_dict.setdefault(prefix + "word_share", torch.zeros(()))
        state_dict.setdefault(prefix + "word_mean", torch.zeros(self.hidden))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def pools_words(self) -> bool:
        """Whether stating sentences are read through their phrases (`words`, `word_share`)."""
        return float(self.word_share) > 0

    def without_boilerplate(self, sentences: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The mask [B, M] with the boilerplate sentences off, unless that leaves a document none."""
        if not len(self.boilerplate):
            return mask
        near = (sentences @ self.boilerplate.to(sentences.dtype).T).amax(dim=-1) >= BOILERPLATE_NEAR
        keep = mask.bool() & ~near
        return torch.where(keep.any(dim=-1, keepdim=True), keep, mask.bool()).to(mask.dtype)

    def weights(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Pooling weights [B, M]: sigmoid of the scores, zero on padding, summing to 1 per document."""
        w = torch.sigmoid(scores) * mask
        return w / w.sum(dim=-1, keepdim=True).clamp(min=1e-12)

    def forward(self, scores, sentences, mask, whole, pooled_from=None):
        """(pooled [B, H] unit rows, weights [B, M]): weights from the scores over the sentences that are not
        boilerplate, the vectors from `pooled_from` where given (the phrase-read sentences), else `sentences`."""
        w = self.weights(scores, self.without_boilerplate(sentences, mask))
        vectors = sentences if pooled_from is None else pooled_from
        pooled = F.normalize((w.unsqueeze(-1) * vectors).sum(dim=1), dim=-1)
        # A document without sentences (an empty text) has nothing to pool: it keeps its whole vector.
        return torch.where(mask.any(dim=-1, keepdim=True), pooled, whole), w


class GatedBlend(nn.Module):
    """g * whole + (1 - g) * pooled with g = sigmoid(gate), learned per aspect: how much of an aspect lives
    outside its own sentences varies by aspect and corpus."""

    def __init__(self, gate_init: float = 0.0):
        super().__init__()
        self.gate = nn.Parameter(torch.tensor(float(gate_init)))

    def share_whole(self) -> float:
        """The share g of the whole-text vector."""
        return float(torch.sigmoid(self.gate.detach()))

    def forward(self, whole: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.gate)
        return g * whole + (1 - g) * pooled


class LowRankProjection(nn.Module):
    """x + (x U) V, the identity at rank 0; V starts at zero, so a new projection changes nothing."""

    def __init__(self, hidden: int, rank: int = 0, seed: int = 0):
        super().__init__()
        self.rank = int(rank)
        if self.rank:
            # U small and random, V zero: the residual starts at exactly zero but can grow
            # (with both zero, neither would ever get a gradient).
            g = torch.Generator().manual_seed(seed)
            self.down = nn.Parameter(torch.randn(hidden, self.rank, generator=g) / hidden ** 0.5)
            self.up = nn.Parameter(torch.zeros(self.rank, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (x @ self.down) @ self.up if self.rank else x

    def penalty(self) -> torch.Tensor | float:
        """The squared size of V (training's L2 prior: the identity)."""
        return self.up.pow(2).sum() if self.rank else 0.0


# Checkpoints written before a head was made of parts held their tensors under these names.
FLAT_NAMES = {"query": "scorer.query", "position": "scorer.position", "bias": "scorer.bias",
              "boilerplate": "pooling.boilerplate", "words": "pooling.words", "word_share": "pooling.word_share",
              "word_mean": "pooling.word_mean", "gate": "blend.gate", "down": "projection.down",
              "up": "projection.up"}


class SentencePoolingHead(nn.Module):
    """One aspect's head, composed: a sentence scorer, a pooling, a blend with the whole text and a projection
    (see module doc). `scorer`: any module scoring sentences as `LinearScorer` does (default: a new one)."""

    def __init__(self, hidden: int, pool: bool = True, rank: int = 0, n_position: int = N_POSITION,
                 gate_init: float = 0.0, seed: int = 0, scorer: nn.Module | None = None):
        super().__init__()
        self.hidden, self.pool, self.rank = int(hidden), bool(pool), int(rank)
        self.scorer = scorer if scorer is not None else LinearScorer(self.hidden, n_position)
        self.pooling = SentencePooling(self.hidden)
        self.blend = GatedBlend(gate_init)
        self.projection = LowRankProjection(self.hidden, self.rank, seed)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for old, new in FLAT_NAMES.items():  # a checkpoint written before heads had parts
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def pools_words(self) -> bool:
        """Whether the head reads the sentences that state its aspect through their phrases."""
        return self.pool and self.pooling.pools_words()

    def sentence_weights(self, sentences: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor):
        """The pooling weights [B, M] the head gives the sentences."""
        return self.pooling.weights(self.scores(sentences, positions, mask),
                                    self.pooling.without_boilerplate(sentences, mask))

    def scores(self, sentences: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The scorer's scores [B, M]; a scorer that normalises over the abstract (`needs_mask`, the taught one)
        also reads which sentences are pooled (the mask, boilerplate off)."""
        if getattr(self.scorer, "needs_mask", False):
            return self.scorer(sentences, positions, self.pooling.without_boilerplate(sentences, mask))
        return self.scorer(sentences, positions)

    def share_whole(self) -> float:
        """The learned share g of the whole-text vector in the blend."""
        return self.blend.share_whole() if self.pool else 1.0

    def forward(self, whole, sentences, mask, positions, word_sentences=None):
        """(embedding [B, H] not normalised, weights [B, M], scores [B, M]). The sentences' weights come from
        `sentences`; the pooled vectors from `word_sentences` [B, M, H] where given (`pools_words`)."""
        if not self.pool:
            return self.projection(whole), None, None
        scores = self.scores(sentences, positions, mask)
        pooled, w = self.pooling(scores, sentences, mask, whole, word_sentences)
        return self.projection(self.blend(whole, pooled)), w, scores


class PooledAspectModel(AspectModel):
    """A frozen backbone (by name) and one `SentencePoolingHead` per aspect; the CPU-first aspect model.

    `pool=True` for the unified model (reads abstracts, weighs their sentences), False for a
    stage-02 teacher (reads one view). Vectors come from a `FeatureCache`; pass a cache
    kept in the run directory to reuse what earlier stages encoded.
    """

    def __init__(self, base_model: str, aspects, hidden: int, pooling: str = "mean", max_length: int = 256,
                 pool: bool = True, rank: int = 0, seed: int = 0):
        super().__init__()
        self.base_model, self.pooling, self.max_length = str(base_model), pooling, int(max_length)
        self.pool, self.rank = bool(pool), int(rank)
        self.extra: dict = {}  # what training adds (settings, scores, the guard's verdicts), saved with the checkpoint
        self.dim = int(hidden)
        self.heads = nn.ModuleDict({a: SentencePoolingHead(hidden, pool=pool, rank=rank, seed=seed + i)
                                    for i, a in enumerate(valid_aspects(aspects))})
        self.cache: FeatureCache | None = None
        # The corpus's frequent phrase pieces (`phrases.piece_frequencies`), which heads that pool phrases
        # weigh down: set with them by the guard's floor, kept in the config.
        self.phrase_frequencies: dict[str, float] = {}

    def backbone(self) -> FrozenBackbone:
        """The frozen backbone these heads read."""
        return FrozenBackbone(self.base_model, pooling=self.pooling, max_length=self.max_length)

    def base_vectors(self, texts: Sequence[str]):
        """The frozen backbone's whole-text vectors (the unified, pooling model's feature cache; else None)."""
        return self.features(list(texts)).whole if self.pool else None

    def features(self, texts: Sequence[str], progress: bool = False):
        """Whole-text vectors [N, H] (pool=False) or `DocumentFeatures` (pool=True) of texts, via the cache."""
        if self.cache is None:
            self.cache = FeatureCache(None, self.backbone())
        return self.cache.documents(texts, progress=progress) if self.pool else \
            self.cache.vectors(texts, progress=progress)

    # ---------------------------------------------------------------- forward

    def forward_features(self, features, aspects=None, progress: bool = False) -> dict[str, tuple]:
        """{aspect: (embedding, weights, scores)} from precomputed features (training and encode share this)."""
        device = self.device
        if isinstance(features, DocumentFeatures):
            whole, sents, mask, pos = features.padded(device)
        else:
            whole = torch.as_tensor(np.asarray(features, dtype=np.float32), device=device)
            sents = mask = pos = None
        aspects = self._check_aspects(aspects)
        pooling = [a for a in aspects if sents is not None and self.heads[a].pools_words()]
        words = dict(zip(pooling, self.word_sentences(features, pooling, device, progress, (sents, mask, pos)))) \
            if pooling else {}
        return {a: self.heads[a](whole, sents, mask, pos, words.get(a)) for a in aspects}

    def word_sentences(self, features: DocumentFeatures, aspects: Sequence[str], device=None,
                       progress: bool = False, padded: tuple | None = None) -> list:
        """Per aspect, [N, M, H]: the documents' sentence vectors, those that state the aspect by the head's own
        weights (`phrases.stating`) blended with their phrases (`aspectfile.word_pooled_sentences`, with the
        model's `phrase_frequencies`); each such sentence's phrases are encoded once for all of them, and the
        pooled vectors are cached with the others. `padded`: (sentences, mask, positions) of
        `features.padded(device)` where the caller has them."""
        if self.cache is None:
            self.cache = FeatureCache(None, self.backbone())
        heads = [self.heads[a] for a in aspects]
        flat = [t for texts in features.sentence_texts for t in texts]
        sents, mask, pos = padded if padded is not None else features.padded(device)[1:]
        marks = []
        with torch.no_grad():
            for head in heads:
                w = head.sentence_weights(sents, mask, pos).float().cpu().numpy()
                marks.append(np.concatenate([stating(w[i, :len(t)]) for i, t in enumerate(features.sentence_texts)]
                                            + [np.zeros(0, dtype=bool)]))
        pooled = marked_word_vectors(partial(self.cache.word_vectors, progress=progress), flat, marks,
                                     np.stack([h.pooling.words.detach().float().cpu().numpy() for h in heads]),
                                     self.phrase_frequencies)
        out = []
        for head, words, m in zip(heads, pooled, marks):
            blended = blend_documents(features, words, float(head.pooling.word_share),
                                      head.pooling.word_mean.detach().float().cpu().numpy(), m)
            out.append(DocumentFeatures(features.whole, blended, features.sentence_texts).padded(device)[1])
        return out

    def encode(self, texts: Sequence[str], aspects: str | Iterable[str] | None = None, batch_size: int = 32,
               max_length: int | None = None, normalize: bool = True, progress: bool = False,
               device: str | None = None) -> dict[str, np.ndarray]:
        """Embed texts with every requested head: {aspect: float32 [len(texts), dim]}, unit rows by default.

        The same call as `AspectEncoder.encode`. The backbone reads each text (and, for a
        pooling model, each sentence) once; `max_length` is the backbone's, fixed at training.
        """
        texts = self._check_texts(texts)
        if device is not None:
            self.to(device)
        aspects = self._check_aspects(aspects)
        if not texts:
            return {a: np.zeros((0, self.dim), dtype=np.float32) for a in aspects}
        features = self.features(texts, progress=progress)
        out = {}
        with torch.inference_mode():
            for a, (emb, _, _) in self.forward_features(features, aspects, progress).items():
                emb = F.normalize(emb, dim=-1) if normalize else emb
                out[a] = emb.float().cpu().numpy()
        return out

    def encode_pooled(self, texts: Sequence[str], batch_size: int = 32, max_length: int | None = None,
                      normalize: bool = True, progress: bool = False, device: str | None = None) -> np.ndarray:
        """The backbone's own vectors of the texts [N, H] without any head (the base-encoder baseline)."""
        return self.backbone().embed(list(texts), batch_size=batch_size, progress=progress)

    def attention(self, texts: Sequence[str], aspects=None):
        """Per document, a DataFrame of its sentences and each aspect head's weight on them.

        Columns: sentence, then one weight column per aspect (each sums to 1 over the
        document); `frame.attrs["whole share"]` holds each head's learned share of the
        whole-text vector. Needs a pooling model.
        """
        import pandas as pd

        if not self.pool:
            raise ValueError("this model reads single views (pool=False): it has no sentence weights")
        features = self.features(list(texts))
        with torch.inference_mode():
            result = self.forward_features(features, aspects)
        frames = []
        for i, sentences in enumerate(features.sentence_texts):
            frame = pd.DataFrame({"sentence": sentences})
            for a, (_, w, _) in result.items():
                frame[a] = w[i, :len(sentences)].float().cpu().numpy()
            frame.attrs["whole share"] = {a: self.heads[a].share_whole() for a in result}
            frames.append(frame)
        return frames

    # ---------------------------------------------------------------- checkpoints

    def config(self) -> dict:
        """What `workbench_config.json` holds (everything needed to rebuild the model but the weights)."""
        return {"format": FORMAT, "version": VERSION, "base_model": self.base_model, "pooling": self.pooling,
                "max_length": self.max_length, "dim": self.dim, "aspects": self.aspects, "pool": self.pool,
                "rank": self.rank, "frozen_backbone": True, "extra": self.extra,
                "phrase_frequencies": self.phrase_frequencies, **self.scorer_configs()}

    def scorer_configs(self) -> dict:
        """{"scorers": {aspect: its scorer's config}} for the heads whose scorer is not the linear one (the floor's
        position mixture), else nothing: a checkpoint of trained heads reads as it always has."""
        configs = {a: scorer_config(h.scorer) for a, h in self.heads.items()}
        other = {a: c for a, c in configs.items() if c["kind"] != LinearScorer.kind}
        return {"scorers": other} if other else {}

    def save_pretrained(self, folder: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write `model.safetensors` (the heads) and `workbench_config.json` (last: a folder without it is unfinished)."""

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if extra:
            self.extra.update(extra)
        config = self.config()
        json.dumps(config)  # fail before writing anything if `extra` is not JSON-serialisable
        write_tensors(folder / WEIGHTS_NAME, self.state_dict(), metadata={"format": "pt"})
        write_json(folder / CONFIG_NAME, config)  # last: a folder without it is unfinished
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, device: str | None = None, aspects=None,
                        trust_remote_code: bool = False) -> "PooledAspectModel":
        """Load a checkpoint written by `save_pretrained`, in eval mode; errors name what is wrong.

        The backbone is resolved by name when it is first needed (the packaged models
        offline; a hub id needs it cached or internet). `trust_remote_code` is accepted
        for the common loader's signature; the backbone is loaded without remote code.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        folder = Path(folder).expanduser()
        config = read_config(folder / CONFIG_NAME, FORMAT, VERSION)
        available = list(config["aspects"])
        wanted = available if aspects is None else ([aspects] if isinstance(aspects, str) else list(aspects))
        unknown = [a for a in wanted if a not in available]
        if unknown:
            raise CheckpointError(f"aspect(s) {unknown} not in checkpoint {folder}; it has {available}")
        model = cls(config["base_model"], available, hidden=config["dim"], pooling=config["pooling"],
                    max_length=config["max_length"], pool=config["pool"], rank=config.get("rank", 0))
        model.extra = dict(config.get("extra") or {})
        for a, scorer in (config.get("scorers") or {}).items():
            if a in model.heads:
                model.heads[a].scorer = scorer_from_config(config["dim"], scorer)
        model.phrase_frequencies = dict(config.get("phrase_frequencies") or {})
        try:
            state = load_file(str(folder / WEIGHTS_NAME), device="cpu")
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{folder / WEIGHTS_NAME} is missing, corrupt or truncated: {exc}") from exc
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f"{folder / WEIGHTS_NAME} does not match the model its config describes: "
                                  f"{exc}") from exc
        if wanted != available:
            model.heads = nn.ModuleDict({a: model.heads[a] for a in wanted})
        return model.to(device or best_device()).eval()
