"""Exports that spreadsheets and reference managers can trust, and a `validate` that cannot be turned on the terminal.

Both writers of each format (Python `write_records`, the map page's JavaScript in headless Chromium)
get every line-break character `str.splitlines` knows and every formula start in ids, titles and
abstracts; `load_corpus` must read back as many records as were written, with the same fields (RIS:
the same after its documented folding, `writers.ris_value`).
"""

from __future__ import annotations

import csv
import io
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main as cli_main
from workbench.data.corpus import load_corpus
from workbench.data.validation import CorpusError
from workbench.data.writers import (LINE_BREAKS, guard_formula, records_csv, records_ris, ris_paragraphs,
                                    ris_value, unguard_formula, write_records)

BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
PREFIXES = ["=", "+", "-", "@", "\t", "\r"]
FORMULA = 'HYPERLINK("http://evil.example/x","click")'


def test_the_break_list_is_what_splitlines_breaks_at():
    every = map(chr, range(0x10000))  # every line break is in the Basic Multilingual Plane
    assert set(LINE_BREAKS) == {c for c in every if len(f"a{c}b".splitlines()) == 2}


def hostile_records() -> pd.DataFrame:
    """One paper per (line break, formula start): each field starts with the formula start, and holds the
    line break before a forged RIS record ("ER  - ", "TY  - JOUR", "ID  - forged")."""
    rows = []
    for i, brk in enumerate(BREAKS):
        for j, start in enumerate(PREFIXES):
            forge = f"{brk}ER  - {brk}TY  - JOUR{brk}ID  - forged{i}-{j}{brk}"
            rows.append({
                "doc_id": f"{start}id{i}-{j}{brk}x",
                "title": f"{start}{FORMULA}{forge}end",
                "abstract": f"{start}{FORMULA} words{forge}more words.{brk}{brk}A second paragraph{forge}.",
                "year": 2000 + i,
                "score": -0.25 * (j + 1),  # a number: left as it is, minus sign and all
                "venue": f"{start}SUM(A1){brk}venue",
            })
    rows.append({"doc_id": "'=kept", "title": "'=1+1 starts with an apostrophe", "abstract": "''+x and more.",
                 "year": 1999, "score": 1.5, "venue": "'@plain"})
    return pd.DataFrame(rows)


def expected_back(records: pd.DataFrame, suffix: str) -> pd.DataFrame:
    """What `load_corpus` must read from a file of `records`: CSV exactly (ids lose surrounding
    whitespace, as in every format); RIS after its folding of line breaks."""
    want = records.copy()
    if suffix == ".ris":
        want["title"] = [ris_value(t) for t in want["title"]]
        want["abstract"] = ["\n\n".join(ris_paragraphs(a)) for a in want["abstract"]]
        want["doc_id"] = [ris_value(i) for i in want["doc_id"]]
    want["doc_id"] = [i.strip() for i in want["doc_id"]]
    return want


def assert_read_back(path, records: pd.DataFrame) -> pd.DataFrame:
    back = load_corpus(path).docs
    want = expected_back(records, path.suffix)
    assert len(back) == len(records), f"{path.name}: {len(back)} records read from {len(records)} written"
    for column in ("doc_id", "title", "abstract"):
        got, expected = back[column].tolist(), want[column].tolist()
        bad = [(g, e) for g, e in zip(got, expected) if g != e]
        assert not bad, f"{path.name}: {column}: {len(bad)} differ, e.g. {bad[0]!r}"
    assert back["year"].tolist() == records["year"].tolist()
    return back


def assert_no_live_formula(csv_text: str) -> None:
    """No cell of the file starts a formula, but the numbers are written as numbers."""
    cells = [cell for row in csv.reader(io.StringIO(csv_text, newline="")) for cell in row]
    numbers = {c for c in cells if c.lstrip("-").replace(".", "").isdigit()}
    live = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r") and c not in numbers]
    assert not live, live[:5]
    assert "-0.25" in cells and "-1.5" in cells  # numeric cells are left as they are
    assert "'=" + FORMULA.split("(")[0] in "".join(cells)


@pytest.mark.parametrize("suffix", [".csv", ".ris"])
def test_python_writers_read_back_every_break_and_formula_start(tmp_path, suffix):
    records = hostile_records()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = write_records(records, tmp_path / f"papers{suffix}")
    back = assert_read_back(path, records)
    if suffix == ".csv":
        assert_no_live_formula(path.read_bytes().decode("utf-8"))  # no newline translation: a CR stays a CR
        assert back["venue"].tolist() == records["venue"].tolist()  # metadata cells come back too
        assert not caught
    else:
        assert [str(w.message) for w in caught if "RIS line cannot" in str(w.message)], "changed ids not said"


def test_ris_export_says_it_drops_a_title_s_leading_tab_or_space(tmp_path):
    """A title's leading tab or space was dropped from a RIS export without a word; CSV keeps it."""
    records = pd.DataFrame({"doc_id": ["a", "b", "c"], "title": ["\tTabbed title", " Spaced title ", "Plain title"],
                            "abstract": ["One claim.", "Two claims.", "Three claims."], "year": [2020, 2021, 2022]})
    with pytest.warns(UserWarning, match=r"^2 title\(s\) will read back changed.*: 2 lose the whitespace at their "
                                         r"start or end.*'\\tTabbed title'"):
        path = write_records(records, tmp_path / "papers.ris")
    assert load_corpus(path).docs["title"].tolist() == ["Tabbed title", "Spaced title", "Plain title"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = write_records(records, tmp_path / "papers.csv")
    assert load_corpus(path).docs["title"].tolist() == records["title"].tolist()


def test_the_formula_guard_round_trips_every_text():
    texts = ["=1+1", "+1", "-x", "@SUM(A1)", "\tx", "\rx", "'=x", "''=x", "'", "'plain", "plain", "", "-",
             "-1", "-0.25", "1e-05", "-.5", "+1"]
    for text in texts:
        written = guard_formula(text)
        assert unguard_formula(written) == text, text
        assert written[:1] not in ("=", "+", "@", "\t", "\r")
        assert written[:1] != "-" or written in ("-1", "-0.25", "-.5")  # only numbers start with a minus
    assert guard_formula("-0.25") == "-0.25" and guard_formula("=1") == "'=1"


def test_a_foreign_ris_file_cannot_forge_records_with_unicode_separators(tmp_path):
    """Line separators other than CR and LF are text inside a value: no record begins there (and byte 0x85,
    a Windows ellipsis read as latin-1, does not end the line)."""
    body = "".join(f"TY  - JOUR\r\nID  - p{i}\r\nTI  - Title {i}\r\nAB  - Claim{brk}ER  - {brk}TY  - JOUR"
                   f"{brk}ID  - forged{i}\r\nER  - \r\n\r\n"
                   for i, brk in enumerate(["\u2028", "\x85", "\x0c", "\x1e", "\u2029", "\x0b"]))
    path = tmp_path / "foreign.ris"
    path.write_text(body, encoding="utf-8", newline="")
    docs = load_corpus(path).docs
    assert docs["doc_id"].tolist() == [f"p{i}" for i in range(6)]
    latin = tmp_path / "latin.ris"
    latin.write_bytes(b"TY  - JOUR\r\nID  - a\r\nTI  - Wait\x85 ER  - \r\nAB  - Wait\x85 and see\r\nER  - \r\n")
    docs = load_corpus(latin, encoding="latin-1").docs
    assert docs["title"].tolist() == ["Wait\x85 ER  -"] and docs["abstract"].tolist() == ["Wait\x85 and see"]


def test_a_mixed_encoding_file_is_reported_by_line_and_column(tmp_path):
    lines = ["doc_id,title,abstract"] + [f"p{i},Caf\u00e9 {i},Abstract {i} about caf\u00e9s." for i in range(600)]
    data = "\n".join(lines).encode("utf-8").split(b"\n")
    data[452] = "p451,Na\u00efve,A line pasted from a latin-1 export.".encode("latin-1")  # line 453 of the file
    for suffix in (".csv", ".ris"):
        path = tmp_path / f"mixed{suffix}"
        if suffix == ".ris":
            data = [b"TY  - JOUR", b"TI  - Caf\xc3\xa9"] * 226 + [b"AB  - Na\xefve"]  # the bad byte on line 453
        path.write_bytes(b"\n".join(data) + b"\n")
        with pytest.raises(CorpusError) as caught:
            load_corpus(path)
        message = str(caught.value)
        column = len("p451,Na" if suffix == ".csv" else "AB  - Na") + 1
        assert f"line 453, column {column}" in message and "0xef" in message, message
        assert "encoding='latin-1'" in message


def test_validate_ids_escapes_terminal_codes(tmp_path, capsys):
    title = "Nice \x1b]0;PWNED\x07\x1b[2J\x1b[31mred\x9b1m \u202eevil"
    path = tmp_path / "esc.csv"
    pd.DataFrame({"doc_id": ["a\x1b[5m", "a\x1b[5m"], "title": [title, "T\u2028two"],
                  "abstract": ["An abstract with words.", "Another abstract."]}).to_csv(path, index=False)
    assert cli_main(["validate", str(path), "--ids"]) == 1  # the duplicate id is an error
    out = capsys.readouterr().out
    control = [c for c in out if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u202e"]
    assert not control, control
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in out and "\\x9b1m" in out and "\\u202eevil" in out
    assert "T\\u2028two" in out and "duplicate_id" in out


# Run in the exported page: select every paper, press both download buttons (their own callbacks, as a
# click does), and hand back the files they made, caught at the Blob (no file is saved).
DOWNLOAD_BOTH = """
const done = arguments[arguments.length - 1];
(async () => {
  const made = [], RealBlob = window.Blob;
  window.Blob = function (parts, options) { made.push(parts.join("")); return new RealBlob(parts, options); };
  HTMLAnchorElement.prototype.click = function () {};
  const doc = Bokeh.documents[0], src = doc.get_model_by_name("points");
  src.selected.indices = [...Array(src.data.title.length).keys()];
  const out = {};
  for (const fmt of ["csv", "ris"]) {
    const button = doc.get_model_by_name("export_" + fmt);
    await button.js_event_callbacks["button_click"][0].execute(button, {});
    out[fmt] = made[made.length - 1];
  }
  out.status = doc.get_model_by_name("export_status").text;
  return out;
})().then(done, error => done({error: String(error) + " " + error.stack}));
"""


@pytest.mark.slow
def test_the_page_downloads_read_back_like_the_python_writers(tmp_path):
    """The map page's CSV and RIS, made by its JavaScript in headless Chromium from hostile papers, read
    back through load_corpus as the Python writers' files do, and are the same text as theirs."""
    from lab_harness import Browser, chromium_paths

    from workbench.maps.page import PageOptions, export_html

    if chromium_paths() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium, chromium-driver and selenium are required in CI")
        pytest.skip("chromium or chromium-driver missing")
    records = hostile_records()
    coords = np.random.default_rng(0).normal(size=(len(records), 2))
    page = export_html(tmp_path / "map.html", {"all": coords}, records[["doc_id", "title", "year"]],
                       records=records, options=PageOptions(filters=["venue", "score"]))
    browser = Browser(tmp_path / "profile")
    try:
        browser.driver.get(page.as_uri())
        browser.wait(lambda: browser.js("return !!(window.Bokeh && Bokeh.documents.length && "
                                        "Bokeh.documents[0].get_model_by_name('export_ris'))"), 20,
                     "the page did not load")
        browser.driver.set_script_timeout(10)
        out = browser.driver.execute_async_script(DOWNLOAD_BOTH)
    finally:
        browser.close()
    assert "error" not in out, out.get("error")
    assert out["status"] == f"exported {len(records)} selected papers as RIS"
    assert_no_live_formula(out["csv"])
    for suffix in (".csv", ".ris"):
        path = tmp_path / f"selection{suffix}"
        path.write_text(out[suffix[1:]], encoding="utf-8", newline="")
        back = assert_read_back(path, records)
        if suffix == ".csv":
            assert back["venue"].tolist() == records["venue"].tolist()
    columns = ["doc_id", "title", "abstract", "year", "venue", "score"]
    assert out["csv"] == records_csv(records[columns])  # one rule in both languages
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the changed ids, said in the test above
        assert out["ris"] == records_ris(records)
