"""The parameters of a run: reading the parameters file, and every check of its parameters, paths and secrets.

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
line, `-p NAME=v` sets a shared parameter, for every stage that declares NAME and over what the
file sets for it (per stage too), and `-p 02_train.NAME=v` one stage's, over both.

Each value is checked by its declared type and range (`paramspec.SPECS`: `k` a whole number >= 1,
`subset` >= 1 or null, no NaN, no true/false for a number, no list for a single value) before any
stage runs, and the message names the key and the stage. The file is read with the aspect files'
loader (`core.safeyaml.StrictLoader`): duplicate keys and YAML alias bombs are refused at once.

Relative paths are taken from the directory you run `workbench` in, on the command line and in
the parameters file alike (as `run_dir` always was), never from the file's own folder. The
notebooks run inside the run directory, so every parameter value that names an existing file or
folder (a value with a `/` or a suffix such as `.csv`; bare names such as `minilm` stay names)
is made absolute before they see it, and `params.yaml` in the run records the absolute paths.
A `corpus` file or an `aspects` YAML that does not exist is an error before anything runs; the corpus is then
loaded and checked as the stages load it (`corpuscheck.py`), before the run directory exists. A few parameters
are the run's own (`RUN_PARAMETERS`): no notebook declares them and no stage receives them, e.g.
`-p duplicate_ids=first`, which keeps the first row of an id that the corpus repeats with different texts.
An empty parameters file (or one of comments only) is refused: it would run the defaults.

Keys belong in the environment: parameters are written to `params.yaml`, the executed notebooks
and their HTML reports. So a parameter named like a secret (`api_key`, `token`, ...), a value
that looks like a key (`sk-...`, `hf_...`), an `*_env` value that is not a variable name, and
a URL with `user:password@` are refused, and the message never repeats the key.

The runner that then executes the stages is `runner.py`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
import warnings
from pathlib import Path

import yaml

from ..core.rundir import why_not_a_run_dir
from ..core.safeyaml import AliasError, StrictLoader
from ..data.aspects import load_aspects
from .paramspec import RENAMED, value_problem

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
PACKAGE = Path(__file__).resolve().parents[1]
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
SET_BY_RUNNER = ("run_dir", "report_dir")
#: Parameters of the run itself, which no notebook declares and no stage receives: {name: its values, the
#: default first}. duplicate_ids: a corpus whose id repeats with different texts is refused before any stage
#: runs (refuse), or the first row of each id is kept (first), as the stages' drop_invalid keeps it.
RUN_PARAMETERS = {"duplicate_ids": ("refuse", "first")}


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
            # The aspect files' loader: duplicate keys and alias bombs refused while parsing, before the
            # secret check walks every value (a 452-byte bomb kept it busy past 45 s).
            config = yaml.load(Path(path).read_text(), Loader=StrictLoader)
        except FileNotFoundError:
            raise RunConfigError(f"parameters file {path} does not exist (looked in {Path.cwd()})") from None
        except AliasError as exc:
            raise RunConfigError(f"{path}: {exc}") from None
        except yaml.YAMLError as exc:
            raise RunConfigError(f"{path}: not valid YAML: {exc}") from None
        if config is None:  # an empty file, or only comments: running the defaults would not be what was meant
            raise RunConfigError(f"{path}: the parameters file is empty (or holds only comments); write at least "
                                 f"the corpus, e.g. `parameters: {{corpus: data/my_papers.csv}}` (params/demo.yaml "
                                 f"is an example), or leave out --params to run the defaults on ACLSum")
        if not isinstance(config, dict):
            raise RunConfigError(f"{path}: the top level must be a mapping (run_dir, stages, parameters)")
    allowed = {"run_dir", "report_dir", "stages", "parameters", "stage_parameters", "kernel"}
    unknown = set(config) - allowed
    if unknown:
        raise RunConfigError(f"{path}: unknown keys {sorted(map(str, unknown))}; allowed: {', '.join(sorted(allowed))}")
    _check_types(config, source)
    params = dict(config.get("parameters") or {})
    per_stage = {str(k): dict(v or {}) for k, v in (config.get("stage_parameters") or {}).items()}
    _apply_overrides(overrides or {}, params, per_stage)
    for where, given in [("", params), *((f"{stage}.", d) for stage, d in per_stage.items())]:
        for name, value in given.items():
            check_secret(f"{where}{name}", value)
            if name in SET_BY_RUNNER:
                raise RunConfigError(f"parameter {where}{name} is set by the runner; give it as --run-dir "
                                     f"(or --params with a top-level {name}: key) instead")
        given.update({name: _absolute(value) for name, value in given.items()})
        check_inputs(given, where, run_aspects=params.get("aspects"))
    config["parameters"] = params
    config["stage_parameters"] = per_stage
    return config


def _apply_overrides(overrides: dict, params: dict, per_stage: dict) -> None:
    """Apply `-p` values: `-p NAME=V` reaches every stage that declares NAME, over what the file sets for
    it, per stage too (`-p k=2` on params/demo.yaml, which sets 01_generate.k: 4, runs k = 2); then
    `-p STAGE.NAME=V` sets one stage's, over both."""
    split = {}
    for key in overrides:
        stage, _, name = str(key).rpartition(".")
        if not name:
            raise RunConfigError(f"-p {key}=...: no parameter name; write -p NAME=VALUE or -p STAGE.NAME=VALUE")
        split[key] = stage, name
    for key, (stage, name) in split.items():
        if not stage:
            params[name] = overrides[key]
            for given in per_stage.values():
                given.pop(name, None)
    for key, (stage, name) in split.items():
        if stage:
            per_stage.setdefault(stage, {})[name] = overrides[key]


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


def check_inputs(params: dict, where: str, run_aspects=None) -> None:
    """A corpus or aspect file that is not there fails now, with the directory it was looked for in; an aspect
    file (or preset) that does not load (a field it names is wrong) fails now too, not in a stage's kernel; so
    does a CSV of marks that is not there or names no aspect of the run's (`run_aspects`: the aspect file or
    preset the run's parameters name, where these parameters name none)."""
    corpus, aspects = params.get("corpus"), params.get("aspects")
    check_marks(params.get("marks"), where, aspects if isinstance(aspects, str) else run_aspects)
    for name, value, what in [("corpus", corpus, "corpus: aclsum"), ("aspects", aspects, "a preset: workbench aspects")]:
        if not isinstance(value, str) or (name == "corpus" and value.split(":")[0] == "aclsum"):
            continue
        if (name == "corpus" or _pathlike(value)) and not Path(value).expanduser().exists():
            raise RunConfigError(
                f"parameter {where}{name}: no such file {value!r} (looked for it from the current directory "
                f"{Path.cwd()}). Relative paths are taken from where you run workbench; give the path from here "
                f"or an absolute one (or {what}).")
    if isinstance(aspects, str):
        try:
            load_aspects(str(Path(aspects).expanduser()) if _pathlike(aspects) else aspects)
        except (ValueError, OSError) as exc:  # AspectConfigError names the field; an alias bomb, the file
            raise RunConfigError(f"parameter {where}aspects: {exc}") from None


def check_marks(marks, where: str, aspects) -> None:
    """The `marks` parameter (a CSV of marks, or None) read as stage 03 reads it, into memory (the run's marks are
    not touched): a missing file, or a row naming no aspect of `aspects` (a file or preset), fails now."""
    if not isinstance(marks, str) or not marks:
        return
    from ..teach.marks import Marks

    path = Path(marks).expanduser()
    if not path.is_file():
        raise RunConfigError(f"parameter {where}marks: no such file {marks!r} (looked for it from the current "
                             f"directory {Path.cwd()})")
    try:
        names = load_aspects(str(Path(aspects).expanduser()) if _pathlike(aspects) else aspects).names \
            if isinstance(aspects, str) else None
    except (ValueError, OSError):
        names = None  # the aspect file's own check says what is wrong with it
    try:
        Marks().read_csv(path, aspects=names)
    except (ValueError, OSError) as exc:
        raise RunConfigError(f"parameter {where}marks: {exc}") from None


# --------------------------------------------------------------------------- the stages


def without_iri_format_checker() -> None:
    """Call before importing papermill or nbformat: their notebook checks then skip jsonschema's IRI format checker.

    jsonschema imports `rfc3987_syntax` where it is installed (jupyter-events pulls it in) for that checker, and
    the module builds a Lark grammar as it is imported: 1.4 s of every run's start on two cores. No notebook
    schema uses the IRI format. jsonschema leaves a checker out whose module is missing, as here."""
    sys.modules.setdefault("rfc3987_syntax", None)


def declared_parameters(notebook: Path) -> dict[str, str | None]:
    """The parameters a notebook declares in its cell tagged `parameters` (papermill's reading of it):
    {name: its default as written there}."""
    without_iri_format_checker()
    import papermill

    with warnings.catch_warnings():  # nbformat's note that the cells have no ids: noise on every run
        warnings.filterwarnings("ignore", message="Cell is missing an id field")
        return {name: p.get("default") for name, p in papermill.inspect_notebook(str(notebook)).items()}


def resolve_stage(stage, known: list[str]) -> str:
    """"02_train", "02", 2 and "train" all name the notebook 02_train."""
    text = str(stage)
    match = [s for s in known if s == text or s.split("_", 1)[0] == text.zfill(2) or s.split("_", 1)[1] == text]
    if len(match) != 1:
        raise RunConfigError(f"unknown stage {stage!r}; available: {', '.join(known)}")
    return match[0]


def resolve_stage_keys(per_stage: dict, known: list[str]) -> dict:
    """`stage_parameters` keyed by full stage names; "01" and "01_generate" (the file's, then -p's) merge in order."""
    merged: dict = {}
    for stage, given in per_stage.items():
        merged.setdefault(resolve_stage(stage, known), {}).update(given)
    return merged


def refuse_undeclared(names, declared, what: str) -> None:
    """Refuse the first of `names` no notebook declares, with the close matches and what is declared."""
    declared = set(declared)
    for name in sorted(set(names) - declared):
        close = difflib.get_close_matches(name, declared, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "."
        raise RunConfigError(f"{what} {name!r}{hint} Declared: {', '.join(sorted(declared - set(SET_BY_RUNNER)))}")


def stage_values(config: dict, stage: str, declared) -> dict:
    """What `stage` receives (run_dir and report_dir aside): the shared parameters it declares, then its own."""
    given = {**config["parameters"], **config["stage_parameters"].get(stage, {})}
    return {name: value for name, value in given.items() if name in declared}


def check_parameters(config: dict, declared: dict[str, dict], resolved: list[str], log=print) -> None:
    """Every parameter a stage would receive, checked before the first stage runs: its name (declared by a
    notebook, or renamed: `RENAMED`) and its value (type and range: `paramspec.SPECS`).

    `config["stage_parameters"]` is keyed by stage names resolved already; `declared`: {stage: {name:
    default}} for every stage; `resolved`: the stages of this run (a shared parameter none of them
    declares is noted through `log`). Stages outside this run are checked too: the file is wrong either way.
    """
    everywhere = set().union(*declared.values())
    refuse_undeclared(config["parameters"], everywhere | set(RUN_PARAMETERS), "no notebook declares the parameter")
    _check_run_parameters(config)
    for stage, given in config["stage_parameters"].items():
        for old, (new, why) in RENAMED.get(stage, {}).items():
            if old in given and old not in declared[stage]:
                raise RunConfigError(f"parameter {stage}.{old}: stage {stage} calls it {new} now ({why}); rename "
                                     f"it in the parameters file or on the command line (-p {stage}.{new}=...)")
        refuse_undeclared(given, declared[stage], f"stage {stage} has no parameters named")
    for name in sorted(set(config["parameters"]) - set().union(*(declared[s] for s in resolved)) - set(RUN_PARAMETERS)):
        users = [s for s in declared if name in declared[s]]
        log(f"[workbench] note: {name} goes to no stage of this run (it is for {', '.join(users)})")
    for stage, names in declared.items():
        for name, value in stage_values(config, stage, names).items():
            problem = value_problem(name, value, names[name])
            if problem:
                own = name in config["stage_parameters"].get(stage, {})
                key = f"{stage}.{name}" if own else f"{name} (shared, given to stage {stage})"
                raise RunConfigError(f"parameter {key}: {problem}. Fix it in the parameters file or on the "
                                     f"command line (-p {stage + '.' if own else ''}{name}=...)")


def _check_run_parameters(config: dict) -> None:
    """`RUN_PARAMETERS`: given for the whole run (never one stage's), and one of their values."""
    for name, values in RUN_PARAMETERS.items():
        for stage, given in config["stage_parameters"].items():
            if name in given:
                raise RunConfigError(f"parameter {stage}.{name}: {name} is the whole run's, not one stage's; give it "
                                     f"as -p {name}=... (or under parameters: in the file)")
        value = config["parameters"].get(name, values[0])
        if value not in values:
            raise RunConfigError(f"parameter {name}: must be {' or '.join(values)} (the default {values[0]}); got "
                                 f"{_short(value)}. Fix it in the parameters file or on the command line "
                                 f"(-p {name}=...)")


def check_run_dir(run_path: Path, notebook_dir: Path, stages: list[str]) -> None:
    """Never write executed notebooks or artifacts over the workbench's own source, a checkout or tracked files."""
    for source in (notebook_dir.resolve(), PACKAGE):
        if run_path == source or source in run_path.parents:
            raise RunConfigError(f"run_dir {run_path} is (inside) {source}, the workbench's source; the run would "
                                 f"overwrite it. Give a folder of its own, e.g. --run-dir runs/my-run")
    reason = why_not_a_run_dir(run_path)  # the checkout's root, a repository, a folder git tracks
    if reason:
        raise RunConfigError(f"run_dir {run_path} {reason}; a run there would write among files that are not "
                             f"its own. Give a folder of its own, e.g. --run-dir runs/my-run (git ignores runs/)")
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
