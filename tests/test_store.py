"""The append-only store: no loss, no duplicates, torn lines repaired, one writer at a time."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from workbench.core.store import RecordStore, StoreError, parse_line

KEY = ("doc_id", "key", "sample")


def rec(doc, sample, text="x"):
    return {"doc_id": doc, "key": "challenge", "sample": sample, "text": text}


def test_append_skips_known_keys_and_survives_reopen(tmp_path):
    path = tmp_path / "s.jsonl"
    with RecordStore(path, KEY) as store:
        assert store.append([rec("a", 0), rec("a", 1)]) == 2
        assert store.append([rec("a", 1, "changed"), rec("b", 0)]) == 1
    reopened = RecordStore(path, KEY)
    assert len(reopened) == 3
    assert ("a", "challenge", 1) in reopened
    assert [r["text"] for r in reopened.records() if r["doc_id"] == "a"] == ["x", "x"]
    assert len(path.read_text().splitlines()) == 3


def test_torn_last_line_is_cut_and_redone(tmp_path):
    path = tmp_path / "s.jsonl"
    with RecordStore(path, KEY) as store:
        store.append([rec("a", 0)])
    good = path.stat().st_size
    with open(path, "a") as fh:
        fh.write('{"doc_id": "a", "key": "chall')  # a write cut short by kill -9
    with pytest.warns(UserWarning, match=rf"s.jsonl: .*incomplete last line \(line 2, 29 bytes from byte {good}\)"):
        store = RecordStore(path, KEY)
    assert len(store) == 1 and store.repaired_bytes == 0  # reading repairs nothing
    with pytest.warns(UserWarning, match=rf"s.jsonl: cut off an incomplete last line \(line 2, 29 bytes from byte {good}"):
        assert store.append([rec("a", 1)]) == 1
    assert store.repaired_bytes == 29
    lines = path.read_text().splitlines()
    assert [json.loads(line)["sample"] for line in lines] == [0, 1]


def test_corrupt_middle_line_is_skipped_and_named(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(rec("a", 0)) + "\n{broken\n" + json.dumps(rec("b", 0)) + "\n")
    with pytest.warns(UserWarning, match="line 2: not valid JSON"):
        store = RecordStore(path, KEY)
    assert [r["doc_id"] for r in store.records()] == ["a", "b"]


def test_record_without_key_field_is_an_error(tmp_path):
    with pytest.raises(StoreError, match="sample"):
        RecordStore(tmp_path / "s.jsonl", KEY).append([{"doc_id": "a", "key": "k"}])


def test_second_writer_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    first = RecordStore(path, KEY)
    first.append([rec("a", 0)])
    code = textwrap.dedent(f"""
        from workbench.core.store import RecordStore, StoreError, parse_line
        try:
            RecordStore({str(path)!r}, {KEY!r}).append([{{"doc_id": "b", "key": "k", "sample": 0}}])
        except StoreError as exc:
            print("refused:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused" in out.stdout and "another process" in out.stdout
    first.close()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused" not in out.stdout, out.stderr


ABSTRACTS = {
    "a": "We study dependency parsing for low-resource languages with cross-lingual transfer.",
    "b": "Neural machine translation degrades on noisy user text; we add synthetic noise.",
    "c": "Abstractive summarisers hallucinate; we filter training data by entailment."}
SHORT_ASPECTS = Path(__file__).parent / "data" / "short_aspects.yaml"  # the `short_aspects` fixture's file
KILL_SCRIPT = f"""
import sys
from workbench.data.aspects import load_aspects
from workbench.data.corpus import Corpus
from workbench.generate.summaries import generate_summaries
from workbench.generate.llm import Sampling, TransformersBackend
import pandas as pd
abstracts = {ABSTRACTS!r}
corpus = Corpus(pd.DataFrame({{"doc_id": list(abstracts), "title": [""] * 3, "abstract": list(abstracts.values())}}))
backend = TransformersBackend("smollm2-135m-instruct", batch_size=1, device="cpu")
generate_summaries(corpus, load_aspects({str(SHORT_ASPECTS)!r}).subset(["challenge"]), backend, sys.argv[1], k=2,
                   save_every=1, progress=False, sampling=Sampling(max_new_tokens=12, seed=0))
print("finished", flush=True)
"""


def _whole_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_generation_resumes_without_loss_or_duplicates(tmp_path, smollm, short_aspects):
    """A real run killed with SIGKILL mid-generation, then resumed: 6 unique records, none twice.

    The resumed run is this process's (the session's SmolLM2): only the kill needs a process of its own.
    """
    import pandas as pd

    from workbench.data.corpus import Corpus
    from workbench.generate.summaries import generate_summaries
    from workbench.generate.llm import Sampling

    script = tmp_path / "gen.py"
    script.write_text(KILL_SCRIPT)
    store = tmp_path / "run" / "summaries.jsonl"
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if store.exists() and len(store.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed:\n" + proc.stdout.read()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len([line for line in store.read_text().splitlines() if _whole_record(line)])  # not a torn one
    assert 2 <= done_before < 6

    corpus = Corpus(pd.DataFrame({"doc_id": list(ABSTRACTS), "title": [""] * 3, "abstract": list(ABSTRACTS.values())}))
    again = generate_summaries(corpus, short_aspects.subset(["challenge"]), smollm, tmp_path / "run", k=2,
                               progress=False, sampling=Sampling(max_new_tokens=12, seed=0))
    assert (again.skipped, again.written) == (done_before, 6 - done_before)
    lines = [json.loads(line) for line in store.read_text().splitlines()]
    keys = [(r["doc_id"], r["key"], r["sample"]) for r in lines]
    assert len(keys) == 6 and len(set(keys)) == 6
    assert {k[0] for k in keys} == {"a", "b", "c"}
    assert all(r["status"] in {"ok", "not_applicable", "unparsed"} and r["raw"] for r in lines)


# -- damaged or hand-edited files: nothing valid is lost, a reader never writes ------------------------


def test_complete_last_record_without_newline_is_kept(tmp_path):
    """A whole JSON object at the end that lacks only its newline is a record, not a torn write."""
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(rec("a", 0)) + "\n" + json.dumps(rec("a", 1)))  # e.g. saved by an editor
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to report
        store = RecordStore(path, KEY)
    assert len(store) == 2 and ("a", "challenge", 1) in store
    assert path.read_bytes() == before
    with store:
        assert store.append([rec("a", 1), rec("b", 0)]) == 1  # a1 is known, b0 is new
    lines = path.read_text().splitlines()
    assert [(r["doc_id"], r["sample"]) for r in map(json.loads, lines)] == [("a", 0), ("a", 1), ("b", 0)]
    assert len(RecordStore(path, KEY)) == 3


def test_reading_never_modifies_the_file(tmp_path):
    """Opening to read (to_frame, `in`) while a writer is mid-write leaves the file alone."""
    path = tmp_path / "s.jsonl"
    writer = RecordStore(path, KEY)
    writer.append([rec("a", 0)])  # holds the writer's lock from here on
    with open(path, "a") as fh:
        fh.write('{"doc_id": "a", "key": "chall')  # the writer's next batch, half written
    before = path.read_bytes()
    with pytest.warns(UserWarning, match="incomplete last line"):
        reader = RecordStore(path, KEY)
    assert path.read_bytes() == before
    assert len(reader.to_frame()) == 1 and ("a", "challenge", 0) in reader and reader.repaired_bytes == 0
    writer.close()
    # A reader of a store that does not exist creates nothing, not even its folder.
    missing = tmp_path / "no_run" / "s.jsonl"
    assert len(RecordStore(missing, KEY)) == 0 and not missing.parent.exists()


def test_bad_lines_are_skipped_with_a_warning_naming_them(tmp_path):
    path = tmp_path / "summaries.jsonl"
    lines = [json.dumps(rec("a", 0)), "[1, 2]", "null", json.dumps({"doc_id": "a", "key": "k"}), "{broken",
             '"text"', json.dumps({"doc_id": ["a"], "key": "k", "sample": 0}), json.dumps(rec("b", 0))]
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    with pytest.warns(UserWarning) as caught:
        store = RecordStore(path, KEY)
    message = "\n".join(str(w.message) for w in caught)
    assert "summaries.jsonl" in message and "6 unusable lines" in message
    assert "line 2: expected a JSON object with fields doc_id, key, sample; got a list" in message
    assert "line 3: expected a JSON object with fields doc_id, key, sample; got null" in message
    assert "line 4: record lacks key field 'sample'" in message
    assert "line 5: not valid JSON" in message
    assert "line 6: expected a JSON object" in message and "got a string" in message
    assert "line 7" in message and "doc_id" in message
    assert [r["doc_id"] for r in store.records()] == ["a", "b"]
    assert path.read_bytes() == before  # the bad lines stay in the file for the user to see
    with store:
        assert store.append([rec("c", 0)]) == 1
    assert path.read_text().splitlines()[:-1] == lines
    with pytest.warns(UserWarning, match="unusable lines"):
        assert [r["doc_id"] for r in RecordStore(path, KEY).records()] == ["a", "b", "c"]


def test_writer_sees_records_appended_after_it_opened(tmp_path):
    """The store is read again under the writer's lock, so a record written meanwhile is not duplicated."""
    path = tmp_path / "s.jsonl"
    late = RecordStore(path, KEY)  # opened (read) before the other writer ran
    with RecordStore(path, KEY) as other:
        other.append([rec("a", 0)])
    with late:
        assert ("a", "challenge", 0) not in late
        assert late.lock() is late and ("a", "challenge", 0) in late  # known before any work is done
        assert late.append([rec("a", 0), rec("a", 1)]) == 1
        with pytest.raises(StoreError, match="another process"):
            RecordStore(path, KEY).lock()
    assert len(path.read_text().splitlines()) == 2


# -- keys in memory, texts read when needed ---------------------------------------------------------------


def whole_read(path: Path) -> list[dict]:
    """The stored records as a plain reading sees them: every whole line parsed, the first of each key kept."""
    kept, seen = [], set()
    for line in path.read_bytes().split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and all(isinstance(record.get(f), (str, int)) for f in KEY):
            key = tuple(record[f] for f in KEY)
            if key not in seen:
                seen.add(key)
                kept.append(record)
    return kept


def test_resume_from_keys_and_offsets_matches_a_whole_read(tmp_path):
    """Keys, records and frame equal an independent parse of every line, before and after the writer's
    read under the lock continues where opening stopped (records appended meanwhile by another writer)."""
    path = tmp_path / "s.jsonl"
    with RecordStore(path, KEY) as store:
        store.append([rec(f"d{i}", s, f"été {i} {s} " * 20) for i in range(30) for s in range(2)])
    with open(path, "a") as fh:  # a hand-copied duplicate (kept once, the first) and a bad line
        fh.write(json.dumps(rec("d3", 1, "a later copy")) + "\n{broken\n")
    with pytest.warns(UserWarning, match="line 62: not valid JSON"):
        late = RecordStore(path, KEY)
    with pytest.warns(UserWarning, match="line 62"), RecordStore(path, KEY) as other:  # a writer, after `late`
        assert other.append([rec("e", 0, "new"), rec("d0", 0, "dup")]) == 1
    expected = whole_read(path)
    assert len(expected) == 61 and ("e", "challenge", 0) not in late
    with late:
        late.lock()
        assert late._unchanged()  # continued from where opening stopped, not read again from the start
        assert late.keys() == [tuple(r[f] for f in KEY) for r in expected]
        assert late.records() == expected and late.to_frame()["text"].tolist() == [r["text"] for r in expected]
        assert late.append([rec("f", 0, "last")]) == 1
    with pytest.warns(UserWarning, match="line 62"):
        assert RecordStore(path, KEY).records() == whole_read(path) == expected + [rec("f", 0, "last")]
    assert late.skipped_lines == [(62, "not valid JSON (Expecting property name enclosed in double quotes)")]


def test_killed_write_seen_by_an_open_store_is_cut_without_loss_or_duplicates(tmp_path):
    """A store opened before a writer was killed mid-line, then locked: the torn line is cut, the rest kept."""
    path = tmp_path / "s.jsonl"
    with RecordStore(path, KEY) as store:
        store.append([rec("a", 0, "ä" * 50), rec("a", 1)])
    opened = RecordStore(path, KEY)
    with open(path, "a", encoding="utf-8") as fh:  # the killed writer: one whole record, then half of one
        fh.write(json.dumps(rec("b", 0), ensure_ascii=False) + "\n" + json.dumps(rec("b", 1, "ü" * 9))[:40])
    with opened, pytest.warns(UserWarning, match="cut off an incomplete last line"):
        assert opened.append([rec(d, s) for d in "abc" for s in range(2)]) == 3  # b1, c0, c1
    records = whole_read(path)
    assert [(r["doc_id"], r["sample"]) for r in records] == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0),
                                                           ("c", 1)]
    assert len(path.read_bytes().split(b"\n")) == 7 and opened.records() == records
    assert opened.repaired_bytes == 40


def test_reading_a_changed_file_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    with RecordStore(path, KEY) as store:
        store.append([rec("a", 0), rec("b", 0)])
    path.write_text(json.dumps(rec("b", 0)) + "\n")  # edited by hand after it was read
    with pytest.raises(StoreError, match="changed since it was read"):
        store.records()


def test_opening_keeps_keys_not_texts(tmp_path):
    """Memory is bounded by the keys: opening a 20 MB store allocates well under a tenth of its size."""
    import tracemalloc

    path = tmp_path / "s.jsonl"
    words = " ".join(f"word{i}" for i in range(700))  # about 5 kB a record
    with open(path, "w") as fh:
        fh.writelines(json.dumps(rec(f"d{i}", 0, f"{i} {words}")) + "\n" for i in range(4000))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        store = RecordStore(path, KEY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(store) == 4000 and size > 20e6
    assert peak < size / 10, (peak, size)  # about 1.5 MB here: the read buffer and 4,000 keys
    assert next(store.iter_records())["text"] == f"0 {words}"  # the text is on disk, read when asked


@pytest.mark.parametrize("line", [b'{"a": 1}\n', b' {"a": 1}\n', b'{"a": 1} x\n', b"{broken\n", b"null\n", b"[1, 2]\n",
                                  b'\xef\xbb\xbf{"a": 1}\n', b'{"a": "\xff"}\n', b'{"a": 1}\x0b\n', b"1 2\n",
                                  b'{"a": "\x01"}\n', b'{"a": 1}\r\n', '{"é": "ü\\n"}\n'.encode()])
def test_fast_line_parse_is_json_loads(line):
    """The scan's parser gives json.loads's value, or raises its error with its message."""
    def outcome(parse):
        try:
            return "value", parse(line)
        except ValueError as exc:
            return type(exc).__name__, getattr(exc, "msg", str(exc))
    assert outcome(parse_line) == outcome(json.loads)
