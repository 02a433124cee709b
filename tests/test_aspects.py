"""Tests for workbench.data.aspects: presets, prompt rendering, judge prompts and validation."""

from __future__ import annotations

import copy
import re
import time

import pytest
import yaml

from workbench.data.aspects import (
    GENERATION_PLACEHOLDERS,
    JUDGE_PLACEHOLDERS,
    AspectConfigError,
    AspectSet,
    list_presets,
    load_aspects,
    parse_aspects,
    parse_aspects_yaml,
    render_template,
)

EXPECTED = {
    "invasion-biology": (
        "invasion_biology",
        ["hypothesis", "ecosystem", "research_question", "species", "methodology", "recommendation"],
        ["hypothesis_general", "hypothesis_specific", "ecosystem", "research_question", "species",
         "methodology", "recommendation"],
    ),
    "medicine": ("medicine", ["disease", "methodology", "patient_group"],
                 ["disease", "methodology", "patient_group"]),
    "acl": ("acl", ["challenge", "approach", "outcome"], ["challenge", "approach", "outcome"]),
}

ABSTRACT = ("Invasive rats on islands compete with one another; a model shows that "
            "incumbent advantage and propagule pressure decide which species dominates.")

KNOWN_PLACEHOLDER = re.compile(
    r"\{(" + "|".join(sorted(GENERATION_PLACEHOLDERS | JUDGE_PLACEHOLDERS)) + r")\}")


def all_keys():
    return [(preset, key) for preset in EXPECTED for key in EXPECTED[preset][2]]


# ---------------------------------------------------------------- presets


def test_list_presets():
    assert list_presets() == sorted(EXPECTED)


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_presets_load_with_expected_aspects_and_keys(preset):
    name, aspects, keys = EXPECTED[preset]
    s = load_aspects(preset)
    assert s.name == name
    assert s.names == aspects
    assert [k for _, k in s.prompt_keys()] == keys
    assert s.source == f"preset:{preset}"
    assert len(s) == len(aspects) and [a.name for a in s] == aspects


def test_invasion_biology_hypothesis_has_two_keys():
    s = load_aspects("invasion-biology")
    assert [p.key for p in s["hypothesis"].prompts] == ["hypothesis_general", "hypothesis_specific"]
    assert s.aspect_of("hypothesis_general") == s.aspect_of("hypothesis_specific") == "hypothesis"
    # The two hypothesis prompts must actually ask different things.
    assert s.messages("hypothesis_general", ABSTRACT) != s.messages("hypothesis_specific", ABSTRACT)


def test_set_name_with_underscore_resolves_to_preset():
    assert load_aspects("invasion_biology").names == load_aspects("invasion-biology").names


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_preset_judge_scales_and_content(preset):
    s = load_aspects(preset)
    for aspect in s:
        assert aspect.judge is not None, aspect.name
        # REFERENCE_FACTS: ecosystem and methodology of invasion biology on 1-6, the rest 1-5.
        six = preset == "invasion-biology" and aspect.name in ("ecosystem", "methodology")
        assert aspect.judge.scale == ((1, 6) if six else (1, 5)), aspect.name
        lo, hi = aspect.judge.scale
        # One rubric line per score level.
        levels = {int(m) for m in re.findall(r"^(\d+):", aspect.judge.rubric, re.M)}
        assert levels == set(range(lo, hi + 1)), aspect.name
        assert 2 <= len(aspect.examples) <= 4 and aspect.include and aspect.exclude, aspect.name


# ---------------------------------------------------------------- generation messages


@pytest.mark.parametrize("preset,key", all_keys())
def test_generation_messages_follow_the_rules(preset, key):
    s = load_aspects(preset)
    messages = s.messages(key, ABSTRACT)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert ABSTRACT in user
    assert "Not applicable." in user
    assert '{"sentence": "..."}' in user  # the JSON answer format survives rendering
    assert "ONE" in user and "sentence" in user
    assert "no numbers" in user and "names" in user
    for text in (system, user):
        assert not KNOWN_PLACEHOLDER.search(text), text


def test_braces_inside_the_abstract_are_not_substituted():
    s = load_aspects("acl")
    tricky = 'We use {aspect} and {"json": 1} and {abstract} literally.'
    user = s.messages("challenge", tricky)[1]["content"]
    assert tricky in user


def test_render_template_only_touches_known_names():
    out = render_template('{a} {b} {"sentence": "x"} {{a}}', {"a": "A"})
    assert out == 'A {b} {"sentence": "x"} {A}'


def test_unknown_prompt_key_and_aspect_errors_list_valid_names():
    s = load_aspects("medicine")
    with pytest.raises(KeyError, match="patient_group"):
        s.messages("nope", ABSTRACT)
    with pytest.raises(KeyError, match="disease, methodology, patient_group"):
        s["nope"]
    assert "disease" in s and "nope" not in s


# ---------------------------------------------------------------- judge messages


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_judge_messages_contain_both_abstracts_and_scale(preset):
    s = load_aspects(preset)
    for aspect in s:
        lo, hi = aspect.judge.scale
        system, user = (m["content"] for m in s.judge_messages(aspect.name, "ABSTRACT-ONE", "ABSTRACT-TWO"))
        assert "ABSTRACT-ONE" in user and "ABSTRACT-TWO" in user
        assert f"from {lo} to {hi}" in user
        assert f"{hi}:" in user  # the rubric itself is included
        # Reasoning is asked for before the score.
        assert user.index('"reasoning"') < user.index('"score"')
        assert not KNOWN_PLACEHOLDER.search(user) and not KNOWN_PLACEHOLDER.search(system)


def test_judge_falls_back_to_default_rubric():
    s = parse_aspects(minimal())
    assert s["topic"].judge is None
    assert s.judge_spec("topic").scale == (1, 5)
    user = s.judge_messages("topic", "AAA", "BBB")[1]["content"]
    assert "AAA" in user and "BBB" in user and "from 1 to 5" in user
    assert "5: The topic" in user  # rubric placeholders are filled


# ---------------------------------------------------------------- other API


def test_prompt_hash_tracks_template_and_fields():
    base = minimal()
    h = parse_aspects(base).prompt_hash("topic")
    assert re.fullmatch(r"[0-9a-f]{12}", h)
    assert parse_aspects(copy.deepcopy(base)).prompt_hash("topic") == h  # deterministic
    changed = copy.deepcopy(base)
    changed["aspects"][0]["prompts"][0]["template"] += "Be brief.\n"
    assert parse_aspects(changed).prompt_hash("topic") != h
    changed = copy.deepcopy(base)
    changed["aspects"][0]["include"] = ["something else"]
    assert parse_aspects(changed).prompt_hash("topic") != h
    # The hash covers what the model sees: a field the template does not use leaves it alone.
    changed = copy.deepcopy(base)
    changed["aspects"][0]["examples"] = ["An unused example."]
    assert parse_aspects(changed).prompt_hash("topic") == h
    changed = copy.deepcopy(base)
    changed["system_prompt"] = "Different system prompt for {domain}."
    assert parse_aspects(changed).prompt_hash("topic") != h


def test_prompt_hashes_differ_between_keys():
    s = load_aspects("invasion-biology")
    hashes = [s.prompt_hash(k) for _, k in s.prompt_keys()]
    assert len(set(hashes)) == len(hashes)


def test_subset_keeps_given_aspects_and_rejects_unknown():
    s = load_aspects("invasion-biology")
    sub = s.subset(["species", "hypothesis"])
    assert sub.names == ["species", "hypothesis"]
    assert [k for _, k in sub.prompt_keys()] == ["species", "hypothesis_general", "hypothesis_specific"]
    assert isinstance(sub, AspectSet) and s.names[0] == "hypothesis"  # original untouched
    with pytest.raises(KeyError, match="research_question"):
        s.subset(["species", "habitat"])


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_to_yaml_round_trips(preset):
    s = load_aspects(preset)
    again = parse_aspects_yaml(s.to_yaml(), source=s.source)
    assert again == s


def test_repr_html_escapes_text():
    data = minimal()
    data["aspects"][0]["description"] = "<script>alert(1)</script> & more"
    out = parse_aspects(data)._repr_html_()
    assert "<script>" not in out
    assert "&lt;script&gt;" in out and "&amp; more" in out
    assert "<table>" in out and "topic" in out


def test_user_written_domain_file_loads(tmp_path):
    path = tmp_path / "materials.yaml"
    path.write_text(
        "name: materials\n"
        "domain: materials science\n"
        "aspects:\n"
        "  - name: material_class\n"
        "    description: The kind of material studied.\n"
        "    include: [bonding type, structure]\n"
        "    exclude: [trade names, numbers]\n"
        "    examples: [\"A layered transition-metal oxide used as a battery cathode.\"]\n"
        "    prompts:\n"
        "      - key: material_class\n"
        "        template: |\n"
        "          Abstract: {abstract}\n"
        "          Describe the {aspect} ({description}) in ONE sentence. Include:\n"
        "          {include}\n"
        "          If not stated, reply {\"sentence\": \"Not applicable.\"}\n"
        "          Answer as JSON: {\"sentence\": \"...\"}\n"
        "    judge:\n"
        "      scale: [0, 3]\n"
        "      rubric: \"3: same {aspect}\\n0: unrelated\"\n",
        encoding="utf-8",
    )
    for arg in (path, str(path)):
        s = load_aspects(arg)
        assert s.name == "materials" and s.source == str(path)
        system, user = (m["content"] for m in s.messages("material_class", ABSTRACT))
        assert "materials science" in system  # default system prompt uses the domain
        assert ABSTRACT in user and "- bonding type" in user and "material class" in user
        assert '{"sentence": "Not applicable."}' in user
        judge = s.judge_messages("material_class", "AAA", "BBB")[1]["content"]
        assert "from 0 to 3" in judge and "3: same material class" in judge


def test_missing_preset_lists_available(tmp_path):
    with pytest.raises(AspectConfigError, match="acl, invasion-biology, medicine") as err:
        load_aspects("no-such-set")
    assert "no-such-set" in str(err.value)
    missing = tmp_path / "gone.yaml"
    with pytest.raises(AspectConfigError, match="available presets") as err:
        load_aspects(missing)
    assert str(missing) in str(err.value)


# ---------------------------------------------------------------- validation


def minimal() -> dict:
    """A small valid aspect set as plain data."""
    return {
        "name": "tiny",
        "domain": "testing",
        "aspects": [
            {
                "name": "topic",
                "description": "What it is about.",
                "include": ["the subject"],
                "exclude": ["names"],
                "examples": ["A study of things."],
                "prompts": [{"key": "topic",
                             "template": 'Abstract: {abstract}\nOne sentence on the {aspect}, or '
                                         '"Not applicable.". Include:\n{include}\nJSON: {"sentence": "..."}\n'}],
            },
            {
                "name": "method",
                "description": "How it was done.",
                "prompts": [{"key": "method", "template": "{abstract} -> method"}],
                "judge": {"scale": [1, 5], "rubric": "5: same\n1: different"},
            },
        ],
    }


def edit(fn):
    """A case built by changing a copy of minimal() with ``fn``; the file is its YAML dump."""
    data = minimal()
    fn(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(path, value):
    def fn(data):
        *parents, last = path
        target = data
        for p in parents:
            target = target[p]
        target[last] = value
    return fn


def _drop(path):
    def fn(data):
        *parents, last = path
        target = data
        for p in parents:
            target = target[p]
        del target[last]
    return fn


A0, P00 = ("aspects", 0), ("aspects", 0, "prompts", 0)

BAD_CASES = {
    # id: (file text, field path expected in the message, other expected substrings)
    "top_level_list": ("- a\n- b\n", "(top level)", ["expected a mapping", "list"]),
    "empty_file": ("", "(top level)", ["expected a mapping"]),
    "yaml_syntax": ("name: tiny\naspects: [\n  {name: x\n", None, ["YAML syntax error", "line ", "column "]),
    "yaml_duplicate_key": ("name: a\nname: b\naspects: []\n", None, ["duplicate key 'name'", "line 2"]),
    "missing_name": (edit(_drop(("name",))), "name", ["missing required field"]),
    "missing_aspects": (edit(_drop(("aspects",))), "aspects", ["missing required field"]),
    "missing_aspect_name": (edit(_drop((*A0, "name"))), "aspects[0].name", ["missing"]),
    "missing_description": (edit(_drop((*A0, "description"))), "aspects[0].description", ["missing"]),
    "missing_prompts": (edit(_drop((*A0, "prompts"))), "aspects[0].prompts", ["missing"]),
    "missing_key": (edit(_drop((*P00, "key"))), "aspects[0].prompts[0].key", ["missing"]),
    "missing_template": (edit(_drop((*P00, "template"))), "aspects[0].prompts[0].template", ["missing"]),
    "missing_rubric": (edit(_drop(("aspects", 1, "judge", "rubric"))), "aspects[1].judge.rubric", ["missing"]),
    "name_not_string": (edit(_set(("name",), 123)), "name", ["expected a string", "int"]),
    "domain_not_string": (edit(_set(("domain",), ["x"])), "domain", ["expected a string"]),
    "empty_description": (edit(_set((*A0, "description"), "  ")), "aspects[0].description", ["empty"]),
    "include_not_list": (edit(_set((*A0, "include"), "the subject")), "aspects[0].include",
                         ["list of strings"]),
    "include_item_not_string": (edit(_set((*A0, "include"), ["ok", 5])), "aspects[0].include[1]",
                                ["expected a string"]),
    "aspects_not_list": (edit(_set(("aspects",), {"name": "x"})), "aspects", ["expected a list"]),
    "aspects_empty": (edit(_set(("aspects",), [])), "aspects", ["must not be empty"]),
    "aspect_not_mapping": (edit(_set(("aspects", 0), "topic")), "aspects[0]", ["expected a mapping"]),
    "prompts_empty": (edit(_set((*A0, "prompts"), [])), "aspects[0].prompts", ["must not be empty"]),
    "unknown_top_key": (edit(_set(("descripton",), "x")), "descripton",
                        ["unknown key", "did you mean 'description'", "allowed:"]),
    "unknown_aspect_key": (edit(_set((*A0, "exlude"), ["x"])), "aspects[0].exlude",
                           ["unknown key", "exclude"]),
    "unknown_prompt_key": (edit(_set((*P00, "templte"), "x")), "aspects[0].prompts[0].templte",
                           ["unknown key", "template"]),
    "unknown_judge_key": (edit(_set(("aspects", 1, "judge", "rubrik"), "x")), "aspects[1].judge.rubrik",
                          ["unknown key", "rubric"]),
    "bad_set_name": (edit(_set(("name",), "Tiny Set")), "name", ["invalid identifier"]),
    "bad_aspect_name": (edit(_set((*A0, "name"), "Topic-1")), "aspects[0].name", ["invalid identifier"]),
    "bad_prompt_key": (edit(_set((*P00, "key"), "my-key")), "aspects[0].prompts[0].key",
                       ["invalid identifier"]),
    "duplicate_aspect": (edit(_set(("aspects", 1, "name"), "topic")), "aspects[1].name",
                         ["duplicate aspect name", "aspects[0]"]),
    "duplicate_prompt_key": (edit(_set(("aspects", 1, "prompts", 0, "key"), "topic")),
                             "aspects[1].prompts[0].key", ["duplicate prompt key", "aspects[0].prompts[0]"]),
    "template_without_abstract": (edit(_set((*P00, "template"), 'Summarise. {"sentence": "..."}')),
                                  "aspects[0].prompts[0].template", ["must contain {abstract}"]),
    "template_unknown_placeholder": (edit(_set((*P00, "template"), "{abstrakt} {abstract}")),
                                     "aspects[0].prompts[0].template",
                                     ["unknown placeholder {abstrakt}", "did you mean {abstract}"]),
    "system_prompt_placeholder": (edit(_set(("system_prompt",), "About {abstract}")), "system_prompt",
                                  ["unknown placeholder {abstract}"]),
    "rubric_unknown_placeholder": (edit(_set(("aspects", 1, "judge", "rubric"), "5: {score}")),
                                   "aspects[1].judge.rubric", ["unknown placeholder {score}"]),
    "scale_reversed": (edit(_set(("aspects", 1, "judge", "scale"), [5, 1])), "aspects[1].judge.scale",
                       ["min < max"]),
    "scale_equal": (edit(_set(("aspects", 1, "judge", "scale"), [3, 3])), "aspects[1].judge.scale",
                    ["min < max"]),
    "scale_one_value": (edit(_set(("aspects", 1, "judge", "scale"), [5])), "aspects[1].judge.scale",
                        ["two integers"]),
    "scale_floats": (edit(_set(("aspects", 1, "judge", "scale"), [1.0, 5.0])), "aspects[1].judge.scale",
                     ["two integers"]),
    "scale_strings": (edit(_set(("aspects", 1, "judge", "scale"), ["1", "5"])), "aspects[1].judge.scale",
                      ["two integers"]),
    "scale_bool": (edit(_set(("aspects", 1, "judge", "scale"), [False, True])), "aspects[1].judge.scale",
                   ["two integers"]),
    "judge_not_mapping": (edit(_set(("aspects", 1, "judge"), "strict")), "aspects[1].judge",
                          ["expected a mapping"]),
    "judge_template_no_b": (edit(_set(("judge_template",), "{abstract_a} {rubric}")), "judge_template",
                            ["must contain {abstract_b}"]),
    "judge_template_no_rubric": (edit(_set(("judge_template",), "{abstract_a} {abstract_b}")),
                                 "judge_template", ["must contain {rubric}"]),
    "judge_template_typo": (edit(_set(("judge_template",), "{abstract_a} {abstract_b} {rubrik} {rubric}")),
                            "judge_template", ["unknown placeholder {rubrik}"]),
}


def test_minimal_case_is_valid(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(edit(lambda d: None), encoding="utf-8")
    assert load_aspects(path).names == ["topic", "method"]


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_malformed_file_names_file_and_field(case, tmp_path):
    text, field, expected = BAD_CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AspectConfigError) as err:
        load_aspects(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    if field is not None:
        assert message.startswith(f"{path}: {field}: "), message
        assert err.value.field == field
    for part in expected:
        assert part in message, message


def test_parse_aspects_rejects_non_mapping_with_source():
    with pytest.raises(AspectConfigError, match=r"^cfg: \(top level\): expected a mapping"):
        parse_aspects(["not", "a", "mapping"], source="cfg")
    assert isinstance(AspectConfigError("s", "f", "p"), ValueError)


# ---------------------------------------------------------------- hostile or huge input


def _bomb_file(levels: int = 9) -> str:
    """A "billion laughs" aspect file: nested aliases in judge.scale that expand to 9**levels items."""
    names = "abcdefghijklmnop"
    chain = [f"&{names[0]} [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    chain += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return ("name: tiny\naspects:\n  - name: topic\n    description: d\n"
            "    prompts: [{key: topic, template: '{abstract}'}]\n"
            f"    judge:\n      rubric: r\n      scale: [{', '.join(chain)}]\n")


def test_yaml_alias_bomb_fails_fast_with_a_short_message(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb_file(), encoding="utf-8")
    assert len(path.read_bytes()) < 600
    start = time.perf_counter()
    with pytest.raises(AspectConfigError) as err:
        load_aspects(path)
    assert time.perf_counter() - start < 1
    message = str(err.value)
    assert len(message) < 1000, message[:2000]
    assert message.startswith(f"{path}: ") and "alias" in message and "write the values out" in message


def test_aliases_of_a_few_values_still_load(tmp_path):
    """The presets share one template through &generation / *generation; small shared lists are fine too."""
    text = edit(lambda d: None).replace("include:\n  - the subject", "include: &inc\n  - the subject")
    text = text.replace("  description: How it was done.\n", "  description: How it was done.\n  include: *inc\n")
    path = tmp_path / "alias.yaml"
    path.write_text(text, encoding="utf-8")
    s = load_aspects(path)
    assert s["method"].include == s["topic"].include == ("the subject",)


def test_error_messages_never_hold_an_unbounded_value():
    """A value built with shared references (or just a very long one) is cut short in the message."""
    bomb: object = ["lol"] * 9
    for _ in range(8):
        bomb = [bomb] * 9  # 9**9 items when written out
    long_name = "x" * 100_000
    cases = [_set(("aspects", 1, "judge", "scale"), bomb), _set(("name",), "Not An Identifier " + long_name),
             _set((long_name,), 1), _set(("aspects", 0, "name"), long_name.upper())]
    for change in cases:
        data = minimal()
        change(data)
        start = time.perf_counter()
        with pytest.raises(AspectConfigError) as err:
            parse_aspects(data, source="cfg")
        assert time.perf_counter() - start < 1
        assert len(str(err.value)) < 1000, str(err.value)[:2000]
    with pytest.raises(AspectConfigError, match="duplicate key") as err:
        parse_aspects_yaml(f"? {long_name}\n: 1\n? {long_name}\n: 2\n", "cfg")  # "?": keys over 1024 chars
    assert len(str(err.value)) < 1000
    with pytest.raises(KeyError) as err:
        load_aspects("acl")[long_name]
    assert len(str(err.value)) < 1000
    for wrong in (long_name, "name: tiny\naspects: []\n" * 1000):  # a name too long, YAML text by mistake
        with pytest.raises(AspectConfigError) as err:
            load_aspects(wrong)
        assert len(str(err.value)) < 1000
    assert "parse_aspects_yaml" in str(err.value)
