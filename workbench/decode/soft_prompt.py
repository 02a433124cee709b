"""Stage 04: decode an aspect embedding back into a natural-language description (paper section 5, A.8).

A frozen causal LM reads a short prompt in which a few positions are not tokens but
vectors computed from the embedding:

    embedding [D] -> Linear(D, 768) -> Sigmoid -> Dropout -> Linear(768, n_soft x H)
                  -> n_soft input-dependent "soft tokens" (H = the LM's hidden size)

They are preceded by n_task trainable, input-independent "task tokens" (a learned task
description) and, for a base LM without a chat template, followed by one trainable
delimiter token. The input sequence is

    chat LM:  [chat template up to the user text] [instruction] task x5, soft x5
              [end of user turn, assistant header] target tokens
    base LM:  <bos> task x5, soft x5, delimiter, target tokens

and the loss is the LM cross-entropy on the target (summary) tokens only. Only the
mapping network and the task / delimiter tokens are trained and saved; the LM is named
by its id in the checkpoint and reloaded from there.

The prompt part has the same length for every embedding (the template pieces are
fixed text), so a batch needs no padding on the prompt side: targets are right-padded
for training, and generation batches are left-aligned prompts of equal length (the
"left padding" that batched generation needs is empty).

Differences from the authors' setup (REFERENCE_FACTS.md), on purpose:
* CPU-sized defaults: the packaged SmolLM2-135M-Instruct instead of Llama 3 8B, and
  few steps; pass `lm=` a hub id or folder to use a larger model on a GPU;
* validation loss is the token-weighted mean NLL over every summary of every
  validation item (deterministic, so checkpoints compare fairly).

Training (`train_decoder`, the validation loss, early stopping) is in `soft_prompt_training.py`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..core.accel import ConfigDict
from ..embed.encoders import CheckpointError, read_config
from ..core.models import cache_keyword, load_causal_lm
from ..core.files import write_json, write_tensors

WEIGHTS_NAME = "decoder.safetensors"
CONFIG_NAME = "decoder_config.json"
HISTORY_NAME = "history.json"
FORMAT = "workbench-embedding-decoder"
VERSION = 2  # 2: input standardisation saved with the weights
# Stands in for the task + soft tokens while the chat template is rendered; split on it.
PLACEHOLDER = "<<SOFT_TOKENS>>"


@dataclass(frozen=True)
class DecodeSampling:
    """How `EmbeddingDecoder.generate` draws each text.

    Sampling by default (the authors' top-k 3, top-p 0.95, no-repeat 5-grams); `greedy=True`
    (or `do_sample=False`) gives one deterministic candidate per embedding (more would be copies),
    and top_k, top_p and temperature then do not apply. num_return_sequences: candidates per
    embedding when sampling; min_new_tokens, max_new_tokens: the length of each.
    """

    max_new_tokens: int = 60
    do_sample: bool = True
    top_k: int = 3
    top_p: float = 0.95
    temperature: float = 1.0
    no_repeat_ngram_size: int = 5
    num_return_sequences: int = 1
    greedy: bool = False
    min_new_tokens: int = 1


@dataclass
class DecoderConfig(ConfigDict):
    """Settings of one embedding decoder; paper values (A.8) except the CPU-sized step counts.

    n_soft / n_task / hidden / lr / weight_decay / batch_size / patience / dropout are the
    paper's and the authors' values. `max_steps` and `eval_every` are sized for a CPU demo
    (the paper validates every 250 updates). `prompt` is the user-turn instruction for a
    chat LM ("{aspect}" is filled in); a base LM gets no instruction text. `device`:
    None picks the GPU if there is one, else the CPU.
    """

    lm: str = "smollm2-135m-instruct"
    n_soft: int = 5
    n_task: int = 5
    hidden: int = 768
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 4
    max_steps: int = 200
    eval_every: int = 50
    patience: int = 5
    max_target_tokens: int = 64
    eval_batch_size: int = 8
    val_summaries: int | None = 2  # summaries per validation item in the validation loss; None = all
    seed: int = 0
    device: str | None = None
    prompt: str = "Describe the {aspect} of this paper in one sentence:"


def _as_tensor(embeddings, device) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(embeddings, dtype=np.float32) if not torch.is_tensor(embeddings)
                             else embeddings)
    if tensor.ndim == 1:
        tensor = tensor[None]
    return tensor.to(device=device, dtype=torch.float32)


class EmbeddingDecoder(nn.Module):
    """Frozen causal LM + trainable mapping network and task (and delimiter) tokens.

    lm, tokenizer: a loaded causal LM and its tokenizer (`models.load_causal_lm`).
    emb_dim: size of the embeddings to decode. aspect: fills "{aspect}" in the prompt
    and is saved with the checkpoint. aspects: makes a *shared* decoder for several
    aspects instead: one learned aspect token per aspect follows the task tokens, and
    every call names the aspect of each embedding (`aspect=`). A tokenizer with a chat template makes this a
    chat decoder (soft tokens inside the user turn), otherwise a base-LM decoder.
    """

    def __init__(self, lm, tokenizer, emb_dim: int, config: DecoderConfig | None = None,
                 aspect: str | None = None, lm_id: str | None = None, aspects: Sequence[str] | None = None):
        super().__init__()
        self.config = config or DecoderConfig()
        self.lm = lm
        self.tokenizer = tokenizer
        self.emb_dim = int(emb_dim)
        self.aspect = aspect
        self.aspects = list(aspects) if aspects else None
        if self.aspects and aspect is not None:
            raise ValueError("give either aspect (one decoder per aspect) or aspects (a shared decoder), not both")
        self.lm_id = lm_id or self.config.lm
        for p in self.lm.parameters():
            p.requires_grad_(False)  # frozen: only the mapping and the learned tokens train
        self.lm.eval()
        H = self.lm_hidden
        c = self.config
        # Input standardisation (per dimension, from the training embeddings; saved with the
        # weights). Aspect embeddings of papers share a large common direction and differ by
        # small amounts around it; fed raw into Linear -> Sigmoid, those differences would
        # stay near the sigmoid's midpoint and every paper would get almost the same soft
        # tokens. Centred and scaled, the mapping sees what tells papers apart.
        self.register_buffer("input_mean", torch.zeros(self.emb_dim))
        self.register_buffer("input_scale", torch.ones(self.emb_dim))
        self.mapping = nn.Sequential(
            nn.Linear(self.emb_dim, c.hidden), nn.Sigmoid(), nn.Dropout(c.dropout),
            nn.Linear(c.hidden, c.n_soft * H),
        )
        # Start the learned tokens at the scale of real token embeddings, so the LM first
        # sees inputs in its usual range rather than unit-variance noise.
        scale = float(self.lm.get_input_embeddings().weight.float().std())
        self.task_tokens = nn.Parameter(torch.randn(c.n_task, H) * scale)
        self.aspect_tokens = nn.Parameter(torch.randn(len(self.aspects), H) * scale) if self.aspects else None
        self.chat = getattr(tokenizer, "chat_template", None) is not None
        self.delimiter = None if self.chat else nn.Parameter(torch.randn(1, H) * scale)
        self.prefix_ids, self.suffix_ids = self._template_ids()
        self.to(self.lm.device)

    # ------------------------------------------------------------------ properties

    @property
    def lm_hidden(self) -> int:
        """The LM's hidden (input embedding) size."""
        return int(self.lm.get_input_embeddings().weight.shape[1])

    @property
    def device(self) -> torch.device:
        """Where the LM (and the trainable parts) live."""
        return self.lm.get_input_embeddings().weight.device

    @property
    def n_prompt(self) -> int:
        """Length of the prompt part (template pieces + learned + soft tokens), the same for every input."""
        return len(self.prefix_ids) + self.config.n_task + (1 if self.aspects else 0) + self.config.n_soft \
            + (0 if self.chat else 1) + len(self.suffix_ids)

    def set_input_stats(self, embeddings) -> None:
        """Standardise inputs with the per-dimension mean and std of these (training) embeddings."""
        emb = _as_tensor(embeddings, self.input_mean.device)
        self.input_mean.copy_(emb.mean(0))
        self.input_scale.copy_(emb.std(0).clamp_min(1e-6) if len(emb) > 1 else torch.ones_like(self.input_scale))

    def saved_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint holds: the trainable parameters and the input standardisation."""
        return {**self.trainable_state(), "input_mean": self.input_mean, "input_scale": self.input_scale}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters that are trained and saved: mapping.*, task_tokens, aspect_tokens, delimiter."""
        return {k: v for k, v in self.named_parameters() if v.requires_grad}

    def train(self, mode: bool = True):
        """Train mode for the mapping (dropout); the frozen LM always stays in eval mode."""
        super().train(mode)
        self.lm.eval()
        return self

    # ------------------------------------------------------------------ inputs

    def _template_ids(self) -> tuple[list[int], list[int]]:
        """Token ids before and after the learned + soft tokens."""
        tok = self.tokenizer
        if not self.chat:
            # Base LM (paper: <bos>, the ten tokens, the delimiter, then the text).
            return ([tok.bos_token_id] if tok.bos_token_id is not None else []), []
        aspect = (self.aspect or ("aspect" if self.aspects else "content")).replace("_", " ")
        content = self.config.prompt.format(aspect=aspect) + " " + PLACEHOLDER
        text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                       add_generation_prompt=True)
        before, after = text.split(PLACEHOLDER)
        # The rendered template already holds its special tokens as text (<|im_start|>, BOS).
        ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
        return ids(before), ids(after)

    def encode_targets(self, texts: Sequence[str]) -> list[list[int]]:
        """Target token ids: the text, then EOS (so the decoder learns to stop), at most max_target_tokens."""
        limit = self.config.max_target_tokens
        eos = self.tokenizer.eos_token_id
        out = []
        for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
            # A text cut at the limit gets no EOS: we must not teach it to stop mid-sentence.
            out.append(ids + [eos] if len(ids) < limit and eos is not None else ids[:limit])
        return out

    def _embed_ids(self, ids: list[int], batch: int) -> torch.Tensor:
        emb = self.lm.get_input_embeddings()(torch.tensor(ids, dtype=torch.long, device=self.device))
        return emb[None].expand(batch, -1, -1)

    def soft_tokens(self, embeddings) -> torch.Tensor:
        """[B, n_soft, H] input-dependent soft tokens for a batch of embeddings [B, D]."""
        emb = _as_tensor(embeddings, self.device)
        if emb.shape[1] != self.emb_dim:
            raise ValueError(f"embeddings have dimension {emb.shape[1]}; this decoder expects {self.emb_dim}")
        emb = (emb - self.input_mean) / self.input_scale
        return self.mapping(emb).view(emb.shape[0], self.config.n_soft, self.lm_hidden)

    def _aspect_rows(self, aspect, B: int) -> torch.Tensor | None:
        """[B, 1, H] aspect tokens of a shared decoder (None for a per-aspect decoder)."""
        if self.aspects is None:
            if aspect is not None and self.aspect is not None and aspect != self.aspect:
                raise ValueError(f"this decoder was trained for aspect {self.aspect!r}, not {aspect!r}")
            return None
        if aspect is None:
            raise ValueError(f"this decoder is shared by aspects {self.aspects}: say which with aspect=")
        names = [aspect] * B if isinstance(aspect, str) else list(aspect)
        unknown = sorted(set(names) - set(self.aspects))
        if unknown or len(names) != B:
            raise ValueError(f"aspect must be one of {self.aspects} (or one per embedding); got {unknown or names}")
        idx = torch.tensor([self.aspects.index(a) for a in names], device=self.aspect_tokens.device)
        return self.aspect_tokens[idx][:, None]

    def build_inputs(self, embeddings, target_ids: list[list[int]] | None = None, batch: int | None = None,
                     aspect=None):
        """(inputs_embeds [B, L, H], attention_mask [B, L], labels [B, L]) for the LM.

        embeddings: [B, D] array/tensor, or None for the unconditioned control (no soft
        tokens; then `batch` or len(target_ids) gives B). target_ids: per item a list of
        ids (`encode_targets`), right-padded here; labels are -100 on the prompt, the
        soft tokens and the padding, the target ids elsewhere. Without target_ids the
        result is the generation prompt (labels all -100). aspect: for a shared decoder,
        the aspect of all items (str) or of each item (list).
        """
        dtype = self.lm.get_input_embeddings().weight.dtype
        if embeddings is not None:
            soft = self.soft_tokens(embeddings)
            B = soft.shape[0]
        else:
            soft = None
            B = batch if batch is not None else len(target_ids or [])
        parts = [self._embed_ids(self.prefix_ids, B), self.task_tokens[None].expand(B, -1, -1)]
        aspect_rows = self._aspect_rows(aspect, B)
        if aspect_rows is not None:
            parts.append(aspect_rows)
        if soft is not None:
            parts.append(soft)
        if self.delimiter is not None:
            parts.append(self.delimiter[None].expand(B, -1, -1))
        parts.append(self._embed_ids(self.suffix_ids, B))
        prompt = torch.cat([p.to(dtype) for p in parts], dim=1)
        P = prompt.shape[1]
        if not target_ids:
            mask = torch.ones(B, P, dtype=torch.long, device=self.device)
            return prompt, mask, torch.full((B, P), -100, dtype=torch.long, device=self.device)
        if len(target_ids) != B:
            raise ValueError(f"{B} embeddings but {len(target_ids)} targets")
        T = max(len(t) for t in target_ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((B, T), pad, dtype=torch.long, device=self.device)
        labels = torch.full((B, P + T), -100, dtype=torch.long, device=self.device)
        mask = torch.zeros(B, P + T, dtype=torch.long, device=self.device)
        mask[:, :P] = 1
        for i, t in enumerate(target_ids):
            ids[i, :len(t)] = torch.tensor(t, dtype=torch.long)
            labels[i, P:P + len(t)] = ids[i, :len(t)]
            mask[i, P:P + len(t)] = 1
        # Right padding: real tokens keep positions 0..P+len-1, so no position-id shift is needed.
        inputs = torch.cat([prompt, self.lm.get_input_embeddings()(ids).to(dtype)], dim=1)
        return inputs, mask, labels

    # ------------------------------------------------------------------ losses

    def _prompt_start(self, rows: int):
        """A key/value cache holding the prompt's fixed start (`prefix_ids`) for `rows` rows.

        The start (the chat template with its system message: 35 of the 59 positions of a
        step of tests/test_decoder.py) is the same for every item, and the LM is frozen, so
        its keys and values are computed once per decoder; training steps and perplexity
        batches read only what follows. No gradient flows into them: nothing before the
        learned tokens can depend on them.
        """
        from transformers import DynamicCache

        where = (str(self.device), self.lm.dtype)
        if getattr(self, "_start_kv", None) is None or self._start_kv[0] != where:
            cache = DynamicCache(config=self.lm.config)
            with torch.no_grad():
                self.lm(input_ids=torch.tensor([self.prefix_ids], device=self.device), use_cache=True,
                        **{cache_keyword(self.lm): cache})
            self._start_kv = (where, [(layer.keys, layer.values) for layer in cache.layers])
        cache = DynamicCache(config=self.lm.config)
        for i, (k, v) in enumerate(self._start_kv[1]):
            cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
        return cache

    def token_nll(self, embeddings, target_ids: list[list[int]], batch: int | None = None, aspect=None):
        """(sum of target-token NLL, number of target tokens) for one batch."""
        inputs, mask, labels = self.build_inputs(embeddings, target_ids, batch=batch, aspect=aspect)
        T = max(len(t) for t in target_ids)
        # Position t predicts token t+1, so the target tokens (the last T positions, right-
        # padded) are predicted by the last T+1 positions minus the very last. Asking the LM
        # for those logits only skips the vocabulary projection over the prompt, which on a
        # CPU costs more than the transformer layers of a small LM. The prompt's fixed start
        # is read from its cache (`_prompt_start`), so the LM runs only over what follows it.
        start = len(self.prefix_ids)
        if start:
            logits = self.lm(inputs_embeds=inputs[:, start:], attention_mask=mask, logits_to_keep=T + 1,
                             **{cache_keyword(self.lm): self._prompt_start(inputs.shape[0])}).logits
        else:
            logits = self.lm(inputs_embeds=inputs, attention_mask=mask, logits_to_keep=T + 1).logits
        # Cross-entropy in fp32 whatever the LM's dtype.
        shift_logits, shift_labels = logits[:, :-1].float(), labels[:, -T:]
        nll = F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.reshape(-1),
                              ignore_index=-100, reduction="sum")
        return nll, int((shift_labels != -100).sum())

    def forward(self, embeddings, target_texts: Sequence[str], aspect=None) -> torch.Tensor:
        """Mean cross-entropy over the target tokens of `target_texts` given `embeddings` [B, D]."""
        nll, n = self.token_nll(embeddings, self.encode_targets(target_texts), aspect=aspect)
        return nll / max(n, 1)

    @torch.no_grad()
    def perplexity(self, embeddings, texts: Sequence[str], batch_size: int = 8, aspect=None) -> float:
        """exp(mean NLL per target token) of `texts`, item i conditioned on embeddings[i].

        embeddings=None gives the unconditioned control (soft tokens dropped; the paper
        reports it for a base LM only). Token-weighted over all texts. aspect: for a
        shared decoder, one aspect for all texts or one per text.
        """
        was_training = self.training
        self.eval()
        total, count = 0.0, 0
        emb = None if embeddings is None else _as_tensor(embeddings, self.device)
        if emb is not None and len(emb) != len(texts):
            raise ValueError(f"{len(emb)} embeddings but {len(texts)} texts")
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start:start + batch_size])
            part = None if emb is None else emb[start:start + batch_size]
            asp = aspect if aspect is None or isinstance(aspect, str) else list(aspect)[start:start + batch_size]
            nll, n = self.token_nll(part, self.encode_targets(chunk), batch=len(chunk), aspect=asp)
            total, count = total + float(nll), count + n
        self.train(was_training)
        return math.exp(total / max(count, 1))

    # ------------------------------------------------------------------ generation

    @torch.no_grad()
    def generate(self, embeddings, sampling: DecodeSampling = DecodeSampling(), batch_size: int = 16,
                 aspect=None, progress: bool = False) -> list[list[str]]:
        """Decode embeddings [N, D] into text: one list of candidates per embedding.

        How each text is drawn is `sampling` (a `DecodeSampling`: by default the authors'
        top-k 3, top-p 0.95, no-repeat 5-grams; `greedy=True` gives one deterministic
        candidate per embedding). Batched `batch_size` embeddings at a time. aspect: for a
        shared decoder.
        """
        from tqdm.auto import tqdm

        was_training = self.training
        self.eval()
        emb = _as_tensor(embeddings, self.device)
        sample = sampling.do_sample and not sampling.greedy
        n_ret = sampling.num_return_sequences if sample else 1
        tok = self.tokenizer
        kwargs: dict[str, Any] = dict(max_new_tokens=sampling.max_new_tokens, min_new_tokens=sampling.min_new_tokens,
                                      do_sample=sample, num_return_sequences=n_ret,
                                      no_repeat_ngram_size=sampling.no_repeat_ngram_size or 0,
                                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None
                                      else tok.eos_token_id,
                                      eos_token_id=tok.eos_token_id)
        if sample:
            kwargs.update(top_k=sampling.top_k, top_p=sampling.top_p, temperature=sampling.temperature)
        else:
            # Reset sampling knobs a generation_config may carry, so greedy raises no warnings.
            kwargs.update(top_k=None, top_p=None, temperature=None)
        out: list[list[str]] = []
        for start in tqdm(range(0, len(emb), batch_size), desc="decoding", disable=not progress):
            asp = aspect if aspect is None or isinstance(aspect, str) else list(aspect)[start:start + batch_size]
            inputs, mask, _ = self.build_inputs(emb[start:start + batch_size], aspect=asp)
            # With inputs_embeds only, generate returns just the new tokens.
            with warnings.catch_warnings():
                # The n-gram rule only sees new tokens with inputs_embeds: that is what we want.
                warnings.filterwarnings("ignore", message=".*no_repeat_ngram_size.*")
                seqs = self.lm.generate(inputs_embeds=inputs, attention_mask=mask, **kwargs)
            texts = [t.strip() for t in tok.batch_decode(seqs, skip_special_tokens=True)]
            out += [texts[i:i + n_ret] for i in range(0, len(texts), n_ret)]
        self.train(was_training)
        return out

    # ------------------------------------------------------------------ checkpoints

    def save_pretrained(self, folder: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write decoder.safetensors (mapping + learned tokens only) and decoder_config.json (LM id, sizes)."""

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {"format": FORMAT, "version": VERSION, "lm": self.lm_id, "lm_hidden": self.lm_hidden,
                  "emb_dim": self.emb_dim, "aspect": self.aspect, "aspects": self.aspects, "chat": self.chat,
                  "config": self.config.to_dict(), "extra": extra or {}}
        json.dumps(config)  # fail before writing anything if `extra` is not JSON-serialisable
        write_tensors(folder / WEIGHTS_NAME, {k: v.float() for k, v in self.saved_state().items()},
                      metadata={"format": "pt"})
        # The config last: a folder without it is an unfinished save.
        write_json(folder / CONFIG_NAME, config)
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, device: str | None = None, lm=None) -> "EmbeddingDecoder":
        """Load a decoder saved by `save_pretrained`; the LM is reloaded by its saved id.

        lm: an already loaded (model, tokenizer) pair to reuse instead (it must be the
        same LM). Raises CheckpointError when the folder is not a decoder checkpoint, or
        when the LM's hidden size or the embedding size do not match the weights.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        folder = Path(folder).expanduser()
        config_path, weights = folder / CONFIG_NAME, folder / WEIGHTS_NAME
        if not config_path.is_file() or not weights.is_file():
            raise CheckpointError(f"{folder} is not a decoder checkpoint: it needs {CONFIG_NAME} and {WEIGHTS_NAME}")
        saved = read_config(config_path, FORMAT, VERSION)
        try:
            state = load_file(str(weights))
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{weights} is not a readable safetensors file: {exc}") from exc
        config = DecoderConfig.from_dict(saved["config"])
        model, tokenizer = lm if lm is not None else load_causal_lm(saved["lm"], device=device)
        hidden = int(model.get_input_embeddings().weight.shape[1])
        if hidden != saved["lm_hidden"] or state["task_tokens"].shape[1] != hidden:
            raise CheckpointError(f"{folder} was trained for an LM with hidden size {saved['lm_hidden']} "
                                  f"({saved['lm']}); the LM given has hidden size {hidden}")
        decoder = cls(model, tokenizer, saved["emb_dim"], config, aspect=saved.get("aspect"), lm_id=saved["lm"],
                      aspects=saved.get("aspects"))
        expected = {k: tuple(v.shape) for k, v in decoder.saved_state().items()}
        found = {k: tuple(v.shape) for k, v in state.items()}
        if expected != found:
            diff = {k: (found.get(k), expected.get(k)) for k in set(expected) | set(found)
                    if found.get(k) != expected.get(k)}
            raise CheckpointError(f"{weights} does not match its config (emb_dim {saved['emb_dim']}, "
                                  f"LM hidden {hidden}): (saved, expected) shapes {diff}")
        decoder.load_state_dict(state, strict=False)  # strict=False: the LM's weights are not in the file
        if device is not None:
            decoder.to(device)
        return decoder.eval()
