"""Many answers to prompts that share a long start, with the start's keys and values held once.

Stage 01 asks one instruction (about 380 tokens) before every abstract (about 200), k times
each. A key/value cache that copies the instruction into every row makes each decoding step
read and copy rows x 600 positions per layer; at 24 rows that is most of the step. Here the
shared start (the *prefix*) is stored once, each row stores only its own end and answer, and
attention combines the two in one softmax ("cascade" attention, as in FlashInfer and vLLM):

    scores = [q . K_prefix | q . K_row]   ->  softmax  ->  p_prefix @ V_prefix + p_row @ V_row

The row buffers are allocated once per batch and written in place, so a decoding step copies
nothing; a finished row leaves the batch by one `index_select`. Several instructions (the
aspects) share one batch, each row attending to its own, so small corpora still fill a batch.

It plugs into any transformers model that routes attention through `AttentionInterface`
(Llama, Mistral, Qwen, SmolLM, ...): the model runs with `use_cache=False`, and the attention
function below keeps the keys and values in the `PromptStore` passed as a keyword argument.
`supports(model)` says whether a model qualifies (no sliding window, no logit soft-capping);
the backend falls back to the plain cache otherwise.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch

NAME = "workbench_cascade"


class PromptStore:
    """Keys and values of one batch: shared prefixes (one row each) and each row's own columns, per layer.

    A batch may hold several prefix *groups* (one per aspect instruction, say); each row
    attends to its group's prefix and to its own columns. Usage (inside `with cascade(model):`):

        start = read_prefix(model, system_ids)                    # shared by every group
        prefixes = [read_prefix(model, ids, start) for ids in instruction_ids]
        parts = []                                                # each prompt's end read alone
        for end, g in zip(ends, groups):
            parts.append(PromptStore(layers, 0, [prefixes[g]]))
            logits = parts[-1].read(model, end_ids, logits=True)
        store = PromptStore.stack(parts, capacity, prefixes, groups)
        store.select(rows)                                        # fork k samples, drop finished rows
        logits = store.read(model, tokens[:, None], logits=True)  # one decoding step
    """

    def __init__(self, layers: int, capacity: int, prefixes: Sequence[list | None] = (None,)):
        self.layers = layers
        self.capacity = capacity  # columns to allocate per row (ends + answer)
        self.columns = capacity  # columns allocated for the rows being read
        # prefix[layer][group] = (keys, values), each (1, kv_heads, P_group, dim); None: no prefix
        self.prefix = [[None if p is None else p[layer] for p in prefixes] for layer in range(layers)]
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.valid: torch.Tensor | None = None  # (rows, columns) bool: which columns hold a real token
        self.group: torch.Tensor | None = None  # (rows,) prefix group of each row
        self.length = 0  # columns filled in every row
        self.incoming: torch.Tensor | None = None  # (rows, T) validity of the tokens being read
        self._mask: torch.Tensor | None = None  # row_mask of the current read, built by its first layer
        self._groups: list[tuple[int, torch.Tensor | None]] | None = None

    @classmethod
    def stack(cls, parts: Sequence["PromptStore"], capacity: int, prefixes: Sequence[list | None],
              groups: Sequence[int]) -> "PromptStore":
        """The rows of `parts` (stores of one prefix each, read from their start) in one store.

        Each part's columns are right-aligned, so every row's last token is in the last
        column; the columns before a shorter row's start are marked empty. Reading each
        prompt's end alone and stacking costs no work on padding.
        """
        width = max(p.length for p in parts)
        store = cls(parts[0].layers, max(capacity, width), prefixes)
        rows = sum(p.valid.shape[0] for p in parts)
        store.columns, store.length = store.capacity, width
        first = parts[0].keys[0]
        store.valid = torch.zeros((rows, store.columns), dtype=torch.bool, device=first.device)
        for layer in range(store.layers):
            shape = (rows, first.shape[1], store.columns, first.shape[3])
            store.keys[layer], store.values[layer] = first.new_zeros(shape), first.new_zeros(shape)
        row = 0
        for part in parts:
            n, start = part.valid.shape[0], width - part.length
            store.valid[row:row + n, start:width] = part.valid[:, :part.length]
            for layer in range(store.layers):
                store.keys[layer][row:row + n, :, start:width] = part.keys[layer][:, :, :part.length]
                store.values[layer][row:row + n, :, start:width] = part.values[layer][:, :, :part.length]
            row += n
        store.group = torch.tensor(list(groups), dtype=torch.long)
        return store

    def prefix_lengths(self) -> torch.Tensor:
        return torch.tensor([0 if kv is None else kv[0].shape[2] for kv in self.prefix[0]])

    def read(self, model, ids: torch.Tensor, valid: torch.Tensor | None = None, group: torch.Tensor | None = None,
             logits: bool = False, every: bool = False):
        """Run `model` over `ids` (rows, T) after what the store holds; return last-position logits or None.

        every=True returns the logits of every position (rows, T, vocabulary): scoring a text.

        `group` (rows,) names each row's prefix at the rows' first read (default: group 0).
        Positions continue from the row's prefix and its own real tokens, so a padded row
        sees exactly the positions of its unpadded prompt.
        """
        rows, width = ids.shape
        valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid.bool()
        if self.length == 0:  # the rows start: room for these tokens and what follows (a prefix may exceed it)
            self.columns = max(self.capacity, width)
            self.group = (torch.zeros(rows, dtype=torch.long) if group is None else group.long().cpu())
            self._groups = None
        before = self.valid[:, :self.length].sum(-1, keepdim=True) if self.length else 0
        offset = self.prefix_lengths()[self.group].to(ids.device)[:, None]
        position = offset + before + valid.long().cumsum(-1) - 1
        self.incoming, self._mask = valid, None
        with torch.inference_mode():
            out = model(input_ids=ids, position_ids=position.clamp(min=0), use_cache=False, prompt_store=self,
                        logits_to_keep=0 if every else 1)
        if self.valid is None:
            self.valid = torch.zeros((rows, self.columns), dtype=torch.bool, device=ids.device)
        self.valid[:, self.length:self.length + width] = valid
        self.length += width
        self.incoming, self._mask = None, None
        if every:
            return out.logits
        return out.logits[:, -1] if logits else None

    def promote(self) -> list:
        """Make what the single row read so far (after its prefix) a prefix; return it, per layer."""
        if self.valid is None or self.valid.shape[0] != 1 or len(self.prefix[0]) != 1:
            raise ValueError("only a single row of a single group can become a prefix")
        prefix = []
        for layer in range(self.layers):
            k, v = self.keys[layer][:, :, :self.length], self.values[layer][:, :, :self.length]
            old = self.prefix[layer][0]
            prefix.append((k, v) if old is None else (torch.cat([old[0], k], 2), torch.cat([old[1], v], 2)))
        return prefix

    def select(self, rows: torch.Tensor) -> None:
        """Keep (and repeat) the rows at `rows`, in that order."""
        for layer in range(self.layers):
            if self.keys[layer] is not None:
                self.keys[layer] = self.keys[layer].index_select(0, rows)
                self.values[layer] = self.values[layer].index_select(0, rows)
        self.valid = self.valid.index_select(0, rows)
        self.group = self.group.index_select(0, rows.cpu())
        self._groups = None

    def groups(self) -> list[tuple[int, torch.Tensor | None]]:
        """(group, rows of the group) for each group present; rows None when it is every row."""
        if self._groups is None:
            present = self.group.unique().tolist()
            device = self.valid.device if self.valid is not None else None
            self._groups = [(present[0], None)] if len(present) == 1 else [
                (g, torch.nonzero(self.group == g).squeeze(1).to(device)) for g in present]
        return self._groups

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' keys and values; return the row keys and values up to them."""
        rows, heads, width, dim = key.shape
        if self.keys[layer] is None:
            self.keys[layer] = key.new_zeros((rows, heads, self.columns, dim))
            self.values[layer] = value.new_zeros((rows, heads, self.columns, dim))
        end = self.length + width
        if end > self.columns:
            raise ValueError(f"the prompt store holds {self.columns} columns per row; {end} were asked for")
        self.keys[layer][:, :, self.length:end] = key
        self.values[layer][:, :, self.length:end] = value
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def row_mask(self) -> torch.Tensor:
        """(rows, T, columns) bool: the row columns each new token may attend to.

        A token sees the real tokens up to itself; a padding token sees only itself, so that
        no softmax is empty (its output is never read).
        """
        if self._mask is None:
            rows, width = self.incoming.shape
            old = self.valid[:, :self.length] if self.length else self.incoming.new_zeros((rows, 0))
            cols = torch.cat([old, self.incoming], 1)  # (rows, length + T)
            causal = torch.ones((width, self.length + width), dtype=torch.bool, device=cols.device).tril(self.length)
            itself = torch.zeros_like(causal)
            itself[torch.arange(width), self.length + torch.arange(width)] = True
            self._mask = (cols[:, None, :] & causal[None]) | itself[None]
        return self._mask


def read_prefix(model, ids: torch.Tensor, start: list | None = None) -> list:
    """Keys and values of `ids` (1, T) read after the prefix `start` (or from position 0), as a prefix."""
    store = PromptStore(model.config.num_hidden_layers, ids.shape[1], [start])
    store.read(model, ids)
    return store.promote()


def cascade_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention over each row's prefix and its own columns, in one softmax.

    The signature is transformers' attention interface. query (rows, heads, T, dim); key, value
    (rows, kv_heads, T, dim) for the new tokens. The model's forward call passes the `PromptStore`
    down to here as the keyword `prompt_store` (transformers hands on the keywords it does not know).
    Returns (rows, T, heads, dim), as transformers' attention functions do.
    """
    store: PromptStore | None = kwargs.get("prompt_store")
    if store is None:  # transformers builds no mask for this implementation: refuse rather than guess
        raise RuntimeError("cascade attention runs only through a PromptStore (PromptStore.read)")
    keys, values = store.write(module.layer_idx, key, value)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    prefixes = store.prefix[module.layer_idx]
    if query.shape[2] == 1:
        return _decoding_step(query, keys, values, store, prefixes, scaling), None
    return _reading(query, keys, values, store, prefixes, scaling), None


def _reading(query, keys, values, store: PromptStore, prefixes, scaling):
    """Several tokens per row (the prompts' ends): each row's prefix copied in front, one SDPA call.

    The rows here are distinct prompts (not yet the k samples), so the copy is small.
    """
    import torch.nn.functional as F

    rows, heads, width, dim = query.shape
    group = heads // keys.shape[1]
    longest = max((kv[0].shape[2] for kv in prefixes if kv is not None), default=0)
    mask = store.row_mask()  # (rows, T, columns)
    if longest:
        pk = keys.new_zeros((rows, keys.shape[1], longest, dim))
        pv = torch.zeros_like(pk)
        seen = torch.zeros((rows, longest), dtype=torch.bool, device=mask.device)
        for g, idx in store.groups():
            if prefixes[g] is not None:
                rows_g = slice(None) if idx is None else idx
                n = prefixes[g][0].shape[2]
                pk[rows_g, :, :n], pv[rows_g, :, :n] = prefixes[g][0], prefixes[g][1]
                seen[rows_g, :n] = True
        keys, values = torch.cat([pk, keys], 2), torch.cat([pv, values], 2)
        mask = torch.cat([seen[:, None, :].expand(rows, width, longest), mask], -1)
    keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask[:, None], scale=scaling)
    return out.transpose(1, 2).contiguous()


def _decoding_step(query, keys, values, store: PromptStore, prefixes, scaling):
    """One token per row: scores against each group's prefix (held once) and the row's own columns."""
    rows, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    # queries grouped by the key/value head they read: (rows, kv_heads, group, dim)
    q = query.reshape(rows, kv_heads, group, dim) * scaling
    row_scores = (q @ keys.transpose(-1, -2)).masked_fill(~store.row_mask()[:, None], float("-inf"))
    longest = max((kv[0].shape[2] for kv in prefixes if kv is not None), default=0)
    if not longest:
        return (torch.softmax(row_scores.float(), -1).to(query.dtype) @ values).reshape(rows, 1, heads, dim)
    # one matmul per group against its prefix, which is never copied per row
    prefix_scores = q.new_full((rows, kv_heads, group, longest), float("-inf"))
    for g, idx in store.groups():
        if prefixes[g] is None:
            continue
        pk = prefixes[g][0][0]  # (kv_heads, P, dim)
        qg = q if idx is None else q.index_select(0, idx)
        sg = (qg.transpose(0, 1).reshape(kv_heads, -1, dim) @ pk.transpose(-1, -2))
        sg = sg.reshape(kv_heads, qg.shape[0], group, -1).transpose(0, 1)
        if idx is None:
            prefix_scores[..., :pk.shape[1]] = sg
        else:
            prefix_scores[idx, :, :, :pk.shape[1]] = sg
    probs = torch.softmax(torch.cat([prefix_scores, row_scores], -1).float(), -1).to(query.dtype)
    out = probs[..., longest:] @ values
    for g, idx in store.groups():
        if prefixes[g] is None:
            continue
        pv = prefixes[g][1][0]  # (kv_heads, P, dim)
        pg = probs[..., :pv.shape[1]] if idx is None else probs[..., :pv.shape[1]].index_select(0, idx)
        og = (pg.transpose(0, 1).reshape(kv_heads, -1, pv.shape[1]) @ pv)
        og = og.reshape(kv_heads, pg.shape[0], group, dim).transpose(0, 1)
        out = out + og if idx is None else out.index_add(0, idx, og)
    return out.reshape(rows, 1, heads, dim)


def supports(model) -> bool:
    """Whether `model` runs correctly with cascade attention (full causal attention through the interface)."""
    config = model.config
    return bool(getattr(model, "_supports_attention_backend", False)
                and getattr(config, "sliding_window", None) is None
                and not getattr(config, "attn_logit_softcapping", None)
                and not getattr(config, "final_logit_softcapping", None)
                and getattr(config, "num_hidden_layers", None))


_registered = False


@contextlib.contextmanager
def cascade(model):
    """Run `model` with cascade attention inside the block (its own implementation restored after)."""
    global _registered
    from transformers import AttentionInterface

    if not _registered:
        AttentionInterface.register(NAME, cascade_attention)
        _registered = True
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
