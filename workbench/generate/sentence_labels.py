"""Stage 01, cheap task: which sentences of an abstract state which aspect.

One request per (document, sample): the LLM sees the aspects with their descriptions
and the abstract's sentences numbered [1], [2], ... (from `split_sentences`, the one
splitter every stage uses), and answers one JSON object

    {"challenge": [1], "approach": [2, 3], "outcome": []}

A sentence may state several aspects or none. Answers are stored in
`<run_dir>/sentence_labels.jsonl`, one record per (document, sample):

    {"doc_id", "prompt_hash", "model", "sample", "status": "ok" | "unparsed",
     "labels": {aspect: [0-based sentence indices]} | None, "n_sentences",
     "raw", "error", "backend", "sampling", "tokens", "time"}

The store is keyed by (doc_id, prompt_hash, model, sample): a resumed run does only what
is missing, and a changed prompt, aspect definition or model is asked again instead of
being answered from old records. The CPU-first stage 03 reads the labels with
`load_sentence_labels` to learn where in an abstract each aspect is stated.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from .summaries import GenerationReport, Reporting, run_requests
from .sampling import Sampling
from .parsing import parse_sentence_labels
from ..data.sentences import split_sentences
from ..core.store import RecordStore

SENTENCE_LABELS = "sentence_labels.jsonl"
LABEL_KEY = ("doc_id", "prompt_hash", "model", "sample")
# Starting the answer with '{"' makes a tiny model write JSON; the object holds only lists, so the first
# closing brace ends it and we stop there (small models chatter on after it).
LABEL_PREFILL = '{"'
LABEL_STOP = ("}",)

LABEL_SYSTEM = ("You label the sentences of scientific abstracts from {domain}. "
                "Reply with one JSON object and nothing else.")
LABEL_TEMPLATE = """\
Aspects:
{aspects}

Sentences:
{sentences}

For each aspect, list the numbers of the sentences that state it. A sentence may state several aspects or none; \
an aspect may have no sentence ([]).
Reply with one JSON object, e.g. {example}"""


def label_store(run_dir: str | Path) -> RecordStore:
    """Open (or create) the run's sentence-label store."""
    return RecordStore(Path(run_dir) / SENTENCE_LABELS, LABEL_KEY)


def label_messages(aspect_set, sentences: list[str]) -> list[dict]:
    """Chat messages (system, user) asking which of the numbered `sentences` state which aspect.

    Kept short on purpose: the packaged generator is a 135M model on CPU, and every
    prompt token costs time. The example answer shows the format with the set's own
    aspect names (first aspect one sentence, second two, the rest none).
    """
    names = aspect_set.names
    example = {n: [[1], [2, 3]][i] if i < 2 else [] for i, n in enumerate(names)}
    user = LABEL_TEMPLATE.format(
        aspects="\n".join(f"- {a.name}: {a.description.strip()}" for a in aspect_set),
        sentences="\n".join(f"[{i}] {s}" for i, s in enumerate(sentences, start=1)),
        example=json.dumps(example),
    )
    return [{"role": "system", "content": LABEL_SYSTEM.format(domain=aspect_set.domain)},
            {"role": "user", "content": user}]


def prompt_hash(aspect_set) -> str:
    """Short sha256 (12 hex digits) of the label prompt: template, system prompt, prefill and aspect definitions.

    The messages are rendered with one placeholder sentence, so the hash changes when
    any aspect's name or description, the domain or the template changes, and not with
    the abstract.
    """
    rendered = json.dumps({"messages": label_messages(aspect_set, ["{sentence}"]), "prefill": LABEL_PREFILL},
                          sort_keys=True)
    return hashlib.sha256(rendered.encode("utf-8")).hexdigest()[:12]


def label_sampling(aspect_set, seed: int | None = None) -> Sampling:
    """Greedy-ish default sampling: temperature 0.2, stop at the end of the JSON object.

    About 12 tokens per aspect ("approach": [2, 3], ...) plus margin; never under 60.
    """
    return Sampling(temperature=0.2, max_new_tokens=max(60, 16 * len(aspect_set)), seed=seed, stop=LABEL_STOP)


def label_sentences(corpus, aspect_set, backend, run_dir: str | Path, k: int = 1, sampling: Sampling | None = None,
                    progress: bool = True, save_every: int | None = None) -> GenerationReport:
    """Label the sentences of each abstract with the aspects they state, k samples per document; resumable.

    Writes `<run_dir>/sentence_labels.jsonl` (see the module docstring for the record).
    `corpus` must pass `validate()` (call `corpus.drop_invalid()` first). Documents whose
    abstract splits into no sentence are not asked; they are counted in the report's
    `status["no_sentences"]`. Records already stored for this prompt and model are skipped.
    """
    report = corpus.validate()
    if not report.ok:
        raise ValueError("the corpus has invalid rows; call corpus.drop_invalid() first and look at what it drops:\n"
                         + report.summary())
    sampling = sampling or label_sampling(aspect_set)
    digest = prompt_hash(aspect_set)
    store = label_store(run_dir)
    tasks, empty = [], 0
    for doc_id, abstract in zip(corpus.ids, corpus.texts()):
        sentences = split_sentences(abstract)
        if not sentences:
            empty += 1
            continue
        messages = label_messages(aspect_set, sentences)
        for sample in range(k):
            tasks.append({"messages": messages, "n_sentences": len(sentences),
                          "record": {"doc_id": doc_id, "prompt_hash": digest, "model": backend.model_id,
                                     "sample": sample}})

    def to_record(task, completion):
        parsed = parse_sentence_labels(completion.text, aspect_set.names, task["n_sentences"], prefill=LABEL_PREFILL)
        record = dict(task["record"])
        record.update(status=parsed.status, labels=parsed.value, n_sentences=task["n_sentences"],
                      raw=completion.text, error=parsed.error, backend=backend.kind, sampling=sampling.to_dict(),
                      tokens=completion.tokens, time=time.time())
        return record

    try:
        result = run_requests(backend, store, tasks, sampling, LABEL_PREFILL, to_record,
                              Reporting("sentence labels", progress, save_every or getattr(backend, "batch_size", 8)))
    finally:
        store.close()
    if empty:
        result.status["no_sentences"] = empty
    return result


def sentence_labels_frame(run_dir: str | Path):
    """The run's sentence-label records as a DataFrame (empty when there are none)."""
    import pandas as pd

    path = Path(run_dir) / SENTENCE_LABELS
    return label_store(run_dir).to_frame() if path.exists() else pd.DataFrame()


def load_sentence_labels(run_dir: str | Path, corpus, aspects, prompt_hash: str | None = None,
                         model: str | None = None) -> dict[str, dict[str, list[float]]]:
    """{aspect: {doc_id: [share of samples that marked sentence i, for each sentence]}} from the run's labels.

    Only "ok" records whose `n_sentences` equals the current `split_sentences` of the
    document's abstract count (a record for an abstract that changed since would point
    at the wrong sentences). Records that lack an aspect (another aspect set) do not
    count for it. `prompt_hash` and `model`, when given, keep only those records; else
    samples of every prompt and model are pooled. Documents without records are absent.
    `aspects` is an AspectSet or a list of aspect names.
    """
    names = list(getattr(aspects, "names", aspects))
    out: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    if not (Path(run_dir) / SENTENCE_LABELS).exists():
        return out  # reading must not create the run directory
    by_doc: dict[str, list[dict]] = {}
    for r in label_store(run_dir).records():
        if r.get("status") != "ok" or not isinstance(r.get("labels"), dict):
            continue
        if prompt_hash is not None and r.get("prompt_hash") != prompt_hash:
            continue
        if model is not None and r.get("model") != model:
            continue
        by_doc.setdefault(r["doc_id"], []).append(r)
    for doc_id, abstract in zip(corpus.ids, corpus.texts()):
        n = len(split_sentences(abstract))
        records = [r for r in by_doc.get(doc_id, []) if r.get("n_sentences") == n]
        for name in names:
            marks = [set(r["labels"][name]) for r in records if name in r["labels"]]
            if marks:
                out[name][doc_id] = [sum(i in m for m in marks) / len(marks) for i in range(n)]
    return out


def labels_table(corpus, labels: dict[str, dict[str, list[float]]], doc_ids=None, aspects=None):
    """One row per sentence (doc_id, index, sentence) and a 0/1 column per aspect, for display.

    `labels` is what `load_sentence_labels` returns; a sentence counts as labelled when
    at least half of the samples marked it. Where a document has no labels for an
    aspect the cell is empty (<NA>), not 0: nobody said the aspect is absent.
    """
    import pandas as pd

    names = list(getattr(aspects, "names", aspects)) if aspects is not None else list(labels)
    doc_ids = list(doc_ids) if doc_ids is not None else corpus.ids
    texts = dict(zip(corpus.ids, corpus.texts()))
    rows = []
    for doc_id in doc_ids:
        for i, sentence in enumerate(split_sentences(texts[doc_id])):
            row = {"doc_id": doc_id, "index": i, "sentence": sentence}
            for name in names:
                shares = labels.get(name, {}).get(doc_id)
                row[name] = pd.NA if shares is None else int(shares[i] >= 0.5)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=["doc_id", "index", "sentence", *names])
    return frame.astype({name: "Int64" for name in names})
