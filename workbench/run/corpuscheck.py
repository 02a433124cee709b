"""The run's corpus, loaded and checked before the first stage runs and before the run directory exists.

Every stage loads the corpus its parameters name (`corpus`, `encoding`, `abstract_column`) with `load_corpus`
and drops the rows in which `Corpus.validate` finds errors (`drop_invalid`). `check_corpus` does the same once,
up front, and refuses what would make a stage fail, naming the file and its lines:

- a file that cannot be read at all: none there, a folder, a pipe, no permission, the wrong encoding, a
  header and no rows (`load_corpus`'s `CorpusError`);
- an id on two rows with different texts: which paper the id stands for is unclear, and stage 03 used to die
  of it far from the cause; `-p duplicate_ids=first` keeps the first row of each id, as the stages then do
  (a row that repeats an earlier one exactly, the same id, title and abstract, is dropped by the loader);
- no usable document once the rows with errors are dropped.

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


def corpus_settings(config: dict, declared: dict[str, dict], resolved: list[str]) -> list[dict]:
    """The distinct `LOAD_PARAMETERS` that the run's stages load their corpus with (a stage's own value, else the
    shared one, else its notebook's default), in stage order; a stage that loads no corpus adds none."""
    found: list[dict] = []
    for stage in resolved:
        names = declared[stage]
        if "corpus" not in names:
            continue
        given = {**config["parameters"], **config["stage_parameters"].get(stage, {})}
        settings = {name: given[name] if name in given else _default(names.get(name))
                    for name in LOAD_PARAMETERS if name in names}
        if settings not in found:
            found.append(settings)
    return found


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
