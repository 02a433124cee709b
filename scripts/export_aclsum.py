"""Write ACLSum abstracts to a file the way a reference manager would: a stand-in for a user's own corpus.

    .venv/bin/python scripts/export_aclsum.py data/my_papers.csv --n 100
    .venv/bin/python scripts/export_aclsum.py data/my_papers.ris --n 100 --split train

The file has titles and abstracts only: no ids (the workbench derives stable ids from
title + abstract), no splits and no human summaries, so every stage runs as it would on a
user's export. `--messy` adds what real exports have (RIS: a record without its ER line,
an abstract split over two AB tags; CSV: commas, quotes and line breaks inside abstracts,
a column of years written in several ways), for tests of the loaders.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.data.corpus import load_corpus  # noqa: E402


def export(out: str | Path, n: int = 100, split: str = "test", messy: bool = False,
           sentences: int | None = None) -> Path:
    """Write the first `n` abstracts of an ACLSum split to `out` (.csv or .ris); return the path.

    sentences: keep only each abstract's first that many sentences (a smaller corpus: the
    tests' LLM and encoders read a third of the tokens).
    """
    corpus = load_corpus(f"aclsum:{split}[:{n}]")
    docs = corpus.docs.copy()
    if sentences:
        docs["abstract"] = [_first_sentences(text, sentences) for text in docs["abstract"]]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    years = ["2019", "2020-05-01", "2021/07", "2018"]
    if out.suffix.lower() == ".csv":
        with open(out, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)  # quotes fields with commas, quotes and line breaks, as exports do
            writer.writerow(["Title", "Abstract", "Publication Year"])
            for i, (title, abstract) in enumerate(zip(docs["title"], docs["abstract"])):
                if messy and i % 7 == 3:
                    abstract = abstract.replace(". ", '.\n', 1) + ' (The "code" is public, see the paper.)'
                writer.writerow([title, abstract, years[i % len(years)] if messy else "2020"])
    elif out.suffix.lower() == ".ris":
        lines = []
        for i, (title, abstract) in enumerate(zip(docs["title"], docs["abstract"])):
            lines += ["TY  - CONF", f"TI  - {title}"]
            if messy and i % 5 == 1:  # an abstract split over two AB tags
                half = len(abstract) // 2
                cut = abstract.rfind(". ", 0, half) + 1 or half
                lines += [f"AB  - {abstract[:cut].strip()}", f"AB  - {abstract[cut:].strip()}"]
            else:
                lines.append(f"AB  - {abstract}")
            lines.append(f"PY  - {years[i % len(years)][:4]}")
            if not (messy and i % 9 == 4):  # a record whose ER line went missing
                lines.append("ER  - ")
            lines.append("")
        out.write_text("\n".join(lines), encoding="utf-8")
    else:
        raise SystemExit(f"write .csv or .ris, not {out.suffix!r}")
    return out


def _first_sentences(text: str, n: int) -> str:
    # ACLSum abstracts are detokenised sentences joined by single spaces: ". " ends a sentence
    # (an abbreviation such as "e.g. " cuts one short, which a stand-in corpus can bear).
    parts = text.split(". ")
    return text if len(parts) <= n else ". ".join(parts[:n]) + "."


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the file to write: .csv or .ris")
    parser.add_argument("--n", type=int, default=100, help="number of abstracts (default 100)")
    parser.add_argument("--split", default="test", help="ACLSum split: train, validation, test (default test)")
    parser.add_argument("--messy", action="store_true", help="add what real exports have (for loader tests)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="keep each abstract's first N sentences (a smaller corpus for quick tests)")
    args = parser.parse_args(argv)
    path = export(args.out, args.n, args.split, args.messy, args.sentences)
    print(f"wrote {args.n} abstracts to {path}")


if __name__ == "__main__":
    main()
