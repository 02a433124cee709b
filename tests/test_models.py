"""Model registry: packaged names, local paths, hub ids, offline errors."""

import time

import numpy as np
import pytest

from workbench.core.models import PACKAGED, ModelNotFoundError, model_table, prepare_causal_lm, resolve_model


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
    from workbench.core.devices import best_device

    assert best_device() in {"cpu", "cuda", "mps"}
    monkeypatch.setenv("WORKBENCH_DEVICE", "cpu")
    assert best_device() == "cpu"


def test_a_conversion_that_lost_the_race_keeps_the_winners_folder(tmp_path):
    """Two workers converting one model: the second rename finds the folder done and drops its copy."""
    from workbench.core.models import publish_folder

    folder = tmp_path / "converted"
    for pid in (1, 2):
        tmp = tmp_path / f"converted.tmp{pid}"
        tmp.mkdir()
        (tmp / "config.json").write_text(f'{{"by": {pid}}}')
        publish_folder(tmp, folder)
        assert not tmp.exists()
    assert (folder / "config.json").read_text() == '{"by": 1}'
    # A folder in the way that is not a finished conversion is an error, not silently kept.
    broken = tmp_path / "broken"
    (broken / "partial").mkdir(parents=True)
    tmp = tmp_path / "broken.tmp3"
    tmp.mkdir()
    (tmp / "config.json").write_text("{}")
    with pytest.raises(OSError):
        publish_folder(tmp, broken)


def test_a_converted_gguf_is_found_from_another_checkout_and_not_for_another_file(tmp_path, monkeypatch):
    """The dequantised copy is keyed by the file's name, size and contents: the same file installed in another
    virtual environment (another path, another modification time) finds the copy; a changed byte does not."""
    import os

    from workbench.core.models import GGUF_KEY_BYTES, ResolvedModel, gguf_cache_folder

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    data = np.random.default_rng(0).integers(0, 256, size=3 * GGUF_KEY_BYTES, dtype=np.uint8).tobytes()
    folders = []
    for venv, when in (("a", 1_000_000_000), ("b", 2_000_000_000)):
        (tmp_path / venv).mkdir()
        (tmp_path / venv / "model.Q4.gguf").write_bytes(data)
        os.utime(tmp_path / venv / "model.Q4.gguf", ns=(when, when))
        folders.append(gguf_cache_folder(ResolvedModel("smollm", str(tmp_path / venv), gguf_file="model.Q4.gguf")))
    assert folders[0] == folders[1] and folders[0].parent == tmp_path / "cache" / "converted"
    for at in (0, len(data) - 1):  # the header, the last tensor's last byte
        changed = bytearray(data)
        changed[at] ^= 1
        (tmp_path / "b" / "model.Q4.gguf").write_bytes(bytes(changed))
        assert gguf_cache_folder(ResolvedModel("smollm", str(tmp_path / "b"), gguf_file="model.Q4.gguf")) != folders[0]


def test_thread_counts_come_from_the_free_cores_or_the_environment(monkeypatch):
    import os

    import torch

    from workbench.core import devices
    from workbench.maps import tsne

    monkeypatch.setenv("WORKBENCH_THREADS", "3")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert devices.free_threads() == 3  # WORKBENCH_THREADS first
    monkeypatch.delenv("WORKBENCH_THREADS")
    assert devices.free_threads() == 1  # then OMP_NUM_THREADS (torchrun sets it per process)
    monkeypatch.delenv("OMP_NUM_THREADS")

    # Otherwise the idle share of the machine, from two readings of /proc/stat: of 2 cores,
    # 100 of 200 ticks idle means one core is busy with another job.
    readings = iter(["cpu  100 0 100 1000 0 0 0 0 0 0\n", "cpu  200 0 100 1100 0 0 0 0 0 0\n"])

    class Stat:
        def __init__(self, *args):
            self.line = next(readings)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def readline(self):
            return self.line

    monkeypatch.setattr(devices, "open", Stat, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert devices.free_threads(sample_seconds=0) == 1
    readings = iter(["cpu  100 0 100 1000 0 0 0 0 0 0\n", "cpu  100 0 100 1200 0 0 0 0 0 0\n"])
    assert devices.free_threads(sample_seconds=0) == 2  # all idle: both cores

    # A sample taken over the default interval serves the calls of the next RESAMPLE_SECONDS.
    readings = iter(["cpu  100 0 100 1000 0 0 0 0 0 0\n", "cpu  200 0 100 1100 0 0 0 0 0 0\n",
                     "cpu  200 0 100 1100 0 0 0 0 0 0\n", "cpu  200 0 100 1300 0 0 0 0 0 0\n"])
    clock = [1000.0]
    monkeypatch.setattr(devices, "_LAST_SAMPLE", [])
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: None)
    assert devices.free_threads() == 1  # one core busy
    clock[0] += devices.RESAMPLE_SECONDS / 2
    assert devices.free_threads() == 1  # the same sample: /proc/stat is not read again
    clock[0] += devices.RESAMPLE_SECONDS
    assert devices.free_threads() == 2  # a new sample: the other job has ended

    # use_free_cores sets torch's threads; openTSNE's n_jobs follows unless N_JOBS is set.
    before = torch.get_num_threads()
    monkeypatch.setenv("WORKBENCH_THREADS", "1")
    try:
        assert devices.use_free_cores() == 1 and torch.get_num_threads() == 1
        assert tsne.thread_count() == 1
        monkeypatch.setattr(tsne, "N_JOBS", 2)
        assert tsne.thread_count() == 2
    finally:
        torch.set_num_threads(before)


def test_cache_keyword_follows_the_models_forward():
    from workbench.core.models import cache_keyword

    class New:
        def forward(self, input_ids=None, cache=None, use_cache=None):
            pass

    class Old:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            pass

    assert cache_keyword(New()) == "cache" and cache_keyword(Old()) == "past_key_values"


def test_a_local_model_folder_keys_its_caches_and_the_resume_by_what_its_files_hold(tmp_path):
    """Vectors cached with a local model, and a command's resume, follow what the folder holds: a retrained model
    in the same folder (same size, other bytes) gets a new feature-cache key and fingerprint, a file only touched
    keeps them; a packaged model's key is the name, pooling and length alone, as before."""
    import hashlib
    import os

    from workbench.embed.features import FrozenBackbone
    from workbench.run.resume import command_fingerprint

    folder = tmp_path / "my-encoder"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    weights = bytearray(b"a" * 3_000_000)
    (folder / "model.safetensors").write_bytes(bytes(weights))

    def fingerprint():
        return command_fingerprint({"base_model": str(folder)}, ["02_train"], True, tmp_path / "run")

    key, before = FrozenBackbone(str(folder)).key, fingerprint()
    os.utime(folder / "model.safetensors", ns=(10**9, 10**9))  # touched, not changed
    assert FrozenBackbone(str(folder)).key == key and fingerprint() == before
    weights[-10] = ord("b")  # retrained in place: the same size, other weights
    (folder / "model.safetensors").write_bytes(bytes(weights))
    assert FrozenBackbone(str(folder)).key != key and fingerprint() != before
    assert FrozenBackbone(str(folder), max_length=64).key != FrozenBackbone(str(folder)).key
    assert FrozenBackbone("minilm").key == hashlib.sha1(b"minilm|mean|256").hexdigest()[:12]
