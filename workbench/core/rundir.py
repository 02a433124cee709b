"""The run directory: one object that names every artifact a stage writes and the next one reads.

    params.yaml, run.json                 the parameters of the run, what each stage did (runner.py)
    summaries.jsonl, judgements.jsonl     01 generate: the views and the LLM's judgements
    aspect_models/split.json              02 train: {"val_split", "train": [doc ids], "validation": [doc ids]}
    aspect_models/<aspect>/               02 train: the model of each aspect
    aspect_models/untrained.json          02 train: the aspects left without a model, and why
    grounding.json                        02 train: which LLM answers were kept as views, and why not
    features/<backbone>/                  02-03 frozen mode: the backbone's cached sentence vectors
    targets.json, targets.safetensors     03 distill: the aspect models' embeddings of the training views
    unified_model/                        03 distill: one model for every aspect
    unified_model/guard.json              03 distill: each head checked against its encoder
    embeddings/                           the unified model's embeddings of a corpus, cached
    embeddings/<key>.parts/               the finished parts of an entry being computed (either engine)
    .engine-input/<tag>/                  the Ray engine's Parquet blocks of the texts to encode (temporary)
    decoders/                             04 decode: the decoders, metrics.json (their faithfulness)
                                          and confidence.json (the confidence calibration)
    maps/<name>/                          05 visualize: saved maps
    maps/selection.json                   05 visualize: the pane's selection and marked pairs
    marks.jsonl                           the user's answers about sentences (which aspect each states)
    metrics.json                          06 evaluate: every number of the run
    questions/<aspect>/                   07 questions: the question axes of an aspect
    .workbench-run.json                   the marker: this folder is a workbench run, and which of its
                                          caches `workbench runs --clean` may delete (`RunDir.mark`)
    .workbench-caches.jsonl               the ledger: each cache file the run wrote, with its size
                                          (`RunDir.record_cache`)
    .unfinished-command.json              the running or interrupted `workbench run`: its fingerprint and
                                          the stages it finished (run/resume.py)

A folder is ours only if it says so: `workbench runs --clean` deletes nothing in a folder without
the marker, and in the caches the marker lists only the files the ledger says the run wrote, at
the size it wrote them. The runner writes the marker with a run's first artifact; `workbench runs
--mark RUN` writes it for a run made before the marker existed.

Every stage, notebook, benchmark and test takes its paths from here, so the layout is stated
once. `RunDir` is a path (`os.PathLike`, and it answers what a `Path` answers): functions that
take a run directory accept either.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from functools import cache
from pathlib import Path, PurePosixPath

from .. import __version__
from .files import LOCK_NAME, write_json

# The folder and file names, for code that needs the name rather than the path.
MODELS_DIR = "aspect_models"
SPLIT_NAME = "split.json"
UNTRAINED_NAME = "untrained.json"
UNIFIED_DIR = "unified_model"
EMBEDDINGS_DIR = "embeddings"
PARTS_SUFFIX = ".parts"  # embeddings/<key>.parts/part-NNNNN.safetensors and .json (embed/engine.py)
ENGINE_INPUT = ".engine-input"
FEATURES_DIR = "features"
DECODERS = "decoders"
CONFIDENCE_NAME = "confidence.json"
MAPS = "maps"
QUESTIONS_DIR = "questions"
SUMMARIES = "summaries.jsonl"
JUDGEMENTS = "judgements.jsonl"
TARGETS_INDEX = "targets.json"
TARGETS_NAME = "targets.safetensors"
METRICS_FILE = "metrics.json"
GROUNDING_NAME = "grounding.json"
GUARD_NAME = "guard.json"
PARAMS_FILE = "params.yaml"
RUN_FILE = "run.json"
MARKS_FILE = "marks.jsonl"
UNFINISHED_FILE = ".unfinished-command.json"
# Folders that can be deleted and are rebuilt when needed (`workbench runs --clean`).
CACHES = (FEATURES_DIR, EMBEDDINGS_DIR)
MARKER_NAME = ".workbench-run.json"
# The ledger of cache files written, beside the marker: one JSON line per file, appended (`record_cache`).
CACHE_LEDGER = ".workbench-caches.jsonl"
# The names the cache writers give their files, and their temporaries (`core/files.py`): stage 03's
# `embed/embeddings.py` writes embeddings/<key>.safetensors and .json, `embed/features.py`
# features/<backbone key>/shard-NNNNN.safetensors and .json under its lock. `workbench runs --mark`
# adopts the files of these names that a run made before the ledger left (`fullmatch` a path in the run).
_KEY16, _KEY12, _SHARD = "[0-9a-f]{16}", "[0-9a-f]{12}", r"shard-[0-9]{5,}\.(safetensors|json)"
CACHE_FILE_NAMES = re.compile("|".join([
    rf"{EMBEDDINGS_DIR}/{_KEY16}\.(safetensors|json)",
    rf"{EMBEDDINGS_DIR}/({_KEY16}\.safetensors\.tmp|\.{_KEY16}\.json\.[0-9]+\.tmp)",
    rf"{FEATURES_DIR}/{_KEY12}/({_SHARD}|\.{_SHARD}\.[0-9]+\.tmp|{re.escape(LOCK_NAME)})",
    rf"{EMBEDDINGS_DIR}/{_KEY16}{re.escape(PARTS_SUFFIX)}/\.?part-[0-9]{{5,}}\.(safetensors|json)(\.[0-9]+\.tmp)?",
]))
# What the marker's "kind" says: a stray JSON file of that name is not a marker.
MARKER_KIND = "workbench run directory"
# Files only workbench writes. A folder holding one is a run (one made before the marker, maybe);
# `maps/`, `embeddings/` or a `metrics.json` alone are not, since people make folders of those names.
RUN_EVIDENCE = (PARAMS_FILE, RUN_FILE, SUMMARIES, f"{MODELS_DIR}/{SPLIT_NAME}",
                f"{UNIFIED_DIR}/workbench_config.json")
# The workbench package: its checkout (the git work tree above it) is never a run directory.
PACKAGE = Path(__file__).resolve().parents[1]


class MarkerError(ValueError):
    """A run's marker file that cannot be read or lists what is not a cache."""

# What each stage leaves behind: the stage counts as done when its artifact exists.
STAGE_ARTIFACTS = {
    "01_generate": SUMMARIES,
    "02_train": f"{MODELS_DIR}/{SPLIT_NAME}",
    "03_distill": UNIFIED_DIR,
    "04_decode": DECODERS,
    "05_visualize": MAPS,
    "06_evaluate": METRICS_FILE,
    "07_questions": QUESTIONS_DIR,
}


class RunDir(os.PathLike):
    """A run directory and the path of each of its artifacts.

    >>> run = RunDir("runs/demo")
    >>> run.unified_model, run.aspect_model("method"), run.split()
    """

    def __init__(self, path):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, other) -> Path:
        return self.path / other

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __getattr__(self, name):
        # Everything else a path offers (exists, mkdir, glob, name, ...) is the folder's.
        if name.startswith("__") or name == "path":
            raise AttributeError(name)
        return getattr(self.path, name)

    def __eq__(self, other) -> bool:
        return isinstance(other, (RunDir, Path, str)) and Path(self) == Path(other)

    def __hash__(self) -> int:
        return hash(self.path)

    # 01 generate
    @property
    def summaries(self) -> Path:
        return self.path / SUMMARIES

    @property
    def judgements(self) -> Path:
        return self.path / JUDGEMENTS

    # 02 train
    @property
    def aspect_models(self) -> Path:
        return self.path / MODELS_DIR

    @property
    def split_file(self) -> Path:
        return self.path / MODELS_DIR / SPLIT_NAME

    @property
    def untrained(self) -> Path:
        """{"aspects": {aspect: why stage 02 trained no model of it}}: nothing to learn from (no usable view)."""
        return self.path / MODELS_DIR / UNTRAINED_NAME

    @property
    def grounding(self) -> Path:
        return self.path / GROUNDING_NAME

    def aspect_model(self, aspect: str, must_exist: bool = False) -> Path:
        """Folder of the stage-02 model of an aspect."""
        folder = self.aspect_models / aspect
        if must_exist and not folder.is_dir():
            why = self.untrained_reasons().get(aspect)
            if why is None:
                raise FileNotFoundError(f"{folder} is missing: run stage 02 (train) for aspect {aspect!r} first")
            raise FileNotFoundError(f"{folder} is missing: stage 02 trained no model of {aspect!r}, since it had "
                                    f"nothing to learn from ({why}); leave it out with aspect_names")
        return folder

    def untrained_reasons(self) -> dict[str, str]:
        """{aspect: why} of `untrained` ({} where stage 02 left every aspect a model, or the file cannot be read)."""
        try:
            found = json.loads(self.untrained.read_text())["aspects"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        return {str(a): str(why) for a, why in found.items()} if isinstance(found, dict) else {}

    def decoding_encoder(self, aspect: str) -> Path:
        """Folder of the model that embeds text into the space `aspect` is decoded in (a retrieval memory, a
        round trip): the aspect's stage-02 model, or, for an aspect stage 02 trained none of (`untrained`), the
        unified model, whose head for it (the aspect-file floor) made every embedding decoded in that space.

        Raises FileNotFoundError, saying which stage to run, where that model is missing."""
        if (self.aspect_models / aspect).is_dir() or aspect not in self.untrained_reasons():
            return self.aspect_model(aspect, must_exist=True)
        if not self.unified_model.is_dir():
            raise FileNotFoundError(f"{self.unified_model} is missing: run stage 03 (distill) first; it reads "
                                    f"{aspect!r}, which stage 02 trained no model of, with the aspect file's head")
        return self.unified_model

    def split(self) -> tuple[list[str], list[str]]:
        """The run's (train ids, validation ids), as stage 02 split the documents."""
        if not self.split_file.is_file():
            raise FileNotFoundError(f"{self.split_file} is missing: run stage 02 (train) for this run first")
        split = json.loads(self.split_file.read_text())
        return [str(d) for d in split["train"]], [str(d) for d in split["validation"]]

    def write_split(self, train_ids, val_ids, val_split: str = "validation") -> Path:
        """Record stage 02's split of the documents (read back by `split`)."""
        write_json(self.split_file, {"val_split": val_split, "train": [str(d) for d in train_ids],
                                     "validation": [str(d) for d in val_ids]})
        return self.split_file

    def features(self, backbone_key: str) -> Path:
        """Cached sentence vectors of a frozen backbone (frozen mode)."""
        return self.path / FEATURES_DIR / backbone_key

    # 03 distill
    @property
    def unified_model(self) -> Path:
        return self.path / UNIFIED_DIR

    @property
    def guard(self) -> Path:
        return self.path / UNIFIED_DIR / GUARD_NAME

    @property
    def targets(self) -> Path:
        return self.path / TARGETS_NAME

    @property
    def targets_index(self) -> Path:
        return self.path / TARGETS_INDEX

    @property
    def embeddings(self) -> Path:
        return self.path / EMBEDDINGS_DIR

    def embedding_parts(self, key: str) -> Path:
        """The finished parts of the embeddings entry `key` while an engine computes it (resume by part)."""
        return self.path / EMBEDDINGS_DIR / f"{key}{PARTS_SUFFIX}"

    def engine_input(self, tag: str) -> Path:
        """The Parquet blocks of texts the Ray engine reads (removed when its pass ends)."""
        return self.path / ENGINE_INPUT / tag

    # 04 decode
    @property
    def decoders(self) -> Path:
        return self.path / DECODERS

    @property
    def decoder_metrics(self) -> Path:
        """Stage 04's faithfulness numbers, {"aspect/kind": {...}}."""
        return self.path / DECODERS / METRICS_FILE

    @property
    def confidence(self) -> Path:
        return self.path / DECODERS / CONFIDENCE_NAME

    # 05-07
    def map(self, name: str = "current") -> Path:
        return self.path / MAPS / name

    @property
    def selection(self) -> Path:
        """The papers selected on the map and the pairs marked similar or not (`Explorer.selection`)."""
        return self.path / MAPS / "selection.json"

    @property
    def marks(self) -> Path:
        """The sentences a person (or a highlights column, or an LLM) said which aspects they state."""
        return self.path / MARKS_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    def questions(self, aspect: str | None = None) -> Path:
        return self.path / QUESTIONS_DIR if aspect is None else self.path / QUESTIONS_DIR / aspect

    @property
    def params(self) -> Path:
        return self.path / PARAMS_FILE

    @property
    def run_record(self) -> Path:
        return self.path / RUN_FILE

    @property
    def unfinished(self) -> Path:
        """The command running here, or interrupted: the stages it finished (run/resume.py)."""
        return self.path / UNFINISHED_FILE

    def stages_done(self) -> dict[str, bool]:
        """{stage: whether its artifact is in the run directory}, in stage order."""
        return {stage: (self.path / artifact).exists() for stage, artifact in STAGE_ARTIFACTS.items()}

    def is_run(self) -> bool:
        """Whether this folder holds a file only workbench writes (RUN_EVIDENCE), marked or not.

        Says what a folder looks like, not that it is ours: only the marker (`is_marked`) lets
        `workbench runs --clean` delete anything.
        """
        return self.path.is_dir() and any((self.path / name).is_file() for name in RUN_EVIDENCE)

    # the marker: this folder is ours
    @property
    def marker(self) -> Path:
        return self.path / MARKER_NAME

    def is_marked(self) -> bool:
        """Whether the folder holds a marker file (`read_marker` checks what it says)."""
        return self.marker.is_file() and not self.marker.is_symlink()

    def read_marker(self) -> dict:
        """The marker's content; MarkerError when it is not a marker workbench wrote."""
        try:
            marker = json.loads(self.marker.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MarkerError(f"{self.marker} cannot be read as a run marker ({exc})") from None
        if not isinstance(marker, dict) or marker.get("kind") != MARKER_KIND or \
                not isinstance(marker.get("caches"), list):
            raise MarkerError(f"{self.marker} is not a run marker written by workbench "
                              f"(no \"kind\": {MARKER_KIND!r} with a \"caches\" list)")
        return marker

    def marked_caches(self) -> list[str]:
        """The cache folders the marker lets `--clean` delete; MarkerError on any other name.

        Only the names in CACHES are accepted, so an edited marker can never point `--clean`
        at a result (`aspect_models`) or outside the folder (`../x`).
        """
        listed = self.read_marker()["caches"]
        unknown = [name for name in listed if name not in CACHES]
        if unknown:
            raise MarkerError(f"{self.marker} lists {unknown}, which are not caches of a run "
                              f"(those are {list(CACHES)})")
        return [name for name in CACHES if name in listed]

    def mark(self, by: str = "workbench run", claim_existing: bool | None = None) -> Path:
        """Write the marker (once; a marker already there is kept as it is) and return its path.

        The marker lists the caches `--clean` may delete. A cache folder already present when a
        folder is first marked is listed only when the folder is a run (`is_run`) or the caller
        says so (claim_existing=True, `workbench runs --mark`): the `embeddings/` of a folder of
        someone's own that a run was pointed at is theirs, not a cache of ours.
        """
        if self.is_marked():
            return self.marker
        claim = self.is_run() if claim_existing is None else claim_existing
        caches = [name for name in CACHES if claim or not os.path.lexists(self.path / name)]
        return write_json(self.marker, {"kind": MARKER_KIND, "workbench": __version__, "by": by,
                                        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + " UTC",
                                        "caches": caches})

    # the ledger: which cache files the run wrote
    @property
    def cache_ledger(self) -> Path:
        return self.path / CACHE_LEDGER

    def record_cache(self, path) -> None:
        """Note in the ledger that the run wrote the cache file `path`, with its size; call it once the file is in place.

        One JSON line, appended with a single write to a file opened O_APPEND: lines of several
        processes (Accelerate ranks, two notebooks on one run) never interleave, and a writer killed
        half-way leaves at most a torn last line, which `cache_records` passes over. A file written
        but not recorded (a kill between the two) is only ever kept by `--clean`, never deleted
        wrongly. A lock file is recorded without a size: each writer rewrites its note.
        """
        path = Path(path)
        size = None if path.name == LOCK_NAME else os.lstat(path).st_size
        line = json.dumps({"path": Path(os.path.relpath(path, self.path)).as_posix(), "bytes": size},
                          ensure_ascii=False) + "\n"
        handle = os.open(self.cache_ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(handle, line.encode("utf-8"))
        finally:
            os.close(handle)

    def cache_records(self) -> dict[str, set]:
        """{path in the run: the sizes recorded for it} from the ledger ({None} for a lock file); {} without one.

        A line that is not JSON is a torn last write and is passed over. MarkerError for a line that
        names anything but a file inside one of CACHES (an absolute path, `..`, a result) or a size
        that is not a count: the ledger was edited, and nothing it says is trusted.
        """
        try:
            lines = self.cache_ledger.read_bytes().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise MarkerError(f"{self.cache_ledger} cannot be read ({exc.strerror or exc})") from None
        records: dict[str, set] = {}
        for number, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            path = entry.get("path") if isinstance(entry, dict) else None
            size = entry.get("bytes") if isinstance(entry, dict) else None
            if not _a_cache_file(path) or not (
                    (isinstance(size, int) and not isinstance(size, bool) and size >= 0)
                    or (size is None and PurePosixPath(path).name == LOCK_NAME)):
                raise MarkerError(f"{self.cache_ledger}, line {number}, names {line.strip()[:200]}, which is not a "
                                  f"file inside the run's caches ({', '.join(CACHES)}) with its size: "
                                  f"not a ledger workbench wrote")
            records.setdefault(path, set()).add(size)
        return records


def _a_cache_file(path) -> bool:
    """Whether `path` (from the ledger) is a plain relative path to a file inside one of CACHES."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        return False
    parts = PurePosixPath(path).parts
    return (len(parts) >= 2 and parts[0] in CACHES and os.path.normpath(path) == path
            and not any(part in (".", "..") for part in parts))


@cache
def checkout_root() -> Path | None:
    """The git work tree the workbench package lies in (a checkout), or None for an installed package."""
    return next((folder for folder in PACKAGE.parents if (folder / ".git").exists()), None)


def tracked_files(folder, paths) -> list[str]:
    """The files git tracks at or under `paths` (relative to `folder`), as paths relative to `folder`.

    [] where `folder` is in no git work tree, git is not installed, or it does not answer in 20 s:
    the check is for a folder under git, and costs nothing elsewhere.
    """
    try:
        done = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--", *map(str, paths)],
                              capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode:
        return []  # not a repository (or one git refuses to read): nothing is tracked
    return [name for name in os.fsdecode(done.stdout).split("\0") if name]


def why_not_a_run_dir(path) -> str | None:
    """Why `path` may never be a run directory, in words for a message, or None when it may be.

    Refused: a folder holding `.git` (a repository's root: the checkout or a project of yours),
    the workbench checkout's root and the folders above it, and a folder in which git tracks files
    in the checkout (docs/, data/, tests/data/...). Folders git ignores there (runs/, reports/NAME/)
    are allowed.
    """
    path = Path(path).expanduser().resolve()
    checkout = checkout_root()
    if path == checkout:
        return f"is the root of the workbench's checkout ({checkout})"
    if checkout is not None and path in checkout.parents:
        return f"holds the workbench's checkout ({checkout})"
    if (path / ".git").exists():
        return "holds .git: it is the root of a git repository, and a run would mix its files with yours"
    tracked = tracked_files(checkout, [path.relative_to(checkout)]) \
        if checkout is not None and checkout in path.parents else []
    if tracked:
        return f"is tracked by git in the workbench's checkout ({tracked[0]} is committed there)"
    return None


def read_split(run_dir) -> tuple[list[str], list[str]]:
    """The run's (train ids, validation ids), as stage 02 split the documents."""
    return RunDir(run_dir).split()


def aspect_model_dir(run_dir, aspect: str) -> Path:
    """Folder of the stage-02 model of an aspect (used to re-embed decoded text); it must exist."""
    return RunDir(run_dir).aspect_model(aspect, must_exist=True)


def decoding_encoder_dir(run_dir, aspect: str) -> Path:
    """Folder of the model that re-embeds text decoded in `aspect`'s space (`RunDir.decoding_encoder`): its
    stage-02 model, or the unified model where stage 02 left the aspect untrained; it must exist."""
    return RunDir(run_dir).decoding_encoder(aspect)
