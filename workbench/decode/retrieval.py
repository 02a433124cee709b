"""Stage 04, CPU-first: decode an aspect embedding by the known statements nearest to it.

The soft-prompt decoder (`soft_prompt.py`, the paper's) must learn to read an embedding
through a frozen LM; on two CPU cores it learns the aspect's style and little more
(README, "Decoding"). This decoder needs no training. Each aspect keeps a *memory*: the
statements worth showing about that aspect of the train and validation papers (never the
test split), each embedded once by the aspect's own model (stage 02), the model that also
scores the round trip:

* LLM answers (stage 01) that the grounding check of stage 02 keeps (`embed/grounding.py`:
  the answer finds its own abstract and does not copy it) and that carry no prompt artefact
  (`artefacts.py`: "BEGININPUT", "###", an example sentence of the aspect file spliced in);
* human summaries and highlighted sentences (ACLSum), without artefacts;
* for a paper with none of those, its *own sentence*: the sentence of its abstract that states
  the aspect most clearly by the unified model's (stage 03) heads, its highest aspect margin
  (`aspect_margin.py`), and none where even that one reads as another aspect.

An aspect stage 02 trained no model of (no usable LLM answer: `aspect_models/untrained.json`)
still gets a memory, which needs no answer: its papers' own sentences, embedded by the unified
model's head for it (the aspect-file floor), each read as a one-sentence abstract. That head
made every embedding decoded in the aspect (a paper, a map's spot, a placed abstract), so the
memory lies in the space of its queries, and the same model scores the round trip
(`RunDir.decoding_encoder`). Where no aspect had a view, stage 02's split holds no paper: the
papers stage 01 was asked about, less the held-out ones, enter the memory (`memory_papers`).

Every entry is one paper's text: no entry joins two papers' sentences. To decode an embedding q:

    answer = the statement whose embedding is nearest q (cosine)
             [+ with rewrite=True: the LM's one-sentence rewrite of that paper's statements,
              kept where it lands nearer q, and then labelled "generated"]

so every answer is, by construction, the text that best points back to where it came from
(its round trip), and it names the one paper it came from, so a reader can check it
(`KIND_NEAREST`, "nearest known statement, from <paper>"). A map point between clusters gets
the statement nearest to it.

`perplexity` conditions the LM on the statements nearest an embedding (plain text in its
prompt, no soft tokens) and scores a reference text: the paper's Table 3 columns
(matching, shuffled, unconditioned) for this decoder too. That prompt is read, never shown.

Saved as ``<run_dir>/decoders/retrieval/``: ``memory.safetensors`` (one [N, D] array per
aspect) + ``memory.json`` (texts, their papers and sources, settings) + ``done.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.files import write_json
from ..core.progress import notice
from ..core.vectors import unit_rows
from ..core.rundir import RunDir, read_split
from ..generate.batching import shared_start
from .artefacts import artefact_reason, marker_reason, prompt_text
from .aspect_margin import LEFT_OUT as MARGIN_LEFT_OUT, MEMORY_MARGIN, stating_sentences
from .statements import Entries, grounding_verdicts, shown_entries

FOLDER = "retrieval"
VECTORS_NAME = "memory.safetensors"
MEMORY_NAME = "memory.json"
FORMAT = "workbench-retrieval-decoder"
SYSTEM = "You summarise research papers."
INSTRUCTION = "Write one sentence stating the {aspect} of a paper like these."
# What memory.json's "checks" says the memory went through: 1 = prompt artefacts and ungrounded LLM answers left
# out, papers without a statement given their own sentence. An older memory (no "checks") is filtered as it loads.
CHECKS = 1

# Which model embedded a memory (memory.json's "encoder" per aspect): the aspect's stage-02 model, or, for an
# aspect stage 02 trained none of, the unified model (its aspect-file head). A memory without it: the aspect's.
ENCODER_ASPECT = "aspect model"
ENCODER_UNIFIED = "unified model"

# What a shown text is (the pane states it beside every text).
KIND_NEAREST = "nearest known statement"  # a known statement of one named paper, nearest the embedding
KIND_GENERATED = "generated"  # written by an LM from the embedding (soft prompt) or from one paper's statements
KIND_OWN = "own sentence"  # the tapped paper's own sentence that states the aspect


@dataclass
class StatementMemory:
    """The known statements of one aspect: texts[i] about paper doc_ids[i], embedded as vectors[i] (unit rows)."""

    aspect: str
    texts: list[str]
    doc_ids: list[str]
    sources: list[str]
    vectors: np.ndarray = field(repr=False)
    left_out: dict = field(default_factory=dict, repr=False)  # why -> statements left out when it was built
    encoder: str = field(default=ENCODER_ASPECT, repr=False)  # which model embedded it (ENCODER_*)

    def __post_init__(self):
        n = len(self.texts)
        if not (len(self.doc_ids) == len(self.sources) == n == len(self.vectors)):
            raise ValueError(f"memory of {self.aspect!r}: {n} texts, {len(self.doc_ids)} doc ids, "
                             f"{len(self.sources)} sources and {len(self.vectors)} vectors")
        self.vectors = unit_rows(self.vectors) if n else np.zeros((0, 1), np.float32)

    def subset(self, keep) -> "StatementMemory":
        """The statements where `keep` (a boolean per statement) is true."""
        rows = np.flatnonzero(np.asarray(keep, dtype=bool))
        return StatementMemory(self.aspect, [self.texts[i] for i in rows], [self.doc_ids[i] for i in rows],
                               [self.sources[i] for i in rows], self.vectors[rows], encoder=self.encoder)

    def of_paper(self, doc_id: str) -> list[tuple[str, str]]:
        """(text, source) of every statement of one paper, in memory order."""
        return [(t, s) for t, d, s in zip(self.texts, self.doc_ids, self.sources) if d == doc_id]

    def nearest(self, queries: np.ndarray, k: int, exclude: Sequence[Sequence[str] | str | None] | None = None):
        """(indices [Q, k], cosines [Q, k]) of the k statements nearest each query, best first.

        exclude[i]: papers whose statements query i may not use (the paper being decoded).
        """
        if not len(self.texts):
            raise ValueError(f"the {self.aspect!r} memory holds no statement: generate summaries (stage 01) first")
        sims = unit_rows(np.atleast_2d(queries)) @ self.vectors.T
        if exclude is not None:
            doc_ids = np.asarray(self.doc_ids)
            for i, skip in enumerate(exclude):
                if skip:
                    sims[i, np.isin(doc_ids, [skip] if isinstance(skip, str) else list(skip))] = -np.inf
        k = min(k, sims.shape[1])
        idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return idx, np.take_along_axis(sims, idx, axis=1)


class RetrievalDecoder:
    """Decode embeddings of one aspect into the known statements nearest them (see the module docstring).

    encoder: the aspect's model (stage 02), or its folder; embeds rewritten candidates and
    new memories. lm: (model, tokenizer) or an LM name, loaded on first use (only
    `perplexity` and `rewrite=True` need it).
    """

    reports_unconditioned = True  # Table 3's unconditioned control: the LM reads the instruction alone
    names_sources = True  # each text is a known statement of a named paper (or, rewritten, None)
    source_files: tuple = ()  # the folders it was loaded from (`report_cache.py` keys its reports by the files)

    def __init__(self, memory: StatementMemory, encoder=None, lm="smollm2-135m-instruct", k: int = 8,
                 context: int = 3, device: str | None = None):
        self.aspect = memory.aspect
        self.memory = memory
        self._encoder = encoder
        self._lm = lm
        self.k, self.context, self.device = k, context, device

    # ------------------------------------------------------------------ models, lazily

    def encoder(self):
        """The aspect model that embeds texts into this aspect's space (loaded on first use)."""
        from ..embed.checkpoints import is_model, load_model

        if self._encoder is None:
            raise ValueError(f"the {self.aspect!r} retrieval decoder has no aspect model to embed new text with")
        if not is_model(self._encoder):
            self._encoder = load_model(self._encoder, device=self.device)
        return self._encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit embeddings [N, D] of texts in this aspect's space."""
        model = self.encoder()
        head = self.aspect if self.aspect in model.aspects else model.aspects[0]
        return unit_rows(model.encode(list(texts), aspects=head)[head])

    def lm(self):
        """(model, tokenizer) of the LM that rewrites and scores text (loaded on first use)."""
        if isinstance(self._lm, (str, os.PathLike)):
            from ..core.models import load_causal_lm

            self._lm = load_causal_lm(self._lm, device=self.device)
        return self._lm

    # ------------------------------------------------------------------ decoding

    def decode(self, embeddings, exclude=None, rewrite: bool = False, max_new_tokens: int = 40) -> list[dict]:
        """Per embedding: {text, doc_id, source, kind, cosine, rewritten} of the best statement, plus `neighbours`.

        The text is one statement of one paper (doc_id), kind `KIND_NEAREST`; cosine is its
        similarity to the embedding in the aspect's space (the round trip). neighbours: the
        `context` nearest (text, paper, cosine), for a caller to list, each with its paper.
        rewrite=True lets the LM rewrite the best paper's own statements (never several
        papers': that would splice them into one text) into one sentence; it wins only where
        it lands nearer than the statement, and is then of kind `KIND_GENERATED`, with
        `rewritten_from` naming the paper and doc_id None (no paper wrote it).
        """
        q = unit_rows(np.atleast_2d(embeddings))
        idx, cos = self.memory.nearest(q, max(self.k, self.context), exclude)
        out = []
        for row, (ii, cc) in enumerate(zip(idx, cos)):
            best = int(ii[0])
            out.append({"text": self.memory.texts[best], "doc_id": self.memory.doc_ids[best],
                        "source": self.memory.sources[best], "kind": KIND_NEAREST, "cosine": float(cc[0]),
                        "rewritten": False,
                        "neighbours": [(self.memory.texts[j], self.memory.doc_ids[j], float(c))
                                       for j, c in zip(ii[:self.context], cc[:self.context])]})
        if rewrite and len(out):
            contexts = [[t for t, _ in self.memory.of_paper(o["doc_id"])][:self.context] for o in out]
            fused = self._generate(contexts, max_new_tokens)
            vectors = self.embed([f or "." for f in fused])
            for o, text, v, qq in zip(out, fused, vectors, q):
                c = float(v @ qq)
                if text and c > o["cosine"] and artefact_reason(text) is None:
                    o.update(text=text, rewritten_from=o["doc_id"], doc_id=None, source="rewritten",
                             kind=KIND_GENERATED, cosine=c, rewritten=True)
        return out

    def statements(self, embeddings, exclude=None, rewrite: bool = False, max_new_tokens: int = 40,
                   **_sampling) -> list[dict]:
        """`decode` under the `decoding.Decoder` interface (sampling settings accepted, without effect)."""
        return self.decode(embeddings, exclude, rewrite, max_new_tokens)

    def describe(self, embeddings, exclude=None, rewrite: bool = False, max_new_tokens: int = 40,
                 **_sampling) -> list[list[str]]:
        """Decode embeddings [N, D] (or one [D]) into text: [[best text]] per embedding (AspectDecoder's interface).

        Sampling settings of the soft-prompt decoder (greedy, top_k, ...) are accepted and
        have no effect: this decoder picks, it does not sample.
        """
        return [[o["text"]] for o in self.decode(embeddings, exclude, rewrite, max_new_tokens)]

    # ------------------------------------------------------------------ the LM's part

    def _prompt(self, statements: Sequence[str] | None) -> str:
        _, tok = self.lm()
        aspect = self.aspect.replace("_", " ")
        if statements:
            lines = "\n".join(f"- {s}" for s in statements)
            user = f"Statements about the {aspect} of closely related papers:\n{lines}\n\n"
        else:
            user = ""
        user += INSTRUCTION.format(aspect=aspect)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _generate(self, contexts: list[list[str]], max_new_tokens: int, batch_size: int = 16) -> list[str]:
        import torch

        model, tok = self.lm()
        tok.padding_side = "left"
        out = []
        for s in range(0, len(contexts), batch_size):
            enc = tok([self._prompt(c) for c in contexts[s:s + batch_size]], return_tensors="pt", padding=True,
                      add_special_tokens=False).to(model.device)
            with torch.no_grad():
                seqs = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, top_k=None, top_p=None,
                                      temperature=None, repetition_penalty=1.1,
                                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
            texts = tok.batch_decode(seqs[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out += [t.strip().split("\n")[0].strip() for t in texts]
        return out

    def perplexity(self, embeddings, texts: Sequence[str], batch_size: int = 8, exclude=None) -> float:
        """exp(mean NLL per token) of texts[i] when the LM reads the statements nearest embeddings[i].

        embeddings=None is the unconditioned control: the instruction alone.
        """
        return self.perplexities({"": (embeddings, texts, exclude)}, batch_size)[""]

    def perplexities(self, requests, batch_size: int = 8) -> dict[str, float]:
        """Several `perplexity` calls in one: {name: (embeddings or None, texts, exclude)} -> {name: perplexity}.

        Each distinct prompt is read once for all requests and rows: Table 3's shuffled control
        reads other papers' contexts, which their matching rows read too, and the unconditioned
        control asks one prompt for every text. With cascade attention (`cascade.py`) a prompt's
        keys and values are held once and every text scored after it attends to them; models
        without it read each prompt with its text, in length-sorted padded batches.
        """
        from ..generate.cascade import supports

        model, tok = self.lm()
        eos = tok.eos_token_id
        index: dict[str, int] = {}  # prompt text -> position in `prompts`
        prompts: list[list[int]] = []
        rows: list[tuple[int, list[int]]] = []  # (prompt, target tokens) per text
        owner: list[str] = []
        for name, (embeddings, texts, exclude) in requests.items():
            if embeddings is not None:
                idx, _ = self.memory.nearest(np.atleast_2d(embeddings), self.context, exclude)
                if len(idx) != len(texts):
                    raise ValueError(f"{len(idx)} embeddings but {len(texts)} texts")
                contexts = [[self.memory.texts[j] for j in row] for row in idx]
            else:
                contexts = [None] * len(texts)
            for context, text in zip(contexts, texts):
                prompt = self._prompt(context)
                if prompt not in index:
                    index[prompt] = len(prompts)
                    prompts.append(tok(prompt, add_special_tokens=False)["input_ids"])
                target = tok(text, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])
                rows.append((index[prompt], target))
                owner.append(name)
        score = self._nll_shared if supports(model) else self._nll_whole
        nll = score(prompts, rows, batch_size) if rows else []
        out = {}
        for name in requests:
            mine = [i for i, o in enumerate(owner) if o == name]
            count = sum(len(rows[i][1]) for i in mine)
            out[name] = math.exp(sum(nll[i] for i in mine) / max(count, 1))
        return out

    def _nll_shared(self, prompts: list[list[int]], rows: list[tuple[int, list[int]]], batch_size: int) -> list[float]:
        """Summed NLL of each row's target after its prompt, each prompt read once (cascade attention)."""
        import torch
        from torch.nn import functional as F

        from ..generate.cascade import PromptStore, cascade, read_prefix

        model, tok = self.lm()
        layers, device = model.config.num_hidden_layers, model.device
        # The tokens every prompt starts with (the system message) are read once for all of them;
        # each prompt keeps at least its last token, whose logits predict the target's first.
        common = shared_start(prompts)
        out = []
        with cascade(model):
            start = read_prefix(model, torch.tensor([prompts[0][:common]], device=device)) if common else None
            prefixes, first = [], []
            for p in prompts:
                store = PromptStore(layers, len(p) - common, [start])
                first.append(store.read(model, torch.tensor([p[common:]], device=device), logits=True)[0])
                prefixes.append(store.promote())
            # Rows of several prompts share a batch, each attending to its own prompt; 16 rows
            # keep the logits of a batch (rows x target length x vocabulary) near 150 MB.
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            for s in range(0, len(rows), max(batch_size, 16)):
                chunk = rows[s:s + max(batch_size, 16)]
                width = max(len(t) for _, t in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                valid = torch.zeros((len(chunk), width), dtype=torch.bool)
                for r, (_, t) in enumerate(chunk):  # right padding: a row's own positions stay in order
                    ids[r, :len(t)], valid[r, :len(t)] = torch.tensor(t), True
                store = PromptStore(layers, width, prefixes)
                logits = store.read(model, ids.to(device), valid.to(device),
                                    torch.tensor([g for g, _ in chunk]), every=True)
                for r, (g, t) in enumerate(chunk):
                    predicted = torch.cat([first[g][None], logits[r, :len(t) - 1]]).float()
                    out.append(float(F.cross_entropy(predicted, torch.tensor(t, device=device), reduction="sum")))
        return out

    def _nll_whole(self, prompts: list[list[int]], rows: list[tuple[int, list[int]]], batch_size: int) -> list[float]:
        """Summed NLL of each row's target, reading prompt and target together (any causal LM)."""
        import torch
        from torch.nn import functional as F

        model, tok = self.lm()
        out = [0.0] * len(rows)
        # Batches of similar length waste little on padding.
        order = sorted(range(len(rows)), key=lambda i: len(prompts[rows[i][0]]) + len(rows[i][1]))
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        for s in range(0, len(order), batch_size):
            batch = order[s:s + batch_size]
            seqs = [(prompts[rows[i][0]], rows[i][1]) for i in batch]
            L = max(len(p) + len(t) for p, t in seqs)
            ids = torch.full((len(seqs), L), pad, dtype=torch.long)
            labels = torch.full((len(seqs), L), -100, dtype=torch.long)
            mask = torch.zeros((len(seqs), L), dtype=torch.long)
            for i, (p, t) in enumerate(seqs):  # right padding: positions stay 0..len-1
                ids[i, :len(p) + len(t)] = torch.tensor(p + t)
                labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
                mask[i, :len(p) + len(t)] = 1
            ids, labels, mask = ids.to(model.device), labels.to(model.device), mask.to(model.device)
            # Position t predicts token t + 1. The vocabulary projection is taken only where a target
            # token is predicted: over the whole prompt it would cost more than the transformer layers.
            shift = labels[:, 1:]
            where = shift != -100
            with torch.no_grad():
                hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
                logits = model.get_output_embeddings()(hidden[where]).float()
            nll = F.cross_entropy(logits, shift[where], reduction="none")
            which = where.nonzero()[:, 0]  # the batch row of each scored token
            sums = torch.zeros(len(seqs), dtype=nll.dtype, device=nll.device).index_add_(0, which, nll)
            for i, value in zip(batch, sums.tolist()):
                out[i] = value
        return out


# --------------------------------------------------------------------------- building and saving


def own_sentences(model, texts: Sequence[str], aspects: Sequence[str]) -> list[dict[str, str]]:
    """Per text, {aspect: the sentence the model's pooling head weighs most for it} (`PooledAspectModel.attention`).

    A sentence with a format marker ("Summary:", a heading) is passed over for the next one. [] for
    a model without sentence weights (one that reads whole texts); a text without a clean
    sentence has no entry.
    """
    if not getattr(model, "pool", False) or not hasattr(model, "attention") or not len(texts):
        return []
    heads = [a for a in aspects if a in model.aspects]
    out = []
    for frame in model.attention(list(texts), heads) if heads else []:
        found = {}
        for a in heads:
            ranked = [str(frame["sentence"].iloc[i]) for i in np.argsort(-frame[a].to_numpy(), kind="stable")]
            clean = [t for t in ranked if t.strip() and marker_reason(t) is None]
            if clean:
                found[a] = clean[0]
        out.append(found)
    return out


def add_own_sentences(run_dir: Path, corpus, entries: dict[str, Entries], allowed: list[str], models) -> None:
    """Give each allowed paper with no statement of an aspect its sentence that states the aspect most clearly
    (`aspect_margin.stating_sentences`: the highest aspect margin), none below `MEMORY_MARGIN` (counted as left
    out) unless the aspect would have no statement at all; models(folder) loads a model once."""
    having = {a: set(e.doc_ids) for a, e in entries.items()}
    missing = {a: [d for d in allowed if d not in having[a]] for a in entries}
    papers = list(dict.fromkeys(d for ds in missing.values() for d in ds))
    folder = RunDir(run_dir).unified_model
    if not papers or corpus is None or not folder.is_dir():
        return
    abstracts = dict(zip(map(str, corpus.ids), corpus.texts()))
    papers = [d for d in papers if d in abstracts]
    found = dict(zip(papers, stating_sentences(models(folder), [abstracts[d] for d in papers], list(entries),
                                               least=-np.inf)))
    for a, e in entries.items():
        offered = [(d, found[d][a]) for d in missing[a] if a in found.get(d, {})]
        clear = [(d, s) for d, (s, m) in offered if m >= MEMORY_MARGIN]
        # A memory with nothing else and no clear sentence keeps its papers' clearest ones (the pane reads them
        # "topic only"), so that it is never empty for want of a clear sentence.
        chosen = clear if clear or e.texts else [(d, s) for d, (s, _) in offered]
        for d, sentence in chosen:
            e.add(d, sentence, "sentence")
        for _ in range(len(offered) - len(chosen)):
            e.leave_out(MARGIN_LEFT_OUT)


def memory_papers(run_dir, corpus) -> list[str]:
    """The papers whose statements may enter a memory: stage 02's train and validation papers.

    Where no aspect had a usable view, that split holds no paper; then the papers stage 01 was asked
    about (its summaries file; every paper of the corpus where it has none), less the held-out ones
    (`generate.views.held_out_ids`), so that their own sentences still give every aspect a memory."""
    from ..generate.summaries import summaries_frame
    from ..generate.views import held_out_ids

    train, val = read_split(run_dir)
    if train or val or corpus is None:
        return train + val
    frame = summaries_frame(run_dir)
    asked = set(frame["doc_id"].astype(str)) if len(frame) else set()
    held = held_out_ids(corpus)
    return [d for d in map(str, corpus.ids) if d not in held and (not asked or d in asked)]


def build_memories(run_dir, corpus, aspects: Sequence[str], doc_ids: Sequence[str] | None = None,
                   progress: bool = False, aspect_set=None) -> dict[str, StatementMemory]:
    """The statements worth showing of each aspect (see the module doc), embedded by that aspect's model (stage 02),
    or, for an aspect stage 02 trained none of, by the unified model (its aspect-file head: `RunDir.decoding_encoder`).

    doc_ids: the papers whose statements may enter (default: `memory_papers`, the run's train and
    validation papers, stage 02's split), so held-out papers never reach the memory.
    aspect_set: the run's aspect file (`data.aspects.AspectSet`): an LLM answer that carries a
    run of its words (an example sentence) is left out. Each memory's `left_out` counts what
    was left out and why.
    """
    from ..embed.checkpoints import load_model
    from ..generate.views import collect_views

    run_dir = Path(run_dir)
    if doc_ids is None:
        doc_ids = memory_papers(run_dir, corpus)
    allowed = list(dict.fromkeys(map(str, doc_ids)))
    views = collect_views(list(aspects), run_dir, corpus)
    verdicts = grounding_verdicts(views, run_dir, corpus)
    abstracts = dict(zip(map(str, corpus.ids), corpus.texts())) if corpus is not None else {}
    prompt = prompt_text(aspect_set) if aspect_set is not None else ""
    entries = {a: shown_entries(views[a], verdicts.get(a, {}), abstracts, set(allowed), prompt) for a in aspects}
    loaded: dict[Path, object] = {}  # the unified model finds own sentences and embeds an untrained aspect's

    def models(folder: Path):
        if folder not in loaded:
            loaded[folder] = load_model(folder, run_dir=run_dir)
        return loaded[folder]

    add_own_sentences(run_dir, corpus, entries, allowed, models)
    run = RunDir(run_dir)
    out = {}
    for aspect in aspects:
        e = entries[aspect]
        folder = run.decoding_encoder(aspect)
        model = models(folder)
        head = aspect if aspect in model.aspects else model.aspects[0]
        vectors = model.encode(e.texts, aspects=head, progress=progress)[head] if e.texts else np.zeros((0, model.dim))
        out[aspect] = StatementMemory(aspect, e.texts, e.doc_ids, e.sources, vectors)
        out[aspect].left_out = dict(e.left_out)
        out[aspect].encoder = ENCODER_UNIFIED if folder == run.unified_model else ENCODER_ASPECT
    return out


def fingerprint(memories: dict[str, StatementMemory], settings: dict) -> str:
    """Hash of the memories' texts, papers and vectors and of the settings (a re-run skips an unchanged one)."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for a in sorted(memories):
        m = memories[a]
        h.update(json.dumps([a, m.texts, m.doc_ids, m.sources, m.encoder]).encode())
        h.update(np.ascontiguousarray(m.vectors, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def save_memories(folder, memories: dict[str, StatementMemory], settings: dict) -> str:
    """Write memory.safetensors + memory.json (the JSON last: a folder without it is incomplete); returns the fingerprint."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (VECTORS_NAME + ".tmp")
    save_file({a: np.ascontiguousarray(m.vectors, dtype=np.float32) for a, m in memories.items()}, str(tmp))
    os.replace(tmp, folder / VECTORS_NAME)
    meta = {"format": FORMAT, "settings": settings, "fingerprint": fingerprint(memories, settings),
            "checks": CHECKS,
            "aspects": {a: {"texts": m.texts, "doc_ids": m.doc_ids, "sources": m.sources, "left out": m.left_out,
                            "encoder": m.encoder} for a, m in memories.items()}}
    write_json(folder / MEMORY_NAME, meta, indent=1)
    return meta["fingerprint"]


def load_retrieval_decoders(folder, aspects: Sequence[str] | None = None, lm=None,
                            device: str | None = None) -> dict[str, RetrievalDecoder]:
    """{aspect: RetrievalDecoder} from a saved folder; each aspect's model is found in the run (stage 02), or, for a
    memory the unified model embedded (an aspect stage 02 trained none of), the unified model (stage 03)."""
    from safetensors.numpy import load_file

    from ..embed.encoders import CheckpointError, read_config  # lazy: torch

    folder = Path(folder)
    meta_path = folder / MEMORY_NAME
    if not meta_path.is_file() or not (folder / VECTORS_NAME).is_file():
        raise FileNotFoundError(f"no retrieval decoder in {folder}: run stage 04 (decode) first")
    meta = read_config(meta_path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path} is not a retrieval decoder (format {meta.get('format')!r})")
    try:
        arrays = load_file(str(folder / VECTORS_NAME))
    except Exception as exc:  # safetensors raises its own error types for a torn or foreign file
        raise CheckpointError(f"{folder / VECTORS_NAME} cannot be read ({exc}); run stage 04 (decode) again "
                              f"to rebuild the retrieval memory") from exc
    settings = meta.get("settings", {})
    names = list(aspects) if aspects is not None else list(meta["aspects"])
    unknown = [a for a in names if a not in meta["aspects"] or a not in arrays]
    if unknown:
        raise FileNotFoundError(f"the retrieval decoder in {folder} has no memory for {unknown} "
                                f"(it has {sorted(meta['aspects'])})")
    run_dir = folder.parent.parent
    # One LM for all aspects, loaded on first use by whichever decoder needs it first.
    lm = lm if lm is not None else _SharedLM(settings.get("lm", "smollm2-135m-instruct"), device)
    if meta.get("checks", 0) < CHECKS:
        notice(f"{meta_path} was built before stage 04 left out prompt artefacts and ungrounded LLM answers: texts "
               "with artefacts are left out as it loads; re-run stage 04 (workbench run --stages 04) to leave out "
               "the ungrounded answers too and give papers without a statement their own sentence")
    out = {}
    for a in names:
        m = meta["aspects"][a]
        memory = StatementMemory(a, m["texts"], m["doc_ids"], m["sources"], arrays[a])
        # Markers of a prompt are checked again on every load: a memory built by older code, or a
        # marker added since, never reaches the pane.
        memory = memory.subset([marker_reason(t) is None for t in memory.texts])
        memory.encoder = m.get("encoder", ENCODER_ASPECT)
        # The model that embedded the memory embeds what is compared with it (a rewrite), in the same space.
        model_dir = RunDir(run_dir).unified_model if memory.encoder == ENCODER_UNIFIED \
            else RunDir(run_dir).aspect_model(a)
        out[a] = RetrievalDecoder(memory, model_dir if model_dir.is_dir() else None, lm=lm,
                                  k=settings.get("k", 8), context=settings.get("context", 3), device=device)
        # What defines it on disk, for the reports kept beside it (`report_cache.py`).
        out[a].source_files = (folder, model_dir) if model_dir.is_dir() else (folder,)
    return out


class _SharedLM:
    """An LM name that loads once for several decoders (behaves as the (model, tokenizer) tuple)."""

    def __init__(self, name, device):
        self.name, self.device, self._pair = name, device, None

    def _load(self):
        if self._pair is None:
            from ..core.models import load_causal_lm

            self._pair = load_causal_lm(self.name, device=self.device)
        return self._pair

    def __iter__(self):
        return iter(self._load())

    def __getitem__(self, i):
        return self._load()[i]
