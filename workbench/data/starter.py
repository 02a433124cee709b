"""A starter aspect file (`workbench aspects new`): aspect names and one-line descriptions in, a file that
stage 01 runs with out, the default prompt filled in, so a user edits words, not templates."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .aspects import AspectConfigError, load_aspects

# The generation prompt of every aspect of a starter file (as in data/my_field.yaml): it asks for one
# general sentence, names what to include and leave out, shows the examples, and says how to decline.
PROMPT_TEMPLATE = """\
Aspect: {aspect}. {description}

Write ONE short, general sentence that describes only this aspect of the abstract below.
Mention when the abstract gives them:
{include}
Do not mention:
{exclude}
Example sentences (for other abstracts):
{examples}

Abstract:
{abstract}

If the abstract does not state this aspect, reply {"sentence": "Not applicable."}
Reply with exactly one JSON object: {"sentence": "..."}
"""

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def parse_aspect_arguments(items: list[str]) -> list[tuple[str, str]]:
    """`["disease: the disease studied", ...]` as [(name, description)]; a clear ValueError for what is wrong."""
    if not items:
        raise ValueError("name at least one aspect: --aspect 'disease: the disease or condition studied'")
    out: list[tuple[str, str]] = []
    for item in items:
        name, sep, description = str(item).partition(":")
        name, description = name.strip(), description.strip()
        if not sep or not description:
            raise ValueError(f"{item!r}: write an aspect as 'name: one-line description'")
        if not _NAME.match(name):
            suggestion = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
            raise ValueError(f"{name!r} is not an aspect name: lower-case letters, digits and _ only, starting "
                             f"with a letter" + (f" (e.g. {suggestion!r})" if _NAME.match(suggestion or "") else ""))
        if name in {n for n, _ in out}:
            raise ValueError(f"aspect {name!r} is named twice")
        out.append((name, description))
    return out


def starter_yaml(name: str, aspects: list[tuple[str, str]], domain: str = "scientific research") -> str:
    """The text of a starter aspect file: each aspect's description, empty lists to fill in, the default prompt."""
    data = {"name": name, "domain": domain, "aspects": [
        {"name": a, "description": d, "include": [], "exclude": [], "examples": [],
         "prompts": [{"key": a, "template": PROMPT_TEMPLATE}]} for a, d in aspects]}
    head = ("# A starter aspect file written by `workbench aspects new`. Edit the words, not the template:\n"
            "#   description  one line: what the aspect is\n"
            "#   include      what a summary of this aspect should mention when the abstract gives it\n"
            "#   exclude      what it must leave out (other aspects, names, numbers)\n"
            "#   examples     two or three sentences of the kind you want, for other abstracts\n"
            "# Check it with `workbench aspects " + name + ".yaml`; run it with -p aspects=" + name + ".yaml.\n")
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_starter(path, aspects: list[tuple[str, str]], domain: str = "scientific research",
                  force: bool = False) -> Path:
    """Write a starter aspect file at `path` (its stem is the set's name) and check that it loads."""
    path = Path(path)
    if path.suffix not in {".yaml", ".yml"}:
        path = path.with_name(path.name + ".yaml")
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; choose another name, or pass --force to replace it")
    name = re.sub(r"[^a-z0-9_]+", "_", path.stem.lower()).strip("_") or "my_aspects"
    if not _NAME.match(name):
        name = "aspects_" + name
    text = starter_yaml(name, aspects, domain)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    try:
        load_aspects(path)
    except AspectConfigError:
        path.unlink()
        raise
    return path
