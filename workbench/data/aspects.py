"""Aspect sets: which aspects of an abstract get summarised, and with which prompts.

An aspect set is one YAML file (see ``workbench/presets/`` for the shipped
ones). It names the domain, lists the aspects (each with a description, the
features to include and to leave out, example sentences, one or more prompt
templates, and optionally an LLM-judge rubric), and can override the system
prompts and the judge template.

Templates use ``{name}`` placeholders, but only the known names are
substituted: generation templates must also contain literal JSON such as
``{"sentence": "..."}``, so ``str.format`` cannot be used.

Typical use::

    aspects = load_aspects("invasion-biology")
    for aspect_name, key in aspects.prompt_keys():
        messages = aspects.messages(key, abstract)
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import html
import json
import os
import re
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from ..core.safeyaml import AliasError, BlockDumper, StrictLoader
from .aspect_names import folder_name_problem
from .aspect_prompts import DEFAULT_DOMAIN, DEFAULT_JUDGE_SYSTEM_PROMPT, DEFAULT_JUDGE_TEMPLATE, DEFAULT_SYSTEM_PROMPT

PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"

# The exact answer a generator gives when the abstract does not state an aspect;
# such answers are dropped before training.
NOT_APPLICABLE = "Not applicable."

GENERATION_PLACEHOLDERS = frozenset(
    {"abstract", "description", "include", "exclude", "examples", "domain", "aspect"}
)
SYSTEM_PLACEHOLDERS = frozenset({"domain"})
RUBRIC_PLACEHOLDERS = frozenset({"aspect", "description", "domain"})
JUDGE_PLACEHOLDERS = frozenset(
    {"abstract_a", "abstract_b", "rubric", "aspect", "description", "include",
     "exclude", "domain", "min_score", "max_score"}
)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*\Z")

# What a file may expand to through YAML aliases (nodes plus characters of text). The
# presets share one template through &generation / *generation, a few kB; a nested
# "billion laughs" alias chain of 500 bytes would expand to gigabytes.

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 100
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to at most ``limit`` characters: an error message stays small whatever the input.

    reprlib looks at a few items of a few levels only, so even a value with a billion
    items through shared references costs nothing to describe.
    """
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _clip(text: str, limit: int = 80) -> str:
    """``text`` cut to at most ``limit`` characters (for names shown in field paths)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class AspectConfigError(ValueError):
    """An aspect set is malformed; the message names the file and the field.

    ``source`` is the file (or ``preset:<name>``), ``field`` the path inside it,
    e.g. ``aspects[1].prompts[0].template`` (empty for file-level problems).
    """

    def __init__(self, source: str, field: str, problem: str):
        self.source, self.field, self.problem = source, field, problem
        super().__init__(f"{source}: {field}: {problem}" if field else f"{source}: {problem}")


@dataclass(frozen=True)
class PromptSpec:
    """One generation prompt: its key (unique in the set) and user-message template."""

    key: str
    template: str


@dataclass(frozen=True)
class JudgeSpec:
    """How an LLM judge scores two abstracts for one aspect: integer scale and rubric."""

    scale: tuple[int, int]
    rubric: str


# Used for aspects without their own rubric, so a new domain can be judged at once.
DEFAULT_JUDGE = JudgeSpec(
    scale=(1, 5),
    rubric=(
        "5: The {aspect} is essentially the same in both abstracts, including its finer details.\n"
        "4: The same kind of {aspect}, differing only in details.\n"
        "3: Clearly related: the main element of the {aspect} is shared, but other elements differ.\n"
        "2: Only a minor or very broad element of the {aspect} is shared.\n"
        "1: No meaningful overlap in the {aspect}, or one abstract does not address it."
    ),
)


@dataclass(frozen=True)
class Aspect:
    """One aspect: what it is, what to include and leave out, its prompts and judge rubric."""

    name: str
    description: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    examples: tuple[str, ...]
    prompts: tuple[PromptSpec, ...]
    judge: JudgeSpec | None

    @property
    def label(self) -> str:
        """The name as words ("research question"), which is what prompts show."""
        return self.name.replace("_", " ")


@dataclass(frozen=True)
class AspectSet:
    """A validated aspect set: an ordered collection of aspects plus the prompts to use.

    Iterating yields the ``Aspect`` objects; ``aspects["species"]`` looks one up by name.
    """

    name: str
    domain: str
    description: str
    system_prompt: str
    aspects: tuple[Aspect, ...]
    judge_template: str
    source: str
    judge_system_prompt: str = DEFAULT_JUDGE_SYSTEM_PROMPT

    @property
    def names(self) -> list[str]:
        """Aspect names, in file order."""
        return [a.name for a in self.aspects]

    def __getitem__(self, name: str) -> Aspect:
        """The aspect called ``name``; KeyError lists the valid names."""
        for aspect in self.aspects:
            if aspect.name == name:
                return aspect
        raise KeyError(f"unknown aspect {_short(name)} in set {self.name!r}; valid: {', '.join(self.names)}")

    def __contains__(self, name: object) -> bool:
        """Whether an aspect of that name exists (``"species" in aspects``)."""
        return name in self.names

    def __len__(self) -> int:
        """Number of aspects."""
        return len(self.aspects)

    def __iter__(self) -> Iterator[Aspect]:
        """Iterate over the aspects in file order."""
        return iter(self.aspects)

    def prompt_keys(self) -> list[tuple[str, str]]:
        """``(aspect name, prompt key)`` pairs, in file order."""
        return [(a.name, p.key) for a in self.aspects for p in a.prompts]

    def _prompt(self, key: str) -> tuple[Aspect, PromptSpec]:
        for aspect in self.aspects:
            for prompt in aspect.prompts:
                if prompt.key == key:
                    return aspect, prompt
        valid = ", ".join(k for _, k in self.prompt_keys())
        raise KeyError(f"unknown prompt key {_short(key)} in set {self.name!r}; valid: {valid}")

    def aspect_of(self, key: str) -> str:
        """Name of the aspect that prompt ``key`` feeds."""
        return self._prompt(key)[0].name

    def messages(self, key: str, abstract: str) -> list[dict]:
        """Chat messages (system, user) asking for one summary sentence for prompt ``key``."""
        aspect, prompt = self._prompt(key)
        values = {
            "abstract": abstract.strip(),
            "aspect": aspect.label,
            "description": aspect.description,
            "include": _bullets(aspect.include),
            "exclude": _bullets(aspect.exclude),
            "examples": _numbered(aspect.examples),
            "domain": self.domain,
        }
        return [
            {"role": "system", "content": render_template(self.system_prompt, {"domain": self.domain})},
            {"role": "user", "content": render_template(prompt.template, values)},
        ]

    def judge_spec(self, aspect: str) -> JudgeSpec:
        """The judge rubric and scale used for ``aspect`` (the default one if it has none)."""
        return self[aspect].judge or DEFAULT_JUDGE

    def judge_messages(self, aspect: str, abstract_a: str, abstract_b: str) -> list[dict]:
        """Chat messages asking an LLM judge to score two abstracts' similarity in ``aspect``.

        The expected answer is ``{"reasoning": "...", "score": <int>}`` on the
        scale of ``judge_spec(aspect)``.
        """
        spec, asp = self.judge_spec(aspect), self[aspect]
        common = {"aspect": asp.label, "description": asp.description, "domain": self.domain}
        values = {
            **common,
            # The rubric is rendered first and inserted as finished text, so its
            # placeholders are filled and nothing inside the abstracts is touched.
            "rubric": render_template(spec.rubric, common).strip(),
            "abstract_a": abstract_a.strip(),
            "abstract_b": abstract_b.strip(),
            "include": _bullets(asp.include),
            "exclude": _bullets(asp.exclude),
            "min_score": str(spec.scale[0]),
            "max_score": str(spec.scale[1]),
        }
        return [
            {"role": "system", "content": render_template(self.judge_system_prompt, {"domain": self.domain})},
            {"role": "user", "content": render_template(self.judge_template, values)},
        ]

    def prompt_hash(self, key: str) -> str:
        """Short sha256 (12 hex digits) of everything that shapes prompt ``key``'s messages.

        The messages are rendered with the literal text ``{abstract}`` as the
        abstract, so the hash covers the system prompt, the template and the
        aspect fields substituted into it (description, include, exclude,
        examples, domain): editing any of them changes the hash.
        """
        rendered = json.dumps(self.messages(key, "{abstract}"), sort_keys=True)
        return hashlib.sha256(rendered.encode("utf-8")).hexdigest()[:12]

    def subset(self, names: list[str]) -> "AspectSet":
        """A copy keeping only the named aspects, in the order given."""
        if isinstance(names, str):  # a bare string would be split into letters
            names = [names]
        if len(set(names)) != len(names):
            raise ValueError(f"subset: duplicate aspect names in {_short(list(names))}")
        if not names:
            raise ValueError("subset: need at least one aspect name")
        return dataclasses.replace(self, aspects=tuple(self[n] for n in names))

    def to_dict(self) -> dict:
        """The set as plain data in the YAML schema (``parse_aspects`` reads it back)."""
        aspects = []
        for a in self.aspects:
            item: dict[str, Any] = {
                "name": a.name,
                "description": a.description,
                "include": list(a.include),
                "exclude": list(a.exclude),
                "examples": list(a.examples),
                "prompts": [{"key": p.key, "template": p.template} for p in a.prompts],
            }
            if a.judge is not None:
                item["judge"] = {"scale": list(a.judge.scale), "rubric": a.judge.rubric}
            aspects.append(item)
        return {
            "name": self.name,
            "domain": self.domain,
            "description": self.description,
            "system_prompt": self.system_prompt,
            "aspects": aspects,
            "judge_system_prompt": self.judge_system_prompt,
            "judge_template": self.judge_template,
        }

    def to_yaml(self) -> str:
        """The set as YAML in the file schema, multi-line texts as block literals."""
        return yaml.dump(self.to_dict(), Dumper=BlockDumper, sort_keys=False,
                         allow_unicode=True, width=100)

    def _repr_html_(self) -> str:
        """A small HTML table for Jupyter: aspect, description, prompt keys, judge scale."""
        e = html.escape
        rows = []
        for a in self.aspects:
            scale = f"{a.judge.scale[0]}&ndash;{a.judge.scale[1]}" if a.judge else "default (1&ndash;5)"
            keys = ", ".join(e(p.key) for p in a.prompts)
            rows.append(f"<tr><td><b>{e(a.name)}</b></td><td>{e(a.description)}</td>"
                        f"<td>{keys}</td><td>{scale}</td></tr>")
        return (
            f"<div><b>{e(self.name)}</b> &mdash; {e(self.domain)} "
            f"({len(self.aspects)} aspects, {e(self.source)})</div>"
            "<table><thead><tr><th>aspect</th><th>description</th><th>prompt keys</th>"
            f"<th>judge scale</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{name}`` for each name in ``values``; every other brace stays as is.

    One pass over the template, so braces inside the substituted values (an
    abstract that contains ``{x}``) are never substituted again.
    """
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _bullets(items: tuple[str, ...]) -> str:
    return "\n".join(f"- {item}" for item in items) if items else "- (none given)"


def _numbered(items: tuple[str, ...]) -> str:
    return "\n".join(f'{i}. "{item}"' for i, item in enumerate(items, 1)) if items else "(none given)"


# ---------------------------------------------------------------- loading


def list_presets() -> list[str]:
    """Names of the shipped aspect sets (file stems in ``workbench/presets``), sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_aspects(name_or_path: str | os.PathLike) -> AspectSet:
    """Load an aspect set from a preset name (``"medicine"``) or a YAML file path."""
    path, source = _resolve(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AspectConfigError(source, "", f"cannot read file: {exc}") from exc
    return parse_aspects_yaml(text, source)


def parse_aspects_yaml(text: str, source: str = "<string>") -> AspectSet:
    """Parse and validate an aspect set from YAML text (e.g. edited in a notebook)."""
    try:
        data = yaml.load(text, Loader=StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = "; ".join(x for x in (exc.context, exc.problem) if x)
        raise AspectConfigError(source, "", f"YAML syntax error at {where}: {problem}") from None
    except AliasError as exc:
        raise AspectConfigError(source, "", str(exc)) from None
    except yaml.YAMLError as exc:
        raise AspectConfigError(source, "", f"YAML error: {exc}") from None
    return parse_aspects(data, source)


def _resolve(name_or_path: str | os.PathLike) -> tuple[Path, str]:
    """Find the file for a preset name or path; the error lists the presets."""
    available = ", ".join(list_presets())
    if not isinstance(name_or_path, str):
        path = Path(name_or_path)
        if _is_file(path):
            return path, str(name_or_path)
        raise AspectConfigError(_clip(str(name_or_path), 300), "", f"no such file (available presets: {available})")
    if "\n" in name_or_path:
        raise AspectConfigError(_short(name_or_path), "", "this looks like YAML text, not a preset name or a file; "
                                "use parse_aspects_yaml(text) for text")
    if _is_file(Path(name_or_path)):
        return Path(name_or_path), name_or_path
    # Presets are addressed by file stem; the set's own name uses "_" instead of "-".
    stem = name_or_path.replace("_", "-")
    preset = PRESET_DIR / f"{stem}.yaml"
    if "/" not in stem and os.sep not in stem and _is_file(preset):
        return preset, f"preset:{stem}"
    raise AspectConfigError(
        _clip(name_or_path, 300), "", f"neither a preset nor an existing file (available presets: {available})"
    )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long for the file system: no such file
        return False


# ---------------------------------------------------------------- validation


class _Checker:
    """Type and shape checks that raise AspectConfigError naming source and field path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, field: str, problem: str):
        raise AspectConfigError(self.source, field, problem)

    def mapping(self, value: Any, field: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.fail(field or "(top level)", f"expected a mapping, got {_type_name(value)}")
        allowed = required + optional
        for key in value:
            if key not in allowed:
                hint = difflib.get_close_matches(_clip(str(key), 100), allowed, n=1)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                self.fail(_join(field, _clip(str(key))),
                          f"unknown key {_short(key)}{did_you_mean}; allowed: {', '.join(sorted(allowed))}")
        for key in required:
            if key not in value:
                self.fail(_join(field, key), "missing required field")
        return value

    def string(self, value: Any, field: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {_type_name(value)}")
        if not allow_empty and not value.strip():
            self.fail(field, "must not be empty")
        return value

    def string_list(self, value: Any, field: str) -> tuple[str, ...]:
        if value is None:  # "include:" with nothing after it means no items
            return ()
        if not isinstance(value, list):
            self.fail(field, f"expected a list of strings, got {_type_name(value)}")
        return tuple(self.string(item, f"{field}[{i}]") for i, item in enumerate(value))

    def identifier(self, value: Any, field: str) -> str:
        self.string(value, field)
        if not _IDENTIFIER.match(value):
            self.fail(field, f"invalid identifier {_short(value)}: use lowercase letters, digits and "
                             "underscores, starting with a letter")
        return value

    def template(self, value: Any, field: str, allowed: frozenset[str],
                 required: tuple[str, ...] = ()) -> str:
        self.string(value, field)
        used = set(_PLACEHOLDER.findall(value))
        for name in sorted(used - allowed):
            hint = difflib.get_close_matches(_clip(name, 100), allowed, n=1)
            did_you_mean = f" (did you mean {{{hint[0]}}}?)" if hint else ""
            self.fail(field, f"unknown placeholder {{{_clip(name)}}}{did_you_mean}; allowed: "
                             + ", ".join(f"{{{a}}}" for a in sorted(allowed)))
        missing = [f"{{{name}}}" for name in required if name not in used]
        if missing:
            self.fail(field, f"must contain {', '.join(missing)}")
        return value

    def scale(self, value: Any, field: str) -> tuple[int, int]:
        ok = (isinstance(value, list) and len(value) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
              and value[0] < value[1])
        if not ok:
            self.fail(field, f"must be two integers [min, max] with min < max, got {_short(value)}")
        return (value[0], value[1])


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _type_name(value: Any) -> str:
    return "nothing (empty)" if value is None else type(value).__name__


def parse_aspects(data: dict, source: str = "<dict>") -> AspectSet:
    """Validate plain data in the YAML schema and build an ``AspectSet``.

    Raises AspectConfigError naming ``source`` and the offending field.
    """
    check = _Checker(source)
    check.mapping(data, "", required=("name", "aspects"),
                  optional=("domain", "description", "system_prompt", "judge_system_prompt",
                            "judge_template"))
    name = check.identifier(data["name"], "name")
    domain = check.string(data.get("domain", DEFAULT_DOMAIN), "domain")
    description = check.string(data.get("description", ""), "description", allow_empty=True)
    system_prompt = check.template(data.get("system_prompt", DEFAULT_SYSTEM_PROMPT),
                                   "system_prompt", SYSTEM_PLACEHOLDERS)
    judge_system_prompt = check.template(data.get("judge_system_prompt", DEFAULT_JUDGE_SYSTEM_PROMPT),
                                         "judge_system_prompt", SYSTEM_PLACEHOLDERS)
    judge_template = check.template(data.get("judge_template", DEFAULT_JUDGE_TEMPLATE),
                                    "judge_template", JUDGE_PLACEHOLDERS,
                                    required=("abstract_a", "abstract_b", "rubric"))

    raw_aspects = data["aspects"]
    if not isinstance(raw_aspects, list):
        check.fail("aspects", f"expected a list of aspects, got {_type_name(raw_aspects)}")
    if not raw_aspects:
        check.fail("aspects", "must not be empty")

    aspects: list[Aspect] = []
    aspect_fields: dict[str, str] = {}  # name -> field path, to point at the first one
    key_fields: dict[str, str] = {}
    for i, raw in enumerate(raw_aspects):
        aspects.append(_parse_aspect(check, raw, f"aspects[{i}]", aspect_fields, key_fields))

    return AspectSet(
        name=name, domain=domain, description=description, system_prompt=system_prompt,
        aspects=tuple(aspects), judge_template=judge_template, source=source,
        judge_system_prompt=judge_system_prompt,
    )


def _parse_aspect(check: _Checker, raw: Any, field: str,
                  aspect_fields: dict[str, str], key_fields: dict[str, str]) -> Aspect:
    """Validate one entry of ``aspects`` and build its ``Aspect``.

    ``aspect_fields`` and ``key_fields`` map the names and prompt keys seen so far (over the
    whole set) to their field paths, so a duplicate's error points at the first one; both are
    updated here.
    """
    check.mapping(raw, field, required=("name", "description", "prompts"),
                  optional=("include", "exclude", "examples", "judge"))
    aspect_name = check.identifier(raw["name"], f"{field}.name")
    if problem := folder_name_problem(aspect_name):  # it names aspect_models/<aspect>/
        check.fail(f"{field}.name", problem)
    if aspect_name in aspect_fields:
        check.fail(f"{field}.name",
                   f"duplicate aspect name {_short(aspect_name)} (also {aspect_fields[aspect_name]})")
    aspect_fields[aspect_name] = field
    prompts = _parse_prompts(check, raw["prompts"], field, key_fields)

    judge = None
    if raw.get("judge") is not None:
        jfield = f"{field}.judge"
        raw_judge = check.mapping(raw["judge"], jfield, required=("rubric",), optional=("scale",))
        judge = JudgeSpec(
            scale=check.scale(raw_judge.get("scale", [1, 5]), f"{jfield}.scale"),
            rubric=check.template(raw_judge["rubric"], f"{jfield}.rubric", RUBRIC_PLACEHOLDERS),
        )

    return Aspect(
        name=aspect_name,
        description=check.string(raw["description"], f"{field}.description"),
        include=check.string_list(raw.get("include"), f"{field}.include"),
        exclude=check.string_list(raw.get("exclude"), f"{field}.exclude"),
        examples=check.string_list(raw.get("examples"), f"{field}.examples"),
        prompts=tuple(prompts),
        judge=judge,
    )


def _parse_prompts(check: _Checker, raw_prompts: Any, field: str, key_fields: dict[str, str]) -> list[PromptSpec]:
    """Validate an aspect's ``prompts`` list; prompt keys are unique over the whole set (``key_fields``)."""
    if not isinstance(raw_prompts, list):
        check.fail(f"{field}.prompts", f"expected a list of prompts, got {_type_name(raw_prompts)}")
    if not raw_prompts:
        check.fail(f"{field}.prompts", "must not be empty")
    prompts = []
    for j, raw_prompt in enumerate(raw_prompts):
        pfield = f"{field}.prompts[{j}]"
        check.mapping(raw_prompt, pfield, required=("key", "template"), optional=())
        key = check.identifier(raw_prompt["key"], f"{pfield}.key")
        if key in key_fields:
            check.fail(f"{pfield}.key", f"duplicate prompt key {_short(key)} (also {key_fields[key]})")
        key_fields[key] = pfield
        template = check.template(raw_prompt["template"], f"{pfield}.template",
                                  GENERATION_PLACEHOLDERS, required=("abstract",))
        prompts.append(PromptSpec(key=key, template=template))
    return prompts
