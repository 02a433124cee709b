"""Stage 01: LLM-written aspect summaries (and LLM-judge similarity scores) for a corpus.

For each document, each prompt key of the aspect set and each of k samples, one
request; each answer is parsed tolerantly and stored as one record in
`<run_dir>/summaries.jsonl`:

    {"doc_id", "aspect", "key", "sample", "status": "ok" | "not_applicable" | "unparsed",
     "text", "raw", "error", "model", "backend", "prompt_hash", "sampling", "tokens", "time"}

The store is append-only and keyed by (doc_id, key, prompt_hash, model, sample), so a
killed run started again does only what is missing, and a run after a change of the
prompt (its template or any aspect field in it) or of the model does that work again
instead of reusing answers to another question. Earlier answers stay in the file; a
small manifest, `<run_dir>/summaries.current.json`, names the (prompt hash, model) of
the latest generation per prompt key, and `summaries_frame` returns only those by
default. The judge (appendix A.5 of the paper) scores pairs of abstracts per aspect into
`<run_dir>/judgements.jsonl` the same way.
"""

from __future__ import annotations

import warnings
import hashlib
import inspect
import itertools
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from .sampling import Sampling, request_seed
from .parsing import NOT_APPLICABLE, Parsed, copies_instructions, parse_judgement, parse_sentence
from ..core.models import ALIASES, PACKAGED
from ..core.progress import notice
from ..core.store import RecordStore
from ..core.rundir import RunDir

CURRENT = "summaries.current.json"
SUMMARY_KEY = ("doc_id", "key", "prompt_hash", "model", "sample")
JUDGEMENT_KEY = ("aspect", "doc_a", "doc_b", "prompt_hash", "model", "sample")
SUMMARY_PREFILL = '{"sentence": "'
JUDGE_PREFILL = '{"reasoning": "'
# Cut the answer at the end of the JSON object: small models chatter on after it.
SUMMARY_STOP = ('"}', '"\n}')
JUDGE_CHARS = 1000  # the authors cut abstracts to 1,000 characters for the judge


class GenerationError(RuntimeError):
    """Some requests failed for good; what succeeded is saved, and a re-run retries the rest."""


@dataclass
class GenerationReport:
    """What one call did: counts by status, time and throughput."""

    requested: int = 0
    skipped: int = 0  # already in the store from an earlier run (reused)
    superseded: int = 0  # stored for the same task under another prompt or model: done again
    written: int = 0
    failed: int = 0
    tokens: int = 0
    seconds: float = 0.0
    status: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second of this call."""
        return self.tokens / self.seconds if self.seconds else 0.0

    def __str__(self) -> str:
        redone = (f" ({self.superseded} of them done again: the store had them from another prompt or model)"
                  if self.superseded else "")
        return (f"{self.written} written{redone}, {self.skipped} reused from the store, {self.failed} failed; "
                f"{self.tokens} tokens in {self.seconds:.1f}s ({self.tokens_per_second:.1f} tokens/s); "
                f"status {self.status}")


def _superseded(store: RecordStore, todo: list[dict]) -> int:
    """How many tasks to do have an answer in the store under another prompt hash or model."""
    if not todo:
        return 0
    task_of = [f for f in store.key_fields if f not in ("prompt_hash", "model")]
    at = [store.key_fields.index(f) for f in task_of]
    stored = {tuple(key[i] for i in at) for key in store.keys()}  # from the keys: no record is read
    return sum(tuple(t["record"][f] for f in task_of) in stored for t in todo)


def request_seeds(store: RecordStore, tasks: list[dict], sampling: Sampling) -> list[int] | None:
    """Each task's own sampling seed, from what names the task and the call's seed; None without a seed.

    The parts are the task's key fields other than prompt hash and model (for a summary,
    doc_id, prompt key and sample), then `sampling.seed`: `request_seed(doc_id, key, sample,
    seed)`. So a task draws the same random numbers whichever other tasks share its call or
    batch, and a resumed run stores what an uninterrupted one would. (Without a seed,
    sampling is not meant to be reproduced: each call draws afresh.)
    """
    if sampling.seed is None:
        return None
    task_of = [f for f in store.key_fields if f not in ("prompt_hash", "model")]
    return [request_seed(*(t["record"][f] for f in task_of), sampling.seed) for t in tasks]


def _takes_seeds(backend) -> bool:
    """Whether `backend.complete` accepts per-request `seeds` (a backend of one's own may not)."""
    try:
        parameters = inspect.signature(backend.complete).parameters
    except (TypeError, ValueError):
        return False
    return "seeds" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def summary_store(run_dir: str | Path) -> RecordStore:
    """Open (or create) the run's summary store."""
    return RecordStore(RunDir(run_dir).summaries, SUMMARY_KEY)


def judgement_store(run_dir: str | Path) -> RecordStore:
    """Open (or create) the run's LLM-judge store."""
    return RecordStore(RunDir(run_dir).judgements, JUDGEMENT_KEY)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="req", disable=not enabled, smoothing=0.1)


@dataclass(frozen=True)
class Reporting:
    """How `run_requests` shows its progress and how often it saves.

    `desc`: the progress bar's label; `progress`: show the bar at all; `save_every`:
    answers kept in memory before they are appended to the store (None: the backend's
    batch, at most 16).
    """

    desc: str = "requests"
    progress: bool = True
    save_every: int | None = None


@dataclass(frozen=True)
class JudgeConfig:
    """How `judge_pairs` asks the judge: `samples` answers per (pair, aspect), drawn with
    `sampling` (None: temperature 0.8, at most 160 new tokens); `progress` shows a bar;
    `save_every` as in `Reporting`."""

    samples: int = 1
    sampling: Sampling | None = None
    progress: bool = True
    save_every: int | None = None


def run_requests(backend, store: RecordStore, tasks: list[dict], sampling: Sampling, prefill: str | None,
                 to_record, reporting: Reporting) -> GenerationReport:
    """Send the tasks not yet stored, parse and store answers in batches; shared by every stage that asks an LLM.

    Answers are saved every `reporting.save_every` (by default the backend's batch, at most 16): a
    killed run loses at most that many, even when the backend samples 96 at once.
    """
    report = GenerationReport(requested=len(tasks))
    save_every = reporting.save_every or min(getattr(backend, "batch_size", 8), 16)
    store.lock()  # refuse a second writer now, before any work, and see what it wrote meanwhile
    todo = [t for t in tasks if store.key_of(t["record"]) not in store]
    report.skipped = len(tasks) - len(todo)
    report.superseded = _superseded(store, todo)
    t0 = time.perf_counter()
    pending: list[dict] = []
    streak = 0  # consecutive failures: a server that is down fails every request, so stop early
    patience = max(3, getattr(backend, "concurrency", 1) * 2)
    bar = _progress(len(todo), reporting.desc, reporting.progress)
    seeds = request_seeds(store, todo, sampling)
    options = {"seeds": seeds} if seeds is not None and _takes_seeds(backend) else {}
    try:
        for index, completion in backend.complete([t["messages"] for t in todo], sampling, prefill=prefill,
                                                  **options):
            bar.update(1)
            if completion.error:
                # Not stored: a re-run asks again. Keep going so one slow request does not stop the rest.
                report.failed += 1
                report.errors.append(completion.error)
                streak += 1
                if streak >= patience:
                    break
                continue
            streak = 0
            record = to_record(todo[index], completion)
            report.tokens += completion.tokens
            report.status[record["status"]] = report.status.get(record["status"], 0) + 1
            pending.append(record)
            if len(pending) >= save_every:
                report.written += store.append(pending)
                pending = []
            bar.set_postfix(tok_s=f"{report.tokens / max(time.perf_counter() - t0, 1e-9):.1f}")
    finally:
        report.written += store.append(pending)  # whatever finished is kept, even on KeyboardInterrupt
        report.seconds = time.perf_counter() - t0
        bar.close()
    if report.failed:
        first = report.errors[0]
        stopped = f" and stopped after {streak} failures in a row" if streak >= patience else ""
        raise GenerationError(
            f"{report.failed} of {len(todo)} requests failed{stopped} (first: {first}). The {report.written} answers "
            f"that came back are saved in {store.path}; run again to retry only the failed ones."
        )
    return report


def generate_summaries(corpus, aspects, backend, run_dir: str | Path, k: int = 4, sampling: Sampling | None = None,
                       progress: bool = True, save_every: int | None = None) -> GenerationReport:
    """Write k summaries per (document, prompt key) into `<run_dir>/summaries.jsonl`; resumable.

    `corpus` is a `workbench.data.corpus.Corpus` (validated: rows with errors must be dropped
    first with `corpus.drop_invalid()`), `aspects` a `workbench.data.aspects.AspectSet`,
    `backend` one of `workbench.generate.llm`'s backends.
    """
    report = corpus.validate()
    if not report.ok:
        raise ValueError("the corpus has invalid rows; call corpus.drop_invalid() first and look at what it drops:\n"
                         + report.summary())
    sampling = sampling or Sampling(stop=SUMMARY_STOP)
    store = summary_store(run_dir)
    hashes = {key: aspects.prompt_hash(key) for _, key in aspects.prompt_keys()}
    tasks = []
    for doc_id, abstract in zip(corpus.ids, corpus.texts()):
        for aspect, key in aspects.prompt_keys():
            messages = aspects.messages(key, abstract)
            for sample in range(k):
                tasks.append({"messages": messages, "abstract": abstract,
                              "record": {"doc_id": doc_id, "aspect": aspect, "key": key, "prompt_hash": hashes[key],
                                         "model": backend.model_id, "sample": sample}})

    def to_record(task, completion):
        parsed = parse_sentence(completion.text)
        if parsed.status == "ok":
            abstract = task["abstract"]
            told = " ".join(str(m["content"]) for m in task["messages"]).replace(abstract, " ")
            if copies_instructions(parsed.value, told, abstract):
                parsed = Parsed("unparsed", None, f"repeats the prompt's instructions: {parsed.value[:80]!r}")
        record = dict(task["record"])
        record.update(status=parsed.status, text=parsed.value if parsed.status != "unparsed" else None,
                      raw=completion.text, error=parsed.error, backend=backend.kind,
                      sampling=sampling.to_dict(), tokens=completion.tokens, time=time.time())
        return record

    _write_current(run_dir, {key: {"prompt_hash": h, "model": backend.model_id} for key, h in hashes.items()})
    try:
        return run_requests(backend, store, tasks, sampling, SUMMARY_PREFILL, to_record,
                            Reporting("summaries", progress, save_every))
    finally:
        store.close()


def _write_current(run_dir: str | Path, current: dict) -> None:
    """Record which (prompt hash, model) is current per prompt key; keys of other aspects are kept."""
    path = Path(run_dir) / CURRENT
    merged = {**_read_current(run_dir), **current}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _read_current(run_dir: str | Path) -> dict:
    path = Path(run_dir) / CURRENT
    if not path.exists():
        return {}
    try:
        current = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); delete it to use every stored summary") from None
    return current if isinstance(current, dict) else {}


def judge_prompt_hash(aspects, aspect: str) -> str:
    """Short sha256 of the judge's messages for `aspect`, rendered with placeholder abstracts."""
    rendered = json.dumps(aspects.judge_messages(aspect, "{abstract_a}", "{abstract_b}"), sort_keys=True)
    return hashlib.sha256(rendered.encode("utf-8")).hexdigest()[:12]


def sample_pairs(ids: list[str], n_pairs: int | None = None, seed: int = 0) -> list[tuple[str, str]]:
    """Unordered document pairs: all of them (n_pairs None) or a reproducible random sample."""
    pairs = list(itertools.combinations(ids, 2))
    if n_pairs is not None and n_pairs < len(pairs):
        pairs = random.Random(seed).sample(pairs, n_pairs)
    return pairs


def judge_pairs(corpus, aspects, backend, run_dir: str | Path, pairs: list[tuple[str, str]] | None = None,
                n_pairs: int | None = None, seed: int = 0, judge: JudgeConfig = JudgeConfig()) -> GenerationReport:
    """Score the similarity of document pairs per aspect with an LLM judge (paper, appendix A.5); resumable.

    The pairs are `pairs`, or else `sample_pairs(corpus.ids, n_pairs, seed)`; how each is
    asked (samples, sampling, progress, saving) is `judge` (a `JudgeConfig`).
    Only aspects with a `judge` rubric in the aspect set are judged. Records go to
    `<run_dir>/judgements.jsonl` with the integer score, the judge's reasoning, and
    the scale, so that the evaluation stage can use them as ground truth.
    """
    sampling = judge.sampling or Sampling(temperature=0.8, max_new_tokens=160)
    pairs = pairs if pairs is not None else sample_pairs(corpus.ids, n_pairs, seed)
    texts = dict(zip(corpus.ids, corpus.texts()))
    missing = sorted({d for pair in pairs for d in pair if d not in texts})
    if missing:
        raise KeyError(f"pairs name documents that are not in the corpus: {missing[:5]}")
    store = judgement_store(run_dir)
    judge_hash = {a.name: judge_prompt_hash(aspects, a.name) for a in aspects if a.judge is not None}
    tasks = []
    for aspect in aspects:
        if aspect.judge is None:
            continue
        for a, b in pairs:
            messages = aspects.judge_messages(aspect.name, texts[a][:JUDGE_CHARS], texts[b][:JUDGE_CHARS])
            for sample in range(judge.samples):
                tasks.append({"messages": messages, "scale": aspect.judge.scale,
                              "record": {"aspect": aspect.name, "doc_a": a, "doc_b": b,
                                         "prompt_hash": judge_hash[aspect.name], "model": backend.model_id,
                                         "sample": sample}})

    def to_record(task, completion):
        parsed = parse_judgement(completion.text, task["scale"])
        record = dict(task["record"])
        ok = parsed.status == "ok"
        record.update(status=parsed.status, score=parsed.value["score"] if ok else None,
                      reasoning=parsed.value["reasoning"] if ok else None, scale=list(task["scale"]),
                      raw=completion.text, error=parsed.error, backend=backend.kind,
                      sampling=sampling.to_dict(), tokens=completion.tokens, time=time.time())
        return record

    try:
        return run_requests(backend, store, tasks, sampling, JUDGE_PREFILL, to_record,
                            Reporting("judge", judge.progress, judge.save_every))
    finally:
        store.close()


def summaries_frame(run_dir: str | Path, status: str | None = None, current: bool = True):
    """The run's summaries as a DataFrame, optionally only those of one status ("ok", ...).

    With `current` (the default), only the summaries of the latest generation per prompt
    key (its prompt hash and model, from `summaries.current.json`) are returned, so that
    answers to an earlier version of a prompt never mix with the new ones; `current=False`
    returns everything the store holds.
    """
    frame = summary_store(run_dir).to_frame()
    latest = _read_current(run_dir) if current else {}
    if latest and len(frame):
        wanted = {(k, v.get("prompt_hash"), v.get("model")) for k, v in latest.items() if isinstance(v, dict)}
        keep = [(k, h, m) in wanted or k not in latest
                for k, h, m in zip(frame["key"], frame["prompt_hash"], frame["model"])]
        frame = frame[keep]
    frame = _recheck_stored(frame)
    if status is not None and len(frame):
        frame = frame[frame["status"] == status]
    return frame


def _recheck_stored(frame):
    """The stored summaries with each "ok" answer parsed again by today's `parse_sentence`.

    A store written before a parsing fix keeps what the older parser accepted: the format
    example's "..." copied back, say, stored as a summary. The raw answer is kept with every
    record, so it is read again here, and a summary the parser now rejects counts as
    unparsed (with the reason), never as training data. The file itself is not rewritten.
    """
    if not len(frame) or "raw" not in frame or "status" not in frame:
        return frame
    ok = frame.index[(frame["status"] == "ok") & frame["raw"].map(lambda v: isinstance(v, str))]
    parsed = {i: parse_sentence(frame.at[i, "raw"]) for i in ok}
    stale = [i for i, p in parsed.items() if p.status == "unparsed"]
    if not stale:
        return frame

    frame = frame.copy()
    frame.loc[stale, "status"] = "unparsed"
    frame.loc[stale, "text"] = None
    frame.loc[stale, "error"] = [f"stored as a summary by an earlier version; now: {parsed[i].error}" for i in stale]
    warnings.warn(f"{len(stale)} stored summaries are no longer accepted by the parser (e.g. "
                  f"{parsed[stale[0]].error}) and are read as unparsed; run stage 01 with a new prompt or "
                  "model to ask again", stacklevel=3)
    return frame


SAMPLE_CHARS = 100  # of a server's answer quoted in a message: enough to recognise an error page or a chatty model


def nothing_kept(frame, aspects) -> dict[str, str]:
    """{aspect: why no answer of it was kept} for each aspect with answers and none usable ("ok"); all: "*".

    `frame`: `summaries_frame` of the run (its papers). A misconfigured server (a proxy's page, another
    model's chatter) or a model that never follows the format leaves answers that are all unparsed or
    "Not applicable."; stage 02 then has no LLM view to train on. Each reason counts the answers by what
    went wrong and quotes one unusable answer, cut short (what the backend stored: keys scrubbed). When
    every aspect is in that state, the single entry "*" says it once for the run.
    """
    if frame is None or not len(frame):
        return {}
    answered = [a for a in aspects if (frame["aspect"] == a).any()]
    empty = [a for a in answered if not (frame.loc[frame["aspect"] == a, "status"] == "ok").any()]
    if empty and empty == list(aspects):
        return {"*": _why_unkept(frame[frame["aspect"].isin(empty)])}
    return {a: _why_unkept(frame[frame["aspect"] == a]) for a in empty}


def _why_unkept(frame) -> str:
    """"no answer of the N was kept: ...", with the counts by status and a short sample of what came back."""
    counts = frame["status"].value_counts()
    parts = []
    if counts.get("unparsed"):
        errors = frame.loc[frame["status"] == "unparsed", "error"].dropna()
        common = f" ({errors.value_counts().index[0]})" if len(errors) else ""
        parts.append(f"{counts['unparsed']} unparsed{common}")
    if counts.get("not_applicable"):
        parts.append(f"{counts['not_applicable']} '{NOT_APPLICABLE}'")
    said = frame.loc[frame["status"] == "unparsed", "raw"] if counts.get("unparsed") else frame["raw"]
    said = next((" ".join(r.split()) for r in said if isinstance(r, str) and r.strip()), "")
    sample = (f'; the server answered, e.g., "{said[:SAMPLE_CHARS]}{"…" if len(said) > SAMPLE_CHARS else ""}"'
              if said else "; every answer was empty")
    return f"no answer of the {len(frame)} was kept: {', '.join(parts)}{sample}"


def say_nothing_kept(frame, aspects) -> dict[str, str]:
    """Print a notice (`progress.notice`) for each aspect, or the whole run, with no usable answer; returns them.

    Stage 01's notebook calls it after generating, so `workbench run` shows it on the terminal too."""
    unkept = nothing_kept(frame, aspects)
    for aspect, why in unkept.items():
        said, which = (why, "") if aspect == "*" else (f"{aspect}: {why}", f" of {aspect}")
        notice(f"{said}. Stage 02 has no LLM answer{which} to train on: check the backend, model and base_url "
               "(a server that answers with its own page), or use a model that follows the prompt's JSON format. "
               "The run goes on with what needs no answer: human summaries where the corpus has them, else "
               "the aspect file's own head in stage 03 (the aspect-file floor).")
    return unkept


def not_applicable_share(frame):
    """Share of answers per aspect and status (rows: aspect; columns: ok, not_applicable, unparsed)."""
    import pandas as pd

    if frame.empty:
        return pd.DataFrame(columns=["ok", "not_applicable", "unparsed"])
    table = pd.crosstab(frame["aspect"], frame["status"], normalize="index")
    return table.reindex(columns=["ok", "not_applicable", "unparsed"], fill_value=0.0)


SUMMARIES_MODES = ("on", "off", "auto")


def summaries_wanted(mode: str, model: str, backend: str) -> tuple[bool, str]:
    """(whether stage 01 writes summaries, why), for its `summaries` parameter: "on", "off", or "auto".

    "auto" leaves them out where the generator is a packaged demo LLM read in process (the 135M model): on
    CSAbstruct run as a user would, its answers changed no head (stage 03 kept the aspect-file floor with
    and without them, docs/results.md "What stage 01's summaries add") and cost most of the run's time. A
    served model (the openai backend) or any other model, by hub id or folder, turns them back on.
    """
    if mode not in SUMMARIES_MODES:
        raise ValueError(f"summaries must be one of {', '.join(SUMMARIES_MODES)}, not {mode!r}")
    if mode != "auto":
        return mode == "on", f"summaries = {mode!r}"
    name = str(model).lower()
    packaged = PACKAGED.get(ALIASES.get(name, name))
    if backend != "openai" and packaged is not None and packaged.kind == "causal-lm":
        return False, (f"summaries skipped: {model} is the packaged demo LLM, whose answers changed no head on a "
                       "real corpus (stage 03 reads each aspect with the aspect file's head instead). A capable "
                       "generator turns them on: a served model (backend = 'openai') or a hub id or folder as model; "
                       "or summaries = 'on'.")
    return True, f"summaries on: {model} ({backend})"
