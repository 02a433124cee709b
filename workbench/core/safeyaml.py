"""Reading users' YAML (aspect and parameters files) safely: no duplicate keys, no alias bombs; writing it readably."""

from __future__ import annotations

import reprlib

import yaml

# Nodes plus characters an aspect or parameters file may expand to with its aliases written out.
MAX_ALIAS_EXPANSION = 1_000_000
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 100, 100


def short(value, limit: int = 200) -> str:
    """``repr(value)`` cut to at most ``limit`` characters, cheap whatever the value holds."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class AliasError(yaml.YAMLError):
    """Aliases that expand too far (or into themselves); aspects.parse_aspects_yaml turns it into AspectConfigError,
    runconfig.load_params into RunConfigError."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, which plain YAML silently overwrites, and alias bombs.

    An alias (``*name``) repeats the value of an anchor (``&name``). The presets use that
    to share one template, which is harmless; but aliases of lists that hold aliases of
    lists multiply ("billion laughs": 500 bytes that expand to a billion items, gigabytes
    of memory once anything walks or prints them). Before any value is built, the
    document's size with every alias written out is counted (each shared node once, so
    the count itself is cheap) and a document over MAX_ALIAS_EXPANSION, or an alias
    inside its own anchor, is refused.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) and not hasattr(self, "_first_alias"):
            self._first_alias = self.peek_event().start_mark
        return super().compose_node(parent, index)

    def compose_document(self):
        node = super().compose_document()
        mark = getattr(self, "_first_alias", None)
        if mark is not None:
            where = f"first alias at line {mark.line + 1}"
            try:
                size = expanded_size(node, {}, set())
            except AliasError:
                raise AliasError(f"uses a YAML alias (*name) inside the value of its own anchor (&name) "
                                  f"({where}); write the values out") from None
            if size > MAX_ALIAS_EXPANSION:
                raise AliasError(
                    f"uses YAML aliases (&name / *name, {where}) that expand to {size:,} nodes and characters, "
                    f"more than the {MAX_ALIAS_EXPANSION:,} a YAML file may have here (nested aliases, a "
                    "'billion laughs' document); write the values out instead of repeating them through aliases")
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key; SafeLoader reports it itself
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {short(key)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def expanded_size(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    """Nodes plus characters of text of ``node`` with every alias written out; AliasError on a cycle."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise AliasError("recursive alias")
    if isinstance(node, yaml.ScalarNode):
        size = 1 + len(node.value)
    else:
        active.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        size = 1 + sum(expanded_size(child, memo, active) for child in children)
        active.discard(key)
    memo[key] = size
    return size


class BlockDumper(yaml.SafeDumper):
    """Dumps multi-line strings as ``|`` blocks so prompts stay readable."""


BlockDumper.add_representer(
    str,
    lambda dumper, s: dumper.represent_scalar(
        "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None),
)
