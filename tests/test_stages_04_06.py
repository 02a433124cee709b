"""Notebooks 04 (decode), 05 (maps) and 06 (evaluate) end to end through the runner, on a tiny run.

One module-scoped run: untrained checkpoints where stages 02 and 03 would have left their
models (frozen-backbone heads, as a CPU run makes them, and the split of stage 02), kept in
tests/data/ as the code before `RunDir` wrote them, so that a run made by older code is what
04-06 read (the stages themselves run through papermill in test_train.py, test_distill.py and
test_own_corpus.py),
with the feature cache of the session's tiny map run (tests/lab_harness.py) on the same validation papers,
then 04-06 with the smallest settings that still exercise every cell (decoders trained for
one step, a map of the whole corpus, a leave-one-out inversion, the evaluation on 20 papers of
ACLSum's test split). The numbers are meaningless at this size; the tests check that every artifact
is written, that the reports hold their tables and plots, and that paper text stays escaped.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from workbench.core.rundir import RunDir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
ASPECTS = ["challenge", "approach"]
CORPUS = "aclsum:validation[:30],test[:20]"
KNOWN = "aclsum:validation[:30]"  # the papers stages 02-03 would have trained on


# What stages 02 and 03 left (frozen mode, untrained heads, the split), written by the code before the
# run directory became one object: stages 04-06 must read a run made by older code.
OLD_RUN = Path(__file__).resolve().parent / "data" / "run_made_before_rundir"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, notebook_kernel, tiny_map_pristine):
    from workbench.run.runner import ExecutionOptions, run_pipeline

    root = tmp_path_factory.mktemp("pipeline")
    params = root / "tiny.yaml"
    params.write_text(yaml.safe_dump({
        "report_dir": str(root / "reports"),
        # Two aspects keep it quick; every table still has an off-diagonal.
        # 30 validation papers and the first 20 of the test split: stage 04's memory must leave
        # the test papers out, stage 06 evaluates on them. The MiniLM pass over the abstracts is the cost.
        "parameters": {"corpus": CORPUS, "aspects": "acl", "aspect_names": ASPECTS, "seed": 0},
        "stage_parameters": {
            # compare: the retrieval decoder (the default, used by 05 and 06) and a soft-prompt decoder.
            # One known statement in the LM's prompt and soft-prompt batches of 2: the LM passes are most of it.
            "04_decode": {"compare": True, "max_steps": 1, "eval_every": 1, "val_docs": 2, "val_summaries": 1,
                          "context": 1, "batch_size": 2,
                          "eval_docs": 2, "perplexity_docs": 2, "examples_per_aspect": 1, "max_new_tokens": 8,
                          "bertscore_model": "minilm"},
            "05_visualize": {"corpus": KNOWN, "n_labels": 2, "loo_docs": 1, "perplexity": 10.0},
            # Truths read twice by MiniLM: the second-encoder cell runs, and the feature cache makes it free.
            "06_evaluate": {"baselines": ["minilm"], "truth_encoders": ["minilm", "minilm"], "n_permutations": 10,
                            "eval_docs": 6, "perplexity_docs": 2, "reconstruct_docs": 1, "probe_pairs": 3,
                            "bertscore_model": "minilm"},
        },
    }))
    run = root / "run"
    shutil.copytree(OLD_RUN, run, ignore=shutil.ignore_patterns("README.md"))
    # The session's tiny map run encoded KNOWN's texts with the same frozen MiniLM: its feature cache (content-
    # addressed) is the one a second run on those papers starts from; stage 04 encodes the 20 test papers.
    shutil.copytree(tiny_map_pristine / "features", run / "features")
    results = run_pipeline(params, run_dir=str(run), stages=["04_decode", "05_visualize", "06_evaluate"],
                           log=lambda *a: None, execution=ExecutionOptions(kernel=notebook_kernel))
    return run, root / "reports", results


def test_decode_stage_writes_decoders_and_report(tiny_run):
    run, reports, _ = tiny_run
    # Frozen-mode checkpoints (what stages 02-03 make on a CPU): aspect vectors are MiniLM-sized.
    unified = json.loads((RunDir(run).unified_model / "workbench_config.json").read_text())
    assert unified["format"] == "workbench-pooled-encoder" and unified["dim"] == 384
    for aspect in ["challenge", "approach"]:
        folder = RunDir(run).decoders / aspect
        assert (folder / "decoder.safetensors").is_file() and (folder / "done.json").is_file()
        saved = json.loads((folder / "decoder_config.json").read_text())
        assert saved["lm"] == "smollm2-135m-instruct" and saved["emb_dim"] == unified["dim"]
    assert not list(run.rglob("*.bin")) and not list(run.rglob("*.pkl"))  # safetensors + JSON only
    retrieval = RunDir(run).decoders / "retrieval"
    assert (retrieval / "memory.safetensors").is_file() and (retrieval / "done.json").is_file()
    memory = json.loads((retrieval / "memory.json").read_text())
    split = json.loads((RunDir(run).split_file).read_text())
    for aspect in ["challenge", "approach"]:  # only train and validation papers speak in the memory
        assert set(memory["aspects"][aspect]["doc_ids"]) <= set(split["train"]) | set(split["validation"])
    assert json.loads((RunDir(run).decoders / "default.json").read_text()) == {"kind": "retrieval"}
    metrics = json.loads((RunDir(run).decoder_metrics).read_text())
    assert set(metrics) == {f"{a}/{k}" for a in ["challenge", "approach"] for k in ["retrieval", "soft_prompt"]}
    assert all(m["ppl matching"] > 1 and m["ppl shuffled"] > 1 for m in metrics.values())
    html = (reports / "04_decode.html").read_text()
    assert "data:image/png" in html and "reconstruction" in html and "round-trip" in html


def test_visualize_stage_exports_a_standalone_map(tiny_run):
    run, reports, _ = tiny_run
    page = reports / "05_map.html"
    assert page.is_file()
    from workbench.maps.page import page_document

    assert "cdn.bokeh.org" not in page.read_text()  # resources inline: the page works offline
    text = page_document(page)  # the document, as the browser unpacks it
    assert "Aspect weights of this map" in text and "Regions" in text  # the legend beside the map
    assert (run / "maps" / "current" / "map_config.json").is_file()
    html = (reports / "05_visualize.html").read_text()
    assert html.count("data:image/png") >= 3  # aspect panels, placed abstract, inverted spot
    assert "Empty spot" in html and "Placed at" in html


def test_evaluate_stage_writes_metrics_and_compare_works(tiny_run, capsys):
    from workbench.cli import main

    run, reports, _ = tiny_run
    metrics = json.loads((run / "metrics.json").read_text())
    for section in ["retrieval_mrr", "spearman", "top10", "truth_correlation", "diagonal_p_values", "decoding",
                    "reading"]:
        assert section in metrics, section
    assert set(metrics["evaluation"]["truths"]) >= {"challenge", "approach"}
    assert metrics["evaluation"]["documents"] == 20  # the test papers of CORPUS
    health = metrics["health"]  # section 4b: the heads' health and the hard-negative probe
    assert set(health["probe"]["n_pairs"]) == {"challenge", "approach"} and health["reading"]
    html = (reports / "06_evaluate.html").read_text()
    assert "data:image/png" in html and "unified:challenge" in html
    assert main(["compare", str(run), str(run)]) == 0
    assert "spearman" in capsys.readouterr().out



def test_a_rerun_of_stages_04_and_06_reads_their_decoding_reports_and_a_change_decodes_again(tiny_run, tmp_path,
                                                                                             notebook_kernel):
    """A copy of the finished run (another folder: the reports' keys name files relative to their folder), rerun:
    stages 04 and 06 write what they wrote, without decoding again (the store is not rewritten: a miss writes it).
    A new setting of stage 04 (the decoded texts' length) decodes again and adds its reports."""
    from workbench.decode.report_cache import REPORTS_NAME
    from workbench.run.runner import ExecutionOptions, run_pipeline

    run, reports, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    store = RunDir(copy).decoders / "retrieval" / REPORTS_NAME
    kept = json.loads(store.read_text())
    assert len(kept) == 2 * 2  # per aspect: stage 04's pass and stage 06's Table 3 of the retrieval decoder
    before = store.stat().st_mtime_ns, (RunDir(copy).decoder_metrics).read_text(), json.loads(
        (copy / "metrics.json").read_text().replace(str(run), str(copy)))  # a warning names the run's folder
    params = yaml.safe_load((run.parent / "tiny.yaml").read_text())
    params["report_dir"] = str(tmp_path / "reports")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(params))
    run_pipeline(tmp_path / "tiny.yaml", run_dir=str(copy), stages=["04_decode", "06_evaluate"], log=lambda *a: None,
                 execution=ExecutionOptions(kernel=notebook_kernel))
    metrics = json.loads((copy / "metrics.json").read_text())
    assert store.stat().st_mtime_ns == before[0] and (RunDir(copy).decoder_metrics).read_text() == before[1]
    assert {k: v for k, v in metrics.items() if k != "written"} == {k: v for k, v in before[2].items() if k != "written"}

    params["stage_parameters"]["04_decode"]["max_new_tokens"] = 6
    # The retrieval decoder alone (the store under test is its own; a report's key does not hold `compare`):
    # decoding the soft-prompt decoder again as well took half of this test.
    params["stage_parameters"]["04_decode"]["compare"] = False
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(params))
    run_pipeline(tmp_path / "tiny.yaml", run_dir=str(copy), stages=["04_decode"], log=lambda *a: None,
                 execution=ExecutionOptions(kernel=notebook_kernel))
    assert set(kept) < set(json.loads(store.read_text()))  # decoded again under the new setting; the old kept
