"""Generator c: a controlled medical corpus written from the `medicine` preset's meaning, never tuned on.

Issue 39, item 3. Generators a and b (`synthetic_corpus.py`) were written for the project and the
floor's steps were chosen on them. Generator c is written from what the shipped `medicine` preset
(`workbench/presets/medicine.yaml`) says its aspects are, in the style of real structured abstracts
and trial registries, and is only ever measured on (`benchmarks/generator_c.py`): it is never used
to choose a step or a constant.

Its factors are exactly the preset's aspects, six values each, each drawn on its own (balanced,
independent of the others), and a nuisance no aspect names:

    disease        heart failure, colorectal cancer, epilepsy, community-acquired pneumonia,
                   psoriasis, generalised anxiety disorder (cardiovascular, neoplastic,
                   neurological, infectious, autoimmune, psychiatric)
    methodology    randomised trial, prospective cohort, registry cohort, cross-sectional
                   survey, case-control, meta-analysis (the study design)
    patient_group  older adults, school-age children, critically ill adults, postmenopausal
                   women, adults with severe obesity, university students
    drug           an invented drug name with its fixed drug class: NUISANCE

What makes it like real abstracts rather than like generators a and b:

* Structured abstracts (half of them with BACKGROUND / OBJECTIVE / METHODS / RESULTS /
  CONCLUSIONS labels), 7 to 11 sentences, many of which state no aspect: results with effect
  sizes and confidence intervals, safety, conclusions.
* The drug is what the paper is about on the surface: in the title, in the objective, often in the
  background with its fixed drug class, in the methods, in most results and in the conclusion, as
  real abstracts name their intervention again and again. The disease, too, is named beyond the
  background: in most methods sentences (`TOPIC_SHARE`), in some results (`RESULT_TOPIC_SHARE`) and
  conclusions, as in "Among patients with chronic heart failure, Talvoxetan reduced ...".
* Registry-style sentences recur word for word across papers that share a value
  (`STOCK_PATIENT_GROUP`, `STOCK_METHODOLOGY`, `STOCK_DISEASE`, each in `STOCK_SHARE` of the value's
  papers, at least two): "Eligible participants were adults aged 65 years or older." With the
  templated sentences that happen to coincide, the sentence stating the patient group recurs in
  24 to 29% of the papers, the design's in 12 to 17%, the disease's in 18 to 33% (150 papers, ten seeds),
  as such sentences do in trial registries and structured abstracts (issue 39: a quarter, 11 to 17%).
* Otherwise varied templates (numbers, years, sites), four wordings per value and fillers, none of
  generators a and b's wordings, sentences or drug names (a test checks it); many sentences state two
  aspects at once (an objective such as "We assessed the efficacy and safety of Pelarixant in
  school-age children with focal epilepsy.", "We enrolled 412 older outpatients with psoriasis.").

History (before it was committed): the repetition shares were set to issue 39's before anything was
measured. The first version named the disease only in the background and in half the objectives;
its figures (`benchmarks/generator_c.py`) did not show what issue 39 saw (the floor at or below
MiniLM on every aspect). It was then changed in two steps towards what real abstracts do, and in no
other way: the disease named in methods, results and conclusions; then an objective naming the
drug in every paper and the drug's class in 70% of the backgrounds (from 50%). The floor was not
touched, and nothing was changed after that to move a figure.

Columns: doc_id, title, abstract, disease, methodology, patient_group, drug, and for truth
`highlights_<aspect>`: the abstract's sentences that state the aspect, exactly as they appear in it
(as `workbench.data.sentences.split_sentences` cuts them), a sentence that states two aspects in
both. No summary columns: a user's own corpus has none.

    from generator_c import generator_c_frame, ASPECTS, NUISANCE
    frame = generator_c_frame(150, seed=0)

    python scripts/generator_c.py out.jsonl [--docs 150 --seed 0]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_corpus import _balanced, _cap, write  # noqa: E402  (helpers only: no word list of a or b)

ASPECTS = ["disease", "methodology", "patient_group"]  # the medicine preset's aspects, in its order
NUISANCE = "drug"
FACTORS = ASPECTS + [NUISANCE]

# How often a paper states an aspect by its value's stock (registry) sentence, word for word.
STOCK_SHARE = {"disease": 0.12, "methodology": 0.12, "patient_group": 0.23}
STRUCTURED_SHARE = 0.5  # papers with section labels ("METHODS: ...")
OBJECTIVE_BOTH_SHARE = 0.5  # papers whose objective names the disease and the patient group
TOPIC_SHARE = 0.6  # methods sentences that name the disease (and mostly the drug) beside the design or the group
DRUG_BACKGROUND_SHARE = 0.7  # papers that introduce the drug and its class in the background
RESULT_TOPIC_SHARE = 0.4  # results sentences that name the disease, as "Among patients with ..., ..."

# ---- disease: the preset's "disease class, organ system, pathological process, hallmark features, course".
# value -> names (four wordings) and characterisations (its general nature, as the preset describes a disease).
DISEASE_NAMES: dict[str, list[str]] = {
    "heart failure": ["heart failure", "chronic heart failure", "heart failure with reduced ejection fraction",
                      "congestive heart failure"],
    "colorectal cancer": ["colorectal cancer", "advanced colorectal cancer", "metastatic colorectal carcinoma",
                          "adenocarcinoma of the colon or rectum"],
    "epilepsy": ["epilepsy", "focal epilepsy", "drug-resistant epilepsy", "recurrent epileptic seizures"],
    "pneumonia": ["community-acquired pneumonia", "bacterial pneumonia", "lower respiratory tract infection",
                  "pneumonia acquired outside hospital"],
    "psoriasis": ["psoriasis", "plaque psoriasis", "moderate-to-severe psoriasis", "chronic plaque psoriasis"],
    "anxiety disorder": ["generalised anxiety disorder", "chronic anxiety", "pathological worry",
                         "an anxiety disorder"],
}
DISEASE_NATURE: dict[str, list[str]] = {
    "heart failure": ["a chronic cardiovascular syndrome in which the heart cannot pump enough blood to meet the "
                      "body's needs",
                      "a progressive disorder of the heart muscle marked by breathlessness, fatigue and fluid "
                      "retention",
                      "a condition of impaired cardiac output with repeated decompensation"],
    "colorectal cancer": ["a malignant tumour of the large bowel that spreads to the liver and regional lymph nodes",
                          "a common gastrointestinal malignancy arising from adenomatous polyps",
                          "a solid tumour of the bowel with poor survival once distant metastases appear"],
    "epilepsy": ["a chronic neurological disorder characterised by recurrent unprovoked seizures",
                 "an enduring brain condition in which abnormal neuronal discharges cause seizures and lapses of "
                 "awareness",
                 "a disorder of cortical excitability with sudden, recurrent convulsions"],
    "pneumonia": ["an acute infection of the lung tissue with fever, cough and consolidation on chest imaging",
                  "an acute bacterial infection of the lower airways that can progress to sepsis and respiratory "
                  "failure",
                  "an infectious inflammation of the alveoli with rapid onset"],
    "psoriasis": ["a chronic immune-mediated skin disease with scaly inflammatory plaques",
                  "an autoimmune inflammatory disorder of the skin and joints with relapsing plaques",
                  "a lifelong inflammatory dermatosis driven by activated T cells"],
    "anxiety disorder": ["a common psychiatric condition of persistent, excessive worry with restlessness and poor "
                         "sleep",
                         "a chronic mental disorder marked by uncontrollable worry and muscular tension",
                         "a psychiatric illness with persistent anxiety that impairs daily functioning"],
}
STOCK_DISEASE: dict[str, str] = {
    "heart failure": "Heart failure is a leading cause of hospital admission and death among adults.",
    "colorectal cancer": "Colorectal cancer is the third most common cancer worldwide.",
    "epilepsy": "Epilepsy is one of the most common chronic neurological disorders.",
    "pneumonia": "Community-acquired pneumonia remains a leading infectious cause of death.",
    "psoriasis": "Psoriasis is a chronic immune-mediated inflammatory disease of the skin.",
    "anxiety disorder": "Generalised anxiety disorder is a common and disabling psychiatric condition.",
}
DISEASE_TEMPLATES = [  # {name}: a wording; {nature}: a characterisation; {drug}
    "{name} is {nature}.",
    "{name}, {nature}, affects about {k} in every 1000 people.",
    "Current treatments for {name} leave up to {p}% of patients with persistent symptoms.",
    "{name} is {nature}, and existing therapies help fewer than {hr}% of patients.",
    "The management of {name} has changed little over the past {k} years.",
    "Patients with {name} have few effective treatment options, and {p}% relapse within a year.",
    "{drug} has shown promise in early studies of {name}.",
    "Whether {drug} alters the course of {name} is unknown.",
]

# ---- methodology: the preset's "study design class, data source and collection, analytic approach".
DESIGN_WORDINGS: dict[str, list[str]] = {
    "randomised trial": ["a randomised, placebo-controlled trial",
                         "a double-blind, placebo-controlled randomised trial",
                         "a multicentre randomised trial with concealed allocation",
                         "a parallel-group randomised clinical trial"],
    "prospective cohort": ["a prospective cohort study", "a prospective observational cohort",
                           "a longitudinal cohort study with repeated follow-up visits",
                           "a prospective multicentre cohort"],
    "registry cohort": ["a retrospective cohort analysis based on electronic health records",
                        "a retrospective analysis of a national registry",
                        "a population-based retrospective cohort drawn from routinely collected health data",
                        "a retrospective review of hospital records"],
    "cross-sectional": ["a cross-sectional study", "a cross-sectional questionnaire study",
                        "a single-visit cross-sectional assessment",
                        "a cross-sectional analysis of baseline survey data"],
    "case-control": ["a nested case-control study", "a matched case-control analysis",
                     "a case-control design with controls matched on age and sex",
                     "a population-based case-control design"],
    "meta-analysis": ["a systematic review with meta-analysis", "a random-effects meta-analysis of randomised trials",
                      "a systematic literature review with random-effects meta-analysis",
                      "a pooled analysis of published trials"],
}
DESIGN_DETAIL: dict[str, list[str]] = {  # a second methods sentence that also says how (with the drug)
    "randomised trial": ["Participants were randomly assigned 1:1 to {drug} or matching placebo for {w} weeks.",
                         "Allocation to {drug} or placebo was concealed, and {k} outcome assessors were blinded.",
                         "Randomisation to {drug} or placebo was stratified across {k} centres, with {w} weeks of "
                         "treatment."],
    "prospective cohort": ["Participants were followed prospectively for {n} days, and those starting {drug} were "
                           "compared with those who did not.",
                           "Users of {drug} were followed at regular clinic visits for {k} years."],
    "registry cohort": ["Dispensing records from {y1} to {y2} identified new users of {drug} and matched non-users.",
                        "Routinely recorded prescriptions of {drug} from {y1} to {y2} were linked to hospital "
                        "outcomes."],
    "cross-sectional": ["Current use of {drug} was recorded by self-report at the time of the survey in {y1}.",
                        "A standardised questionnaire on {drug} use and symptoms was completed at a single visit "
                        "in {y1}."],
    "case-control": ["Exposure to {drug} was compared between {n} cases and matched controls by conditional logistic "
                     "regression.",
                     "Prescriptions of {drug} in the {k} years before the index date were ascertained for cases and "
                     "controls alike."],
    "meta-analysis": ["Two reviewers independently screened {n} records for trials of {drug} and extracted the data.",
                      "Trials of {drug} published up to {y2} were pooled with a random-effects model."],
}
STOCK_METHODOLOGY: dict[str, str] = {
    "randomised trial": "This was a multicentre, randomised, double-blind, placebo-controlled trial.",
    "prospective cohort": "This prospective cohort study followed participants at regular clinic visits.",
    "registry cohort": "We performed a retrospective cohort analysis of linked electronic health records.",
    "cross-sectional": "This cross-sectional study used standardised questionnaires administered at a single visit.",
    "case-control": "We conducted a nested case-control study with controls matched on age and sex.",
    "meta-analysis": "We systematically reviewed and meta-analysed randomised controlled trials.",
}
DESIGN_TEMPLATES = [  # {design}: a wording; {drug}
    "This was {design} conducted at {k} centres between {y1} and {y2}.",
    "We conducted {design} between {y1} and {y2}.",
    "{design} was carried out in {sites} from {y1} to {y2}.",
    "The study was designed as {design} and registered in {y1}.",
    "We evaluated {drug} in {design} ({y1} to {y2}).",
    "Evidence on {drug} was gathered in {design} covering {k} centres.",
]
DESIGN_TOPIC = [  # the same naming the disease and the drug, as most methods sections do
    "We evaluated {drug} for {name} in {design} between {y1} and {y2}.",
    "To compare {drug} with standard care in {name}, we conducted {design}.",
    "{design} of {drug} in {name} was carried out at {k} centres.",
    "The effect of {drug} on {name} was examined in {design}.",
]

# ---- patient_group: the preset's "age group, sex, health status, severity, care setting".
GROUP_WORDINGS: dict[str, list[str]] = {
    "older adults": ["adults aged 65 years or older", "community-dwelling older adults",
                     "people aged 70 years and over", "older outpatients"],
    "school-age children": ["children aged 6 to 11 years", "school-age children",
                            "paediatric outpatients aged 6 to 11 years", "primary-school children"],
    "critically ill adults": ["critically ill adults in the intensive care unit", "adults requiring intensive care",
                              "mechanically ventilated adults", "patients admitted to critical care"],
    "postmenopausal women": ["postmenopausal women", "women after the menopause", "postmenopausal women aged 50 to 75",
                             "women at least one year after their final menstrual period"],
    "adults with severe obesity": ["adults with severe obesity", "adults with a body mass index of 35 or more",
                                   "obese adults awaiting bariatric surgery", "adults with class II or III obesity"],
    "university students": ["university students", "young adults aged 18 to 25 years",
                            "young adults in higher education", "students aged 18 to 25 years"],
}
STOCK_PATIENT_GROUP: dict[str, str] = {
    "older adults": "Eligible participants were adults aged 65 years or older.",
    "school-age children": "Children aged 6 to 11 years were eligible.",
    "critically ill adults": "We included adults admitted to the intensive care unit.",
    "postmenopausal women": "Participants were postmenopausal women.",
    "adults with severe obesity": "Adults with a body mass index of 35 kg/m2 or higher were enrolled.",
    "university students": "Participants were university students aged 18 to 25 years.",
}
GROUP_TEMPLATES = [  # {group}: a wording; {name}: a disease wording (states both); {drug}
    "We enrolled {n} {group} with {name}.",
    "A total of {n} {group} took part.",
    "The study population comprised {n} {group} recruited at {sites}.",
    "Eligible patients were {group} with a diagnosis confirmed at least {k} months earlier.",
    "{drug} was given to {n} {group}.",
    "The analysis was restricted to {group}, {n} in all.",
]
GROUP_TOPIC = [  # the same naming the disease (and the drug)
    "We enrolled {n} {group} with {name}.",
    "{drug} was given to {n} {group} with {name}.",
    "We identified {n} {group} with {name} who had used {drug}.",
    "Participants were {group} with {name} treated at {sites}.",
]
SITES = ["several centres", "five sites", "participating hospitals", "eleven centres", "two regions"]

# ---- the nuisance: invented drug names (none of generators a and b), each with its fixed drug class.
DRUGS: dict[str, str] = {
    "Talvoxetan": "an oral selective kinase inhibitor",
    "Brimaclorin": "a long-acting ion-channel modulator",
    "Ostelumab": "a monoclonal antibody against an inflammatory cytokine",
    "Cendrafil": "a phosphodiesterase inhibitor",
    "Mirovastine": "a lipid-lowering statin analogue",
    "Pelarixant": "a neurokinin receptor antagonist",
}
DRUG_BACKGROUND = [
    "{drug} is {klass}.",
    "{drug}, {klass}, has been approved for other indications.",
    "Preclinical work suggests that {drug}, {klass}, may be of benefit.",
]
OBJECTIVE_BOTH = [  # the objective: disease and patient group at once
    "We assessed the efficacy and safety of {drug} in {group} with {name}.",
    "This study examined whether {drug} improves outcomes in {group} with {name}.",
    "We aimed to evaluate {drug} for {name} in {group}.",
]
OBJECTIVE_DRUG = [
    "We assessed the efficacy and safety of {drug}.",
    "This study examined whether {drug} improves clinical outcomes.",
    "Our aim was to estimate the benefits and harms of {drug}.",
]
OUTCOME = [
    "The primary outcome was the change in a validated symptom score from baseline.",
    "The primary end point was a composite of hospital admission or death.",
    "Outcomes included quality of life, health-care use and adverse events.",
    "Secondary outcomes were assessed at six and twelve months.",
]
RESULTS = [  # numbers filled at random
    "{drug} reduced the primary outcome by {p}% compared with the control group (95% CI {lo} to {hi}).",
    "The hazard ratio for the primary outcome with {drug} was 0.{hr} (95% CI 0.{hrlo} to 0.{hrhi}).",
    "Adverse events occurred in {p}% of participants receiving {drug} and {q}% of controls.",
    "Treatment with {drug} improved the secondary outcomes consistently across subgroups.",
    "A total of {n} participants were included in the analysis.",
    "Serious adverse events were similar between groups.",
    "Discontinuation of {drug} because of adverse effects was uncommon ({q}%).",
    "Benefits of {drug} were apparent within the first month and were sustained.",
]
CONCLUSION = [
    "{drug} was safe and effective in this setting.",
    "These findings support further evaluation of {drug}.",
    "{drug} may be a useful addition to current treatment.",
    "{drug} did not reduce the risk of the primary outcome.",
]
RESULTS_TOPIC = [  # naming the disease
    "Among patients with {name}, {drug} reduced the primary outcome by {p}% (95% CI {lo} to {hi}).",
    "In {name}, the benefit of {drug} was consistent across prespecified subgroups.",
    "Symptoms of {name} improved more with {drug} than with the comparator ({p}% against {q}%).",
]
CONCLUSION_TOPIC = [  # naming the disease, the patient group or both
    "{drug} may be a useful addition to current treatment of {name}.",
    "In {group}, {drug} improved clinically relevant outcomes.",
    "Among {group} with {name}, {drug} was well tolerated and reduced the primary outcome.",
]
TITLES = [
    "Efficacy and safety of {drug} in {group} with {name}: {design}",
    "{drug} for {name}: {design}",
    "{drug} in {group}: {design}",
    "Effect of {drug} on outcomes of {name}",
]
LABELS = {"background": "BACKGROUND", "objective": "OBJECTIVE", "methods": "METHODS", "results": "RESULTS",
          "conclusions": "CONCLUSIONS"}
_LABEL = re.compile(r"^(?:%s): " % "|".join(LABELS.values()))


def _stated(template: str) -> set[str]:
    """The aspects a template states: those whose placeholder it has."""
    return {a for a, slot in (("disease", "{name}"), ("methodology", "{design}"), ("patient_group", "{group}"))
            if slot in template}


def _numbers(rng: random.Random) -> dict:
    p = rng.randint(8, 35)
    hr = rng.randint(55, 92)
    y1 = rng.randint(2004, 2018)
    return {"y1": y1, "y2": y1 + rng.randint(2, 6), "k": rng.randint(2, 14), "w": rng.choice([12, 24, 26, 48, 52]),
            "p": p, "q": rng.randint(2, 12), "lo": max(1, p - rng.randint(3, 9)), "hi": p + rng.randint(3, 12),
            "hr": hr, "hrlo": hr - rng.randint(5, 12), "hrhi": min(99, hr + rng.randint(4, 9)),
            "n": rng.randint(80, 4000)}


def _paper(f: dict[str, str], stock: set[str], rng: random.Random) -> tuple[str, list[str], dict[str, list[str]]]:
    """(title, sentences, {aspect: the sentences that state it}) of one paper with factors `f`; the aspects in `stock`
    are stated by their value's stock sentence."""
    drug, klass = f[NUISANCE], DRUGS[f[NUISANCE]]
    name = lambda: rng.choice(DISEASE_NAMES[f["disease"]])  # noqa: E731
    group = lambda: rng.choice(GROUP_WORDINGS[f["patient_group"]])  # noqa: E731
    sections: dict[str, list[tuple[str, set]]] = {s: [] for s in LABELS}

    # BACKGROUND: the disease, stock or templated; now and then the drug and its class.
    if "disease" in stock:
        sections["background"].append((STOCK_DISEASE[f["disease"]], {"disease"}))
    else:
        t = rng.choice(DISEASE_TEMPLATES)
        sections["background"].append((t.format(name=name(), nature=rng.choice(DISEASE_NATURE[f["disease"]]),
                                                drug=drug, **_numbers(rng)), {"disease"}))
    if rng.random() < DRUG_BACKGROUND_SHARE:
        sections["background"].append((rng.choice(DRUG_BACKGROUND).format(drug=drug, klass=klass), set()))
    # OBJECTIVE
    if rng.random() < OBJECTIVE_BOTH_SHARE:
        sections["objective"].append((rng.choice(OBJECTIVE_BOTH).format(drug=drug, group=group(), name=name()),
                                      {"disease", "patient_group"}))
    else:
        sections["objective"].append((rng.choice(OBJECTIVE_DRUG).format(drug=drug), set()))
    # METHODS: design, patient group (either order), maybe a design detail, an outcome sentence.
    if "methodology" in stock:
        design = (STOCK_METHODOLOGY[f["methodology"]], {"methodology"})
    else:
        t = rng.choice(DESIGN_TOPIC if rng.random() < TOPIC_SHARE else DESIGN_TEMPLATES)
        design = (t.format(design=rng.choice(DESIGN_WORDINGS[f["methodology"]]), name=name(), drug=drug,
                           sites=rng.choice(SITES), **_numbers(rng)), _stated(t))
    if "patient_group" in stock:
        people = (STOCK_PATIENT_GROUP[f["patient_group"]], {"patient_group"})
    else:
        t = rng.choice(GROUP_TOPIC if rng.random() < TOPIC_SHARE else GROUP_TEMPLATES)
        people = (t.format(group=group(), name=name(), drug=drug, sites=rng.choice(SITES), **_numbers(rng)),
                  _stated(t))
    methods = [design, people] if rng.random() < 0.7 else [people, design]
    if rng.random() < 0.5:
        methods.insert(methods.index(design) + 1,
                       (rng.choice(DESIGN_DETAIL[f["methodology"]]).format(drug=drug, **_numbers(rng)),
                        {"methodology"}))
    if rng.random() < 0.6:
        methods.append((rng.choice(OUTCOME), set()))
    sections["methods"] = methods
    # RESULTS: two or three, mostly naming the drug, some the disease.
    results = rng.sample(RESULTS, rng.choice([2, 3, 3]))
    topics = rng.sample(RESULTS_TOPIC, len(results))
    for t, topic in zip(results, topics):
        t = topic if rng.random() < RESULT_TOPIC_SHARE else t
        sections["results"].append((t.format(drug=drug, name=name(), **_numbers(rng)), _stated(t)))
    # CONCLUSIONS
    t = rng.choice(CONCLUSION_TOPIC if rng.random() < 0.45 else CONCLUSION)
    sections["conclusions"].append((t.format(drug=drug, name=name(), group=group()), _stated(t)))

    structured = rng.random() < STRUCTURED_SHARE
    sentences, stated = [], {a: [] for a in ASPECTS}
    for section, items in sections.items():
        for k, (text, aspects) in enumerate(items):
            text = _cap(text)
            if structured and k == 0:
                text = f"{LABELS[section]}: {text}"
            sentences.append(text)
            for a in aspects:
                stated[a].append(text)
    title = _cap(rng.choice(TITLES).format(drug=drug, group=group(), name=name(),
                                           design=rng.choice(DESIGN_WORDINGS[f["methodology"]])))
    return title, sentences, stated


def generator_c_frame(n: int = 150, seed: int = 0) -> pd.DataFrame:
    """n papers of generator c (see the module doc for the columns); the same (n, seed) gives the same frame."""
    rng = random.Random(f"generator-c-{seed}")
    values = {"disease": list(DISEASE_NAMES), "methodology": list(DESIGN_WORDINGS),
              "patient_group": list(GROUP_WORDINGS), NUISANCE: list(DRUGS)}
    columns = {f: _balanced(values[f], n, rng) for f in FACTORS}  # each factor on its own: balanced, independent
    stock = {j: set() for j in range(n)}
    for a in ASPECTS:  # STOCK_SHARE of each value's papers, at least two (as a registry's wording recurs)
        for v in values[a]:
            papers = [j for j in range(n) if columns[a][j] == v]
            for j in rng.sample(papers, min(len(papers), max(2, round(STOCK_SHARE[a] * len(papers))))):
                stock[j].add(a)
    rows = []
    for j in range(n):
        f = {k: columns[k][j] for k in FACTORS}
        title, sentences, stated = _paper(f, stock[j], rng)
        rows.append({"doc_id": f"genc-{seed}-{j:04d}", "title": title, "abstract": " ".join(sentences), **f,
                     **{f"highlights_{a}": stated[a] for a in ASPECTS}})
    return pd.DataFrame(rows, columns=["doc_id", "title", "abstract", *FACTORS,
                                       *[f"highlights_{a}" for a in ASPECTS]])


def unlabelled(sentence: str) -> str:
    """The sentence without a structured abstract's section label ("METHODS: ")."""
    return _LABEL.sub("", sentence)


def repeated_shares(frame: pd.DataFrame) -> dict[str, float]:
    """{aspect: the share of papers with a sentence stating it that another paper has word for word}.

    Sentences are compared as written, less a section label ("METHODS: This was ..." repeats "This was ...").
    A stating sentence's copy in another paper states the same there, so the highlights are all that is read."""
    stating = [{unlabelled(s) for a in ASPECTS for s in row[f"highlights_{a}"]} for _, row in frame.iterrows()]
    papers = Counter(s for sentences in stating for s in sentences)
    return {a: sum(any(papers[unlabelled(s)] > 1 for s in h) for h in frame[f"highlights_{a}"]) / max(len(frame), 1)
            for a in ASPECTS}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="output file, .csv or .jsonl")
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"wrote {args.docs} papers to {write(generator_c_frame(args.docs, args.seed), args.out)}")


if __name__ == "__main__":
    main()
