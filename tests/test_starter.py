"""`workbench aspects new`: a starter aspect file from names and one-line descriptions."""

import pytest

from workbench.cli import main


def test_a_starter_file_loads_and_carries_the_default_prompt(tmp_path, capsys):
    from workbench.data.aspects import load_aspects

    target = tmp_path / "my_field"
    assert main(["aspects", "new", str(target), "--aspect", "disease: the disease or condition studied",
                 "--aspect", "patient_group: who the patients are", "--domain", "clinical medicine"]) == 0
    assert "wrote" in capsys.readouterr().out
    aspects = load_aspects(tmp_path / "my_field.yaml")
    assert aspects.names == ["disease", "patient_group"] and aspects.domain == "clinical medicine"
    assert aspects["disease"].description == "the disease or condition studied"
    user = aspects.messages("disease", "An abstract about asthma in children.")[-1]["content"]
    assert "asthma in children" in user and "the disease or condition studied" in user
    assert '{"sentence": "Not applicable."}' in user  # the default prompt, filled in


@pytest.mark.parametrize("argv, message", [
    (["aspects", "new", "{f}"], "name at least one aspect"),
    (["aspects", "new", "{f}", "--aspect", "disease: a", "--aspect", "disease: b"], "named twice"),
    (["aspects", "new", "{f}", "--aspect", "Patient Group: who"], "'patient_group'"),
    (["aspects", "new", "{f}", "--aspect", "disease"], "name: one-line description"),
    (["aspects", "new"], "name the file to write"),
])
def test_bad_input_gets_a_clear_message_and_writes_nothing(tmp_path, capsys, argv, message):
    target = tmp_path / "x.yaml"
    assert main([a.replace("{f}", str(target)) for a in argv]) == 2
    assert message in capsys.readouterr().err and not target.exists()


def test_an_existing_file_is_not_replaced_without_force(tmp_path, capsys):
    target = tmp_path / "mine.yaml"
    target.write_text("my own words\n")
    assert main(["aspects", "new", str(target), "--aspect", "disease: d"]) == 2
    assert "exists" in capsys.readouterr().err and target.read_text() == "my own words\n"
    assert main(["aspects", "new", str(target), "--aspect", "disease: d", "--force"]) == 0


@pytest.mark.slow
def test_stage_01_runs_with_a_starter_file(tmp_path, smollm):
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.generate.summaries import SUMMARY_STOP, generate_summaries
    from workbench.generate.llm import Sampling

    assert main(["aspects", "new", str(tmp_path / "acl_words"), "--aspect", "challenge: the problem the paper "
                 "addresses", "--aspect", "approach: how the paper addresses it"]) == 0
    docs = load_corpus("aclsum:train[:2]")
    summary = generate_summaries(docs, load_aspects(tmp_path / "acl_words.yaml"), smollm, tmp_path / "run", k=1,
                                 sampling=Sampling(max_new_tokens=12, seed=0, stop=SUMMARY_STOP), progress=False)
    assert "4 written" in str(summary)


def test_runs_lists_run_directories_and_cleans_only_their_caches(tmp_path, capsys):
    from workbench.core.files import RunLock
    from workbench.core.rundir import RunDir

    run = tmp_path / "runs" / "demo"
    (run / "features" / "x").mkdir(parents=True)
    (run / "features" / "x" / "shard.safetensors").write_bytes(b"1" * 5000)
    (run / "embeddings").mkdir()
    (run / "embeddings" / "e.safetensors").write_bytes(b"1" * 1000)
    for cache_file in (run / "features" / "x" / "shard.safetensors", run / "embeddings" / "e.safetensors"):
        RunDir(run).record_cache(cache_file)  # as the cache writers record what they write
    (run / "summaries.jsonl").write_text("{}\n")
    (run / "run.json").write_text('{"01_generate": {}}')
    RunDir(run).mark()  # what the runner writes with a run's first artifact: only then are its caches ours
    (tmp_path / "runs" / "not_a_run").mkdir()
    assert main(["runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "not_a_run" not in out and "01_generate" in out
    assert " ".join(out.split()).count("caches 6.0 kB") == 1
    with RunLock(run, "a run in progress"):
        assert main(["runs", "--clean", str(run), "--yes"]) == 2  # never under a running stage
    assert "in use" in capsys.readouterr().err and (run / "features").exists()
    assert main(["runs", "--clean", str(run), "--yes"]) == 0
    assert "6.0 kB freed" in capsys.readouterr().out
    assert not (run / "features").exists() and not (run / "embeddings").exists()
    assert (run / "summaries.jsonl").read_text() == "{}\n"  # results stay
    assert main(["runs", "--clean", str(tmp_path / "runs" / "not_a_run")]) == 2
