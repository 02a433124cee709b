"""Tests for workbench.data.corpus: loaders for every format, validation, subsetting, saving."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from workbench.cli import main as cli_main
from workbench.data.corpus import ColumnNames, Corpus, CorpusError, ValidationReport, load_corpus
from workbench.data.aclsum_corpus import aclsum_splits

HASH_ID = re.compile(r"h[0-9a-f]{12}")


def write(tmp_path, name: str, text: str, encoding: str = "utf-8"):
    path = tmp_path / name
    path.write_text(text, encoding=encoding)
    return path


def issue(report: ValidationReport, problem: str) -> pd.DataFrame:
    return report.issues[report.issues["problem"] == problem]


def make_corpus(abstracts, titles=None, ids=None) -> Corpus:
    n = len(abstracts)
    docs = pd.DataFrame({
        "doc_id": ids or [f"d{i}" for i in range(n)],
        "title": titles or [f"Title {i}" for i in range(n)],
        "abstract": pd.Series(abstracts, dtype=object),
    })
    return Corpus(docs, name="t")


# -- formats ---------------------------------------------------------------------------
def test_plain_csv(tmp_path):
    path = write(tmp_path, "papers.csv",
                 'id,title,abstract,year,venue\n'
                 '007,"A, quoted title","First abstract, with comma.",2019,ACL\n'
                 'x2,Second,"Multi\nline abstract.",2021,EMNLP\n')
    corpus = load_corpus(path)
    assert corpus.ids == ["007", "x2"]  # ids stay text: the leading zeros survive
    assert corpus.titles() == ["A, quoted title", "Second"]
    assert corpus.texts() == ["First abstract, with comma.", "Multi\nline abstract."]
    assert corpus.docs["year"].tolist() == [2019, 2021]
    assert str(corpus.docs["year"].dtype) == "Int64"
    assert corpus.docs["venue"].tolist() == ["ACL", "EMNLP"]  # other metadata kept
    assert list(corpus.docs.columns[:4]) == ["doc_id", "title", "abstract", "year"]
    assert corpus.name == "papers" and corpus.source == str(path)


def test_csv_empty_and_na_cells(tmp_path):
    # An empty cell is a missing abstract, whitespace is an empty one, and the word "NA"
    # is kept as text (a title "None" must not vanish) but flagged as a placeholder.
    path = write(tmp_path, "p.csv",
                 "id,title,abstract\n"
                 "a,None,Real text here.\n"
                 "b,T,\n"
                 'c,T2,"   "\n'
                 "d,T3,NA\n"
                 "e,,[No abstract available]\n")
    corpus = load_corpus(path)
    assert corpus.titles() == ["None", "T", "T2", "T3", ""]
    assert corpus.docs["abstract"][1] is None
    report = corpus.validate()
    problems = dict(zip(report.errors["row"], report.errors["problem"]))
    assert problems == {1: "missing_abstract", 2: "empty_abstract",
                        3: "placeholder_abstract", 4: "placeholder_abstract"}
    assert issue(report, "missing_title")["row"].tolist() == [4]


def test_a_spreadsheets_marked_sentences_become_sentence_marks(tmp_path):
    """A `highlights_<aspect>` cell of a CSV holds the sentences that state the aspect, copied from the abstract (or
    a JSON list of them): they mark the same sentences as the list a JSON-lines export carries. A blank cell marks
    nothing and is not "marked none"."""
    from workbench.embed.head_training import human_sentence_labels
    from workbench.measures.health import corpus_sentence_aspects

    abstract = "Parsing is hard. We propose a parser, e.g. a fast one. It wins by 3.5 points."
    path = write(tmp_path, "p.csv",
                 "id,abstract,highlights_approach,highlights_outcome\n"
                 f'a,"{abstract}","We propose a parser, e.g. a fast one.","[""It wins by 3.5 points.""]"\n'
                 f'b,"{abstract}",,"Parsing is hard. It wins by 3.5 points."\n'
                 f'c,"{abstract}",A parser is proposed.,\n')
    corpus = load_corpus(path)
    assert corpus.docs["highlights_approach"].tolist() == [["We propose a parser, e.g. a fast one."], None, None]
    assert corpus.docs["highlights_outcome"].tolist() == [["It wins by 3.5 points."],
                                                         ["Parsing is hard.", "It wins by 3.5 points."], None]
    # A paraphrase marks no sentence: not marked (rather than "marked none"), and the user is told where.
    warned = issue(corpus.validate(), "unmatched_highlights")
    assert warned[["row", "doc_id", "field"]].values.tolist() == [[2, "c", "highlights_approach"]]
    assert "line 4" in warned["detail"].iloc[0] and "copy the sentences" in warned["detail"].iloc[0]
    listed = Corpus(pd.DataFrame({"doc_id": ["a"], "title": [""], "abstract": [abstract],
                                  "highlights_approach": [["We propose a parser, e.g. a fast one."]],
                                  "highlights_outcome": [["It wins by 3.5 points."]]}))
    names = ["approach", "outcome"]
    assert corpus_sentence_aspects(corpus, names)[0] == corpus_sentence_aspects(listed, names)[0] == \
        {"approach": [0, 1, 0], "outcome": [0, 0, 1]}
    assert corpus_sentence_aspects(corpus, names)[1] == {"outcome": [1, 0, 1]}
    labels = human_sentence_labels(corpus, names)
    assert set(labels["approach"]) == {"a"} and labels["outcome"]["b"] == [1, 0, 1]


def test_tsv(tmp_path):
    path = write(tmp_path, "p.tsv", "paper_id\tTitle\tAbstract\tYear\nP1\tT1\tA one.\t2001\nP2\tT2\tA two.\t\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["P1", "P2"]
    assert corpus.texts() == ["A one.", "A two."]
    assert corpus.docs["year"][0] == 2001 and pd.isna(corpus.docs["year"][1])


def test_scopus_csv(tmp_path):
    path = write(tmp_path, "scopus.csv",
                 '\ufeffAuthors,Title,Year,Source title,DOI,Abstract,Author Keywords,EID\n'
                 '"Smith J.","Deep nets",2020,"J. AI","10.1/abc","We study nets.","nets; deep","2-s2.0-111"\n'
                 '"Doe A.","Shallow nets",2018,"J. ML",,"We study shallow nets.",,"2-s2.0-222"\n')
    corpus = load_corpus(path)
    # EID is present on every Scopus row, DOI is not, so EID is the id.
    assert corpus.ids == ["2-s2.0-111", "2-s2.0-222"]
    assert corpus.titles() == ["Deep nets", "Shallow nets"]
    assert corpus.texts() == ["We study nets.", "We study shallow nets."]
    assert corpus.docs["year"].tolist() == [2020, 2018]
    assert corpus.docs["Author Keywords"][0] == "nets; deep"
    assert "labels" not in corpus.docs.columns  # keywords are not labels by default
    assert corpus.docs["Authors"][0] == "Smith J."  # the BOM did not stick to the first name


def test_wos_tab_delimited_txt(tmp_path):
    header = "PT\tAU\tTI\tSO\tAB\tPY\tDI\tUT\n"
    rows = ('J\tSmith, J\t"Graph" learning\tNATURE\tWe propose "graphs".\t2017\t10.1/x\tWOS:000123\t\n'
            "J\tDoe, A\tTrees\tSCIENCE\tTrees grow.\t2015\t\tWOS:000456\t\n")
    path = write(tmp_path, "savedrecs.txt", "\ufeff" + header + rows)
    corpus = load_corpus(path)
    assert corpus.ids == ["WOS:000123", "WOS:000456"]
    assert corpus.titles() == ['"Graph" learning', "Trees"]  # WoS never quotes fields
    assert corpus.texts() == ['We propose "graphs".', "Trees grow."]
    assert corpus.docs["year"].tolist() == [2017, 2015]
    assert corpus.docs["PT"].tolist() == ["J", "J"]  # the trailing tab did not shift columns


def test_txt_that_is_not_wos(tmp_path):
    with pytest.raises(CorpusError, match="Web of Science"):
        load_corpus(write(tmp_path, "notes.txt", "hello\nworld\n"))


def test_zotero_csv(tmp_path):
    path = write(tmp_path, "zotero.csv",
                 '"Key","Item Type","Publication Year","Author","Title","Abstract Note","Date"\n'
                 '"ABCD1234","journalArticle","2022","Lee, K.","Zotero paper","An abstract.","2022-03-01"\n')
    corpus = load_corpus(path)
    assert corpus.ids == ["ABCD1234"]
    assert corpus.titles() == ["Zotero paper"]
    assert corpus.texts() == ["An abstract."]
    assert corpus.docs["year"].tolist() == [2022]
    assert corpus.docs["Date"].tolist() == ["2022-03-01"]


def test_jsonl_and_json(tmp_path):
    records = [{"doc_id": 1, "title": "T1", "abstract": "A1.", "year": 2020, "labels": ["x", "y"]},
               {"doc_id": "2", "title": None, "abstract": "A2.", "year": None, "labels": "z"}]
    jsonl = write(tmp_path, "d.jsonl", "\n".join(json.dumps(r) for r in records) + "\n\n")
    jsn = write(tmp_path, "d.json", json.dumps(records))
    for path in (jsonl, jsn):
        corpus = load_corpus(path)
        assert corpus.ids == ["1", "2"]
        assert corpus.titles() == ["T1", ""]
        assert corpus.texts() == ["A1.", "A2."]
        assert corpus.docs["year"][0] == 2020 and pd.isna(corpus.docs["year"][1])
        assert corpus.docs["labels"].tolist() == [["x", "y"], ["z"]]


def test_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    pd.DataFrame({"ID": ["a", "b"], "TITLE": ["T", "U"], "Summary": ["S one.", "S two."],
                  "publication_year": [1999, 2000]}).to_parquet(path)
    corpus = load_corpus(path)
    assert corpus.ids == ["a", "b"]
    assert corpus.titles() == ["T", "U"]
    assert corpus.texts() == ["S one.", "S two."]
    assert corpus.docs["year"].tolist() == [1999, 2000]


def test_ris_two_records(tmp_path):
    path = write(tmp_path, "export.ris",
                 "TY  - JOUR\nTI  - First paper\nAB  - First abstract.\nPY  - 2019\n"
                 "DO  - 10.1000/one\nKW  - alpha\nKW  - beta\nER  - \n\n"
                 "TY  - JOUR\nT1  - Second paper\nN2  - Second abstract.\nY1  - 2020///\nER  - \n")
    corpus = load_corpus(path)
    assert corpus.ids[0] == "10.1000/one"
    assert HASH_ID.fullmatch(corpus.ids[1])  # no DO or ID tag: derived from the text
    assert corpus.titles() == ["First paper", "Second paper"]
    assert corpus.texts() == ["First abstract.", "Second abstract."]
    assert corpus.docs["year"].tolist() == [2019, 2020]
    assert corpus.docs["keywords"][0] == ["alpha", "beta"]
    assert "labels" not in corpus.docs.columns


def test_bibtex_braces(tmp_path):
    path = write(tmp_path, "refs.bib",
                 "@article{devlin2019,\n  title = {{BERT}: Pre-training of Deep\n    Bidirectional {T}ransformers},\n"
                 "  abstract = {We introduce {BERT} \\& friends.},\n  year = {2019}\n}\n\n"
                 '@inproceedings{vaswani2017, title = "Attention Is All You Need", year = 2017,\n'
                 "  abstract = {Transformers.}, keywords = {attention}}\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["devlin2019", "vaswani2017"]
    assert corpus.titles() == ["BERT: Pre-training of Deep Bidirectional Transformers",
                               "Attention Is All You Need"]
    assert corpus.texts() == ["We introduce BERT & friends.", "Transformers."]
    assert corpus.docs["year"].tolist() == [2019, 2017]
    assert corpus.docs["entry_type"].tolist() == ["article", "inproceedings"]


def test_bibtex_duplicate_key_is_kept_for_validation(tmp_path):
    path = write(tmp_path, "dup.bib", "@article{a, title={X}, abstract={One.}}\n"
                                      "@article{a, title={Y}, abstract={Two.}}\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["a", "a"]
    assert issue(corpus.validate(), "duplicate_id")["row"].tolist() == [1]


# -- columns ---------------------------------------------------------------------------
def test_explicit_columns_override_detection(tmp_path):
    path = write(tmp_path, "p.csv",
                 "id,ref,title,headline,abstract,body,year,when,label,topic\n"
                 "1,R1,Wrong title,Right title,Wrong abstract,Right body,1900,2021,l,cs.CL\n")
    corpus = load_corpus(path, abstract_column="body", name="mine",
                         columns=ColumnNames(id_column="ref", title_column="HEADLINE", year_column="when",
                                             label_column="topic"))
    assert corpus.ids == ["R1"]
    assert corpus.titles() == ["Right title"]
    assert corpus.texts() == ["Right body"]
    assert corpus.docs["year"].tolist() == [2021]
    assert corpus.docs["labels"].tolist() == [["cs.CL"]]
    assert corpus.name == "mine"
    # The detected-but-overridden columns stay, renamed where they would clash.
    assert corpus.docs["title_original"][0] == "Wrong title"
    assert corpus.docs["abstract_original"][0] == "Wrong abstract"
    assert corpus.docs["id"][0] == "1"


def test_generated_ids_and_label_detection(tmp_path):
    path = write(tmp_path, "p.csv", "title,text,label\nA,First.,pos\nB,Second.,neg; other\n")
    corpus = load_corpus(path)
    assert all(HASH_ID.fullmatch(i) for i in corpus.ids) and len(set(corpus.ids)) == 2
    assert corpus.texts() == ["First.", "Second."]
    assert corpus.docs["labels"].tolist() == [["pos"], ["neg", "other"]]


def test_missing_abstract_column_names_columns(tmp_path):
    path = write(tmp_path, "papers.csv", "id,title,venue\n1,T,ACL\n")
    with pytest.raises(CorpusError) as err:
        load_corpus(path)
    message = str(err.value)
    assert "papers.csv" in message and "no abstract column" in message
    assert "['id', 'title', 'venue']" in message and "abstract_column=" in message


def test_unknown_explicit_column(tmp_path):
    path = write(tmp_path, "p.csv", "id,abstract\n1,A.\n")
    with pytest.raises(CorpusError, match="title_column='Nope' not found"):
        load_corpus(path, columns=ColumnNames(title_column="Nope"))


# -- malformed files -------------------------------------------------------------------
def test_malformed_jsonl_names_line(tmp_path):
    path = write(tmp_path, "bad.jsonl", '{"id": 1, "abstract": "ok"}\n\n{"id": 2, "abstract": \n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl: line 3 is not valid JSON"):
        load_corpus(path)


def test_jsonl_line_that_is_not_an_object(tmp_path):
    with pytest.raises(CorpusError, match="line 2 is a list"):
        load_corpus(write(tmp_path, "b.jsonl", '{"abstract": "a"}\n[1, 2]\n'))


def test_malformed_json(tmp_path):
    with pytest.raises(CorpusError, match="not valid JSON"):
        load_corpus(write(tmp_path, "b.json", '[{"abstract": "a"},'))
    with pytest.raises(CorpusError, match="expected a JSON list"):
        load_corpus(write(tmp_path, "c.json", '{"abstract": "a"}'))


def test_malformed_bibtex(tmp_path):
    path = write(tmp_path, "bad.bib", "@article{ok, title={Fine}, abstract={A.}}\n"
                                      "@article{broken, title={never closed\n"
                                      "@article{next, title={N}, abstract={B.}}\n")
    with pytest.raises(CorpusError, match=r"bad\.bib: malformed BibTeX entry starting on line 2"):
        load_corpus(path)


def test_ragged_csv_names_line(tmp_path):
    path = write(tmp_path, "rag.csv", "id,title,abstract\n1,T,A\n2,T,A,extra,more\n")
    report = load_corpus(path).validate()
    with pytest.raises(CorpusError, match=r"(?s)rag\.csv.*line 3"):
        report.raise_if_errors()


@pytest.mark.parametrize("name,text", [("empty.csv", ""), ("header.csv", "id,abstract\n"),
                                       ("empty.jsonl", "\n\n"), ("empty.json", "[]"),
                                       ("empty.ris", ""), ("empty.bib", "")])
def test_empty_file(tmp_path, name, text):
    with pytest.raises(CorpusError, match="no documents"):
        load_corpus(write(tmp_path, name, text))


def test_unknown_suffix(tmp_path):
    with pytest.raises(CorpusError) as err:
        load_corpus(write(tmp_path, "papers.xlsx", "x"))
    assert "papers.xlsx" in str(err.value) and ".csv" in str(err.value) and ".ris" in str(err.value)


def test_format_argument_overrides_suffix(tmp_path):
    path = write(tmp_path, "export.dat", "id\tabstract\n1\tA.\n")
    assert load_corpus(path, format="tsv").texts() == ["A."]


def test_wrong_encoding_names_encoding(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("id,abstract\n1,Caf\u00e9 society.\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="encoding="):
        load_corpus(path)
    assert load_corpus(path, encoding="latin-1").texts() == ["Caf\u00e9 society."]


def test_missing_file():
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus("/nonexistent/papers.csv")


# -- nothing lost, nothing silent (loader repairs and problems reach the report) ---------
def test_csv_unquoted_comma_is_an_error_not_a_cut(tmp_path):
    path = write(tmp_path, "p.csv",
                 "id,title,abstract\n"
                 "a,T1,A fine abstract.\n"
                 "b,T2,An abstract, with an unquoted comma.\n"
                 "c,T3\n"
                 "d,T4,Last one.\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["a", "b", "c", "d"]  # nothing dropped by the loader
    report = corpus.validate()
    bad = issue(report, "malformed_row")
    assert bad["row"].tolist() == [1, 2] and set(bad["severity"]) == {"error"}
    assert "line 3" in bad["detail"].iloc[0] and "4 fields" in bad["detail"].iloc[0]
    assert "header has 3" in bad["detail"].iloc[0] and "quote" in bad["detail"].iloc[0]
    assert "line 4" in bad["detail"].iloc[1] and "2 fields" in bad["detail"].iloc[1]
    assert "no problems" not in report.summary()
    with pytest.raises(CorpusError, match="drop_invalid"):
        corpus.texts()  # a cut abstract must not reach a model unnoticed
    clean, dropped = corpus.drop_invalid(report)
    assert clean.ids == ["a", "d"] and sorted(set(dropped.issues["row"])) == [1, 2]
    assert clean.validate().ok and clean.texts() == ["A fine abstract.", "Last one."]


def test_csv_trailing_empty_fields_are_not_malformed(tmp_path):
    path = write(tmp_path, "p.csv", "id,abstract\na,Text one.,\nb,Text two.,,\n")
    corpus = load_corpus(path)
    assert corpus.validate().ok and corpus.texts() == ["Text one.", "Text two."]


def test_csv_unclosed_quote_names_line(tmp_path):
    path = write(tmp_path, "q.csv", 'id,abstract\na,"Never closed.\nb,Swallowed.\n')
    with pytest.raises(CorpusError, match=r"q\.csv.*line 2.*quote"):
        load_corpus(path)


def test_ris_missing_er_starts_a_new_record(tmp_path):
    path = write(tmp_path, "noer.ris",
                 "TY  - JOUR\nTI  - One\nAB  - First abstract.\n"
                 "TY  - JOUR\nTI  - Two\nAB  - Second abstract.\nER  - \n")
    corpus = load_corpus(path)
    assert corpus.titles() == ["One", "Two"]
    assert corpus.texts() == ["First abstract.", "Second abstract."]
    warning = issue(corpus.validate(), "missing_er")
    assert warning["row"].tolist() == [0] and warning["severity"].tolist() == ["warning"]
    assert "line 1" in warning["detail"].iloc[0] and "line 4" in warning["detail"].iloc[0]


def test_ris_truncated_last_record_is_kept_and_reported(tmp_path):
    path = write(tmp_path, "cut.ris",
                 "TY  - JOUR\nTI  - One\nAB  - First abstract.\nER  - \n\n"
                 "TY  - JOUR\nTI  - Two\nAB  - Second abstract, cut o")
    corpus = load_corpus(path)
    assert corpus.texts() == ["First abstract.", "Second abstract, cut o"]
    warning = issue(corpus.validate(), "truncated_record")
    assert warning["row"].tolist() == [1] and "line 6" in warning["detail"].iloc[0]


def test_ris_record_without_ty_and_text_outside_records(tmp_path):
    path = write(tmp_path, "odd.ris", "Provider: some database\n\nTI  - Orphan\nAB  - Kept text.\nER  - \n")
    corpus = load_corpus(path)
    assert corpus.texts() == ["Kept text."]
    report = corpus.validate()
    assert issue(report, "missing_ty")["row"].tolist() == [0]
    assert any("line 1" in note and "not read" in note for note in report.notes)


def test_load_issues_follow_subset_and_drop(tmp_path):
    path = write(tmp_path, "p.csv", "id,abstract,year\na,One.,2019\nb,Two, cut.,2020\nc,Three.,soon\n")
    corpus = load_corpus(path)
    clean, _ = corpus.drop_invalid()
    assert clean.ids == ["a", "c"]
    assert issue(clean.validate(), "unparseable_year")[["row", "doc_id"]].values.tolist() == [[1, "c"]]
    assert issue(corpus.subset(ids=["c"]).validate(), "unparseable_year")["row"].tolist() == [0]
    assert corpus.subset(ids=["a"]).validate().ok and not len(corpus.subset(ids=["a"]).load_issues)


def test_ris_two_abstract_tags_are_joined(tmp_path):
    path = write(tmp_path, "two.ris",
                 "TY  - JOUR\nTI  - One\nAB  - First paragraph\ngoes on.\nAB  - Second paragraph.\nER  - \n")
    corpus = load_corpus(path)
    assert corpus.texts() == ["First paragraph goes on.\n\nSecond paragraph."]
    warning = issue(corpus.validate(), "repeated_tag")
    assert warning["row"].tolist() == [0] and "lines 3, 5" in warning["detail"].iloc[0]


def test_ris_repeated_single_tag_is_reported(tmp_path):
    path = write(tmp_path, "ti.ris", "TY  - JOUR\nTI  - Kept\nTI  - Other\nAB  - Text.\nER  - \n")
    corpus = load_corpus(path)
    assert corpus.titles() == ["Kept"]
    assert "'Other'" in issue(corpus.validate(), "repeated_tag")["detail"].iloc[0]


def test_bibtex_latex_becomes_unicode_text(tmp_path):
    path = write(tmp_path, "tex.bib",
                 "@article{k, title = {On \\emph{things} and {\\\"U}ber-{BERT} in \\LaTeX},\n"
                 "  abstract = {Pages 1--2 of Schr\\\"odinger \\& co. show $\\alpha \\leq x^2$ in 50\\% of cases.}}\n")
    corpus = load_corpus(path)
    assert corpus.titles() == ["On things and \u00dcber-BERT in LaTeX"]
    text = corpus.texts()[0]
    assert text.startswith("Pages 1\u20132 of Schr\u00f6dinger & co. show \u03b1")
    assert "\u2264 x^2 in 50% of cases." in text  # math readable, a % not taken for a comment


def test_unparseable_years_are_reported(tmp_path):
    path = write(tmp_path, "y.csv",
                 "id,abstract,year\n"
                 "a,A.,2019\nb,B.,circa 1990s\nc,C.,2019-05-01\nd,D.,2019/05\ne,E.,\nf,F.,next year\n")
    corpus = load_corpus(path)
    assert corpus.docs["year"].dropna().tolist() == [2019, 2019, 2019]
    assert corpus.docs["year"].isna().tolist() == [False, True, False, False, True, True]
    warnings = issue(corpus.validate(), "unparseable_year")
    assert warnings["row"].tolist() == [1, 5] and set(warnings["severity"]) == {"warning"}
    assert "'circa 1990s'" in warnings["detail"].iloc[0] and "line 3" in warnings["detail"].iloc[0]
    assert "'next year'" in warnings["detail"].iloc[1]


def test_unparseable_json_years_are_reported(tmp_path):
    path = write(tmp_path, "y.json", json.dumps([{"abstract": "A.", "year": 2020},
                                                 {"abstract": "B.", "year": 95},
                                                 {"abstract": "C.", "year": 2001.0}]))
    corpus = load_corpus(path)
    assert corpus.docs["year"].isna().tolist() == [False, True, False]
    assert issue(corpus.validate(), "unparseable_year")["row"].tolist() == [1]


def test_ids_without_id_column_survive_reexport(tmp_path):
    rows = ["First,One about graphs.", "Second,Two about trees.", "Third,Three about nets."]
    before = load_corpus(write(tmp_path, "a.csv", "title,abstract\n" + "\n".join(rows) + "\n"))
    after = load_corpus(write(tmp_path, "b.csv", "title,abstract\nNew,A new record on top.\n"
                              + "\n".join(reversed(rows)) + "\n"))
    assert all(HASH_ID.fullmatch(i) for i in before.ids)
    assert dict(zip(after.titles(), after.ids))["Second"] == dict(zip(before.titles(), before.ids))["Second"]
    assert set(before.ids) < set(after.ids)
    # The mapping is reported: a note in the report and a table of id and title.
    report = before.validate()
    assert report.ok and any("derived" in note and "id_column" in note for note in report.notes)
    assert "derived" in report.summary()
    table = before.id_table()
    assert list(table.columns) == ["doc_id", "title"] and table["title"].tolist() == ["First", "Second", "Third"]


def test_derived_ids_ignore_case_spacing_and_punctuation(tmp_path):
    a = load_corpus(write(tmp_path, "a.csv", 'title,abstract\nDeep Nets,"We study   nets."\n'))
    b = load_corpus(write(tmp_path, "b.jsonl", '{"title": "deep nets", "abstract": "We study nets"}\n'))
    assert a.ids == b.ids


def test_derived_ids_of_duplicates_are_distinct_and_reported(tmp_path):
    # The same text but for the title's case: one derived id, numbered; an exact repeat would be dropped.
    path = write(tmp_path, "d.csv", "title,abstract\nT,Same text.\nt,Same text.\nU,Other text.\n")
    corpus = load_corpus(path)
    assert len(set(corpus.ids)) == 3 and corpus.ids[1] == corpus.ids[0] + "-2"
    report = corpus.validate()
    assert report.ok and issue(report, "duplicate_text")["row"].tolist() == [1]


def test_an_exact_duplicate_is_dropped_with_a_note_and_the_lines_are_kept(tmp_path):
    """A paper exported twice (the same id, and the same title and abstract but for spacing) is read once; an id
    repeated with another text stays, for validate to name both lines."""
    path = write(tmp_path, "p.csv", "id,title,abstract\n"
                                    "a,Deep nets,We study nets.\n"
                                    "b,Other,Another text.\n"
                                    "a,Deep  nets,\"We study\n nets.\"\n"
                                    "b,Changed,A changed text.\n"
                                    "c,Third,Text three.\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["a", "b", "b", "c"]
    assert corpus.where == ["line 2", "line 3", "line 6", "line 7"]  # lines 4-5 went
    assert any("1 exact duplicate" in note and "lines 4-5 repeats line 2" in note for note in corpus.notes)
    report = corpus.validate()
    assert issue(report, "duplicate_id")["detail"].tolist() == ["same doc_id as row 1 (line 3); this one is on line 6"]
    assert "exact duplicate" in report.summary()
    clean, _ = corpus.drop_invalid(report)
    assert clean.ids == ["a", "b", "c"] and clean.where == ["line 2", "line 3", "line 7"]
    assert clean.subset(ids=["c"]).place(0) == "line 7" and make_corpus(["One."]).place(0) == "row 0"


def test_an_exact_duplicate_without_ids_is_dropped_and_the_other_ids_stay(tmp_path):
    """Without an id column a paper exported twice would take a "-2" id of its own: it is dropped before the ids are
    numbered, so every id is the one the file without the repeat gives; so in RIS without DOIs."""
    once = "title,abstract\nT,Same text.\nt,same text\nU,Other text.\n"
    twice = "title,abstract\nT,Same text.\nT,Same   text.\nt,same text\nU,Other text.\n"
    kept = load_corpus(write(tmp_path, "once.csv", once))
    read = load_corpus(write(tmp_path, "twice.csv", twice))
    assert read.ids == kept.ids and kept.ids[1] == kept.ids[0] + "-2"
    assert any("the same title and abstract" in note and "line 3 repeats line 2" in note for note in read.notes)
    record = "TY  - JOUR\nTI  - {title}\nAB  - {abstract}\nER  - \n"
    a, b = record.format(title="A", abstract="Text A."), record.format(title="B", abstract="Text B.")
    ris = load_corpus(write(tmp_path, "twice.ris", a + b + a))
    assert ris.ids == load_corpus(write(tmp_path, "once.ris", a + b)).ids
    assert any("record starting on line 9 repeats record starting on line 1" in note for note in ris.notes)


def test_ris_ids_without_doi_are_derived(tmp_path):
    record = "TY  - JOUR\nTI  - {title}\nAB  - {abstract}\nER  - \n"
    one = record.format(title="A", abstract="Text A.") + record.format(title="B", abstract="Text B.")
    before = load_corpus(write(tmp_path, "a.ris", one))
    after = load_corpus(write(tmp_path, "b.ris", record.format(title="New", abstract="New.") + one))
    assert after.ids[1:] == before.ids
    assert any("derived" in note for note in before.validate().notes)


def test_what_cannot_be_read_is_named(tmp_path, monkeypatch):
    """A folder (its corpus files named), a header without rows, a pipe (reading it would wait forever) and a
    file without read permission each get a CorpusError that says what is wrong."""
    import os

    from workbench.data import readers

    write(tmp_path, "papers.csv", "id,title,abstract\n")
    with pytest.raises(CorpusError, match=r"is a folder, not a corpus file.*it holds papers\.csv"):
        load_corpus(tmp_path)
    with pytest.raises(CorpusError, match=r"papers\.csv: no documents: the file has a header \(id, title, abstract\) "
                                          "and no rows"):
        load_corpus(tmp_path / "papers.csv")
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(CorpusError, match="is not a regular file"):
        load_corpus(tmp_path / "pipe.csv")

    def no_permission(path, encoding):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setitem(readers.READERS, "csv", no_permission)  # the tests run as root, who may read anything
    with pytest.raises(CorpusError, match=r"papers\.csv: cannot be read: Permission denied; give yourself read "):
        load_corpus(tmp_path / "papers.csv")


# -- command line ----------------------------------------------------------------------
def test_cli_validate_reports_cut_rows(tmp_path, capsys):
    path = write(tmp_path, "p.csv", "id,title,abstract\na,T,Fine.\nb,T,Cut, here.\n")
    assert cli_main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "malformed_row" in out and "line 3" in out and "no problems" not in out


def test_cli_validate_accepts_the_recommended_options(tmp_path, capsys):
    path = tmp_path / "latin.csv"
    path.write_bytes("id,body\n1,Caf\u00e9 society.\n".encode("latin-1"))
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--encoding" in err or "--abstract-column" in err
    assert cli_main(["validate", str(path), "--encoding", "latin-1"]) == 2
    assert "--abstract-column" in capsys.readouterr().err
    assert cli_main(["validate", str(path), "--abstract-column", "body", "--encoding", "latin-1"]) == 0
    assert "1 documents" in capsys.readouterr().out


# -- validation ------------------------------------------------------------------------
def test_each_problem_reported_with_row_and_severity():
    long_text = "word " * 5000  # 25,000 characters
    corpus = Corpus(pd.DataFrame({
        "doc_id": ["a", "b", "c", "a", "e", "f", "g", "h", "i", "j"],
        "title": ["T", "T", "T", "T", "T", "", "T", 42, "T", "T"],
        "abstract": pd.Series(["Good text.", None, "  \n ", "Another text.", 12345,
                               "Fine text.", long_text, "Title is a number.",
                               "Good   text.", ["a", "list"]], dtype=object),
    }))
    report = corpus.validate(max_chars=20000)
    found = {(r.row, r.problem): r.severity for r in report.issues.itertuples()}
    assert found == {
        (1, "missing_abstract"): "error",
        (2, "empty_abstract"): "error",
        (3, "duplicate_id"): "error",
        (4, "non_text"): "error",
        (5, "missing_title"): "warning",
        (6, "very_long"): "warning",
        (7, "non_text"): "warning",
        (8, "duplicate_text"): "warning",
        (9, "non_text"): "error",
    }
    assert issue(report, "duplicate_text")["detail"].iloc[0].startswith("same abstract as row 0")
    assert issue(report, "duplicate_id")["detail"].iloc[0] == "same doc_id as row 0"
    assert issue(report, "non_text")["field"].tolist() == ["abstract", "title", "abstract"]
    assert not report.ok
    assert len(report.errors) == 5 and len(report.warnings) == 4
    summary = report.summary()
    assert "5 errors" in summary and "1 missing_abstract" in summary and "1 very_long" in summary


def test_clean_corpus_is_ok():
    report = make_corpus(["One.", "Two."]).validate()
    assert report.ok and report.issues.empty
    report.raise_if_errors()  # no exception
    assert "no problems" in report.summary()


def test_raise_if_errors_lists_rows():
    report = make_corpus(["One.", None, ""]).validate()
    with pytest.raises(CorpusError) as err:
        report.raise_if_errors()
    message = str(err.value)
    assert "row 1 (doc_id 'd1'): abstract: missing_abstract" in message
    assert "row 2 (doc_id 'd2'): abstract: empty_abstract" in message


def test_drop_invalid_removes_exactly_error_rows():
    corpus = make_corpus(["Good one.", None, "Good one.", "", "Third.", "Fourth."],
                         titles=["A", "B", "C", "D", "", "F"],
                         ids=["a", "b", "c", "d", "a", "f"])
    report = corpus.validate()
    clean, dropped = corpus.drop_invalid(report)
    # Row 2 (duplicate text) and row 4's missing title are warnings: kept.
    # Row 4 also repeats id "a": an error, so the first "a" stays and row 4 goes.
    assert clean.ids == ["a", "c", "f"]
    assert sorted(dropped.issues["row"]) == [1, 3, 4]
    assert set(dropped.issues["severity"]) == {"error"}
    assert set(dropped.issues["problem"]) == {"missing_abstract", "empty_abstract", "duplicate_id"}
    assert clean.validate().ok
    assert clean.docs.index.tolist() == [0, 1, 2]
    # Without a report it validates by itself, and a stale report is refused.
    assert corpus.drop_invalid()[0].ids == clean.ids
    with pytest.raises(ValueError, match="validate this corpus again"):
        clean.drop_invalid(report)


def test_texts_refuses_invalid_abstracts():
    with pytest.raises(CorpusError, match="drop_invalid"):
        make_corpus(["ok", None]).texts()


def test_loader_never_drops(tmp_path):
    path = write(tmp_path, "p.jsonl", '{"id": "a", "abstract": "x y"}\n{"id": "a"}\n{"id": "c", "abstract": 7}\n')
    corpus = load_corpus(path)
    assert len(corpus) == 3
    assert set(corpus.validate().errors["row"]) == {1, 2}


# -- access, subset, saving ------------------------------------------------------------
def test_get_and_getitem():
    corpus = make_corpus(["One.", "Two."])
    assert corpus.get("d1")["abstract"] == "Two."
    assert corpus["d0"]["title"] == "Title 0"
    with pytest.raises(KeyError, match="nope"):
        corpus["nope"]
    with pytest.raises(TypeError):
        corpus[0]


def test_subset():
    corpus = make_corpus([f"Abstract {i}." for i in range(50)])
    a, b = corpus.subset(10, seed=3), corpus.subset(10, seed=3)
    assert a.ids == b.ids and len(a) == 10
    assert a.ids == sorted(a.ids, key=corpus.ids.index)  # original order
    assert corpus.subset(10, seed=4).ids != a.ids
    assert len(corpus.subset(500)) == 50
    assert corpus.subset(ids=["d7", "d2"]).ids == ["d2", "d7"]
    with pytest.raises(CorpusError, match="d99"):
        corpus.subset(ids=["d1", "d99"])
    corpus.docs["split"] = ["test" if i % 5 == 0 else "train" for i in range(50)]
    assert corpus.subset(where='split == "test"').ids == [f"d{i}" for i in range(0, 50, 5)]
    assert corpus.subset(where=corpus.docs["split"] == "test").ids == [f"d{i}" for i in range(0, 50, 5)]
    assert len(corpus.subset(3, where='split == "test"', seed=1)) == 3
    with pytest.raises(CorpusError, match="columns are"):
        corpus.subset(where="nonexistent == 1")


def test_round_trip_jsonl_and_parquet(tmp_path):
    path = write(tmp_path, "p.csv",
                 "id,title,abstract,year,labels,venue\n"
                 'a,T1,"Abstract ""one"".",2020,x; y,ACL\n'
                 "b,,Abstract two.,,,\n")
    corpus = load_corpus(path)
    for saved in (corpus.to_jsonl(tmp_path / "out" / "c.jsonl"), corpus.to_parquet(tmp_path / "c.parquet")):
        again = load_corpus(saved)
        pd.testing.assert_frame_equal(again.docs, corpus.docs, check_dtype=False)
        assert str(again.docs["year"].dtype) == "Int64"
        assert again.docs["labels"].tolist() == [["x", "y"], []]
        assert again.fingerprint() == corpus.fingerprint()


def test_fingerprint():
    corpus = make_corpus(["One.", "Two."])
    assert corpus.fingerprint() == make_corpus(["One.", "Two."]).fingerprint()
    assert len(corpus.fingerprint()) == 16
    assert corpus.fingerprint() != make_corpus(["One.", "Two!"]).fingerprint()
    assert corpus.fingerprint() != make_corpus(["One.", "Two."], ids=["x", "d1"]).fingerprint()
    assert corpus.fingerprint() != make_corpus(["Two.", "One."]).fingerprint()


def test_repr_html_escapes_paper_text():
    corpus = make_corpus(["<script>alert(1)</script> text"], titles=["<b>bold</b>"])
    page = corpus._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold" in page
    assert "1 documents" in page
    report = make_corpus(["<script>x</script>", "<script>x</script>"]).validate()
    assert "<script>" not in report._repr_html_() and "duplicate_text" in report._repr_html_()


# -- ACLSum ----------------------------------------------------------------------------
def test_aclsum_all_splits():
    assert aclsum_splits() == ["train", "validation", "test"]
    corpus = load_corpus("aclsum")
    assert len(corpus) == 250
    assert corpus.docs["split"].value_counts().to_dict() == {"train": 100, "validation": 50, "test": 100}
    assert corpus.validate().ok
    assert all(len(t) > 50 for t in corpus.texts())
    for aspect in ("challenge", "approach", "outcome"):
        assert corpus.docs[f"summary_{aspect}"].str.strip().str.len().gt(0).all()
        assert all(isinstance(h, list) for h in corpus.docs[f"highlights_{aspect}"])
    first = corpus["P06-1112"]
    assert first["split"] == "train"
    # Highlights are sentences of the paper; this one is the abstract's last sentence.
    assert first["highlights_outcome"][0] in first["abstract"]


def test_aclsum_single_and_named_splits():
    test = load_corpus("aclsum:test")
    assert len(test) == 100 and set(test.docs["split"]) == {"test"}
    assert test.source == "aclsum:test"
    two = load_corpus("aclsum:train,val")
    assert len(two) == 150 and set(two.docs["split"]) == {"train", "validation"}
    with pytest.raises(CorpusError, match="unknown split"):
        load_corpus("aclsum:dev2")


def test_aclsum_split_slices_follow_python_slices():
    """"test[:20]" is the first 20 papers of the split, in the data set's order, as list slicing gives them."""
    test, full = load_corpus("aclsum:test").ids, load_corpus("aclsum")
    assert load_corpus("aclsum:test[:20]").ids == test[:20]
    assert load_corpus("aclsum:test[95:]").ids == test[95:]
    assert load_corpus("aclsum:test[10:12]").ids == test[10:12]
    mixed = load_corpus("aclsum:validation,test[:5]")
    assert mixed.docs["split"].value_counts().to_dict() == {"validation": 50, "test": 5}
    assert mixed.source == "aclsum:validation,test[:5]" and mixed.name != full.name
    with pytest.raises(CorpusError, match="slice"):
        load_corpus("aclsum:test[:x]")
    with pytest.raises(CorpusError, match="twice"):
        load_corpus("aclsum:test[:2],test[:3]")
