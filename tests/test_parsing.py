"""Tolerant parsing of LLM answers."""

import pytest

from workbench.generate.parsing import NOT_APPLICABLE, is_not_applicable, parse_judgement, parse_sentence


@pytest.mark.parametrize("answer, expected", [
    ('{"sentence": "A method for parsing."}', "A method for parsing."),
    ('```json\n{"sentence": "A method for parsing."}\n```', "A method for parsing."),
    ('Sure! Here it is:\n{"sentence": "A method for parsing."}\nHope this helps {not json}', "A method for parsing."),
    ('{"sentence": "A method for parsing.", "extra": [1, 2]}', "A method for parsing."),
    ('{"sentence": "A method   for\\nparsing."}', "A method for parsing."),
    ('{"sentence": "A method for parsing', "A method for parsing"),  # cut off by max tokens
    ('{"sentence": "Uses \\"quoted\\" terms."}', 'Uses "quoted" terms.'),
    ('{"other": 1} {"sentence": "Second object."}', "Second object."),
])
def test_sentence_is_extracted(answer, expected):
    parsed = parse_sentence(answer)
    assert parsed.status == "ok"
    assert parsed.value == expected


@pytest.mark.parametrize("answer", [
    '{"sentence": "Not applicable."}', '{"sentence": "not applicable"}', '{"sentence": "N/A"}',
    "Not applicable.", "NOT APPLICABLE - the abstract says nothing about it", '```json\n{"sentence": "Not Applicable."}\n```',
])
def test_not_applicable_variants(answer):
    parsed = parse_sentence(answer)
    assert parsed.status == "not_applicable"
    assert parsed.value == NOT_APPLICABLE


@pytest.mark.parametrize("answer", ["", "   ", "The paper is about parsing.", '{"summary": "x"}', '{"sentence": ""}',
                                    '{"sentence": 3}', None,
                                    # the prompt copied, not answered (SmolLM2 in the demo)
                                    '{"sentence": "..."}', '{"sentence": " - ?"}', '{"sentence": "### {text}###"}',
                                    '{"sentence": "The {aspect} of the paper."}',
                                    # a question about the paper instead of a statement (SmolLM2 in the demo)
                                    '{"sentence": "How does it achieve its goals?"}',
                                    '{"sentence": "Sentence: How does it work? "}'])
def test_unparsable_answers_are_flagged(answer):
    parsed = parse_sentence(answer)
    assert parsed.status == "unparsed"
    assert parsed.value is None
    assert parsed.error


def test_sentences_with_braces_or_few_words_are_still_answers():
    assert parse_sentence('{"sentence": "We bound the loss by {0, 1} labels."}').status == "ok"
    assert parse_sentence('{"sentence": "BERT."}').value == "BERT."
    assert parse_sentence('{"sentence": "Does syntax help? Yes: parsers gain two points."}').status == "ok"


def test_not_applicable_does_not_match_ordinary_sentences():
    assert not is_not_applicable("Nanotechnology is applicable to parsing.")
    assert not is_not_applicable("Non-applicable methods are compared.")
    assert not is_not_applicable("NAACL papers are studied.")


@pytest.mark.parametrize("answer, score", [
    ('{"reasoning": "Both parse.", "score": 4}', 4),
    ('```json\n{"reasoning": "x", "score": "2"}\n```', 2),
    ('{"reasoning": "cut off before the end... "score": 5', 5),
    ('{"reasoning": "x", "score": 3.0}', 3),
])
def test_judgement_scores(answer, score):
    parsed = parse_judgement(answer, (1, 5))
    assert parsed.status == "ok"
    assert parsed.value["score"] == score


@pytest.mark.parametrize("answer", ['{"reasoning": "x", "score": 7}', '{"reasoning": "x", "score": 0}',
                                    '{"reasoning": "x", "score": 2.5}', '{"reasoning": "x"}', "four", ""])
def test_bad_judgements_are_flagged(answer):
    assert parse_judgement(answer, (1, 5)).status == "unparsed"
