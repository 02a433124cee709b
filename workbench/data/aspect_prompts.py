"""The default prompts of an aspect set: the summariser's system prompt, and the judge's system prompt and
template (`aspects.AspectSet` uses them where a YAML file gives none; `aspects` re-exports them)."""

DEFAULT_DOMAIN = "scientific research"

DEFAULT_SYSTEM_PROMPT = (
    "You summarise scientific abstracts from {domain}, one aspect at a time. "
    "Describe only the requested aspect, in general terms that would also fit "
    "other studies of the same kind. Never use proper names (of organisms, "
    "people, places, institutions, datasets or models) and never use numbers; "
    'do not refer to "the study", "we" or "the authors". If the abstract does '
    'not state the aspect, the answer is exactly "Not applicable.". Reply with '
    "one JSON object and nothing else."
)

DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You are an expert in {domain}. You compare two scientific abstracts with "
    "respect to one aspect only. Both abstracts come from {domain}, so sharing "
    "the field is no evidence of similarity. Judge only from what the abstracts "
    "actually say, and answer with one JSON object and nothing else."
)

# Reasoning comes before the score on purpose: asking for the bare score gives
# inconsistent judgements (paper, appendix A.5).
DEFAULT_JUDGE_TEMPLATE = """\
Abstract A:
{abstract_a}

Abstract B:
{abstract_b}

Aspect: {aspect}. {description}

Judge how similar the two abstracts are with respect to this aspect alone.
Features that matter, when present:
{include}
Ignore:
{exclude}
Do not raise the score just because both abstracts belong to {domain}. If an abstract does not address the aspect, give the lowest score.

Scoring rubric (integers from {min_score} to {max_score}):
{rubric}

First write a short reasoning: what each abstract says about the aspect, where they agree and differ, and which score level that supports. Then give the score.
Reply with exactly one JSON object and nothing else:
{"reasoning": "<short reasoning>", "score": <integer from {min_score} to {max_score}>}
"""
