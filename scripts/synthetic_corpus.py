"""Synthetic scientific abstracts whose aspects vary independently: a ground truth the heads can be checked against.

Each document is a made-up clinical study with three aspects and one nuisance factor,
drawn independently of each other (balanced within each split):

    disease     6 values  (asthma, type 2 diabetes, migraine, ...)
    method      6 values  (randomised controlled trial, retrospective cohort study, ...)
    population  6 values  (children under five, elderly nursing-home residents, ...)
    drug        6 values  an invented drug name: NUISANCE, no aspect

The abstract has 4-6 sentences: one sentence per aspect (sometimes a second one for one
aspect), and one or two filler sentences that state no aspect. Every value is worded in
three ways and every factor has several sentence templates, so that no single word
identifies a value. The order of the aspect sentences is shuffled in half of the
documents and the fillers go anywhere. The drug is named in one or two sentences chosen at
random among all of them (disease, method, population or filler alike), so its name is
tied to no aspect; the other sentences speak of "the study drug" and the like.

Like ACLSum, each aspect has a human-like summary (`summary_<aspect>`: one sentence from
templates of its own, stating only that aspect, never the drug) and highlights
(`highlights_<aspect>`: the abstract's sentences that state it, exactly as they appear in
the abstract), so that `views.collect_views` and `head_training.sentence_supervision` use
them; both leave out the test split by themselves.

    from synthetic_corpus import synthetic_corpus, ASPECTS, NUISANCE
    corpus = synthetic_corpus(n_train=120, n_val=40, n_test=60, seed=0)

    python scripts/synthetic_corpus.py data/synthetic.jsonl [--train 120 --val 40 --test 60 --seed 0]

A CSV file stores the list columns (highlights_*, sentences) as JSON strings; `load_corpus` reads a highlights_* cell back
as its list (a `sentences` cell stays text). JSONL keeps them lists.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.data.corpus import Corpus  # noqa: E402

ASPECTS = ["disease", "method", "population"]
NUISANCE = "drug"
FACTORS = ASPECTS + [NUISANCE]
SPLITS = ("train", "validation", "test")

# value -> three wordings (the first is the value's name)
WORDINGS: dict[str, dict[str, list[str]]] = {
    "disease": {
        "asthma": ["asthma", "bronchial asthma", "reversible airway obstruction with recurrent wheeze"],
        "type 2 diabetes": ["type 2 diabetes", "non-insulin-dependent diabetes mellitus",
                            "adult-onset diabetes with insulin resistance"],
        "migraine": ["migraine", "recurrent migraine headache", "episodic headache attacks with aura"],
        "rheumatoid arthritis": ["rheumatoid arthritis", "inflammatory polyarthritis",
                                 "autoimmune inflammation of the joints"],
        "major depressive disorder": ["major depressive disorder", "clinical depression",
                                      "persistent low mood with loss of interest"],
        "chronic kidney disease": ["chronic kidney disease", "progressive renal insufficiency",
                                   "a slow decline of kidney function"],
    },
    "method": {  # with their article: they end "We conducted ..."
        "randomised controlled trial": ["a randomised controlled trial",
                                        "a double-blind trial with random allocation to treatment or placebo",
                                        "a multicentre placebo-controlled randomised study"],
        "retrospective cohort study": ["a retrospective cohort study",
                                       "a review of historical medical records that followed patients over time",
                                       "an analysis of a previously assembled cohort from routine records"],
        "case-control study": ["a case-control study",
                               "a comparison of affected cases with matched unaffected controls",
                               "a matched case-referent design"],
        "cross-sectional survey": ["a cross-sectional survey",
                                   "a questionnaire administered at a single point in time",
                                   "a one-off population survey"],
        "meta-analysis": ["a systematic review and meta-analysis",
                          "a pooled analysis of published trials found by a systematic literature search",
                          "a quantitative synthesis of earlier studies"],
        "qualitative interview study": ["a qualitative interview study",
                                        "semi-structured interviews analysed thematically",
                                        "in-depth conversations analysed with grounded theory"],
    },
    "population": {
        "children under five": ["children under five years of age", "infants and toddlers",
                                "preschool children"],
        "elderly nursing-home residents": ["elderly nursing-home residents",
                                           "older adults living in residential care homes",
                                           "frail residents of long-term care facilities"],
        "pregnant women": ["pregnant women", "expectant mothers in their second trimester",
                           "women attending antenatal clinics"],
        "adolescents": ["adolescents aged 12 to 17", "secondary-school pupils", "teenagers"],
        "night-shift workers": ["night-shift workers", "employees on rotating overnight schedules",
                                "hospital staff who work nights"],
        "military veterans": ["military veterans", "former service members", "retired armed-forces personnel"],
    },
}
DRUGS = ["Zorvatide", "Klemanol", "Pratexin", "Velubrant", "Dorafenol", "Tesquarin"]
VALUES = {**{f: list(w) for f, w in WORDINGS.items()}, NUISANCE: DRUGS}

# Abstract sentences. {x}: a wording of the value; {agent}: the drug's name or a generic phrase.
TEMPLATES: dict[str, list[str]] = {
    "disease": [
        "{x} remains a leading cause of chronic ill health, and existing therapies serve many patients poorly.",
        "Current management of {x} relieves symptoms but rarely alters the course of the condition.",
        "Despite decades of research, {x} is still difficult to control in routine care.",
        "{agent} was designed to act on the mechanisms that drive {x}.",
        "Whether {agent} benefits people with {x} has not been established.",
    ],
    "method": [
        "We conducted {x}.",
        "The evidence reported here comes from {x}.",
        "To answer this question, we designed {x} with a prespecified analysis plan.",
        "{agent} was assessed in {x}.",
        "Data on {agent} were gathered through {x}.",
    ],
    "population": [
        "Participants were {x}.",
        "The study population consisted of {x} recruited from several sites.",
        "Our analysis focused on {x}.",
        "{agent} was offered to {x}.",
        "Among {x}, uptake of {agent} was recorded.",
    ],
    "filler": [
        "Outcomes were recorded at baseline and at the end of follow-up.",
        "Secondary endpoints included quality of life and healthcare costs.",
        "The findings should inform the design of future work.",
        "Statistical analysis used mixed-effects models to account for repeated measures.",
        "Adherence to {agent} was high and adverse events were mostly mild.",
        "Tolerability of {agent} was acceptable throughout the observation period.",
        "These results add to a growing body of evidence on {agent}.",
    ],
}
GENERIC_AGENTS = ["the study drug", "the new compound", "the investigational agent", "the treatment"]

# Summaries: one sentence per aspect, templates of their own, never the drug.
SUMMARY_TEMPLATES: dict[str, list[str]] = {
    "disease": ["The paper is about {x}.", "This work addresses {x}.", "The condition studied is {x}."],
    "method": ["The study design is {x}.", "The authors report {x}.", "Methodologically, this is {x}."],
    "population": ["The work concerns {x}.", "The people studied were {x}.", "The research targets {x}."],
}


# ---- A second generator (style "b"), written and frozen before any method was tuned on it: the same
# factors and values, other wordings, other sentence templates, other fillers and drug names, and in
# about a third of the documents one sentence that states two aspects at once (disease and population).
WORDINGS_B: dict[str, dict[str, list[str]]] = {
    "disease": {
        "asthma": ["asthma", "chronic asthma with nocturnal cough", "asthma that flares with exercise and cold air"],
        "type 2 diabetes": ["type 2 diabetes", "poorly controlled hyperglycaemia of the non-autoimmune type",
                            "diabetes treated with metformin and diet"],
        "migraine": ["migraine", "migraine with photophobia and nausea", "chronic migraine of more than 15 days a month"],
        "rheumatoid arthritis": ["rheumatoid arthritis", "seropositive erosive arthritis",
                                 "arthritis with morning stiffness of the small hand joints"],
        "major depressive disorder": ["major depressive disorder", "moderate to severe unipolar depression",
                                      "depression with anhedonia and sleep disturbance"],
        "chronic kidney disease": ["chronic kidney disease", "advanced nephropathy with rising creatinine",
                                   "reduced glomerular filtration with albuminuria"],
    },
    "method": {
        "randomised controlled trial": ["a randomised controlled trial", "a trial where a computer allocated "
                                        "each participant by chance to the active arm or a dummy pill",
                                        "a blinded parallel-arm trial with concealed allocation"],
        "retrospective cohort study": ["a retrospective cohort study", "a look back through electronic patient "
                                       "charts covering the last decade",
                                       "a historical follow-up of a registry population"],
        "case-control study": ["a case-control study", "a design contrasting patients who developed the outcome "
                               "with similar patients who did not", "a matched comparison of cases and controls"],
        "cross-sectional survey": ["a cross-sectional survey", "a snapshot questionnaire mailed a single time to a sample",
                                   "a single-wave survey by telephone"],
        "meta-analysis": ["a meta-analysis", "a statistical pooling of all eligible trials from four databases",
                          "an umbrella synthesis of previously published findings"],
        "qualitative interview study": ["a qualitative interview study", "moderated discussions with transcripts "
                                        "coded for themes", "open-ended interviews with framework analysis"],
    },
    "population": {
        "children under five": ["children under five", "children aged one to four years",
                                "toddlers attending day care"],
        "elderly nursing-home residents": ["elderly nursing-home residents", "people over eighty living in care "
                                           "institutions", "aged residents of assisted-living homes"],
        "pregnant women": ["pregnant women", "women in the third trimester of pregnancy", "mothers-to-be"],
        "adolescents": ["adolescents", "young people aged thirteen to sixteen", "pupils in grades eight to ten"],
        "night-shift workers": ["night-shift workers", "factory staff on permanent night rotas",
                                "nurses working overnight shifts"],
        "military veterans": ["military veterans", "people who had served in the army or navy",
                              "ex-soldiers registered with veterans' services"],
    },
}
DRUGS_B = ["Quorilant", "Bexavirin", "Lumetrox", "Sandoprel", "Nivalta", "Ferozide"]
TEMPLATES_B: dict[str, list[str]] = {
    "disease": [
        "Background: {x} imposes a heavy burden on patients and health systems.",
        "People living with {x} often report that available treatments fall short.",
        "{agent} targets a pathway implicated in {x}.",
        "The benefit of {agent} in {x} is uncertain.",
    ],
    "method": [
        "Methods: the work was {x}.",
        "This report describes {x}.",
        "We used {x} to evaluate {agent}.",
        "Evidence on {agent} came from {x}.",
    ],
    "population": [
        "We enrolled {x}.",
        "The sample comprised {x} from three regions.",
        "Eligible participants were {x} who gave consent.",
        "{agent} was given to {x}.",
    ],
    "both": [  # disease and population in one sentence
        "We studied {x} in {y}.",
        "Among {y}, {x} was the condition of interest.",
        "{agent} was tested for {x} in {y}.",
    ],
    "filler": [
        "Results: the primary endpoint was reached in most analyses.",
        "Conclusions: further research is warranted.",
        "Follow-up lasted twelve months.",
        "Missing data were handled by multiple imputation.",
        "Safety signals for {agent} were monitored by an independent board.",
        "Serious adverse reactions to {agent} were rare.",
    ],
}
GENERIC_AGENTS_B = ["the drug", "the medication under study", "the active treatment"]
SUMMARY_TEMPLATES_B: dict[str, list[str]] = {
    "disease": ["Condition: {x}.", "It concerns {x}."],
    "method": ["Design: {x}.", "It was {x}."],
    "population": ["Participants: {x}.", "It enrolled {x}."],
}


def _document_b(factors: dict[str, str], rng: random.Random) -> dict:
    """One document of the second generator (style "b"): see WORDINGS_B and TEMPLATES_B."""
    both = rng.random() < 0.35
    kinds = (["both"] if both else ["disease", "population"]) + ["method"]
    rng.shuffle(kinds)
    for _ in range(rng.choice([1, 2, 3])):
        kinds.insert(rng.randrange(len(kinds) + 1), "filler")
    with_drug = set(rng.sample(range(len(kinds)), rng.choice([1, 2])))
    sentences, used, labels = [], set(), []
    for i, kind in enumerate(kinds):
        choices = [t for t in TEMPLATES_B[kind] if ("{agent}" in t or i not in with_drug) and t not in used]
        template = rng.choice(choices or TEMPLATES_B[kind])
        used.add(template)
        agent = factors[NUISANCE] if i in with_drug else rng.choice(GENERIC_AGENTS_B)
        if kind == "both":
            x = rng.choice(WORDINGS_B["disease"][factors["disease"]])
            y = rng.choice(WORDINGS_B["population"][factors["population"]])
            text = template.format(x=x, y=y, agent=agent)
            labels.append({"disease", "population"})
        else:
            x = rng.choice(WORDINGS_B[kind][factors[kind]]) if kind in WORDINGS_B else ""
            text = template.format(x=x, agent=agent)
            labels.append({kind})
        sentences.append(_cap(text))
    row = {"sentences": sentences, "abstract": " ".join(sentences)}
    for a in ASPECTS:
        row[f"summary_{a}"] = _cap(rng.choice(SUMMARY_TEMPLATES_B[a]).format(
            x=rng.choice(WORDINGS_B[a][factors[a]])))
        row[f"highlights_{a}"] = [s for s, k in zip(sentences, labels) if a in k]
    return row


def _cap(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def _balanced(values: list[str], n: int, rng: random.Random) -> list[str]:
    """n values, each as often as possible (counts differ by at most one), in random order."""
    out = [values[i % len(values)] for i in range(n)]
    rng.shuffle(out)
    return out


def _document(factors: dict[str, str], rng: random.Random) -> dict:
    """The abstract (as a list of sentences), highlights and summaries of one document."""
    # Slots: (kind, template index, wording); one per aspect, maybe a second for one aspect.
    aspect_slots = [[a] for a in ASPECTS]
    if rng.random() < 0.3:
        aspect_slots[rng.randrange(len(ASPECTS))].append(None)  # a second sentence for that aspect
    if rng.random() < 0.5:
        rng.shuffle(aspect_slots)
    kinds = [a for group in aspect_slots for a in [group[0]] * len(group)]
    n_fillers = rng.choice([1, 2])
    for _ in range(n_fillers):
        kinds.insert(rng.randrange(len(kinds) + 1), "filler")
    with_drug = set(rng.sample(range(len(kinds)), rng.choice([1, 2]) if len(kinds) > 4 else 1))

    sentences, used = [], set()
    for i, kind in enumerate(kinds):
        choices = [t for t in TEMPLATES[kind] if ("{agent}" in t or i not in with_drug) and t not in used]
        template = rng.choice(choices)
        used.add(template)
        agent = factors[NUISANCE] if i in with_drug else rng.choice(GENERIC_AGENTS)
        x = rng.choice(WORDINGS[kind][factors[kind]]) if kind in WORDINGS else ""
        sentences.append(_cap(template.format(x=x, agent=agent)))

    row = {"sentences": sentences, "abstract": " ".join(sentences)}
    for a in ASPECTS:
        summary = rng.choice(SUMMARY_TEMPLATES[a]).format(x=rng.choice(WORDINGS[a][factors[a]]))
        row[f"summary_{a}"] = _cap(summary)
    for a in ASPECTS:
        row[f"highlights_{a}"] = [s for s, k in zip(sentences, kinds) if k == a]
    return row


def synthetic_frame(n_train: int = 120, n_val: int = 40, n_test: int = 60, seed: int = 0,
                    style: str = "a") -> pd.DataFrame:
    """The documents as a DataFrame (see module doc for the columns); the same seed gives the same frame.

    style: "a" (the generator the workbench was developed on) or "b" (a second one, frozen before any
    tuning: other wordings, templates, fillers and drug names, and sentences stating two aspects).
    """
    if style not in ("a", "b"):
        raise ValueError(f"style must be 'a' or 'b', got {style!r}")
    rng = random.Random(seed)
    values = VALUES if style == "a" else {**{f: list(w) for f, w in WORDINGS_B.items()}, NUISANCE: DRUGS_B}
    make = _document if style == "a" else _document_b
    rows = []
    for split, n in zip(SPLITS, (n_train, n_val, n_test)):
        # Each factor drawn on its own: balanced within the split, independent of the others.
        columns = {f: _balanced(values[f], n, rng) for f in FACTORS}
        for j in range(n):
            factors = {f: columns[f][j] for f in FACTORS}
            doc = make(factors, rng)
            number = len(rows)
            rows.append({"doc_id": f"syn-{number:04d}", "title": f"Evaluating {factors[NUISANCE]}: study {number}",
                         "abstract": doc["abstract"], "split": split, **factors,
                         **{k: v for k, v in doc.items() if k != "abstract"}})
    order = ["doc_id", "title", "abstract", "split", *FACTORS, *[f"summary_{a}" for a in ASPECTS],
             *[f"highlights_{a}" for a in ASPECTS], "sentences"]
    return pd.DataFrame(rows, columns=order)


def synthetic_corpus(n_train: int = 120, n_val: int = 40, n_test: int = 60, seed: int = 0,
                     style: str = "a") -> Corpus:
    """A `Corpus` of synthetic abstracts (train / validation / test splits); deterministic for a seed and style."""
    return Corpus(synthetic_frame(n_train, n_val, n_test, seed, style),
                  name=f"synthetic-{seed}" if style == "a" else f"synthetic-b-{seed}",
                  source=f"synthetic_corpus(seed={seed}, style={style!r})")


def write(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write CSV (list columns as JSON strings) or JSONL (lists kept), by the file's suffix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".jsonl", ".ndjson"):
        with path.open("w", encoding="utf-8") as f:
            for record in frame.to_dict("records"):
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif path.suffix == ".csv":
        out = frame.copy()
        for column in out.columns:
            if out[column].map(lambda v: isinstance(v, list)).any():
                out[column] = out[column].map(json.dumps)
        out.to_csv(path, index=False)
    else:
        raise SystemExit(f"{path}: write .csv or .jsonl")
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="output file, .csv or .jsonl")
    parser.add_argument("--train", type=int, default=120)
    parser.add_argument("--val", type=int, default=40)
    parser.add_argument("--test", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--style", choices=["a", "b"], default="a", help="b: the second generator (see WORDINGS_B)")
    args = parser.parse_args(argv)
    frame = synthetic_frame(args.train, args.val, args.test, args.seed, args.style)
    print(f"wrote {len(frame)} documents to {write(frame, args.out)}")


if __name__ == "__main__":
    main()
