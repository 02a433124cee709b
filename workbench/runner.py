"""Run the numbered notebooks through papermill into a run directory and export HTML reports.

A parameters file (YAML) says where the run goes and what each notebook gets:

    run_dir: runs/aclsum-demo        # artifacts (summaries.jsonl, models, ...) and executed notebooks
    report_dir: reports/aclsum-demo  # HTML reports (default: reports/<run name>, from here)
    stages: [01_generate]            # which notebooks, in order (default: all in notebooks/)
    parameters:                      # passed to every notebook that declares them
      corpus: data/my_papers.csv
      encoding: latin-1              # how the corpus file is read; abstract_column: names its column
    stage_parameters:                # per stage, on top of `parameters`
      01_generate: {subset: 8}
      02_train: {max_steps: 30}

Each notebook receives `run_dir` too. A shared parameter goes to the notebooks that declare it
in their `parameters` cell, so one file can drive all stages; a name that no notebook declares
(a typo) is an error, as is a stage parameter that its stage does not declare. On the command
line, `-p k=v` sets a shared parameter and `-p 02_train.k=v` one stage's.

Relative paths are taken from the directory you run `workbench` in, on the command line and in
the parameters file alike (as `run_dir` always was), never from the file's own folder. The
notebooks run inside the run directory, so every parameter value that names an existing file or
folder (a value with a `/` or a suffix such as `.csv`; bare names such as `minilm` stay names)
is made absolute before they see it, and `params.yaml` in the run records the absolute paths.
A `corpus` file or an `aspects` YAML that does not exist is an error before anything runs.

Keys belong in the environment: parameters are written to `params.yaml`, the executed notebooks
and their HTML reports. So a parameter named like a secret (`api_key`, `token`, ...), a value
that looks like a key (`sk-...`, `hf_...`), an `*_env` value that is not a variable name, and
a URL with `user:password@` are refused, and the message never repeats the key.

While a stage runs, one line shows its cells done / total, the elapsed time and the running
cell's own progress bar (or its last line of output): redrawn in place on a terminal, a plain
line every 30 s in a log or a pipe. At the end a summary lists what each stage wrote into the
run directory, its report and its time.
"""

from __future__ import annotations

import difflib
import html
import json
import os
import re
import shutil
import sys
import threading
import time
import warnings
from functools import cache
from pathlib import Path

import yaml

from .files import RunLock, replace_from, write_json, write_text
from .progress import NOTICE

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PACKAGE = Path(__file__).resolve().parent
_SECRET = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)
# A key by its value (see `check_secret`): a known prefix, or 32+ hex characters standing alone.
_KEY = re.compile(r"\b(?P<prefixed>(?:(?:sk|glpat|pplx|pypi|xox[abprs])-"
                  r"|(?:sk|hf|ghp|gho|ghs|ghu|ghr|github_pat|gsk|npm|r8)_)[\w-]{16,}|(?:AKIA|ASIA|AIza)[\w-]{16,})"
                  r"|(?<![0-9A-Za-z])(?P<hex>[0-9a-fA-F]{32,})(?![0-9A-Za-z])")
# Where 40 hex characters are a git/hub revision (a SHA-1), not a key: the parameter's name, or just before it.
_REVISION_NAME = re.compile(r"revision|commit|(?:^|[._])(?:rev|sha1?|ref|git_?ref)(?:$|_)", re.IGNORECASE)
_REVISION_BEFORE = re.compile(r"(?:@|/(?:commits?|tree|blob|resolve|raw)/|\b(?:revision|rev|commit|sha1?|ref)[=:]\s*)$",
                              re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z0-9+/_=-]{24,}")  # a base64 / URL-safe run for `_looks_random` to judge
# A credential in a URL's query or fragment, by its name there (?key=, &api_key=, access_token=, sig=, ...),
# matched against the name lower-cased with its words joined by "_" (X-Amz-Signature: x_amz_signature).
_QUERY = re.compile(r"[?&#]([A-Za-z][\w.\-\[\]]*)=([^&#\s]+)")
_QUERY_SECRET = re.compile(r"(?:^|_)(?:\w*(?:key|token|secret|passw(?:or)?d)|pwd|pass|sig|signature|auth|authorization"
                           r"|credentials?|session(?:_?id)?|jwt|hmac)(?:_|$)")
_URL_LOGIN = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SET_BY_RUNNER = ("run_dir", "report_dir")


class RunConfigError(ValueError):
    """A parameters file that is malformed or asks for something that does not exist."""


# Stages that run only when named (`--stages 07_questions` or a `stages:` list): the
# question axes cost LLM minutes that neither the demo nor a default run budgets for.
OPTIONAL_STAGES = ("07_questions",)


def available_stages(notebook_dir: Path = NOTEBOOKS) -> list[str]:
    """The numbered notebooks, e.g. ["01_generate"], in pipeline order (optional stages included)."""
    return sorted(p.stem for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))


# --------------------------------------------------------------------------- the parameters


def load_params(path: str | os.PathLike | None, overrides: dict | None = None) -> dict:
    """Read a parameters YAML file (or start empty), apply `overrides` and check the result.

    Returns the config with `parameters` and `stage_parameters` always mappings, `stages` a
    list when given, and every relative path that exists made absolute (see the module doc).
    """
    source = str(path) if path is not None else "the parameters"
    config: dict = {}
    if path is not None:
        try:
            config = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise RunConfigError(f"parameters file {path} does not exist (looked in {Path.cwd()})") from None
        except yaml.YAMLError as exc:
            raise RunConfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(config, dict):
            raise RunConfigError(f"{path}: the top level must be a mapping (run_dir, stages, parameters)")
    allowed = {"run_dir", "report_dir", "stages", "parameters", "stage_parameters", "kernel"}
    unknown = set(config) - allowed
    if unknown:
        raise RunConfigError(f"{path}: unknown keys {sorted(map(str, unknown))}; allowed: {', '.join(sorted(allowed))}")
    _check_types(config, source)
    params = dict(config.get("parameters") or {})
    per_stage = {str(k): dict(v or {}) for k, v in (config.get("stage_parameters") or {}).items()}
    for key, value in (overrides or {}).items():
        stage, _, name = str(key).rpartition(".")
        if not name:
            raise RunConfigError(f"-p {key}=...: no parameter name; write -p NAME=VALUE or -p STAGE.NAME=VALUE")
        if stage:
            per_stage.setdefault(stage, {})[name] = value
        else:
            params[name] = value
    for where, given in [("", params), *((f"{stage}.", d) for stage, d in per_stage.items())]:
        for name, value in given.items():
            check_secret(f"{where}{name}", value)
            if name in _SET_BY_RUNNER:
                raise RunConfigError(f"parameter {where}{name} is set by the runner; give it as --run-dir "
                                     f"(or --params with a top-level {name}: key) instead")
        given.update({name: _absolute(value) for name, value in given.items()})
        check_inputs(given, where)
    config["parameters"] = params
    config["stage_parameters"] = per_stage
    return config


def _short(value, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def _check_types(config: dict, source: str) -> None:
    """Say which key has the wrong type, instead of a traceback from deep inside the runner."""
    for key in ("run_dir", "report_dir", "kernel"):
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            hint = f'; if it is a name, quote it: {key}: "{value}"' if isinstance(value, (int, float)) else ""
            raise RunConfigError(f"{source}: {key} must be text (a path), got {_short(value)} "
                                 f"({type(value).__name__}){hint}")
    stages = config.get("stages")
    if isinstance(stages, (str, int)):
        config["stages"] = [s.strip() for s in stages.split(",")] if isinstance(stages, str) else [stages]
    elif stages is not None and not (isinstance(stages, list) and all(isinstance(s, (str, int)) for s in stages)):
        raise RunConfigError(f"{source}: stages must be a list of stage names or numbers, e.g. "
                             f"[01_generate, 02_train] or \"01,02\"; got {_short(stages)}")
    per_stage = config.get("stage_parameters")
    if per_stage is not None and not isinstance(per_stage, dict):
        raise RunConfigError(f"{source}: stage_parameters must be a mapping from stage to its parameters, "
                             f"e.g. {{02_train: {{max_steps: 30}}}}; got a {type(per_stage).__name__}")
    mappings = {"parameters": config.get("parameters"), **{f"stage_parameters.{k}": v for k, v in (per_stage or {}).items()}}
    for key, value in mappings.items():
        if value is not None and not isinstance(value, dict):
            raise RunConfigError(f"{source}: {key} must be a mapping of name: value (one per line), "
                                 f"got a {type(value).__name__}")
        bad = [k for k in (value or {}) if not isinstance(k, str)]
        if bad:
            raise RunConfigError(f"{source}: {key} has names that are not text: {_short(bad)}")


def _mask(text: str) -> str:
    """At most the first and last three characters of a secret: sk-…xyz."""
    return f"{text[:3]}…{text[-3:]}" if len(text) >= 12 else "…"


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _key_in(text: str, name: str = "") -> str | None:
    """The first part of `text` that looks like an API key, or None.

    A known prefix (sk-, hf_, ...) then 16+ characters with a digit among them ("sk-learn-compatible-
    pipelines" in an abstract is no key); 32+ hex characters, digits and letters, standing alone (a
    UUID's runs are shorter), except exactly 40 where the parameter `name` or what stands just before
    them says revision (`_REVISION_NAME`, `_REVISION_BEFORE`); a 24+ character base64 / URL-safe run
    that `_looks_random`."""
    for m in _KEY.finditer(text):
        key = m.group(0)
        if m.group("prefixed"):
            if any(c.isdigit() for c in key):
                return key
        elif any(c.isdigit() for c in key) and any(c.isalpha() for c in key) and not (
                len(key) == 40 and (_REVISION_NAME.search(name.rpartition(".")[2])
                                    or _REVISION_BEFORE.search(text, 0, m.start()))):
            return key
    return next((m.group(0) for m in _TOKEN.finditer(text) if _looks_random(m.group(0))), None)


def _looks_random(text: str) -> bool:
    """A long random token rather than a word, name, id or path.

    Its letter/digit runs of 6+ characters (one of 10+; runs of 32+ hex are `_key_in`'s and set aside)
    hold 20+ characters of at least two classes (upper, lower, digit; 2+ of each), not all hex (a UUID
    is an id), and either 30% of neighbours switch class inside a run (aB, a1, 1a: "Meta-Llama-3-8B-
    Instruct" has few) or 30% of the characters are in fragments that no word has: one or two letters,
    or no vowel ("Fq", "Zrkt"). A heuristic: ~99% of random 24+ base62 tokens, ~88% of lower case and
    digits ones; no hub model id, class name or corpus text seen in the tests."""
    runs = [run for run in re.findall(r"[A-Za-z0-9]{6,}", text) if not re.fullmatch(r"[0-9a-fA-F]{32,}", run)]
    joined = "".join(runs)
    if len(joined) < 20 or max(map(len, runs)) < 10 or re.fullmatch(r"[0-9a-fA-F]+", joined):
        return False
    classes = (sum(map(str.isupper, joined)), sum(map(str.islower, joined)), sum(map(str.isdigit, joined)))
    if sum(n >= 2 for n in classes) < 2:
        return False
    switches = sum(len(re.findall(r"[a-z](?=[A-Z])|[A-Za-z](?=[0-9])|[0-9](?=[A-Za-z])", run)) for run in runs)
    words = [p for run in runs for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", run) if not p.isdigit()]
    odd = sum(len(p) for p in words if len(p) <= 2 or not (re.search("[aeiouAEIOU]", p) or p.isupper() and len(p) < 5))
    return switches >= 0.3 * (len(joined) - len(runs)) or odd >= 0.3 * len(joined)


def check_secret(name: str, value) -> None:
    """Refuse keys in parameters (by name and by value) without echoing them.

    By name: api_key, token, secret, password. By value, in every string: a URL with user[:password]@;
    a URL query or fragment with a credential by its name there (key, api_key, access_token, sig,
    X-Amz-Signature, ...); a known key prefix; 32+ hex characters (MD5 and SHA-256 lengths: Azure,
    W&B, Together keys), except exactly 40 (a SHA-1: a git commit, a hub revision) in a parameter whose
    name says revision/commit/sha/ref, or right after @, /commit/, /tree/, /blob/, /resolve/ or
    revision=; a 24+ character base64 / URL-safe token that `_looks_random`. Ids pass: UUIDs (8-4-4-4-12,
    as run names), DOIs, ACL Anthology, arXiv and PubMed ids, hub model ids, paths, URLs without keys.
    """
    where = "; parameters are written to params.yaml, the executed notebooks and their HTML reports"
    how = "Run `export OPENAI_API_KEY=...` in your shell and pass the variable's NAME: api_key_env: OPENAI_API_KEY"
    if _SECRET.search(name) and value:
        raise RunConfigError(f"parameter {name!r} looks like a secret{where}. Put it in an environment variable "
                             f"and pass its name instead (e.g. api_key_env: OPENAI_API_KEY).")
    if name.endswith("_env") and value is not None:
        text = str(value)
        if (not isinstance(value, str) or not _ENV_NAME.fullmatch(text) or _key_in(text) or _looks_random(text)
                or len(text) >= 20 and sum(map(str.isdigit, text)) >= 0.15 * len(text)):
            raise RunConfigError(f"parameter {name!r} must be the NAME of an environment variable that holds the key, "
                                 f"not the key itself (got {_mask(text)}){where}. {how}.")
    for text in _strings(value):
        login = _URL_LOGIN.search(text)
        if login:
            raise RunConfigError(f"parameter {name!r} is a URL with a login in it ({login.group(1)}…@…){where}. "
                                 f"Give the URL without user:password@ and the key through the environment. {how}.")
        for m in _QUERY.finditer(text):
            words = re.sub(r"[^a-z0-9]+", "_", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", m.group(1)).lower())
            if _QUERY_SECRET.search(words):
                raise RunConfigError(f"parameter {name!r} is a URL with a credential in its query "
                                     f"({m.group(1)}={_mask(m.group(2))}){where}. Give the URL without it and "
                                     f"the key through the environment. {how}.")
        key = _key_in(text, name)
        if key:
            hint = ""
            if len(key) == 40 and re.fullmatch(r"[0-9a-fA-F]+", key):
                hint = (" (a 40-hex git or hub revision is taken in a parameter named like revision or commit, "
                        "or after @ or /commit/ in the value)")
            raise RunConfigError(f"parameter {name!r} holds what looks like a key ({_mask(key)}, {len(key)} "
                                 f"characters){hint}{where}. Put the key in an environment variable. {how}.")


def _pathlike(text: str) -> bool:
    return "/" in text or os.sep in text or text.startswith("~") or bool(Path(text).suffix)


def _absolute(value):
    """A relative path that exists from here, made absolute; names, texts and numbers unchanged."""
    if isinstance(value, list):
        return [_absolute(v) for v in value]
    if not isinstance(value, str) or "\n" in value or len(value) > 1000 or not _pathlike(value):
        return value
    path = Path(value).expanduser()
    try:
        return str(path.resolve()) if path.exists() else value
    except OSError:  # not a possible path at all
        return value


def check_inputs(params: dict, where: str) -> None:
    """A corpus or aspect file that is not there fails now, with the directory it was looked for in."""
    corpus, aspects = params.get("corpus"), params.get("aspects")
    for name, value, what in [("corpus", corpus, "corpus: aclsum"), ("aspects", aspects, "a preset: workbench aspects")]:
        if not isinstance(value, str) or (name == "corpus" and value.split(":")[0] == "aclsum"):
            continue
        if (name == "corpus" or _pathlike(value)) and not Path(value).expanduser().exists():
            raise RunConfigError(
                f"parameter {where}{name}: no such file {value!r} (looked for it from the current directory "
                f"{Path.cwd()}). Relative paths are taken from where you run workbench; give the path from here "
                f"or an absolute one (or {what}).")


# --------------------------------------------------------------------------- the stages


def _declared_parameters(notebook: Path) -> set[str]:
    import papermill

    with warnings.catch_warnings():  # nbformat's note that the cells have no ids: noise on every run
        warnings.filterwarnings("ignore", message="Cell is missing an id field")
        return set(papermill.inspect_notebook(str(notebook)).keys())


def _resolve_stage(stage, known: list[str]) -> str:
    """"02_train", "02", 2 and "train" all name the notebook 02_train."""
    text = str(stage)
    match = [s for s in known if s == text or s.split("_", 1)[0] == text.zfill(2) or s.split("_", 1)[1] == text]
    if len(match) != 1:
        raise RunConfigError(f"unknown stage {stage!r}; available: {', '.join(known)}")
    return match[0]


def _undeclared(names, declared: set[str], what: str) -> None:
    for name in sorted(set(names) - declared):
        close = difflib.get_close_matches(name, declared, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "."
        raise RunConfigError(f"{what} {name!r}{hint} Declared: {', '.join(sorted(declared - set(_SET_BY_RUNNER)))}")


def check_run_dir(run_path: Path, notebook_dir: Path, stages: list[str]) -> None:
    """Never write executed notebooks or artifacts over the workbench's own source."""
    for source in (notebook_dir.resolve(), PACKAGE):
        if run_path == source or source in run_path.parents:
            raise RunConfigError(f"run_dir {run_path} is (inside) {source}, the workbench's source; the run would "
                                 f"overwrite it. Give a folder of its own, e.g. --run-dir runs/my-run")
    for stage in stages:
        old = run_path / f"{stage}.ipynb"
        try:
            executed = old.exists() and "papermill" in json.loads(old.read_text()).get("metadata", {})
        except (OSError, ValueError, AttributeError):
            # Unreadable (cut off by a full disk, say) but written by papermill: a failed earlier run.
            executed = _mentions_papermill(old)
        if old.exists() and not executed:
            raise RunConfigError(f"run_dir {run_path} holds {old.name}, which is not a notebook executed by an "
                                 f"earlier run (a copy of the source?); the run would overwrite it. Give another "
                                 f"run_dir, or move that file away.")


def _mentions_papermill(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return b'"papermill"' in f.read(4_000_000)
    except OSError:
        return False


# --------------------------------------------------------------------------- progress


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _shown(path: Path) -> str:
    """A path relative to where the user stands when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Progress:
    """The live line of one stage: cells done / total, elapsed time, the running cell's own progress.

    papermill's engine calls `begin`, `cell_start` and `cell_done`; the cells' stdout/stderr
    arrive through `write` (the last line is kept, so a text tqdm bar shows its latest state)
    and their widget messages through `message` (tqdm.auto in a kernel draws an ipywidgets bar).
    A thread redraws the line every `every` seconds: in place on a terminal, else a plain line.
    """

    def __init__(self, stage: str, stream=None, every: float | None = None):
        self.stage, self.stream = stage, stream
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.every = every if every is not None else (0.5 if self.tty else 30.0)
        self.fill = "█" if "utf" in (getattr(stream, "encoding", None) or "").lower() else "#"
        self.done = self.total = 0
        self.detail, self.bar = "", None
        self.notices: list[str] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = None

    def begin(self, nb) -> None:
        self.total = sum(c.cell_type == "code" and bool(c.source.strip()) for c in nb.cells)

    def cell_start(self, **_) -> None:
        self.detail, self.bar = "", None

    def cell_done(self, **_) -> None:
        self.done += 1

    def write(self, text: str) -> None:
        lines = [s.strip() for s in re.split(r"[\r\n]", text) if s.strip()]
        for line in lines:  # what the stage says it did not do (progress.notice): shown now and in the summary
            if line.startswith(NOTICE) and line[len(NOTICE):] not in self.notices:
                self.notices.append(line[len(NOTICE):])
                if self.stream is not None:
                    self.stream.write(("\r\x1b[K" if self.tty else "") + f"[workbench] {self.stage}: "
                                      f"notice: {line[len(NOTICE):]}\n")
                    self.stream.flush()
        if lines:
            self.detail = lines[-1]

    def flush(self) -> None:
        pass

    def message(self, msg: dict, widgets: dict) -> None:
        """Follow the latest tqdm widget bar: an HBox of (text, progress, text)."""
        if msg.get("msg_type") not in ("comm_open", "comm_msg"):
            return
        state = msg.get("content", {}).get("data", {}).get("state", {})
        children = state.get("children") or []
        if state.get("_model_name") == "HBoxModel" and len(children) == 3:
            self.bar = [c.removeprefix("IPY_MODEL_") for c in children]
        if self.bar:
            left, middle, right = (widgets.get(i, {}) for i in self.bar)
            if "max" in middle:
                text = [html.unescape(re.sub(r"<[^>]+>", "", str(w.get("value") or ""))).replace("\u2007", " ").strip()
                        for w in (left, right)]
                filled = int(10 * (middle.get("value") or 0) / (middle["max"] or 1))
                self.detail = f"{text[0]}|{self.fill * min(filled, 10)}{' ' * (10 - min(filled, 10))}| {text[1]}"

    def line(self) -> str:
        cells = f"{self.done}/{self.total} cells" if self.total else "starting the kernel"
        text = f"[workbench] {self.stage}: {cells}, {_duration(time.perf_counter() - self.t0)}"
        return f"{text} | {self.detail}" if self.detail else text

    def draw(self) -> None:
        if self.stream is None:
            return
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + self.line()[:width] + "\x1b[K")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self.draw()

    def __enter__(self):
        if self.stream is not None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@cache
def _register_engine() -> str:
    """papermill's nbclient engine, with a `Progress` watching the cells and the kernel's messages."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from traitlets import Any

    class Client(PapermillNotebookClient):
        watch = Any(None)

        def process_message(self, msg, cell, cell_index):
            output = super().process_message(msg, cell, cell_index)
            self.watch.message(msg, self.widget_state)
            return output

    class Engine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, watch=None, kernel_log=None, kernel=None,
                                     start_timeout=60, **_):
            watch.begin(nb_man.nb)
            client = Client(nb_man, km=kernel.manager, kernel_name=kernel_name, startup_timeout=start_timeout,
                            log=logger, watch=watch, stdout_file=watch, stderr_file=watch,
                            on_cell_execute=watch.cell_start, on_cell_executed=watch.cell_done)
            try:
                if kernel.manager is not None:  # a kernel kept from the previous stage
                    return client.execute()
                # The kernel process's own output (its start-up warnings, C libraries) goes to a file, not
                # across the progress line; what the cells print still arrives through `watch`. The
                # process keeps its own copy of the file descriptor once started.
                with open(kernel_log, "ab") as log:
                    if kernel.keep:  # ours from here: nbclient leaves it running at the end
                        kernel.manager, client.owns_km = client.create_kernel_manager(), False
                        kernel.log_path = kernel_log
                    return client.execute(stdout=log, stderr=log)
            finally:
                if kernel.keep and client.kc is not None:
                    client.kc.stop_channels()  # the next stage opens its own

    papermill_engines.register("workbench", Engine)
    return "workbench"


class Kernel:
    """The kernel a run's stages share (keep=True), or none kept (a fresh kernel per stage).

    Shared, a stage after the first finds torch, transformers and the models' code imported and
    the session caches (`report.encode_texts`'s feature caches, BERTScore's token vectors) filled;
    starting a kernel and importing them costs about 7 s of CPU per stage on 2 cores. Each
    stage still starts from an empty namespace (`%reset -f`, figures closed): a notebook that
    used a name it did not define fails as it would alone.
    """

    RESET = "%reset -f\nimport matplotlib.pyplot as _plt\n_plt.close('all')\ndel _plt"

    def __init__(self, keep: bool = True):
        self.keep, self.manager = keep, None
        self.log_path: Path | None = None  # where the kept kernel's own output goes (set when it starts)

    def reset(self, cwd: str | os.PathLike | None = None) -> None:
        """Empty the kept kernel's namespace before the next stage, in `cwd` (the run directory: a
        kernel passed from one run to the next started in the first one); a dead kernel is replaced."""
        if self.manager is None:
            return
        from jupyter_core.utils import run_sync

        if not run_sync(self.manager.is_alive)():
            self.close()
            return
        client = self.manager.blocking_client()
        client.start_channels()
        try:
            code = self.RESET + (f"\nimport os as _os\n_os.chdir({str(cwd)!r})\ndel _os" if cwd else "")
            reply = client.execute_interactive(code, silent=True, store_history=False, timeout=120)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"resetting the kernel between stages failed: {reply['content']}")
        finally:
            client.stop_channels()

    def close(self) -> None:
        if self.manager is not None:
            from jupyter_core.utils import run_sync

            try:
                run_sync(self.manager.shutdown_kernel)(now=True)
            except Exception:  # already gone (it died, or was killed with the run)
                pass
            self.manager = None


def _snapshot(folder: Path) -> dict:
    return {p: (s.st_size, s.st_mtime_ns) for p in folder.rglob("*") if p.is_file() for s in [p.stat()]}


def _written(before: dict, after: dict, run_path: Path, skip: tuple) -> dict:
    """{top-level name in the run directory: {"files", "bytes"}} of what changed; folders end in '/'."""
    out: dict = {}
    for path, (size, _) in sorted(after.items()):
        if before.get(path) == after[path] or path in skip or path.suffix == ".lock":
            continue
        parts = path.relative_to(run_path).parts
        entry = out.setdefault(parts[0] + ("/" if len(parts) > 1 else ""), {"files": 0, "bytes": 0})
        entry["files"] += 1
        entry["bytes"] += size
    return out


def summary(results: dict, run_path: Path) -> str:
    """What each stage wrote (top-level artifacts and sizes), its time and its report."""
    total = sum(r["seconds"] for r in results.values())
    lines = []
    maps = [Path(r["html"]).with_name("05_map.html") for r in results.values() if r.get("html")]
    if any(m.is_file() for m in maps):  # the main output first: the map to open in a browser
        lines.append(f"[workbench] the map: {_shown(next(m for m in maps if m.is_file()))} (open it in a browser)")
    lines.append(f"[workbench] {len(results)} stage(s) in {_duration(total)}, run directory {_shown(run_path)}:")
    for stage, r in results.items():
        wrote = ", ".join(f"{name} ({_size(a['bytes'])}" + (f", {a['files']} files)" if name.endswith("/") else ")")
                          for name, a in r["artifacts"].items()) or "no new files"
        lines.append(f"  {stage:<13} {_duration(r['seconds']):>7}  {wrote}")
        if r.get("html"):
            lines.append(f"  {'':<13} {'':>7}  report {_shown(Path(r['html']))}")
        lines += [f"  {'':<13} {'':>7}  notice: {n}" for n in r.get("notices", [])]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run


def run_pipeline(params_file: str | os.PathLike | None = None, *, run_dir: str | None = None,
                 stages: list[str] | None = None, overrides: dict | None = None, report: bool = True,
                 notebook_dir: Path = NOTEBOOKS, log=print, progress: bool = True,
                 kernel_per_stage: bool = False, kernel: Kernel | None = None, report_code: bool = False) -> dict:
    """Execute the chosen notebooks in order with papermill; returns {stage: {"notebook", "html", "seconds",
    "artifacts"}}, also written to run.json in the run directory.

    Everything is checked before the first notebook starts (parameters, paths, the run directory).
    A stage that fails stops the run; its partly executed notebook is kept in the run directory
    (papermill marks the failing cell) and the error names it. `progress` shows the live line
    on stdout (see `Progress`). The stages share one kernel, each from an empty namespace
    (see `Kernel`); kernel_per_stage=True starts a fresh one for each. The kernel's own output
    goes to ``kernel.log`` in the run directory (``<stage>.kernel.log`` with a kernel per stage).
    kernel: a `Kernel(keep=True)` to run the stages in and leave running for the caller's next
    run (the caller closes it); its own output stays in the log of the run that started it.
    """
    config = load_params(params_file, overrides)
    run_path = Path(run_dir or config.get("run_dir") or "runs/default").expanduser().resolve()
    report_path = Path(config.get("report_dir") or Path("reports") / run_path.name).expanduser().resolve()
    known = available_stages(notebook_dir)
    default = [s for s in known if s not in OPTIONAL_STAGES]
    resolved = [_resolve_stage(stage, known) for stage in stages or config.get("stages") or default]
    config["stage_parameters"] = {_resolve_stage(k, known): v for k, v in config["stage_parameters"].items()}
    declared = {stage: _declared_parameters(notebook_dir / f"{stage}.ipynb") for stage in known}
    _undeclared(config["parameters"], set().union(*declared.values()), "no notebook declares the parameter")
    for stage, given in config["stage_parameters"].items():
        _undeclared(given, declared[stage], f"stage {stage} has no parameters named")
    for name in sorted(set(config["parameters"]) - set().union(*(declared[s] for s in resolved))):
        users = [s for s in known if name in declared[s]]
        log(f"[workbench] note: {name} goes to no stage of this run (it is for {', '.join(users)})")
    check_run_dir(run_path, notebook_dir, resolved)

    run_path.mkdir(parents=True, exist_ok=True)
    # One run at a time in a run directory: a second one is refused here, before it writes anything.
    with RunLock(run_path, "workbench run --stages " + ",".join(resolved)):
        return _run_locked(config, run_path, report_path, resolved, declared, report, notebook_dir, log, progress,
                           kernel_per_stage, kernel, report_code)


def _run_locked(config, run_path, report_path, resolved, declared, report, notebook_dir, log, progress,
                kernel_per_stage, kernel, report_code=False) -> dict:
    """`run_pipeline` once its checks have passed and it holds the run directory's lock."""
    import papermill
    from nbclient.exceptions import DeadKernelError

    write_text(run_path / "params.yaml", yaml.safe_dump({**config, "run_dir": str(run_path)}, sort_keys=False))
    engine = _register_engine()
    own_kernel = kernel is None
    if own_kernel:
        kernel = Kernel(keep=not kernel_per_stage)
    elif kernel_per_stage or not kernel.keep:
        raise ValueError("kernel= takes a Kernel(keep=True) to share; leave it out for a kernel per stage")
    if kernel.keep and kernel.manager is None:
        (run_path / "kernel.log").unlink(missing_ok=True)  # this run's kernel only
    results = {}
    try:
        for stage in resolved:
            source = notebook_dir / f"{stage}.ipynb"
            params = {k: v for k, v in {**config["parameters"], **config["stage_parameters"].get(stage, {})}.items()
                      if k in declared[stage]}
            params["run_dir"] = str(run_path)
            if "report_dir" in declared[stage]:  # stages that write their own report files (05's standalone map)
                params["report_dir"] = str(report_path)
            executed = run_path / f"{stage}.ipynb"
            # papermill writes the notebook as it runs: under a temporary name, renamed once whole (a full
            # disk or a kill leaves the earlier notebook, never a torn one).
            running = run_path / f".{stage}.running.ipynb"
            log(f"[workbench] {stage}: executing {source.name} -> {_shown(executed)}")
            before, t0 = _snapshot(run_path), time.perf_counter()
            kernel.reset(run_path)
            # A kept kernel writes where it started (a kernel passed in from an earlier run: that run's log).
            kernel_log = run_path / ("kernel.log" if kernel.keep else f"{stage}.kernel.log")
            if kernel.manager is not None:
                kernel_log = kernel.log_path
            elif not kernel.keep:
                kernel_log.unlink(missing_ok=True)
            try:
                with Progress(stage, sys.stdout if progress else None) as watch, warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Cell is missing an id field")
                    papermill.execute_notebook(str(source), str(running), parameters=params, engine_name=engine,
                                               kernel_name=config.get("kernel", "python3"), cwd=str(run_path),
                                               progress_bar=False, watch=watch, kernel_log=kernel_log, kernel=kernel)
                replace_from(running, executed)
            except OSError as exc:
                running.unlink(missing_ok=True)
                if results:
                    log(summary(results, run_path))
                raise RuntimeError(f"stage {stage} could not write {exc.filename or running}: {exc.strerror or exc}; "
                                   f"free some space (or fix the folder's permissions), then go on with --stages "
                                   f"{','.join(resolved[resolved.index(stage):])}") from None
            except (papermill.PapermillExecutionError, DeadKernelError) as exc:
                if running.exists():  # the notebook with the failing cell marked, whole: keep it for the user
                    replace_from(running, executed)
                if results:
                    log(summary(results, run_path))
                cell = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}" if hasattr(exc, "ename") else \
                    f"cell {watch.done + 1}: the kernel died (out of memory?); its last words are in {kernel_log}"
                rest = ",".join(resolved[resolved.index(stage):])
                raise RuntimeError(f"stage {stage} failed in {cell}\nThe executed notebook with the error is "
                                   f"{executed}; once fixed, go on with --stages {rest}") from None
            entry = {"notebook": str(executed), "seconds": round(time.perf_counter() - t0, 1),
                     "artifacts": _written(before, _snapshot(run_path), run_path, (executed, kernel_log)),
                     "notices": list(watch.notices)}
            if report:
                html_path = report_path / f"{stage}.html"
                try:
                    entry["html"] = str(export_html(executed, html_path, code=report_code))
                except OSError as exc:
                    raise RuntimeError(f"stage {stage} ran, but its report {exc.filename or html_path} could not be "
                                       f"written: {exc.strerror or exc}") from None
            results[stage] = entry
            log(f"[workbench] {stage}: done in {_duration(entry['seconds'])}, {watch.done} cells")
    finally:
        if own_kernel:
            kernel.close()
    write_json(run_path / "run.json", results)
    log(summary(results, run_path))
    return results


def export_html(notebook: Path, html_path: Path, code: bool = False) -> Path:
    """Export an executed notebook as a standalone HTML report (images inlined).

    For a reader, not a developer: by default no code and no cell counters, the run's parameters
    as one table at the top and where the results came from at the end (package versions, the
    corpus file's hash, the parameters). code=True (`workbench run --report-code`) keeps the code.
    """
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    params = nb.metadata.get("papermill", {}).get("parameters", {})
    if not code:
        nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and {"parameters", "injected-parameters"}
                                                & set(c.metadata.get("tags", [])))]
        at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0  # after the notebook's title
        nb.cells.insert(at, nbformat.v4.new_markdown_cell(_parameters_markdown(params)))
        nb.cells.append(nbformat.v4.new_markdown_cell(_provenance_markdown(params)))
    exporter = HTMLExporter(template_name="lab", exclude_input=not code, exclude_input_prompt=not code,
                            exclude_output_prompt=not code)
    body, _ = exporter.from_notebook_node(nb)
    return write_text(html_path, body)


def _parameters_markdown(params: dict) -> str:
    """The run's parameters as one table: an HTML block (no Markdown is read inside it), every value escaped."""
    def shown(value):
        return html.escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))

    rows = "".join(f"<tr><td><code>{html.escape(str(k))}</code></td><td>{shown(v)}</td></tr>" for k, v in params.items())
    table = f"<table><tr><th>parameter</th><th>value</th></tr>{rows}</table>" if rows else "<p>the notebook's defaults</p>"
    return f"<div class=\"wb-parameters\"><p><b>Parameters of this run</b></p>{table}</div>"


def _provenance_markdown(params: dict) -> str:
    """Where the results came from: versions, the corpus file's hash, the platform (escaped Markdown)."""
    import hashlib
    import platform
    from importlib import metadata

    lines = []
    for package in ("semcse-workbench", "torch", "transformers", "sentence-transformers", "scikit-learn",
                    "openTSNE", "bokeh", "pandas", "numpy"):
        try:
            lines.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    corpus = params.get("corpus")
    if isinstance(corpus, str) and Path(corpus).is_file():
        digest = hashlib.sha256(Path(corpus).read_bytes()).hexdigest()[:16]
        lines.append(f"corpus file {Path(corpus).name}, sha256 {digest}…")
    elif corpus:
        lines.append(f"corpus {corpus}")
    lines.append(f"Python {platform.python_version()} on {platform.system()} {platform.machine()}")
    return ("<div class=\"wb-provenance\"><p><b>Provenance</b>: " + "; ".join(html.escape(line) for line in lines)
            + ".</p></div>")
