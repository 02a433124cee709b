"""Model registry: packaged names, local paths, hub ids, offline errors."""

import time

import pytest

from workbench.models import PACKAGED, ModelNotFoundError, model_table, prepare_causal_lm, resolve_model


def test_packaged_names_resolve_to_installed_files():
    minilm = resolve_model("minilm")
    assert minilm.packaged and (minilm.path.endswith("model")) and not minilm.is_gguf
    smol = resolve_model("SmolLM2")  # alias, any case
    assert smol.name == "smollm2-135m-instruct" and smol.gguf_file.endswith(".gguf")
    assert all(row["installed"] for row in model_table()), model_table()


def test_local_folder_and_gguf_file(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    assert resolve_model(folder).path == str(folder.resolve())
    gguf = folder / "x.gguf"
    gguf.write_bytes(b"GGUF")
    resolved = resolve_model(gguf)
    assert resolved.is_gguf and resolved.gguf_file == "x.gguf"
    (folder / "notes.txt").write_text("x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model(folder / "notes.txt")


def test_unknown_hub_id_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ModelNotFoundError, match="offline") as info:
        resolve_model("KISTI-AI/Scideberta-full")
    assert time.perf_counter() - t0 < 5
    assert "packaged model" in str(info.value) and "minilm" in str(info.value)


def test_hub_id_is_passed_through_when_online(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert resolve_model("KISTI-AI/Scideberta-full").path == "KISTI-AI/Scideberta-full"


def test_nonsense_name_is_explained():
    with pytest.raises(ModelNotFoundError, match="owner/name"):
        resolve_model("no-such-model")


def test_gguf_conversion_is_cached():
    first = prepare_causal_lm("smollm2-135m-instruct")
    t0 = time.perf_counter()
    second = prepare_causal_lm("smollm2-135m-instruct")
    assert first == second and time.perf_counter() - t0 < 1.0
    assert set(PACKAGED) >= {"minilm", "mpnet", "smollm2-135m-instruct"}


def test_devices_are_detected_not_hard_coded(monkeypatch):
    from workbench.devices import best_device

    assert best_device() in {"cpu", "cuda", "mps"}
    monkeypatch.setenv("WORKBENCH_DEVICE", "cpu")
    assert best_device() == "cpu"
