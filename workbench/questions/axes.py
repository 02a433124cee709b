"""Question axes: yes/no questions that say why two papers are close in an aspect (CQG-MBQA).

After Sun et al., "A general framework for producing interpretable semantic text
embeddings" (CQG-MBQA), scaled down to one aspect embedding and a small local LLM:

1. CQG, contrastive question generation. Cluster the aspect's embeddings (KMeans); for
   each cluster show the LLM the statements of a few papers nearest its centre
   (positives) and of papers nearest the centres of its neighbouring clusters (hard
   negatives), and ask for yes/no questions answered "yes" for the first and "no" for
   the second. Parse, normalise, deduplicate (exact, then near-duplicates by cosine).
2. Probing. Ask the LLM yes/no for every question on a few papers of every cluster
   (a grid: the paper's probes of the cluster and its neighbours, and full rows for the
   classifier). Keep the questions that discriminate: a yes-rate neither near 0 nor
   near 1, and more "yes" in the cluster than in its neighbours where there are enough
   answers.
3. MBQA. A multi-task binary classifier on the FROZEN aspect embedding (a linear layer,
   or a small MLP with one shared hidden layer), one logit per question, trained with a
   BCE masked to the answered pairs; scored against held-out LLM answers.

`QuestionAxes` is the result: `answer(vectors)` gives (n, q) yes-probabilities,
`compare(a, b)` the questions two papers agree and disagree on, `region_questions`
the questions most papers of a map region answer "yes" (region labels).

What may be read: the test split is the evaluation's ground truth (its human
summaries), so no prompt, answer or training pair reads a test paper; clusters,
questions and the classifier come from the other papers only.

Files, under ``<run_dir>/questions/``:

    questions.jsonl     one record per generation request (aspect, cluster, sample, prompt hash, model)
    answers.jsonl       one record per (doc_id, question_id, model, prompt_hash), "unparsed" ones too
    <aspect>/mbqa.safetensors + mbqa.json   the classifier and its questions (never pickle; `mbqa.py`)

Both stores are `workbench.core.store.RecordStore`s driven like stage 01's (`generate.run_requests`):
a second run asks the backend nothing it has answered; a change of prompt (template,
statement or question: the hash covers the whole conversation) or of model asks again.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..generate.sampling import Sampling
from .settings import AxesConfig
from .mbqa import (CONFIG_NAME, WEIGHTS_NAME, MBQATraining, QuestionAxes, agreement, predict, save_mbqa,
                   train_mbqa)
from ..generate.parsing import Parsed, json_objects
from ..core.progress import notice
from ..core.store import RecordStore
from ..core.vectors import unit_rows
from ..measures.evaluation import correlation_table
from ..embed.features import FeatureCache, FrozenBackbone

from ..core.rundir import RunDir
from ..generate.summaries import GenerationReport, Reporting, run_requests

QUESTIONS = "questions.jsonl"
ANSWERS = "answers.jsonl"
QUESTION_KEY = ("aspect", "cluster", "sample", "prompt_hash", "model")
ANSWER_KEY = ("doc_id", "question_id", "model", "prompt_hash")

# Two questions whose MiniLM embeddings have a cosine at or above this are one question.
# Rewordings ("Does the paper address NER?" / "Is the challenge about NER?") score about
# 0.85-0.95; two different questions in the same "Does the paper ...?" mould about 0.5-0.8.
DEDUPE_THRESHOLD = 0.85
MIN_PAPERS = 2  # papers with a statement an aspect needs for clusters to contrast

GEN_SYSTEM = "You write yes/no questions about research papers."
GEN_PREFILL = "1. Does the paper"  # a tiny model that is not pushed into the list writes prose or wh-questions
ANSWER_SYSTEM = "You answer questions about research papers with yes or no."
ANSWER_PREFILL = "Answer:"  # without it SmolLM2 starts "The challenge is ..." half the time, never yes or no
# A yes/no question starts with an auxiliary verb; "What ...?" and "How ...?" cannot be answered yes or no.
_YES_NO_START = re.compile(r"^(does|do|did|is|are|was|were|has|have|had|can|could|will|would|should|may|might|"
                           r"must)\b", re.IGNORECASE)


def _hash(obj) -> str:
    """Short sha256 of a JSON-able object (prompt hashes, question ids)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:12]


# --------------------------------------------------------------------------- parsing


def normalise_question(text: str) -> str | None:
    """The question cleaned (whitespace, quotes, numbering, a leading "Question:"), or None if not a yes/no question.

    Kept: 3 to 25 words, ending with "?", starting with an auxiliary verb (Does, Is, Can, ...), not
    naming the prompt's "group A" or "group B".
    """
    q = " ".join(str(text).split())
    q = re.sub(r"^\s*(?:\d+\s*[.):\-]|[-*\u2022]|q\d*\s*[:.)]|question\s*\d*\s*[:.)])\s*", "", q, flags=re.IGNORECASE)
    q = q.strip(" \"'`*")
    if not q.endswith("?"):
        return None
    q = q[0].upper() + q[1:]
    if not _YES_NO_START.match(q) or not 3 <= len(q.split()) <= 25 or re.search(r"\bgroups? [ab]\b", q, re.I):
        return None  # a long question is a copied statement; one about "group A" is about the prompt
    return re.sub(r"\s+\?$", "?", q)


def question_id(text: str) -> str:
    """A question's id: the hash of its text, lowercased (so a re-run finds its answers again)."""
    return _hash(" ".join(text.lower().split()))


def parse_questions(text: str) -> list[str]:
    """The yes/no questions in an LLM answer: a JSON list (or {"questions": [...]}), or numbered/bulleted lines.

    Every question must end with "?" and start like a yes/no question (`normalise_question`);
    the rest (chatter, "Yes: ..." lines, wh-questions) is dropped. Order kept, exact repeats removed.
    """
    if not isinstance(text, str):
        return []
    found: list[str] = []
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"\[", text)]:  # a JSON list of strings
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, list):
            found += [v for v in value if isinstance(v, str)]
    for obj in json_objects(text):  # {"questions": [...]}
        for v in obj.values():
            if isinstance(v, list):
                found += [x for x in v if isinstance(x, str)]
    if not found:  # lines; a line may hold several questions ("1. Is it X? 2. Is it Y?")
        for line in text.splitlines():
            line = re.sub(r"^\s*(?:\d+\s*[.):\-]|[-*\u2022])\s*", "", line)
            found += re.findall(r"[^?]*\?", re.sub(r"\s\d+\s*[.)]\s", " ", line))
    out, seen = [], set()
    for q in filter(None, map(normalise_question, found)):
        if q.lower() not in seen:
            seen.add(q.lower())
            out.append(q)
    return out


def parse_yes_no(text: str, prefill: str = ANSWER_PREFILL) -> Parsed:
    """Parse a yes/no answer: Parsed("ok", True/False) or Parsed("unparsed", None, why).

    Reads "Yes", "no.", "Answer: Yes, because ...", {"answer": "no"}, "true"/"false". The
    first word decides; failing that, a lone "yes" or "no" anywhere in the answer; both
    or neither is unparsed (never guessed).
    """
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    for obj in json_objects(text):
        value = obj.get("answer")
        if isinstance(value, bool):
            return Parsed("ok", value)
        if isinstance(value, str):
            text = value
            break
    body = text.strip()
    if prefill and body.startswith(prefill):
        body = body[len(prefill):]
    body = re.sub(r"^\W*(?:answer|a)\s*[:\-]", "", body, flags=re.IGNORECASE).lower()
    words = re.findall(r"[a-z]+", body)
    first = {"yes": True, "y": True, "true": True, "no": False, "n": False, "false": False}
    if words and words[0] in first:
        return Parsed("ok", first[words[0]])
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return Parsed("ok", has_yes)
    return Parsed("unparsed", None, "both yes and no" if has_yes else "neither yes nor no")


# --------------------------------------------------------------------------- dedupe


def _embedder(embed):
    """A function texts -> (n, d) unit rows: given, or a packaged encoder by name (e.g. "minilm")."""
    if embed is None or callable(embed):
        return embed
    cache = FeatureCache(None, FrozenBackbone(str(embed), max_length=64))  # a question is encoded once
    return lambda texts: unit_rows(cache.vectors(list(texts)))


def dedupe_questions(questions: Sequence[str], embed="minilm", threshold: float = DEDUPE_THRESHOLD) -> list[int]:
    """Indices of the questions to keep, first occurrence wins.

    Exact duplicates (case and spacing ignored) go first; then a question whose embedding
    has a cosine >= `threshold` with one already kept (`embed`: a function texts -> (n, d),
    or an encoder name; None skips this step).
    """
    keep, seen = [], set()
    for i, q in enumerate(questions):
        key = " ".join(q.lower().split()).rstrip("?").strip()
        if key not in seen:
            seen.add(key)
            keep.append(i)
    embed = _embedder(embed)
    if embed is None or len(keep) < 2:
        return keep
    v = np.asarray(embed([questions[i] for i in keep]), dtype=np.float64)
    v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    kept: list[int] = []
    for row in range(len(keep)):
        if not kept or (v[kept] @ v[row]).max() < threshold:
            kept.append(row)
    return [keep[r] for r in kept]


# --------------------------------------------------------------------------- clusters and prompts


def cluster(vectors: np.ndarray, k: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """KMeans of unit rows: (labels (n,), centres (k, d) as unit rows). k is cut to n // 3."""
    from sklearn.cluster import KMeans

    x = unit_rows(vectors)
    k = min(max(2, min(k, len(x) // 3)), len(x))  # never more clusters than points
    km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
    return km.labels_.astype(int), unit_rows(km.cluster_centers_)


def neighbours(centres: np.ndarray, n: int = 2) -> list[list[int]]:
    """Per cluster, the n clusters whose centres are nearest (cosine): its hard negatives."""
    sims = centres @ centres.T
    np.fill_diagonal(sims, -np.inf)
    return [list(np.argsort(-row, kind="stable")[:n]) for row in sims]


def representatives(vectors: np.ndarray, labels: np.ndarray, centres: np.ndarray, c: int, n: int) -> list[int]:
    """Indices of the n members of cluster c nearest its centre."""
    members = np.flatnonzero(labels == c)
    return list(members[np.argsort(-(unit_rows(vectors[members]) @ centres[c]), kind="stable")[:n]])


def question_messages(aspect: str, positives: Sequence[str], negatives: Sequence[str], n: int = 5) -> list[dict]:
    """The CQG prompt: statements of group A (the cluster) and B (its neighbours); n questions, yes for A only."""
    a = aspect.replace("_", " ")
    user = (f"The {a} of papers in group A:\n" + "\n".join(f"- {s}" for s in positives)
            + f"\n\nThe {a} of papers in group B:\n" + "\n".join(f"- {s}" for s in negatives)
            + f"\n\nWrite {n} short yes/no questions (at most 15 words each) about the {a} of a paper, "
            f"answered yes for every paper of group A and no for every paper of group B. Number them 1 to {n}.")
    return [{"role": "system", "content": GEN_SYSTEM}, {"role": "user", "content": user}]


def answer_messages(aspect: str, statement: str, question: str) -> list[dict]:
    """The probing prompt: one paper's statement of the aspect, one question."""
    user = (f"Statement about the {aspect.replace('_', ' ')} of a paper: {statement}\n"
            f"Question: {question}\nReply with one word, Yes or No.")
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]


def aspect_statements(corpus, aspect: str, run_dir=None) -> list[str | None]:
    """Per paper (corpus order), its statement of the aspect: the human `summary_<aspect>` where the corpus
    has one, else the first parsed LLM summary of the run's store (stage 01), else None."""
    docs = corpus.docs.reset_index(drop=True)
    column = f"summary_{aspect}"
    human = docs[column].tolist() if column in docs else [None] * len(docs)
    llm = {}
    if run_dir is not None and RunDir(run_dir).summaries.is_file():
        from ..generate.summaries import summaries_frame

        frame = summaries_frame(run_dir, status="ok")
        if len(frame):
            llm = frame[frame["aspect"] == aspect].groupby("doc_id")["text"].first().to_dict()
    return [h.strip() if isinstance(h, str) and h.strip() else llm.get(str(d))
            for h, d in zip(human, docs["doc_id"].astype(str))]


# --------------------------------------------------------------------------- asking the LLM (resumable)


def question_store(run_dir) -> RecordStore:
    """`<run_dir>/questions/questions.jsonl`: one record per CQG request."""
    return RecordStore(RunDir(run_dir).questions() / QUESTIONS, QUESTION_KEY)


def answer_store(run_dir) -> RecordStore:
    """`<run_dir>/questions/answers.jsonl`: one record per (paper, question) asked."""
    return RecordStore(RunDir(run_dir).questions() / ANSWERS, ANSWER_KEY)


def _ask(backend, store: RecordStore, tasks: list[dict], sampling: Sampling, prefill: str, parse, desc: str,
         progress: bool):
    """Ask what the store lacks and append parsed records: stage 01's runner (`generate.run_requests`), so the
    locking, batching, saving on interrupt and retry-on-failure rules are the same."""
    store.lock()  # a second writer is refused here, before any work
    todo = [t for t in tasks if store.key_of(t["record"]) not in store]
    if not todo:  # all stored: ask nothing (a backend given an empty batch may fail)
        store.close()
        return GenerationReport(requested=len(tasks), skipped=len(tasks))

    def to_record(task, completion):
        record = dict(task["record"])
        record.update(parse(completion.text), raw=completion.text, backend=getattr(backend, "kind", "?"),
                      sampling=sampling.to_dict(), tokens=completion.tokens, seconds=completion.seconds,
                      time=time.time())
        return record

    try:
        return run_requests(backend, store, tasks, sampling, prefill, to_record,
                            Reporting(desc, progress, getattr(backend, "batch_size", 8)))
    finally:
        store.close()


def generate_questions(backend, run_dir, aspect: str, prompts: Sequence[tuple[int, list[dict]]], samples: int = 1,
                       sampling: Sampling | None = None, progress: bool = False):
    """Ask the LLM each cluster's CQG prompt (`prompts`: (cluster, messages)); resumable. Returns the report."""
    sampling = sampling or Sampling(temperature=0.7, max_new_tokens=100, seed=0)
    tasks = [{"messages": m, "record": {"aspect": aspect, "cluster": int(c), "sample": s, "model": backend.model_id,
                                        "prompt_hash": _hash([m, GEN_PREFILL])}}
             for c, m in prompts for s in range(samples)]

    def parse(text):
        questions = parse_questions(text)
        return {"status": "ok" if questions else "unparsed", "questions": questions}

    return _ask(backend, question_store(run_dir), tasks, sampling, GEN_PREFILL, parse, "questions", progress)


def answer_questions(backend, run_dir, aspect: str, pairs: Sequence[tuple[str, str, str]],
                     sampling: Sampling | None = None, progress: bool = False):
    """Ask yes/no for (doc_id, statement, question) triples; resumable, unparsed answers stored as such."""
    sampling = sampling or Sampling(temperature=0.0, max_new_tokens=2)
    tasks = []
    for doc_id, statement, question in pairs:
        m = answer_messages(aspect, statement, question)
        tasks.append({"messages": m, "record": {"doc_id": str(doc_id), "question_id": question_id(question),
                                                "model": backend.model_id, "prompt_hash": _hash([m, ANSWER_PREFILL]),
                                                "aspect": aspect, "question": question}})

    def parse(text):
        p = parse_yes_no(text)
        return {"status": p.status, "answer": p.value, "error": p.error}

    return _ask(backend, answer_store(run_dir), tasks, sampling, ANSWER_PREFILL, parse, "answers", progress)


# --------------------------------------------------------------------------- the whole pipeline


def held_out(doc_id: str, share: float = 0.25) -> bool:
    """Whether a paper's answers are held out from training (a stable hash of its id, about `share` of papers)."""
    return int(hashlib.sha256(str(doc_id).encode()).hexdigest()[:8], 16) % 1000 < share * 1000


def probe_papers(labels: np.ndarray, docs: Sequence[int], n: int, seed: int = 0) -> list[int]:
    """About n papers to ask every question, drawn from each cluster in turn (each cluster gets its positives
    and every other cluster's negatives). Stable for a seed, so a re-run asks the same papers."""
    rng = np.random.default_rng(seed)
    docs = np.asarray(docs)
    pools = [list(rng.permutation(docs[labels[docs] == c])) for c in np.unique(labels[docs])]
    chosen: list[int] = []
    while len(chosen) < n and any(pools):
        for pool in pools:
            if pool and len(chosen) < n:
                chosen.append(int(pool.pop(0)))
    return chosen


def build_axes(run_dir, aspect: str, doc_ids: Sequence[str], vectors: np.ndarray,
               statements: Sequence[str | None], backend, usable=None,
               config: AxesConfig = AxesConfig()) -> tuple[QuestionAxes | None, dict]:
    """CQG + probing + MBQA for one aspect; saves `<run_dir>/questions/<aspect>/`. Returns (axes or None, report).

    doc_ids, vectors (n, D: the aspect embedding), statements: the corpus, aligned.
    usable: boolean mask of the papers that may be read (default: every paper with a
    statement; pass ~test to keep the test split out). The settings are `config` (an `AxesConfig`).
    A held-out quarter of the papers (`held_out`) scores the classifier; only the other
    papers' answers select questions and train it.
    """
    ids = [str(d) for d in doc_ids]
    vectors = unit_rows(vectors)
    ok = np.array([isinstance(s, str) and bool(s.strip()) for s in statements])
    usable = ok & (np.ones(len(ids), bool) if usable is None else np.asarray(usable, bool))
    docs = np.flatnonzero(usable)
    report: dict = {"aspect": aspect, "papers": int(len(docs))}
    if len(docs) < MIN_PAPERS:  # no clusters to contrast: say so, as when no question is kept
        notice(f"{aspect}: no question axes: {len(docs)} paper(s) with a statement of it may be read "
               f"(at least {MIN_PAPERS} are needed)")
        report.update(clusters=0, generation="skipped: too few papers", generated=0, unique=0, kept=0, questions=[])
        return None, report

    # 1. CQG: clusters of the usable papers, one prompt per cluster.
    clusters = _clusters(vectors, docs, len(ids), config)
    prompts = _cqg_prompts(aspect, clusters, vectors, docs, statements, config)
    report["clusters"] = len(clusters.centres)
    report["generation"] = str(generate_questions(backend, run_dir, aspect, prompts, config.samples,
                                                  config.gen_sampling, config.progress))

    # 2. Candidates of this run's prompts, deduplicated.
    qs = _candidate_questions(run_dir, aspect, backend, prompts, config, report)
    if not qs:
        report["kept"] = 0
        return None, report

    # 3. Probing: every question for a few papers of every cluster. A grid, not scattered pairs: the prompts of
    #    one paper share its statement, which the backend reads once for all its questions (several times
    #    faster than pairs scattered over many papers), and each paper gives the classifier a full row.
    papers = probe_papers(clusters.labels, docs, max(2 * len(clusters.centres), round(config.pairs / len(qs))),
                          config.seed)
    Y, M = _probe(run_dir, aspect, backend, (ids, statements), qs, papers, config, report)

    # 4. Keep the questions that discriminate (training papers' answers only).
    test = np.array([held_out(d) for d in ids])
    _mark_kept(qs, Y, M * ~test[:, None], clusters, config)
    cols = [j for j, q in enumerate(qs) if q["kept"]]
    report["kept"] = len(cols)
    report["questions"] = qs
    report["yes_rate"] = float(Y[M > 0].mean()) if M.any() else float("nan")
    folder = RunDir(run_dir).questions(aspect)
    if not cols:
        for name in (WEIGHTS_NAME, CONFIG_NAME):  # axes of an earlier build would no longer match this one
            (folder / name).unlink(missing_ok=True)
        return None, report

    # 5. MBQA on the frozen embedding; scored on the held-out papers' answers.
    model = _fit_mbqa(vectors, Y[:, cols], M[:, cols], test, config, report)
    plain = lambda v: None if isinstance(v, float) and np.isnan(v) else v  # noqa: E731 - JSON has no NaN
    kept = [{f: plain(q[f]) for f in ("id", "text", "cluster", "yes_rate", "cluster_rate", "neighbour_rate")}
            for q in (qs[j] for j in cols)]
    saved = {"aspect": aspect, "dim": int(vectors.shape[1]), "hidden": config.hidden, "questions": kept,
             "llm": backend.model_id, "metrics": {m: report[m] for m in ("heldout", "train", "majority")},
             "llm_seconds_per_answer": plain(report["llm_seconds_per_answer"]),
             "settings": {"k": config.k, "per_cluster": config.per_cluster, "samples": config.samples,
                          "pairs": config.pairs, "seed": config.seed, "min_rate": config.min_rate,
                          "max_rate": config.max_rate, "papers": len(papers)}}
    save_mbqa(model, folder, saved)
    return QuestionAxes(aspect, kept, model, saved), report


@dataclass
class _Clusters:
    """KMeans clusters of the usable papers: a label per paper of the corpus (-1: not usable),
    the usable papers' own labels, the centres and each cluster's neighbouring clusters."""

    labels: np.ndarray
    sub_labels: np.ndarray
    centres: np.ndarray
    nbrs: list


def _clusters(vectors: np.ndarray, docs: np.ndarray, n: int, config: AxesConfig) -> _Clusters:
    sub_labels, centres = cluster(vectors[docs], config.k, config.seed)
    labels = np.full(n, -1)
    labels[docs] = sub_labels
    return _Clusters(labels, sub_labels, centres, neighbours(centres))


def _cqg_prompts(aspect: str, clusters: _Clusters, vectors: np.ndarray, docs: np.ndarray, statements,
                 config: AxesConfig) -> list[tuple[int, list[dict]]]:
    """One CQG prompt per cluster: statements nearest its centre (positives) and its neighbours' (hard negatives)."""
    sub_labels, centres, nbrs = clusters.sub_labels, clusters.centres, clusters.nbrs
    prompts = []
    for c in range(len(centres)):
        pos = [statements[docs[i]] for i in representatives(vectors[docs], sub_labels, centres, c, config.n_pos)]
        per = max(1, config.n_neg // len(nbrs[c]))
        neg = [statements[docs[i]] for b in nbrs[c]
               for i in representatives(vectors[docs], sub_labels, centres, b, per)][:config.n_neg]
        prompts.append((c, question_messages(aspect, pos, neg, config.per_cluster)))
    return prompts


def _candidate_questions(run_dir, aspect: str, backend, prompts, config: AxesConfig, report: dict) -> list[dict]:
    """The questions this run's prompts got from `backend`, deduplicated; counts go into `report`."""
    wanted = {(c, s, _hash([m, GEN_PREFILL])) for c, m in prompts for s in range(config.samples)}
    # Parsed again from the raw answer, so a better parser also serves answers stored before it.
    candidates = [(q, r["cluster"]) for r in question_store(run_dir).records()
                  if r["aspect"] == aspect and r["model"] == backend.model_id
                  and (r["cluster"], r["sample"], r["prompt_hash"]) in wanted for q in parse_questions(r.get("raw"))]
    report["generated"] = len(candidates)
    keep = dedupe_questions([q for q, _ in candidates], config.embed) if candidates else []
    qs = [{"id": question_id(candidates[i][0]), "text": candidates[i][0], "cluster": int(candidates[i][1])}
          for i in keep]
    report["unique"] = len(qs)
    return qs


def _probe(run_dir, aspect: str, backend, corpus: tuple[list[str], Sequence], qs: list[dict], papers: list[int],
           config: AxesConfig, report: dict) -> tuple[np.ndarray, np.ndarray]:
    """Ask every question of `qs` for every paper of `papers` (corpus: ids and statements, aligned); returns the
    answers Y and the answered mask M, (n papers, questions) each; counts and timing go into `report`."""
    ids, statements = corpus
    asked = [(i, j) for i in papers for j in range(len(qs))]
    report["answering"] = str(answer_questions(backend, run_dir, aspect,
                                               [(ids[i], statements[i], qs[j]["text"]) for i, j in asked],
                                               config.answer_sampling, config.progress))
    expected = {(ids[i], qs[j]["id"]): _hash([answer_messages(aspect, statements[i], qs[j]["text"]), ANSWER_PREFILL])
                for i, j in asked}
    records = {(r["doc_id"], r["question_id"]): r for r in answer_store(run_dir).records()
               if r["model"] == backend.model_id and expected.get((r["doc_id"], r["question_id"])) == r["prompt_hash"]}
    Y, M = np.zeros((len(ids), len(qs)), np.float32), np.zeros((len(ids), len(qs)), np.float32)
    seconds, unparsed = [], 0
    for i, j in asked:
        r = records.get((ids[i], qs[j]["id"]))
        if r is None:
            continue
        seconds.append(r.get("seconds", 0.0))
        if r["status"] != "ok":
            unparsed += 1
            continue
        Y[i, j], M[i, j] = float(r["answer"]), 1.0
    report.update(answers=len(seconds), unparsed=unparsed,
                  llm_seconds_per_answer=float(np.mean(seconds)) if seconds else float("nan"))
    return Y, M


def _mark_kept(qs: list[dict], Y: np.ndarray, Mt: np.ndarray, clusters: _Clusters, config: AxesConfig) -> None:
    """Give each question its yes-rates (overall, in its cluster, in the neighbouring ones) from the training
    papers' answers (mask `Mt`), and `kept`: a yes-rate within the config's range, and more "yes" inside
    its cluster than around it where both have answers enough."""
    labels, nbrs = clusters.labels, clusters.nbrs
    for j, q in enumerate(qs):
        answered = Mt[:, j] > 0
        inside, near = answered & (labels == q["cluster"]), answered & np.isin(labels, nbrs[q["cluster"]])
        rate = lambda where: float(Y[where, j].mean()) if where.any() else float("nan")  # noqa: E731
        q.update(yes_rate=rate(answered), answered=int(answered.sum()), cluster_rate=rate(inside),
                 neighbour_rate=rate(near))
        contrast = inside.sum() >= 2 and near.sum() >= 2
        q["kept"] = bool(answered.sum() >= 3 and config.min_rate <= q["yes_rate"] <= config.max_rate
                         and (not contrast or q["cluster_rate"] > q["neighbour_rate"]))


def _fit_mbqa(vectors: np.ndarray, Y: np.ndarray, M: np.ndarray, test: np.ndarray, config: AxesConfig,
              report: dict):
    """Train MBQA on the training papers' answers to the kept questions; its agreement on the held-out
    papers, the training papers and of the majority answer go into `report`. Returns the model."""
    train_rows = np.flatnonzero(~test & (M.sum(1) > 0))
    model = train_mbqa(vectors[train_rows], Y[train_rows], M[train_rows], hidden=config.hidden,
                       training=MBQATraining(seed=config.seed))
    probs = predict(model, vectors)
    majority = np.tile(((Y * M * ~test[:, None]).sum(0) / np.maximum((M * ~test[:, None]).sum(0), 1)) > 0.5,
                       (len(vectors), 1)).astype(np.float32)  # per question the training majority answer
    held = M * test[:, None]
    report.update(train_pairs=int(M[train_rows].sum()), heldout=agreement(probs, Y, held),
                  train=agreement(probs, Y, M * ~test[:, None]), majority=agreement(majority, Y, held))
    return model


# --------------------------------------------------------------------------- evaluation


def question_embedding_correlation(probs: np.ndarray, head: np.ndarray, truth: np.ndarray,
                                   centre: bool = False) -> dict:
    """Stage 06's Table 2 number (mean per-paper Spearman x100 against `truth`, `evaluation.correlation_table`)
    for the question-probability vectors used as an embedding, and for the head they come from.

    probs (n, q) and head (n, D) for the same n evaluation papers; truth (n, n), e.g.
    `report.summary_truths(held, [aspect])[aspect]`. centre: subtract each question's mean
    before the cosine (otherwise questions most papers answer "yes" make every pair look alike).
    Returns {"questions", "head", "ratio", "questions_n"}.
    """
    p = np.asarray(probs, dtype=np.float64)
    if centre:
        p = p - p.mean(0, keepdims=True)
    table = correlation_table({"questions": p, "head": np.asarray(head, dtype=np.float64)}, {"truth": truth})
    q, h = float(table["spearman"].loc["questions", "truth"]), float(table["spearman"].loc["head", "truth"])
    return {"questions": q, "head": h, "ratio": q / h if h else float("nan"), "questions_n": int(p.shape[1])}


def answering_cost(axes: QuestionAxes, vectors: np.ndarray, llm_seconds_per_answer: float,
                   encode_seconds_per_paper: float = 0.0, repeats: int = 5) -> dict:
    """Seconds per paper to answer every question: MBQA (classifier, + the encoder pass if given) vs the LLM.

    The LLM figure is its measured seconds per (paper, question) answer times the number of questions.
    """
    axes.answer(vectors[:2])  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        axes.answer(vectors)
    mbqa = (time.perf_counter() - t0) / repeats / len(vectors) + encode_seconds_per_paper
    llm = llm_seconds_per_answer * len(axes.questions)
    return {"mbqa_s_per_paper": mbqa, "llm_s_per_paper": llm, "speedup": llm / mbqa if mbqa else float("inf")}
