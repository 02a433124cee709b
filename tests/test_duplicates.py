"""No copied logic inside the package: pylint's duplicate-code checker (`symilar`) at 6 lines.

Docstrings and comments are ignored, so only code counts. A block made only of imports
(two modules that need the same libraries) or of dataclass fields is not shared logic and is
let through; any other block of 6 or more equal lines in two places fails the test, naming
both places. (`--ignore-imports` would do the import part inside symilar, but it parses every
module with astroid and takes about 100 s; reading the blocks here takes a fraction of one.)
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_LINES = 6
IMPORT = re.compile(r"^(from \S+ import .*|import \S+.*|\)|[\w, ]+,?)$")
FIELD = re.compile(r"^\w+: [\w\[\], .|\"']+( = .+)?$")


def duplicate_blocks() -> list[tuple[list[str], list[str]]]:
    """[(places, lines)] for every block symilar reports in workbench/*.py."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workbench").rglob("*.py"))
    symilar = Path(sys.executable).parent / "symilar"
    out = subprocess.run([str(symilar), "-d", str(MIN_LINES), "--ignore-docstrings", "--ignore-comments",
                          *files], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    blocks = []
    for chunk in re.split(r"\n(?=\d+ similar lines in \d+ files)", out):
        if not re.match(r"\d+ similar lines", chunk.strip()):
            continue
        places = re.findall(r"^==(\S+)$", chunk, flags=re.M)
        lines = [line.strip() for line in chunk.splitlines()
                 if line.startswith("   ") and line.strip()]
        blocks.append((places, lines))
    return blocks


def shares_logic(lines: list[str]) -> bool:
    """False for a block of imports only or of dataclass fields only."""
    return not (all(IMPORT.match(line) for line in lines) or all(FIELD.match(line) for line in lines))


def test_symilar_runs_and_finds_a_planted_copy(tmp_path):
    """The checker is really looking: a copied function in two files is reported."""
    body = "".join(f"    total = total + {i} * x\n" for i in range(8))
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"def f{name[0]}(x):\n    total = 0\n{body}    return total\n")
    symilar = Path(sys.executable).parent / "symilar"
    out = subprocess.run([str(symilar), "-d", str(MIN_LINES), "a.py", "b.py"], cwd=tmp_path,
                         capture_output=True, text=True, check=False).stdout
    assert re.search(r"\d+ similar lines in 2 files", out), out


def test_import_and_field_blocks_are_not_logic():
    assert not shares_logic(["from __future__ import annotations", "import json", "from torch import nn"])
    assert not shares_logic(["name: str", "count: int = 0", "values: list[float] | None = None"])
    assert shares_logic(["total = 0", "for x in xs:", "total += x"])


def test_no_copied_logic_in_the_package():
    copies = [f"{' and '.join(places)}:\n    " + "\n    ".join(lines)
              for places, lines in duplicate_blocks() if shares_logic(lines)]
    assert not copies, "copied code (move it to one place):\n" + "\n".join(copies)
