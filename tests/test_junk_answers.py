"""No usable LLM answer, for one aspect or for all: said in words, and the run goes on with the aspect-file floor.

A misconfigured server (a proxy's own page, another service on the port) answers every request with
text that is no summary. Stage 01 stored the answers as unparsed and said nothing of it; stage 02 then
died with an IndexError (no training paper to show) or stopped on its missing supervision. Here a real
server on 127.0.0.1 answers junk, for every request or for one aspect's prompts only: stage 01 says
that no answer of the N was kept and quotes what came back, stage 02 trains no model of such an aspect
and says why (in its notebook and in `aspect_models/untrained.json`), stage 03 gives its head the
aspect file's floor, and stage 04 decodes it into its papers' own sentences, read by that head.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from loopback import FakeServer

from workbench.core.rundir import RunDir
from workbench.data.aspects import load_aspects
from workbench.data.corpus import Corpus
from workbench.generate.http_backend import OpenAIBackend
from workbench.generate.sampling import RetryPolicy
from workbench.generate.summaries import generate_summaries, summaries_frame

ROOT = Path(__file__).resolve().parents[1]
JUNK = "<html><title>Welcome to nginx!</title>  If you see this page, the nginx web server is installed.</html>"


def junk_replies(good_for: str | None = None):
    """A `FakeServer` reply: every chat completion is `JUNK`, or, with `good_for`, a proper summary for the
    prompts that name that aspect (so only the other aspects get junk)."""
    def respond(n, request):
        good = good_for is not None and f"Aspect: {good_for}." in json.dumps(request["body"])
        content = json.dumps({"sentence": "A parser that reads long documents in linear time."}) if good else JUNK
        return 200, {"choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}],
                     "usage": {"completion_tokens": 9}}
    return respond


@pytest.fixture
def serve():
    servers = []

    def start(**options):
        servers.append(FakeServer(junk_replies(**options)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def three_papers() -> Corpus:
    docs = pd.DataFrame({"doc_id": ["d0", "d1", "d2"], "title": ["Parsing", "Mining", "Coreference"], "abstract": [
        "Parsing long documents is slow. We propose a linear-time parser that is as accurate as cubic ones.",
        "Low-resource translation lacks parallel data. We mine sentence pairs from comparable corpora.",
        "Annotating coreference is costly. Active learning halves the annotation effort."]})
    return Corpus(docs, name="three")


def generate(server, run_dir: Path, aspects) -> None:
    backend = OpenAIBackend(model="fake-model", base_url=server.base_url, concurrency=2,
                            retry=RetryPolicy(timeout=5.0, retries=0))
    try:
        generate_summaries(three_papers(), aspects, backend, run_dir, k=2, progress=False)
    finally:
        backend.close()


def test_stage_01_says_that_no_answer_was_kept_and_what_the_server_answered(serve, tmp_path, capsys):
    from workbench.generate.summaries import say_nothing_kept

    server = serve()
    aspects = load_aspects("acl").subset(["challenge", "approach"])
    generate(server, tmp_path, aspects)
    assert len(server.posts) == 12
    said = say_nothing_kept(summaries_frame(tmp_path), aspects.names)
    out = capsys.readouterr().out
    assert list(said) == ["*"]  # said once for the run, not once per aspect
    assert out.count("[notice] ") == 1
    assert 'no answer of the 12 was kept: 12 unparsed (no JSON object with a "sentence" string)' in out
    assert "the server answered, e.g., \"<html><title>Welcome to nginx!</title> If you see" in out  # whitespace folded
    assert "aspect-file floor" in out and "base_url" in out


def test_stage_01_names_the_one_aspect_whose_answers_were_all_junk(serve, tmp_path, capsys):
    from workbench.generate.summaries import say_nothing_kept

    server = serve(good_for="challenge")
    aspects = load_aspects("acl").subset(["challenge", "approach"])
    generate(server, tmp_path, aspects)
    said = say_nothing_kept(summaries_frame(tmp_path), aspects.names)
    out = capsys.readouterr().out
    assert list(said) == ["approach"] and said["approach"].startswith("no answer of the 6 was kept: 6 unparsed")
    assert out.startswith("[notice] approach: no answer of the 6 was kept") and "Welcome to nginx" in out
    assert "challenge" not in out


def test_stage_02_trains_no_model_of_an_aspect_without_views_and_says_why(serve, tmp_path, capsys):
    """All junk on a corpus without human summaries: no training paper at all. Stage 02 raised (or, in its
    notebook, died on `train_ids[0]`); now it records the aspects as untrained, with the reason."""
    from workbench.embed.aspect_training import TrainConfig, prepare_views, train_aspect_models
    from workbench.embed.untaught import example_views_html, results_table

    generate(serve(), tmp_path, load_aspects("acl").subset(["challenge"]))
    corpus = three_papers()
    views, train_ids, val_ids = prepare_views(["challenge"], tmp_path, corpus)
    assert train_ids == [] and val_ids == []
    assert "no paper has a view" in example_views_html(views, train_ids).lower()
    results = train_aspect_models(["challenge"], tmp_path, corpus, TrainConfig(mode="frozen"), progress=False)
    assert results == {}
    out = capsys.readouterr().out
    assert "[notice] no aspect model trained for challenge: no answer of the 6 was kept" in out
    untrained = json.loads(RunDir(tmp_path).untrained.read_text())["aspects"]
    assert list(untrained) == ["challenge"] and "Welcome to nginx" in untrained["challenge"]
    assert "Welcome to nginx" in results_table(results, tmp_path).at["challenge", "not trained"]
    assert not RunDir(tmp_path).aspect_model("challenge").exists()


def test_stage_02_fine_tuning_records_an_aspect_with_too_few_views_as_left_without_a_model(serve, tmp_path,
                                                                                           monkeypatch):
    """Fine-tuning (a GPU's mode) has no frozen teacher to fall back on: an aspect with usable answers for too few
    papers got no model and no record, and stage 03 asked to run stage 02 again for it. Now untrained.json says
    why, so stage 03 knows it has no teacher (its head: the floor, or, fine-tuning, a refusal that says so)."""
    from stand_ins import BagOfWords
    from workbench.embed import grounding
    from workbench.embed.aspect_training import TrainConfig, train_aspect_models

    monkeypatch.setattr(grounding, "FrozenBackbone", lambda name: BagOfWords())  # no encoder to load
    generate(serve(good_for="challenge"), tmp_path, load_aspects("acl").subset(["challenge"]))
    assert train_aspect_models(["challenge"], tmp_path, three_papers(), TrainConfig(mode="finetune"),
                               progress=False) == {}
    untrained = json.loads(RunDir(tmp_path).untrained.read_text())["aspects"]
    assert list(untrained) == ["challenge"] and untrained["challenge"].startswith("too few documents with two")


def test_stage_03_heads_without_any_supervision_are_saved_untrained_for_the_floor(tmp_path, monkeypatch):
    """No target and no sentence label for any aspect: stage 03 stopped on "need documents with targets"; now
    its heads are saved as they start, marked untrained (stage 03's check puts the aspect-file floor there)."""
    from stand_ins import BagOfWords
    from workbench.embed import distill
    from workbench.embed.distill import DistillConfig, train_unified_model
    from workbench.embed.heads import PooledAspectModel

    monkeypatch.setattr(distill, "frozen_backbone", lambda *args: BagOfWords())  # no encoder to load

    result = train_unified_model(three_papers(), {"challenge": {}, "approach": {}}, ([], []), tmp_path / "u",
                                 DistillConfig(mode="frozen"), progress=False, run_dir=tmp_path, sentence_labels={})
    assert result.aspects == ["challenge", "approach"] and result.n_train == 0
    config = json.loads((tmp_path / "u" / "workbench_config.json").read_text())
    assert config["extra"]["untrained"] == ["challenge", "approach"] and config["aspects"] == ["challenge", "approach"]
    assert isinstance(PooledAspectModel.from_pretrained(tmp_path / "u", device="cpu"), PooledAspectModel)


def test_stage_03_floors_the_heads_too_few_papers_can_train_says_why_and_trains_the_rest(tmp_path, monkeypatch,
                                                                                           capsys):
    """Usable answers for a few papers only (a weak model, answers cut off): stage 03 died with "need documents
    with targets or sentence labels for training and validation, got 1 and 1". Now it says how many papers each
    aspect has and what to do; a head too few papers can train and validate is marked untrained, with why, for
    stage 03's check to put the aspect-file floor there, and the others are trained."""
    import numpy as np

    from stand_ins import BagOfWords
    from workbench.embed import distill
    from workbench.embed.distill import DistillConfig, train_unified_model
    from workbench.embed.guard import untrained_verdict

    monkeypatch.setattr(distill, "frozen_backbone", lambda *args: BagOfWords())  # no encoder to load
    vector = dict(zip(["d0", "d1", "d2"], np.random.default_rng(0).standard_normal((3, BagOfWords.hidden_size))))
    frozen = DistillConfig(mode="frozen", head_steps=20, eval_every=10)

    def train(targets, split, folder, config=frozen):
        result = train_unified_model(three_papers(), targets, split, tmp_path / folder, config, progress=False,
                                     run_dir=tmp_path, sentence_labels={})
        extra = json.loads((tmp_path / folder / "workbench_config.json").read_text())["extra"]
        return result, extra, capsys.readouterr().out

    # Two papers with a summary of challenge, one of approach: no head can be both trained and checked.
    result, extra, out = train({"challenge": {d: vector[d] for d in ("d0", "d1")}, "approach": {"d0": vector["d0"]}},
                               (["d0"], ["d1"]), "none")
    assert result.n_train == 0 and extra["untrained"] == ["challenge", "approach"]
    assert out.count("[notice] ") == 1 and "stage 03 cannot train the heads of challenge, approach" in out
    assert ("challenge: only 2 of the 3 papers have a usable summary of it: 1 to train on and 1 held out to check "
            "it on, where a head needs 1 and 2; approach: only 1 of the 3 papers has") in out
    assert "Every head is the aspect file's own" in out
    assert "01_generate.subset" in out and "max_new_tokens" in out and "JSON" in out
    gpu = DistillConfig(mode="finetune")  # a GPU's mode: with no head to train, the floor's frozen heads too
    assert train({"challenge": {"d0": vector["d0"]}}, (["d0"], []), "gpu", gpu)[1]["untrained"] == ["challenge"]
    why = extra["untrained_reasons"]["approach"]
    assert untrained_verdict("approach", why)["verdict"] == (f"no trained head: {why}, so the aspect file's own "
                                                             "head reads it")

    # Enough papers for challenge, too few held out for approach: challenge is trained, approach gets the floor.
    result, extra, out = train({"challenge": vector, "approach": {d: vector[d] for d in ("d0", "d1")}},
                               (["d0"], ["d1", "d2"]), "one")
    assert result.n_train == 1 and result.n_val == 2 and result.steps == 20
    assert extra["untrained"] == ["approach"] and list(extra["untrained_reasons"]) == ["approach"]
    assert "stage 03 cannot train the head of approach for want of papers: approach: only 2 of the 3" in out
    assert "reads it; the heads of challenge are trained" in out


def test_stage_04_decodes_an_aspect_without_a_model_into_its_papers_own_sentences(tmp_path, capsys, monkeypatch):
    """One aspect's answers all junk: stage 04 stopped (every aspect junk) or left it out, and then a map of it
    could decode nothing. Now its retrieval memory is each paper's own sentence, embedded by the unified model's
    head for it, the head that embeds what a map decodes; the other aspect keeps its own model's memory."""
    import numpy as np

    from workbench.core.files import write_json
    from workbench.core.vectors import unit_rows
    from workbench.decode.decoding import build_retrieval_decoders, load_decoders, scored_aspects
    from workbench.decode.retrieval import memory_papers
    from workbench.embed.aspect_training import TrainConfig
    from workbench.embed.checkpoints import load_model
    from workbench.embed.distill import DistillConfig
    from workbench.embed.heads import PooledAspectModel
    from stand_ins import BagOfWords

    monkeypatch.setattr(PooledAspectModel, "backbone", lambda self: BagOfWords())  # no encoder to load
    corpus, run, both = three_papers(), RunDir(tmp_path), ["challenge", "approach"]
    hidden = BagOfWords.hidden_size
    PooledAspectModel("bag-of-words", ["challenge"], hidden=hidden, pool=False, rank=TrainConfig().head_rank) \
        .save_pretrained(run.aspect_model("challenge"), extra={"mode": "frozen"})
    PooledAspectModel("bag-of-words", both, hidden=hidden, pool=True, rank=DistillConfig().head_rank).save_pretrained(
        run.unified_model, extra={"stage": "distill", "mode": "frozen", "untrained": ["approach"]})
    write_json(run.untrained, {"aspects": {"approach": "no answer of the 6 was kept"}})
    run.write_split([], [])  # where no aspect had a view: the papers stage 01 was asked about (here: all)
    assert memory_papers(run, corpus) == ["d0", "d1", "d2"]
    run.write_split(["d0", "d1"], ["d2"])

    assert scored_aspects(run, both, ["retrieval", "soft_prompt"]) == ["challenge"]
    build_retrieval_decoders(run, corpus, both)
    out = capsys.readouterr().out
    assert "[notice] approach: no faithfulness scores and no soft-prompt decoder" in out
    assert "[notice] the retrieval memory of approach holds each paper's own sentence" in out
    decoders = load_decoders(run, both, kind="retrieval")
    memory = decoders["approach"].memory
    assert memory.encoder == "unified model" and memory.doc_ids == ["d0", "d1", "d2"]
    assert memory.sources == ["sentence"] * 3 and decoders["challenge"].memory.encoder == "aspect model"
    unified = load_model(run.unified_model, run_dir=run)
    np.testing.assert_allclose(memory.vectors, unit_rows(unified.encode(memory.texts, aspects="approach")["approach"]),
                               atol=1e-5)
    # The round trip and a rewrite embed in that space too.
    assert run.decoding_encoder("approach") == run.unified_model == decoders["approach"]._encoder
    assert run.decoding_encoder("challenge") == run.aspect_model("challenge")


@pytest.mark.slow
def test_a_run_on_an_own_corpus_goes_on_with_the_floor_when_every_answer_is_junk(serve, tmp_path):
    """`workbench run` stages 01-03 on six abstracts against a server answering junk: one run (about 20 s).
    It died in stage 02 with IndexError; now it ends, says why on the terminal, and every head is the floor."""
    server = serve()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_aclsum.py"), str(tmp_path / "papers.csv"),
                    "--n", "6", "--sentences", "3"], check=True, capture_output=True)
    aspects = load_aspects(str(ROOT / "data" / "my_field.yaml")).to_dict()
    aspects["aspects"] = aspects["aspects"][:2]
    (tmp_path / "aspects.yaml").write_text(json.dumps(aspects))  # JSON is YAML
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENAI_API_KEY": "sk-unused-here"}
    params = ["corpus=papers.csv", "aspects=aspects.yaml", "backend=openai", "model=fake-model",
              f"base_url={server.base_url}", "k=2", "subset=6", "max_new_tokens=16", "n_judge_pairs=0",
              "label_sentences=false", "concurrency=2"]
    args = [sys.executable, "-m", "workbench", "run", "--run-dir", "run", "--stages", "01,02,03"]
    for param in params:
        args += ["-p", param]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "notice: no answer of the 24 was kept: 24 unparsed" in said and "Welcome to nginx" in said
    assert "no aspect model trained for task, method" in said
    run = RunDir(tmp_path / "run")
    assert set(json.loads(run.untrained.read_text())["aspects"]) == {"task", "method"}
    guard = json.loads(run.guard.read_text())
    assert {a: r["kept"] for a, r in guard["aspects"].items()} == {"task": "aspect file", "method": "aspect file"}
    assert "no trained head" in (tmp_path / "run" / "03_distill.ipynb").read_text()
