"""The run's corpus, loaded and checked before the first stage runs and before the run directory exists.

Every stage loads the corpus its parameters name (`corpus`, `encoding`, `abstract_column`) with `load_corpus`
and drops the rows in which `Corpus.validate` finds errors (`drop_invalid`). `check_corpus` does the same once,
up front, and refuses what would make a stage fail, naming the file and its lines:

- a file that cannot be read at all: none there, a folder, a pipe, no permission, the wrong encoding, a
  header and no rows (`load_corpus`'s `CorpusError`);
- an id on two rows with different texts: which paper the id stands for is unclear, and stage 03 used to die
  of it far from the cause; `-p duplicate_ids=first` keeps the first row of each id, as the stages then do
  (a row that repeats an earlier one exactly, the same id, title and abstract, is dropped by the loader);
- no usable document once the rows with errors are dropped;
- too few usable documents for a stage asked (`MIN_PAPERS`): stage 03 validates the unified model on at
  least two held-out papers and trains on the rest, stage 05 draws a t-SNE map. What a stage cannot
  know before it runs (how many papers the LLM answered usably for) is left to the stage.

What the loader noted about the file (exact duplicates dropped, ids derived from the text) is printed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from .runconfig import RunConfigError

#: The parameters with which a stage loads its corpus, `load_corpus`'s arguments of the same names.
LOAD_PARAMETERS = ("corpus", "encoding", "abstract_column")
#: The run parameter that says what a repeated id with different texts gets (`runconfig.RUN_PARAMETERS`).
DUPLICATE_IDS = "duplicate_ids"
_NAMED_IDS = 5  # repeated ids named in the message; the rest counted

#: The stages that cannot run on a corpus of a few papers, and the fewest usable papers each needs.
#: 03_distill: its split over the papers with a target holds out at least two to validate on (validation ranks
#: each held-out paper among the others) and keeps one to train on; a random split (`split_documents`) holds out
#: two only from four papers on. 05_visualize: a t-SNE map of the corpus (`tsne_math.MIN_MAP_POINTS`).
#: Stage 01 runs on one paper, and so does stage 02 (on a CPU an aspect with too few views keeps the frozen
#: encoder as its teacher); stages 04 and 06 read what stage 03 made.
MIN_PAPERS = {"03_distill": 4, "05_visualize": 4}
_MIN_VALIDATION = 2  # stage 03's held-out papers (`head_training._supervised_split`)


def corpus_settings(config: dict, declared: dict[str, dict], resolved: list[str]) -> list[dict]:
    """The distinct `LOAD_PARAMETERS` that the run's stages load their corpus with (a stage's own value, else the
    shared one, else its notebook's default), in stage order; a stage that loads no corpus adds none."""
    found: list[dict] = []
    for stage in resolved:
        settings = _load_settings(config, declared, stage)
        if settings is not None and settings not in found:
            found.append(settings)
    return found


def _load_settings(config: dict, declared: dict[str, dict], stage: str) -> dict | None:
    """The `LOAD_PARAMETERS` that `stage` loads its corpus with, or None for a stage that loads none."""
    names = declared.get(stage, {})
    if "corpus" not in names:
        return None
    return {name: _value(config, declared, stage, name) for name in LOAD_PARAMETERS if name in names}


def _value(config: dict, declared: dict[str, dict], stage: str, name: str):
    """The value `stage` runs with for parameter `name`: its own, else the shared one, else its notebook's
    default (None where it declares none)."""
    given = {**config["parameters"], **config["stage_parameters"].get(stage, {})}
    return given[name] if name in given else _default(declared.get(stage, {}).get(name))


def _default(text: str | None):
    """A notebook's default as papermill gives it (the text written in its parameters cell), as a value."""
    try:
        return ast.literal_eval(text) if text is not None else None
    except (ValueError, SyntaxError):
        return None


def check_corpus(config: dict, declared: dict[str, dict], resolved: list[str], log: Callable = print) -> None:
    """Load and check the corpus of each of `corpus_settings`; `RunConfigError` for what would make a stage
    fail (see the module's doc), the loader's notes through `log`."""
    from ..data.corpus import load_corpus
    from ..data.validation import CorpusError

    keep_first = config["parameters"].get(DUPLICATE_IDS, "refuse") == "first"
    # repr of the settings (a dict, unhashable) -> (the corpus as loaded, drop_invalid's (kept, dropped))
    usable: dict[str, tuple] = {}
    for settings in corpus_settings(config, declared, resolved):
        source = settings.get("corpus")
        if not isinstance(source, str) or not source:
            continue  # no corpus (stage 02 then trains on the LLM answers alone): nothing to load
        options = {name: settings[name] for name in ("encoding", "abstract_column") if settings.get(name)}
        try:
            corpus = load_corpus(source, **options)
        except CorpusError as exc:
            raise RunConfigError(f"parameter corpus: {exc}") from None
        for note in corpus.notes:
            log(f"[workbench] corpus: note: {note}")
        report = corpus.validate()
        if not keep_first:
            _refuse_repeated_ids(corpus)
        if len(report.error_rows) == len(corpus):  # what drop_invalid would leave: nothing
            raise RunConfigError(_nothing_usable(corpus, report))
        usable[repr(settings)] = (corpus, corpus.drop_invalid(report))
    for stage in resolved:
        settings = _load_settings(config, declared, stage)
        if stage in MIN_PAPERS and settings is not None and repr(settings) in usable:
            _refuse_too_few(stage, *usable[repr(settings)], lambda name: _value(config, declared, stage, name),
                            lambda name: _value(config, declared, "01_generate", name))


def _refuse_repeated_ids(corpus) -> None:
    """Refuse a corpus in which an id stands for two different papers (exact repeats were dropped by the
    loader), naming each repeated id with its lines."""
    ids = corpus.docs["doc_id"].astype(str)
    repeated = ids[ids.duplicated(keep=False) & (ids.str.strip() != "")]
    if repeated.empty:
        return
    rows = repeated.groupby(repeated, sort=False).groups  # {id: its positions, in file order}
    shown = [f"{doc_id!r} on {_places(corpus, list(positions))}"
             for doc_id, positions in list(rows.items())[:_NAMED_IDS]]
    more = f", and {len(rows) - _NAMED_IDS} more" if len(rows) > _NAMED_IDS else ""
    n = len(rows)
    raise RunConfigError(
        f"parameter corpus: {_label(corpus)}: {n} id{'s are' if n > 1 else ' is'} repeated with different texts, "
        f"so which paper {'each' if n > 1 else 'it'} stands for is unclear: {'; '.join(shown)}{more}. Correct the "
        f"ids in the file (or remove the wrong rows), or keep the first row of each id with -p {DUPLICATE_IDS}=first "
        f"(workbench validate {corpus.source} lists them).")


def _refuse_too_few(stage: str, corpus, kept: tuple, value: Callable, first: Callable) -> None:
    """Refuse a corpus with fewer usable papers than `stage` needs (`MIN_PAPERS`), with the run's parameters:
    `value(name)` is the stage's own, `first(name)` stage 01's. `kept`: `drop_invalid`'s (corpus, dropped)."""
    clean, dropped = kept
    docs = clean.docs
    have = f"{_label(corpus)} has {_papers(len(clean))}{_dropped(corpus, dropped)}"
    if stage == "05_visualize":
        if len(clean) < MIN_PAPERS[stage]:
            raise RunConfigError(
                f"parameter corpus: {have}, and stage 05_visualize needs at least {MIN_PAPERS[stage]}: it draws a "
                f"t-SNE map of the papers, and a map of fewer has no neighbours to lay them out by. {_advice(corpus)}")
        return
    subset = value("subset")
    n = min(len(clean), subset) if subset else len(clean)  # the papers stage 03 reads (its `subset`)
    val_split = value("val_split")
    if val_split and "split" in docs and docs["split"].notna().any():
        # The corpus's split column decides: its val_split papers validate, all others train.
        n_val = min(int((docs["split"] == val_split).sum()), n)
        n_train = min(len(docs) - int((docs["split"] == val_split).sum()), n)
        if n_val >= _MIN_VALIDATION and n_train >= 1:
            return
        raise RunConfigError(
            f"parameter corpus: {have}, of which {_papers(n_val)} in its {val_split!r} split and "
            f"{_papers(n_train)} in the others; stage 03_distill validates the unified model on at least "
            f"{_MIN_VALIDATION} papers of the {val_split!r} split (it ranks each among the others) and trains on at "
            f"least 1 of the others. Mark more papers of the file's split column as {val_split!r} (or as others), "
            f"or set -p val_split=null to hold out a random fifth instead (from {MIN_PAPERS[stage]} papers on).")
    why = (f"stage 03_distill needs at least {MIN_PAPERS[stage]}: it validates the unified model on at least "
           f"{_MIN_VALIDATION} papers held out at random (it ranks each among the others) and trains on the rest")
    if n < MIN_PAPERS[stage]:
        reads = f" (subset={subset} of them)" if n < len(clean) else ""
        raise RunConfigError(f"parameter corpus: {have}{reads}, and {why}. {_advice(corpus, subset=n < len(clean))}")
    human = any(str(c).startswith(("summary_", "highlights_")) for c in docs.columns) and value("include_human")
    summarised = first("subset")
    if not human and summarised and summarised < MIN_PAPERS[stage]:
        # Without human summaries a paper has a target only when stage 01 summarised it.
        raise RunConfigError(
            f"parameter corpus: {have}, of which stage 01 summarises subset={summarised}, and {why}, each one "
            f"summarised. Set -p 01_generate.subset={MIN_PAPERS[stage]} or more (or null for every paper).")


def _papers(n: int) -> str:
    return f"{n} usable paper{'' if n == 1 else 's'}" if n else "no usable paper"


def _dropped(corpus, dropped) -> str:
    """What every stage drops of the file, as a clause: " (2 of its 3 rows dropped, ...: 2 duplicate_id)"."""
    rows = sorted(set(dropped.issues["row"])) if len(dropped.issues) else []
    if not rows:
        return ""
    counts = dropped.issues.drop_duplicates("row")["problem"].value_counts()
    kinds = ", ".join(f"{n} {problem}" for problem, n in counts.items())
    return f" ({len(rows)} of its {len(corpus)} rows dropped, as every stage drops them: {kinds})"


def _advice(corpus, subset: bool = False) -> str:
    more = "Raise stage 03's subset, or add papers" if subset else "Add papers"
    return (f"{more} to the corpus (workbench validate {corpus.source} lists the rows every stage drops), or run "
            f"only the stages that need fewer: --stages 01,02.")


def _nothing_usable(corpus, report) -> str:
    """The message for a corpus of which every row has an error: how many of each, and where."""
    counts = report.errors.drop_duplicates("row")["problem"].value_counts()
    kinds = ", ".join(f"{n} {problem}" for problem, n in counts.items())
    rows = report.error_rows
    return (f"parameter corpus: {_label(corpus)}: no usable document: every one of its {len(corpus)} rows has an "
            f"error ({kinds}; {_places(corpus, rows[:10])}{' ...' if len(rows) > 10 else ''}), and every stage "
            f"drops those rows, which leaves nothing to run on; workbench validate {corpus.source} lists them")


def _label(corpus) -> str:
    return corpus.source or corpus.name


_LINES = re.compile(r"lines? (\S+)")


def _places(corpus, rows: list[int]) -> str:
    """Where `rows` are in the file, joined: "lines 4 and 9", "lines 3-4, 7 and 9", "rows 2 and 5"."""
    places = [corpus.place(row) for row in rows]
    lines = [_LINES.fullmatch(place) for place in places]
    if all(lines):
        numbers = [m.group(1) for m in lines]
        return ("lines " if len(numbers) > 1 or "-" in numbers[0] else "line ") + _and(numbers)
    if all(place.startswith("row ") for place in places):
        return ("rows " if len(places) > 1 else "row ") + _and([place[4:] for place in places])
    return _and(places)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
