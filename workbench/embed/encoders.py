"""Aspect encoders: one transformer backbone, pooled, with one linear head per aspect.

The same class serves both stages of SemCSE-Multi:

* an aspect model (paper section 3, A.3): one head, named after its aspect, trained
  with InfoNCE on pairs of summaries; heads initialised from N(0, 0.1);
* the unified model (section 4, A.4): one head per aspect on a shared backbone, all
  heads computed from a single backbone pass; heads initialised from N(0, 1e-2).

Heads are bias-free Linear(hidden -> dim) maps of the pooled backbone output ("cls",
the first token of the last hidden state, as the authors do; or "mean" over the
attention mask).

A checkpoint is a folder that holds only plain files, no pickles::

    model.safetensors       backbone + heads (state dict keys "backbone.*", "heads.<aspect>.weight")
    config.json             the backbone's transformers config
    tokenizer files
    workbench_config.json   {"format": "workbench-aspect-encoder", "version": 1, ...}

Typical use::

    model = AspectEncoder.from_base("minilm", ["hypothesis"], head_std=0.1)
    vectors = model.encode(["a summary", "another one"])["hypothesis"]   # [2, 150], unit rows
    model.save_pretrained("runs/x/hypothesis")
    model = AspectEncoder.from_pretrained("runs/x/hypothesis")
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.devices import best_device
from ..core.models import load_encoder
from ..core.files import write_json

FORMAT = "workbench-aspect-encoder"
VERSION = 1
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "workbench_config.json"
POOLINGS = ("cls", "mean")


class CheckpointError(ValueError):
    """A folder that cannot be loaded as a workbench aspect encoder; the message says why."""


def read_config(path, fmt: str | None = None, version: int | None = None) -> dict:
    """A checkpoint's JSON config. CheckpointError, naming the file, when it cannot be read, is not JSON, or
    (given `fmt`) is not of that format and version: the one check every loader of the package makes."""
    path = Path(path)
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    if fmt is not None and (config.get("format") != fmt or (version is not None and config.get("version") != version)):
        raise CheckpointError(f"{path} has format {config.get('format')!r} version {config.get('version')!r}; "
                              f"this workbench reads format {fmt!r} version {version}")
    return config


def config_hidden_size(config) -> int:
    """The width of a transformers backbone's hidden states, read from its config (hidden_size, d_model or dim)."""
    for name in ("hidden_size", "d_model", "dim"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    raise ValueError(f"cannot tell the hidden size of a {type(config).__name__}")


def valid_aspects(aspects: str | Iterable[str]) -> list[str]:
    """The aspect names as a list, after checking that there is one at least, none twice and none with a dot."""
    aspects = [aspects] if isinstance(aspects, str) else list(aspects)
    if not aspects:
        raise ValueError("an AspectEncoder needs at least one aspect")
    if len(set(aspects)) != len(aspects):
        raise ValueError(f"duplicate aspect names: {aspects}")
    for name in aspects:
        # ModuleDict keys become parts of state dict keys, so they cannot hold dots.
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"invalid aspect name {name!r}: use a non-empty string without dots")
    return aspects


def _brief(keys: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(list(keys)[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


class AspectModel(nn.Module):
    """What every aspect model shares, fine-tuned (`AspectEncoder`) or on a frozen encoder (`heads.PooledAspectModel`).

    Subclasses hold their heads in `self.heads` (a ModuleDict keyed by aspect).
    """

    @property
    def aspects(self) -> list[str]:
        """The aspect names, in head order."""
        return list(self.heads)

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return next(self.parameters()).device

    def base_vectors(self, texts: Sequence[str]):
        """The base encoder's whole-text vectors [n, hidden] where the model holds them at no cost, else None.

        A fine-tuned model has no frozen base to ask; `heads.PooledAspectModel` answers from its feature cache.
        """
        return None

    def _check_aspects(self, aspects: str | Iterable[str] | None) -> list[str]:
        if aspects is None:
            return self.aspects
        aspects = [aspects] if isinstance(aspects, str) else list(aspects)
        unknown = [a for a in aspects if a not in self.heads]
        if unknown:
            raise KeyError(f"unknown aspect(s) {unknown}; this model has {self.aspects}")
        return aspects

    @staticmethod
    def _check_texts(texts) -> list[str]:
        """The texts as a list, after checking that each is a string (a lone string is refused, not split)."""
        if isinstance(texts, str):
            raise TypeError("encode wants a list of strings; wrap a single text as [text]")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is a {type(text).__name__}, not a string: {text!r}")
        return texts


TOKENS_PER_TEXT = 64  # `AspectEncoder.batches`: a batch of n texts holds at most n x 64 tokens


class AspectEncoder(AspectModel):
    """A transformers backbone + pooling + one bias-free Linear(hidden -> dim) head per aspect.

    `tokenizer` is kept as a plain attribute (it is not a module), so that `encode`,
    `tokenize` and `save_pretrained` need nothing else.
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer,
        aspects: str | Iterable[str],
        dim: int = 150,
        pooling: str = "cls",
        head_std: float = 0.1,
        max_length: int = 128,
        base_model: str = "",
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if int(dim) <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.backbone = backbone
        self.tokenizer = tokenizer
        # CLS pooling reads position 0, which must be a real token, not padding.
        self.tokenizer.padding_side = "right"
        self.pooling = pooling
        self.dim = int(dim)
        self.max_length = int(max_length)
        self.base_model = str(base_model)
        self.extra: dict = {}  # what training adds (settings, scores), saved with the checkpoint
        hidden = config_hidden_size(backbone.config)
        heads = {}
        for name in valid_aspects(aspects):
            head = nn.Linear(hidden, self.dim, bias=False)
            nn.init.normal_(head.weight, mean=0.0, std=head_std)
            heads[name] = head
        try:
            self.heads = nn.ModuleDict(heads)
        except KeyError as exc:  # a name such as "keys" clashes with a ModuleDict attribute
            raise ValueError(f"invalid aspect name: {exc}") from exc

    # ---------------------------------------------------------------- forward

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **backbone_kwargs) -> torch.Tensor:
        """The pooled backbone output [B, hidden]: the first token ("cls") or the masked mean ("mean")."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **backbone_kwargs).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        aspects: str | Iterable[str] | None = None,
        **backbone_kwargs,
    ) -> dict[str, torch.Tensor]:
        """Embeddings {aspect: [B, dim]} for the requested aspects (default all), from ONE backbone pass."""
        aspects = self._check_aspects(aspects)
        pooled = self.pooled(input_ids, attention_mask, **backbone_kwargs)
        return {a: self.heads[a](pooled.to(self.heads[a].weight.dtype)) for a in aspects}

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """Tokenise a batch (right-padded, truncated) into input_ids and attention_mask on the model's device.

        Only these two are returned, so training and `encode` feed the backbone the same inputs.
        """
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=max_length or self.max_length, return_tensors="pt"
        )
        device = self.device
        return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}

    # ---------------------------------------------------------------- inference

    def batches(self, texts: Sequence[str], batch_size: int, max_length: int | None = None):
        """(indices, batch) over texts in batches of similar token length, longest first.

        Each text is tokenised once and the batches are padded from the token ids. On the
        ACLSum test split, sorting by characters padded abstracts by 19% and their one-sentence
        summaries by 33% (wasted compute); sorting by tokens with the token cap below pads
        both by about 5%. The batches are what `tokenize` gives for the same texts.
        """
        if not len(texts):
            return
        ids = self.tokenizer(list(texts), truncation=True, max_length=max_length or self.max_length)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        left = self.tokenizer.padding_side == "left"
        start = 0
        while start < len(order):
            # At most batch_size texts and batch_size x 64 tokens: long texts come in smaller
            # batches, which pad less and still give the matrix products thousands of rows.
            width = len(ids[order[start]])
            take = max(1, min(batch_size, (batch_size * TOKENS_PER_TEXT) // max(width, 1)))
            idx, start = order[start:start + take], start + take
            input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                cols = slice(width - len(ids[i]), width) if left else slice(0, len(ids[i]))
                input_ids[row, cols], mask[row, cols] = torch.tensor(ids[i]), 1
            yield idx, {"input_ids": input_ids.to(self.device), "attention_mask": mask.to(self.device)}

    def _run_batched(self, texts, run, batch_size, max_length, progress, device, desc) -> dict[str, np.ndarray]:
        """Apply `run(batch) -> {key: [b, d]}` to `texts` in length-sorted batches, rows back in input order."""
        texts = self._check_texts(texts)
        if device is not None:
            self.to(device)
        from tqdm.auto import tqdm

        out: dict[str, np.ndarray] = {}
        was_training = self.training
        self.eval()  # no dropout; restored afterwards, since validation runs mid-training
        try:
            with torch.inference_mode(), tqdm(total=len(texts), disable=not progress, desc=desc) as bar:
                for idx, batch in self.batches(texts, batch_size, max_length):
                    result = run(batch)
                    for key, value in result.items():
                        if key not in out:
                            out[key] = np.empty((len(texts), value.shape[1]), dtype=np.float32)
                        out[key][idx] = value.float().cpu().numpy()
                    bar.update(len(idx))
        finally:
            self.train(was_training)
        return out

    def encode(
        self,
        texts: Sequence[str],
        aspects: str | Iterable[str] | None = None,
        batch_size: int = 32,
        max_length: int | None = None,
        normalize: bool = True,
        progress: bool = False,
        device: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Embed texts with every requested head: {aspect: float32 array [len(texts), dim]}, input order.

        Rows are L2-normalised unless normalize=False. `max_length` defaults to the
        model's (128 for summaries; pass 512 for abstracts, as the authors do).
        `device`, when given, moves the model there first (it stays there).
        """
        aspects = self._check_aspects(aspects)

        def run(batch):
            heads = self(batch["input_ids"], batch["attention_mask"], aspects)
            return {a: F.normalize(v, dim=-1) if normalize else v for a, v in heads.items()}

        out = self._run_batched(texts, run, batch_size, max_length, progress, device, "encode")
        # An empty input still gets arrays of the right width.
        return {a: out.get(a, np.empty((0, self.dim), dtype=np.float32)) for a in aspects}

    def encode_pooled(
        self,
        texts: Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        normalize: bool = True,
        progress: bool = False,
        device: str | None = None,
    ) -> np.ndarray:
        """The pooled backbone vectors [len(texts), hidden] without any head (e.g. the base-model baseline)."""

        def run(batch):
            v = self.pooled(batch["input_ids"], batch["attention_mask"])
            return {"pooled": F.normalize(v, dim=-1) if normalize else v}

        out = self._run_batched(texts, run, batch_size, max_length, progress, device, "encode")
        return out.get("pooled", np.empty((0, config_hidden_size(self.backbone.config)), dtype=np.float32))

    # ---------------------------------------------------------------- checkpoints

    def save_pretrained(self, folder: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write the checkpoint folder (safetensors weights, backbone config, tokenizer, workbench_config.json).

        `extra` (JSON-serialisable) is merged into `self.extra` and saved with it, e.g.
        the training settings or the validation score. workbench_config.json is written
        last, so a folder without it is an unfinished save.
        """
        from safetensors.torch import save_model

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if extra:
            self.extra.update(extra)
        config = {
            "format": FORMAT,
            "version": VERSION,
            "base_model": self.base_model,
            "pooling": self.pooling,
            "dim": self.dim,
            "aspects": self.aspects,
            "max_length": self.max_length,
            "extra": self.extra,
        }
        json.dumps(config)  # fail before writing anything if `extra` is not JSON-serialisable
        # save_model drops the duplicate names of tied/shared tensors (save_file would refuse them);
        # from_pretrained restores them. Write to a temporary name so a killed save leaves no half file.
        tmp = folder / (WEIGHTS_NAME + ".tmp")
        save_model(self, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, folder / WEIGHTS_NAME)
        self.backbone.config.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        write_json(folder / CONFIG_NAME, config)
        return folder

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike,
        device: str | None = None,
        aspects: str | Iterable[str] | None = None,
        trust_remote_code: bool = False,
    ) -> "AspectEncoder":
        """Load a checkpoint written by `save_pretrained`, offline, in eval mode.

        `aspects` keeps only those heads (the backbone pass is shared anyway). Raises
        CheckpointError when the folder is missing, is not a workbench checkpoint, has
        another format or version, lacks a requested aspect, has a corrupt weights file,
        or its weights do not match the model the config describes.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise CheckpointError(f"checkpoint folder {folder} does not exist")
        config_path = folder / CONFIG_NAME
        if not config_path.is_file():
            hint = ""
            if (folder / "config.json").is_file():
                hint = " It looks like a plain transformers model: use AspectEncoder.from_base() to add fresh heads."
            raise CheckpointError(f"{folder} is not a workbench encoder checkpoint: it has no {CONFIG_NAME}.{hint}")
        config = read_config(config_path, FORMAT, VERSION)
        available = list(config["aspects"])
        wanted = available if aspects is None else ([aspects] if isinstance(aspects, str) else list(aspects))
        unknown = [a for a in wanted if a not in available]
        if unknown:
            raise CheckpointError(f"aspect(s) {unknown} not in checkpoint {folder}; it has {available}")
        weights = folder / WEIGHTS_NAME
        if not weights.is_file():
            pickles = sorted(p.name for p in folder.glob("*") if p.suffix in {".bin", ".pt", ".pth", ".pkl", ".ckpt"})
            note = f" (found {pickles}, which are not loaded: pickles can run code)" if pickles else ""
            raise CheckpointError(f"{folder} has no {WEIGHTS_NAME}{note}")

        backbone_config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        backbone = AutoModel.from_config(backbone_config, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        model = cls(
            backbone, tokenizer, available, dim=config["dim"], pooling=config["pooling"],
            max_length=config["max_length"], base_model=config.get("base_model", ""),
        )
        model.extra = dict(config.get("extra") or {})
        try:
            state = load_file(str(weights), device="cpu")
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{weights} is corrupt or truncated: {exc}") from exc
        _load_state_strict(model, state, weights)
        if wanted != available:
            model.heads = nn.ModuleDict({a: model.heads[a] for a in wanted})
        return model.to(device or best_device()).eval()

    @classmethod
    def from_base(
        cls,
        model_name: str | os.PathLike,
        aspects: str | Iterable[str],
        dim: int = 150,
        pooling: str = "cls",
        head_std: float = 0.1,
        max_length: int = 128,
        device: str | None = None,
        trust_remote_code: bool = False,
    ) -> "AspectEncoder":
        """A fresh model: a pretrained backbone (packaged name, local folder or hub id) with new heads.

        If `model_name` is a workbench checkpoint folder, its backbone is reused (its heads
        are not). The backbone is kept in float32: train with autocast for speed.
        """
        if (Path(str(model_name)).expanduser() / CONFIG_NAME).is_file():
            source = cls.from_pretrained(model_name, device="cpu", trust_remote_code=trust_remote_code)
            backbone, tokenizer = source.backbone, source.tokenizer
        else:
            backbone, tokenizer = load_encoder(model_name, device="cpu", trust_remote_code=trust_remote_code)
        model = cls(
            backbone.float(), tokenizer, aspects, dim=dim, pooling=pooling, head_std=head_std,
            max_length=max_length, base_model=str(model_name),
        )
        return model.to(device or best_device())


def _load_state_strict(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """load_state_dict(strict=True), except that a tied tensor saved under one of its names is enough."""
    expected = model.state_dict()
    # save_model kept one name per shared storage; the others are filled through the tie.
    shared: dict[int, list[str]] = {}
    for key, tensor in expected.items():
        shared.setdefault(tensor.data_ptr() or key, []).append(key)  # empty tensors share no storage
    missing = [
        k for k, t in expected.items() if k not in state and not any(o in state for o in shared[t.data_ptr() or k])
    ]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match the model its config describes: "
            f"missing keys [{_brief(missing)}], unexpected keys [{_brief(unexpected)}]"
        )
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise CheckpointError(f"{path} does not match the model its config describes: {exc}") from exc
