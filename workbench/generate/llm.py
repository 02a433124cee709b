"""LLM backends for generating summaries and judgements.

Three backends, one interface (`complete`):

* `TransformersBackend`: any causal chat model that transformers loads (hub id, local
  folder, GGUF file, packaged short name), batched, on the auto-detected device; every
  prompt token is read once, however many samples are drawn from it, and a start that
  many prompts share is held once (cascade attention, `cascade.py`): on 2 CPU cores the
  fastest generator for stage 01 (`benchmarks/generate.py`);
* `LlamaCppBackend`: llama.cpp in process on a GGUF file (optional extra,
  `pip install llama-cpp-python`);
* `OpenAIBackend` (`http_backend.py`): any OpenAI-compatible HTTP server (vLLM,
  llama.cpp's server, Ollama, TGI, `transformers serve`), with concurrent requests,
  timeouts and retries.

`make_backend` builds one by name; `register_backend` adds one.

`complete` yields `(index, Completion)` pairs as answers arrive, so the caller can save
each batch as soon as it is done (the stores are resumable; see `workbench.core.store`).

What a request asks and gets (`Messages`, `Sampling`, `Completion` or `BackendError`, seeds,
drawing a token) is in `sampling.py`; how the local backend groups prompts into batches, in `batching.py`.
"""

from __future__ import annotations

import copy
import contextlib
import random
import time
from pathlib import Path
from typing import Iterator, Sequence

from .batching import pack_groups, plan_batches, shared_start
from ..core.models import cache_keyword, load_causal_lm, gguf_cache_folder, resolve_model
from .http_backend import OpenAIBackend
from .sampling import (BackendError, Completion, Messages, Sampling, call_seeds, cut_at_stop, draw,
                       filtered_probs)

from ..core.devices import best_device, free_threads, use_free_cores

# tokens of a prompt read at once (attention while reading costs chunk x prompt length).
KV_BUDGET_BYTES = 2_000_000_000
READ_CHUNK = 512


class TransformersBackend:
    """Local generation with a transformers causal LM, batched, left-padded.

    `prefill` (a string) is placed at the start of the assistant's answer: a tiny model
    that ignores "answer in JSON" still writes JSON when its answer starts with `{"sentence": "`.
    """

    kind = "transformers"

    def __init__(self, model: str = "smollm2-135m-instruct", device: str | None = None, batch_size: int = 96,
                 dtype=None, trust_remote_code: bool = False):
        self.model_id = str(model)
        self.batch_size = batch_size
        resolve_model(model)  # a name that cannot be found fails here, before any work
        # The weights load on first use: a resumed stage with nothing left to ask (every answer
        # already stored) never loads them, which for an 8B model on a GPU is most of its time.
        self.device = best_device(device)
        self._options = dict(dtype=dtype, trust_remote_code=trust_remote_code)
        self._loaded = None

    def _load(self):
        if self._loaded is None:
            model, tokenizer = load_causal_lm(self.model_id, device=self.device, **self._options)
            if not tokenizer.chat_template:
                raise BackendError(
                    f"{self.model_id} has no chat template; the generator needs a chat (instruct) model."
                )
            self._loaded = model, tokenizer
        return self._loaded

    @property
    def model(self):
        """The causal LM, loaded on first use."""
        return self._load()[0]

    @property
    def tokenizer(self):
        """Its tokenizer (left padding), loaded with the model on first use."""
        return self._load()[1]

    def _prompt(self, messages: Messages, prefill: str | None) -> str:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return text + (prefill or "")

    def complete(self, conversations: Sequence[Messages], sampling: Sampling,
                 prefill: str | None = None, seeds: Sequence[int] | None = None) -> Iterator[tuple[int, Completion]]:
        """Yield (index, Completion) for each conversation, one batch at a time.

        `seeds` (one int per conversation, e.g. `request_seed(doc_id, key, sample, seed)`)
        seed each answer's own random stream: every sampled token of an answer is drawn
        from it alone, so an answer depends on its request and seed only, not on which
        other requests share its batch or the call (a resumed run asks for fewer). Without
        `seeds`, each request's seed comes from `sampling.seed` and its position in the call.

        What is guaranteed: the same request gets the same stream of random numbers in any
        batch; with the thread count and batch composition fixed, the same text. The
        logits themselves come from batched matmuls whose last float bits may change with
        the batch's rows and shared prefixes, and a token whose draw falls within such a
        difference of a boundary of the cumulative distribution would change; in practice
        the text is identical across batch compositions (measured: SmolLM2-135M on CPU, one
        thread, 12 ACLSum abstracts x 3 aspects x 2 samples, 40 tokens: all 72 answers the
        same in batches of 8, 48 and 96, each alone, in reverse order, half the requests,
        and through the plain cache in batches of 8 and 24).

        Reading the prompt is most of the work for short answers (about 590 prompt tokens
        for 15 answer tokens here), so every token of prompt is read once:

        * identical conversations (the k samples of one document and prompt key) are read
          once and sampled from the same keys and values;
        * prompts that share at least half their tokens (one instruction before several
          abstracts, or one abstract under several aspects, whichever the template puts
          first) go into one batch, whose common start is read once;
        * the start that every prompt of the call shares (the system prompt) is read once
          per call.

        With cascade attention (`cascade.py`, most decoder-only models) the common start is
        also *held* once: each row keeps only its own end and answer, so a decoding step
        costs about the same for 48 rows as the plain cache's for 16.
        """
        from . import cascade

        if not conversations:  # a resumed run with nothing left to ask
            return
        if self.model.device.type == "cpu":
            use_free_cores()  # two threads on a core another job holds run several times slower than one
        seeds = call_seeds(len(conversations), sampling, seeds)
        rows_of: dict[str, list[int]] = {}
        for index, messages in enumerate(conversations):
            rows_of.setdefault(self._prompt(messages, prefill), []).append(index)
        prompts = [self.tokenizer(text, add_special_tokens=False)["input_ids"] for text in rows_of]
        indices = list(rows_of.values())
        base = shared_start(prompts)
        repeats = [len(i) for i in indices]
        shared = cascade.supports(self.model)
        batches = self._plan(prompts, repeats, base, sampling, shared)
        if shared:
            sample, context = self._sample_shared, cascade.cascade
            with context(self.model):
                start = cascade.read_prefix(self.model, self._tensor([prompts[0][:base]])) if base else None
        else:
            sample, context = self._sample, contextlib.nullcontext
            start = self._read(prompts[0][:base], None) if base else None
        for batch in batches:
            t0 = time.perf_counter()
            members = [b for group in batch for b in group]
            rows = [i for b in members for i in indices[b]]
            # Each answer is yielded as soon as it is done, so progress and saving follow the batch as it runs.
            with context(self.model):
                for row, answer in sample([[prompts[b] for b in group] for group in batch],
                                          [[repeats[b] for b in group] for group in batch], start, base, sampling,
                                          [seeds[i] for i in rows]):
                    text = cut_at_stop(self.tokenizer.decode(answer, skip_special_tokens=True), sampling.stop)
                    seconds = (time.perf_counter() - t0) / len(rows)  # the batch so far, shared by its answers
                    yield rows[row], Completion((prefill or "") + text, len(answer), seconds)

    def _plan(self, prompts: list[list[int]], repeats: list[int], base: int, sampling: Sampling,
              shared: bool) -> list[list[list[int]]]:
        """Batches of groups of prompt indices for `complete`: prompts sharing a start go into one group.

        `shared`: cascade attention is on, so several groups may share one batch.
        """
        # Every answer of a batch holds keys and values for the batch's longest prompt end plus its answer:
        # one long abstract among short ones would size every row by it (a 20,000-character abstract
        # among the demo's took stage 01 to 13.6 GB). A budget of cells (answers x columns) keeps it bounded.
        cells = max(1, int(KV_BUDGET_BYTES // self._bytes_per_cell()))
        costs = [len(p) - base + sampling.max_new_tokens for p in prompts]
        # the plain cache copies every row's whole prompt at each step: more than 24 rows only slow it down
        groups = plan_batches(prompts, repeats, self.batch_size if shared else min(self.batch_size, 24),
                              costs=costs, max_cells=cells)
        if shared:
            # cascade attention holds each group's start once, so groups can share a batch (fewer decoding steps)
            return pack_groups(groups, repeats, self.batch_size, costs=costs, max_cells=cells)
        return [[g] for g in groups]

    def _bytes_per_cell(self) -> int:
        """Bytes of keys and values one token of one answer holds, over all layers (float32 on a CPU)."""
        config = self.model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return 2 * config.num_hidden_layers * heads * dim * self.model.dtype.itemsize

    def _tensor(self, rows):
        import torch

        return torch.tensor(rows, dtype=torch.long, device=self.model.device)

    def _sample_shared(self, groups: list[list[list[int]]], repeats: list[list[int]], start, base: int,
                       sampling: Sampling, seeds: Sequence[int]) -> Iterator[tuple[int, list[int]]]:
        """`_sample` with cascade attention, for several groups of prompts in one batch.

        Each group's common start is read once and held once (a prefix, one row); each row
        holds only its prompt's end and its answer, so the k samples and the other prompts
        of the group cost their own tokens only.
        """
        import torch

        from .cascade import PromptStore, read_prefix

        prefixes, parts, logits, group_of, counts = [], [], [], [], []
        for g, (prompts, reps) in enumerate(zip(groups, repeats)):
            shared = max(shared_start(prompts), base)
            prefixes.append(read_prefix(self.model, self._tensor([prompts[0][base:shared]]), start)
                            if shared > base else start)
            for prompt in prompts:  # each end alone: no work on padding
                end = prompt[shared:]
                part = PromptStore(self.model.config.num_hidden_layers, len(end), [prefixes[g]])
                # In chunks: attention over a long end costs chunk x length, not length x length.
                for at in range(0, len(end), READ_CHUNK):
                    last = part.read(self.model, self._tensor([end[at:at + READ_CHUNK]]), logits=True)
                logits.append(last)
                parts.append(part)
            group_of += [g] * len(prompts)
            counts += reps
        store = PromptStore.stack(parts, max(p.length for p in parts) + sampling.max_new_tokens, prefixes,
                                  group_of)
        logits = torch.cat(logits)
        pick = self._tensor([row for row, r in enumerate(counts) for _ in range(r)])
        store.select(pick)

        def feed(token):
            return store.read(self.model, token[:, None], logits=True)

        return self._decode(logits[pick], feed, store.select, sampling, seeds)

    def _read(self, ids: list[int], cache):
        """Run the model over `ids` (one sequence) after `cache`; return the extended cache."""
        import torch
        from transformers import DynamicCache

        cache = cache if cache is not None else DynamicCache(config=self.model.config)
        with torch.inference_mode():
            self.model(input_ids=torch.tensor([ids], device=self.model.device), **{cache_keyword(self.model): cache},
                       use_cache=True, logits_to_keep=1)
        return cache

    def _sample(self, groups: list[list[list[int]]], repeats: list[list[int]], base_cache, base: int,
                sampling: Sampling, seeds: Sequence[int]) -> Iterator[tuple[int, list[int]]]:
        """Sample `repeats[g]` answers to each prompt, reading every prompt token once (plain cache).

        `groups` holds one group of prompts (with `repeats`, one list per group).

        The prompts' common start goes into one cache row; their different ends are padded
        in the middle (start, pads, end), so that every row ends on its last real token and
        the positions, counted over the attention mask, stay those of the unpadded prompt.
        Yields (answer, tokens) as each answer is done; answers are numbered prompt by prompt.
        """
        import torch

        (prompts,), (repeats,) = groups, repeats
        device = self.model.device
        shared = max(shared_start(prompts), base)
        cache = copy.deepcopy(base_cache) if base_cache is not None else None
        if shared > base or cache is None:
            cache = self._read(prompts[0][base:max(shared, 1)], cache)
            shared = max(shared, 1)
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for g, p in enumerate(prompts):
            ids[g, :shared], ids[g, width - len(p) + shared:] = torch.tensor(p[:shared]), torch.tensor(p[shared:])
            mask[g, :shared] = 1
            mask[g, width - len(p) + shared:] = 1
        ids, mask = ids.to(device), mask.to(device)
        state = {"mask": mask, "position": (mask.cumsum(-1) - 1).clamp(min=0), "step": shared}
        with torch.inference_mode():
            cache.batch_repeat_interleave(len(prompts))
            logits = self.model(input_ids=ids[:, shared:], attention_mask=mask, position_ids=state["position"][:, shared:],
                                **{cache_keyword(self.model): cache}, use_cache=True, logits_to_keep=1,
                                cache_position=torch.arange(shared, width, device=device)).logits[:, -1]
        pick = torch.tensor([g for g, r in enumerate(repeats) for _ in range(r)], device=device)
        cache.batch_select_indices(pick)
        state.update(mask=mask[pick], position=state["position"][pick, -1:], step=width)

        def feed(token):
            state["mask"] = torch.cat([state["mask"], state["mask"].new_ones((token.shape[0], 1))], dim=1)
            state["position"] = state["position"] + 1
            with torch.inference_mode():
                out = self.model(input_ids=token[:, None], attention_mask=state["mask"], position_ids=state["position"],
                                 **{cache_keyword(self.model): cache}, use_cache=True,
                                 cache_position=torch.tensor([state["step"]], device=device))
            state["step"] += 1
            return out.logits[:, -1]

        def drop(index):
            cache.batch_select_indices(index)
            state["mask"], state["position"] = state["mask"][index], state["position"][index]

        return self._decode(logits[pick], feed, drop, sampling, seeds)

    def _decode(self, logits, feed, drop, sampling: Sampling, seeds: Sequence[int]) -> Iterator[tuple[int, list[int]]]:
        """Sample token by token from `logits` (one row per answer); yield (answer, tokens) as each is done.

        Answer i draws its tokens from its own stream, `random.Random(seeds[i])`: one uniform
        number per token, inverted through the row's cumulative distribution, so what an
        answer draws never depends on the other rows (`torch.multinomial` on the batch would
        hand out one stream's numbers by row position).

        `feed(tokens)` reads one token per row and returns the next logits; `drop(index)`
        keeps only the rows at `index`. `generate` keeps every row to the end of the longest
        answer; here a finished row leaves the batch, so one rambling answer costs its own
        steps, not those of every row.
        """
        import torch

        eos = set(self._eos_ids())
        answers: list[list[int]] = [[] for _ in range(logits.shape[0])]
        alive = list(range(logits.shape[0]))  # answer index of each row still in the batch
        streams = [random.Random(seed) for seed in seeds]
        for step in range(sampling.max_new_tokens):
            if sampling.greedy:
                token = logits.argmax(-1)
            else:
                probs, candidates = filtered_probs(logits, sampling)
                uniform = torch.tensor([streams[a].random() for a in alive], dtype=torch.float64)
                token = candidates.gather(1, draw(probs, uniform.to(probs.device))[:, None]).squeeze(1)
            keep = []
            last = step == sampling.max_new_tokens - 1
            for row, t in enumerate(token.tolist()):
                answer = answers[alive[row]]
                answer.append(t)
                if last or t in eos or self._stopped(answer, sampling.stop):
                    yield alive[row], answer
                else:
                    keep.append(row)
            if not keep:
                return
            if len(keep) < len(alive):
                index = torch.tensor(keep, device=token.device)
                drop(index)
                token, alive = token[index], [alive[row] for row in keep]
            logits = feed(token)

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        eos = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        return [e for e in eos + [self.tokenizer.eos_token_id] if e is not None]

    def _stopped(self, answer: list[int], stop: Sequence[str]) -> bool:
        """Whether the answer's end holds a stop string (the last few tokens are enough)."""
        return bool(stop) and any(s in self.tokenizer.decode(answer[-4:]) for s in stop)


class LlamaCppBackend:
    """llama.cpp in process (llama-cpp-python) on a GGUF file: the fastest generator on a CPU.

    An optional extra: `pip install llama-cpp-python` compiles llama.cpp (about 4 minutes
    on 2 cores; pip keeps the wheel). The prompt is the model's chat template rendered
    by its transformers tokenizer, the same tokens the transformers backend reads, sent as
    token ids, with `prefill` at the start of the answer. llama.cpp keeps the key/value
    cache of the previous prompt and reads only what differs, so the k samples of one
    prompt, sent one after another, read it once.
    """

    kind = "llama_cpp"

    def __init__(self, model: str = "smollm2-135m-instruct", n_ctx: int = 2048, n_threads: int | None = None,
                 batch_size: int = 8):
        try:
            from llama_cpp import Llama
        except ImportError:
            raise BackendError("the llama_cpp backend needs llama-cpp-python: pip install llama-cpp-python "
                               "(it compiles llama.cpp, about 4 minutes on 2 cores)") from None
        from transformers import AutoTokenizer

        resolved = resolve_model(model)
        if not resolved.is_gguf:
            raise BackendError(f"the llama_cpp backend reads GGUF files; {model!r} is not one "
                               "(use the transformers backend, or give a .gguf file)")
        self.model_id = str(model)
        self.batch_size = batch_size  # answers saved together; llama.cpp itself answers one at a time
        self.n_threads = n_threads or free_threads()
        folder = gguf_cache_folder(resolved)  # the converted folder's tokenizer loads in a blink, if there
        self.tokenizer = (AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer_config.json").exists()
                          else AutoTokenizer.from_pretrained(resolved.path, gguf_file=resolved.gguf_file))
        if not self.tokenizer.chat_template:
            raise BackendError(f"{self.model_id} has no chat template; the generator needs a chat (instruct) model.")
        self.llm = Llama(model_path=str(Path(resolved.path) / resolved.gguf_file), n_ctx=n_ctx,
                         n_threads=self.n_threads, verbose=False)
        self.device = "cpu"

    def complete(self, conversations: Sequence[Messages], sampling: Sampling,
                 prefill: str | None = None, seeds: Sequence[int] | None = None) -> Iterator[tuple[int, Completion]]:
        """Yield (index, Completion) for each conversation, in order.

        `seeds`: one per conversation, passed to llama.cpp's sampler (see `TransformersBackend.complete`).
        """
        seeds = call_seeds(len(conversations), sampling, seeds)
        for index, messages in enumerate(conversations):
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = self.tokenizer(text + (prefill or ""), add_special_tokens=False)["input_ids"]
            t0 = time.perf_counter()
            # Each answer gets its own seed: the k samples of one prompt must differ.
            out = self.llm.create_completion(ids, max_tokens=sampling.max_new_tokens,
                                             temperature=max(sampling.temperature, 0.0), top_p=sampling.top_p,
                                             top_k=sampling.top_k if not sampling.greedy else 1,
                                             stop=list(sampling.stop) or None, seed=seeds[index])
            answer = out["choices"][0]["text"]
            if out["choices"][0].get("finish_reason") == "stop" and sampling.stop:
                # llama.cpp cuts the stop string off; transformers keeps it, and the JSON parser wants it.
                answer += sampling.stop[0]
            yield index, Completion((prefill or "") + answer, int(out["usage"]["completion_tokens"]),
                                    time.perf_counter() - t0)


# Backend name (and its aliases) -> class taking (model, **options). `register_backend` adds one.
BACKENDS = {
    **dict.fromkeys(["transformers", "local", "hf"], TransformersBackend),
    **dict.fromkeys(["llama_cpp", "llama-cpp", "gguf"], LlamaCppBackend),
    **dict.fromkeys(["openai", "http", "vllm", "llamacpp", "ollama", "tgi"], OpenAIBackend),
}
BUILT_IN = frozenset(BACKENDS)


def register_backend(cls, *names: str) -> None:
    """Make `make_backend(name, model, **options)` build `cls(model, **options)`.

    `cls` has a `kind` and a `model_id` (recorded beside every answer) and answers
    `complete(conversations, sampling, prefill=None, seeds=None)`, yielding `(index, Completion)`
    as each request finishes (any order; stages 01 and 07 store each at once).
    """
    for name in names:
        BACKENDS[name] = cls


def make_backend(backend: str = "transformers", model: str = "smollm2-135m-instruct", **options):
    """Build a backend by name: "transformers" (local), "llama_cpp" (local GGUF, in process) or
    "openai" (any OpenAI-compatible server: vLLM, llama.cpp's server, Ollama, TGI), or one registered."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use 'transformers', 'llama_cpp' or 'openai'"
                         + (f" (or one registered: {sorted(set(BACKENDS) - BUILT_IN)})" if set(BACKENDS) - BUILT_IN
                            else ""))
    return BACKENDS[backend](model, **options)
