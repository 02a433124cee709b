"""What each notebook parameter may hold (type, range, null or not), checked before any stage runs.

The notebooks' `parameters` cells declare the names and their defaults; `SPECS` declares, for each
name, what a value must be. One name means one thing in every stage that declares it (stage 01's
`k` is summaries per document and aspect; stage 06's top-k overlap is `overlap_k`, stage 07's
clusters `n_clusters`), so one spec per name serves them all. tests/test_param_validation.py
checks that every parameter of every notebook has a spec here and that its default passes it.

A value of the wrong type or out of range used to reach the notebook and fail there late
(`k=0`: a KeyError in cell 7), or worse, run with a silently different meaning (`subset=.nan`:
the whole corpus; `k=true`: k = 1; `n_permutations=-5`: every p-value -0.25).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from ..core.safeyaml import short

# Kinds of value: what each accepts, in words for the error message.
_KIND_WORDS = {"int": "a whole number", "number": "a number", "bool": "true or false", "text": "text",
               "id": "a paper id (text or a whole number)", "list": "a list", "mapping": "a mapping",
               "any": "any value"}


@dataclass(frozen=True)
class ParamSpec:
    """What a notebook parameter accepts: `kind` (see _KIND_WORDS), an inclusive `minimum` (or an exclusive
    one with `above`), a `maximum`, whether null (None) is allowed, and for a list what each item is."""

    kind: str
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False          # minimum is exclusive: lr > 0
    nullable: bool = False
    items: str | None = None     # a list's items: "text"
    min_items: int = 0
    null_means: str = ""         # said in the message: what null does where it is allowed

    def describe(self) -> str:
        """The accepted values in words: 'a whole number >= 1, or null (the whole corpus)'."""
        words = _KIND_WORDS[self.kind]
        if self.items:
            words += f" of {_KIND_WORDS[self.items]}"
        if self.min_items:
            words += f" with at least {self.min_items} item{'s' if self.min_items > 1 else ''}"
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.above else '>='} {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {self.maximum:g}")
        if bounds:
            words += " " + " and ".join(bounds)
        if self.nullable:
            words += ", or null" + (f" ({self.null_means})" if self.null_means else "")
        return words

    def problem(self, value) -> str | None:
        """Why `value` is not accepted (a phrase), or None when it is."""
        if value is None:
            return None if self.nullable or self.kind == "any" else "null is not allowed"
        wrong = _wrong_kind(self.kind, value)
        if wrong:
            return wrong
        if self.kind == "list":
            return self._list_problem(value)
        if self.kind in ("int", "number"):
            return self._range_problem(value)
        return _non_finite(value)

    def _range_problem(self, value) -> str | None:
        if not math.isfinite(value):
            return "not a finite number"
        low = self.minimum is not None and (value <= self.minimum if self.above else value < self.minimum)
        high = self.maximum is not None and value > self.maximum
        return "out of range" if low or high else None

    def _list_problem(self, value: list) -> str | None:
        if len(value) < self.min_items:
            return "too few items"
        for item in value:
            if self.items and _wrong_kind(self.items, item):
                return f"its item {short(item, 60)} is {_what(item)}"
            if _non_finite(item):
                return "it holds NaN or infinity"
        return None


def _what(value) -> str:
    """What `value` is, in the words of the message: 'true/false', 'a list', 'text'."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float):
        return "a decimal number" if math.isfinite(value) else "NaN or infinity"
    words = {int: "a whole number", str: "text", list: "a list", tuple: "a list", dict: "a mapping"}
    return next((w for cls, w in words.items() if isinstance(value, cls)), type(value).__name__)


def _wrong_kind(kind: str, value) -> str | None:
    """Why `value` is not of `kind` (a phrase), or None; a bool is never taken for a number (`k=true` ran k = 1)."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {"int": is_int,
          "number": is_int or isinstance(value, float),
          "bool": isinstance(value, bool),
          "text": isinstance(value, str),
          "id": isinstance(value, str) or is_int,
          "list": isinstance(value, list),
          "mapping": isinstance(value, dict),
          "any": True}[kind]
    if ok:
        return None
    if kind == "number" and isinstance(value, str) and _reads_as_number(value):
        return (f"it is text: YAML reads {value} as text; write it with a dot and a signed exponent, "
                f"e.g. 1.0e-5")
    if kind in ("text", "id") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"it is a number; quote it: \"{value}\""
    return f"it is {_what(value)}"


def _reads_as_number(text: str) -> bool:
    """1e-5 and 5e-5: numbers to a reader, text to YAML 1.1 (PyYAML wants 1.0e-5)."""
    return re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d+", text.strip()) is not None


def _non_finite(value, depth: int = 0) -> str | None:
    """'holds NaN or infinity' for a float inside `value` (a mapping of weights, a list), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number" if depth == 0 else "it holds NaN or infinity"
    if depth < 4 and isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            if _non_finite(item, depth + 1):
                return "it holds NaN or infinity"
    return None


def _int(minimum: int = 0, *, nullable: bool = False, null_means: str = "") -> ParamSpec:
    return ParamSpec("int", minimum=minimum, nullable=nullable, null_means=null_means)


def _num(minimum: float = 0.0, maximum: float | None = None, *, above: bool = False, nullable: bool = False,
         null_means: str = "") -> ParamSpec:
    return ParamSpec("number", minimum=minimum, maximum=maximum, above=above, nullable=nullable,
                     null_means=null_means)


def _text(*, nullable: bool = False, null_means: str = "") -> ParamSpec:
    return ParamSpec("text", nullable=nullable, null_means=null_means)


_BOOL = ParamSpec("bool")
_NAMES = ParamSpec("list", items="text", nullable=True, null_means="all of them")

# Every parameter of notebooks/*.ipynb, by name (one name, one meaning across the stages).
SPECS: dict[str, ParamSpec] = {
    # the corpus and the aspects, in every stage
    "corpus": _text(), "encoding": _text(), "abstract_column": _text(nullable=True, null_means="found by name"), "marks": _text(nullable=True, null_means="the run's own marks only"),
    "aspects": _text(), "aspect_names": _NAMES,
    "subset": _int(1, nullable=True, null_means="the whole corpus"), "subset_seed": _int(0), "seed": _int(0),
    "split": _text(nullable=True, null_means="the run's validation papers"),
    "val_split": _text(nullable=True, null_means="a random fifth held out"),
    # LLMs (01, 07)
    "model": _text(), "backend": _text(), "base_url": _text(), "concurrency": _int(1),
    "api_key_env": _text(nullable=True, null_means="no key"),
    "batch_size": _int(1), "k": _int(1), "temperature": _num(0.0), "top_p": _num(0.0, 1.0, above=True),
    "top_k": _int(0), "max_new_tokens": _int(1), "label_sentences": _BOOL, "n_judge_pairs": _int(0),
    "summaries": _text(),  # on, off or auto (`generate.summaries.summaries_wanted` refuses anything else)
    # training (02, 03, 04)
    "base_model": _text(), "pooling": _text(), "dim": _int(1), "max_length": _int(1), "lr": _num(0.0, above=True),
    "max_steps": _int(0), "eval_every": _int(1), "patience": _int(0), "mode": _text(), "head_lr": _num(0.0, above=True),
    "head_steps": _int(0), "head_rank": _int(0), "include_human": _BOOL, "overwrite": _BOOL,
    "weight_decay": _num(0.0), "clip_value": _num(0.0, above=True, nullable=True, null_means="no clipping"),
    "unified_baseline": _BOOL, "embed_batch_size": _int(1), "label_weight": _num(0.0), "distant_weight": _num(0.0),
    "kd_weight": _num(0.0), "head_refit": _BOOL, "show_docs": _int(0),
    "engine": _text(), "ray_address": _text(nullable=True, null_means="a local Ray instance when Ray runs"),
    # decoding (04)
    "decoder": _text(), "compare": _BOOL, "lm": _text(), "k_neighbours": _int(1), "context": _int(1),
    "rewrite": _BOOL, "source": _text(), "shared": _BOOL,
    "val_docs": _int(1, nullable=True, null_means="all of them"),
    "val_summaries": _int(1, nullable=True, null_means="all of them"),
    "eval_docs": _int(0), "perplexity_docs": _int(0), "bertscore_model": _text(), "examples_per_aspect": _int(0),
    "device": _text(nullable=True, null_means="the GPU when there is one"),
    # the map (05)
    "report_dir": _text(nullable=True), "run_dir": _text(),
    "weights": ParamSpec("mapping", nullable=True, null_means="all aspects weighed equally"),
    "perplexity": _num(0.0, above=True), "method": _text(), "reuse_map": _BOOL, "n_labels": _int(0),
    "new_abstract": _text(), "search_queries": ParamSpec("mapping", nullable=True, null_means="an example"),
    "fit_labels": _text(nullable=True, null_means="none"),
    "fit_summaries": _text(nullable=True, null_means="no fit"), "loo_docs": _int(0), "interactive": _BOOL,
    "export": _BOOL,
    # evaluation (06)
    "unseen_docs": _int(0), "baselines": ParamSpec("list", items="text"),
    "truth_encoders": ParamSpec("list", items="text", min_items=1), "overlap_k": _int(1),
    "n_permutations": _int(1), "decode": _BOOL, "probe_pairs": _int(0), "reconstruct_docs": _int(0),
    # question axes (07)
    "n_clusters": _int(1), "per_cluster": _int(1), "samples": _int(1), "question_tokens": _int(1),
    "pairs": _int(1), "n_pos": _int(1), "n_neg": _int(0), "min_rate": _num(0.0, 1.0), "max_rate": _num(0.0, 1.0),
    "hidden": _int(0), "dedupe_encoder": _text(nullable=True, null_means="exact duplicates only"),
    "paper": ParamSpec("id", nullable=True, null_means="the first held-out paper"), "top": _int(1),
    "n_regions": _int(1), "region_top": _int(1), "time_encoder": _BOOL,
}

# Names a stage does not declare (any more), and what it calls them: a parameters file written
# before the rename is told so, instead of the value being refused as a mere typo.
# {stage: {old name: (new name, why)}}.
_K_IS_STAGE_01S = "one name, one meaning: k is stage 01's summaries per document and aspect"
RENAMED: dict[str, dict[str, tuple[str, str]]] = {
    "06_evaluate": {"k": ("overlap_k", _K_IS_STAGE_01S),  # the top-k overlap's k (Table 7)
                    "top_k": ("overlap_k", "top_k is stage 01's sampling setting")},
    "07_questions": {"k": ("n_clusters", _K_IS_STAGE_01S)},  # clusters per aspect, one question prompt each
}


def spec_for(name: str, default: str | None = None) -> ParamSpec:
    """The spec of `name`; for a name `SPECS` does not know (a notebook of one's own), the kind of its
    default in the notebook's parameters cell (`default`: papermill's text of it), null allowed."""
    if name in SPECS:
        return SPECS[name]
    try:
        value = ast.literal_eval(default) if default is not None else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    kinds = [(bool, "bool"), (int, "int"), (float, "number"), (str, "text"), (list, "list"), (dict, "mapping")]
    kind = next((word for cls, word in kinds if isinstance(value, cls)), "any")
    return ParamSpec(kind, nullable=True)


def value_problem(name: str, value, default: str | None = None) -> str | None:
    """None when `value` is what `name` accepts; else a sentence that names what it must be."""
    spec = spec_for(name, default)
    problem = spec.problem(value)
    if problem is None:
        return None
    return f"must be {spec.describe()}; got {short(value, 60)} ({problem})"
