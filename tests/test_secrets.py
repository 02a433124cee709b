"""Keys in parameters: refused by value (query strings, bare hex, random tokens), never echoed; ids pass.

Parameters are written to params.yaml, the executed notebooks and their HTML reports, so a key given
as a parameter leaks. Two leaks passed the check before: a key in a URL's query string and a 32-hex key
without a known prefix. The other half is no false alarm on what users pass: DOIs, paper ids, hub
model ids, paths, git revisions, the shipped params files and the text of the corpora the tests use.
"""

from pathlib import Path

import pytest
import yaml

from workbench.run import runconfig
from workbench.run.runner import load_params, run_pipeline
from workbench.run.runconfig import RunConfigError

ROOT = Path(__file__).resolve().parent.parent
HEX32 = "3f9a1c7e5b2d4f6081a9c3e7b5d2f4a6"
HEX40 = "9c1e4b7a2d5f8e0b3a6c9d2f5e8b1a4c7d0e3f6a"
HEX64 = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"


def refusal(name: str, value) -> str:
    with pytest.raises(RunConfigError) as err:
        load_params(None, {name: value})
    return str(err.value)


def leaks(secret: str, message: str, n: int = 8) -> bool:
    """Whether the message repeats any n characters of the secret (a mask shows three and three)."""
    return any(secret[i:i + n] in message for i in range(len(secret) - n + 1))


@pytest.fixture
def no_execution(monkeypatch):
    import papermill

    def refuse(*args, **kwargs):
        raise AssertionError("papermill.execute_notebook was called")

    monkeypatch.setattr(papermill, "execute_notebook", refuse)


# --------------------------------------------------------------------------- refused


QUERY_KEYS = [  # (value, the secret in it)
    ("https://host/v1?key=abc123def456ghi789", "abc123def456ghi789"),
    ("https://generativelanguage.example.com/v1/models?alt=json&key=Qz7Lp2Xw9Rk4Mv1Tn6Bd", "Qz7Lp2Xw9Rk4Mv1Tn6Bd"),
    ("https://api.example.com/v1/chat?api_key=s3cr3t-value-42", "s3cr3t-value-42"),
    ("https://api.example.com/v1?apiKey=Zr81kQm2Vn7aLp4x", "Zr81kQm2Vn7aLp4x"),
    ("http://127.0.0.1:8000/v1?model=x&token=tok_mysecret_2024", "tok_mysecret_2024"),
    ("https://host/callback#access_token=ya29.a0AfH6SMBx9Qw", "ya29.a0AfH6SMBx9Qw"),
    ("https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&sr=b&sig=AbCd%2BEfGh1234%3D", "AbCd%2BEfGh1234%3D"),
    ("https://bucket.s3.amazonaws.com/papers.csv?X-Amz-Credential=AKXX0000%2F20240101&X-Amz-Date=20240101T000000Z"
     "&X-Amz-Signature=" + HEX64, "AKXX0000%2F20240101"),
    ("https://host/data?client_secret=cs-8fk2m9q1x7", "cs-8fk2m9q1x7"),
    ("https://host/feed?Ocp-Apim-Subscription-Key=subkey0987654321", "subkey0987654321"),
]


@pytest.mark.parametrize("value, secret", QUERY_KEYS)
def test_a_credential_in_a_url_query_is_refused_without_echoing_it(value, secret):
    message = refusal("base_url", value)
    assert "'base_url'" in message and "query" in message and "environment" in message
    assert not leaks(secret, message)


@pytest.mark.parametrize("value, secret", QUERY_KEYS[:3])
def test_a_query_key_is_refused_before_anything_is_written(tmp_path, no_execution, value, secret):
    with pytest.raises(RunConfigError, match="query") as err:
        run_pipeline(None, run_dir=str(tmp_path / "run"), stages=["01_generate"], overrides={"base_url": value},
                     report=False)
    assert not leaks(secret, str(err.value))
    assert not (tmp_path / "run").exists()


VALUE_KEYS = [  # (parameter, value, the secret in it)
    ("model", HEX32, HEX32),  # MD5 length: Azure OpenAI, ElevenLabs, ... keys have no prefix
    ("model", HEX32.upper(), HEX32.upper()),
    ("base_model", HEX64, HEX64),  # SHA-256 length (Together, ...)
    ("run_name", HEX40, HEX40),  # 40 hex outside a revision: a W&B key, an old GitHub token
    ("revision", HEX32, HEX32),  # a revision is 40 hex; 32 in a revision parameter is still a key
    ("commit", HEX64, HEX64),
    ("base_url", f"https://host/v1/{HEX32}/chat", HEX32),
    ("headers", f"Authorization: Bearer {HEX32}", HEX32),
    ("01_generate.model", "Zk9xQ2pLm7RtV3yH8sD1fG6jK0aB", "Zk9xQ2pLm7RtV3yH8sD1fG6jK0aB"),  # 28 base62
    ("model", "qW3-rT8yU1_iO5pA7sD2fG9hJ4kL", "qW3-rT8yU1_iO5pA7sD2fG9hJ4kL"),  # URL-safe base64
    ("model", "u4Jx+9kPq2Lm/ZrT7vWb1NcY8hDs3Ge=", "u4Jx+9kPq2Lm/ZrT7vWb1NcY8hDs3Ge="),  # base64
    ("model", "k3j9x8m2p4q7r1s5t6u0v2w8y1z3", "k3j9x8m2p4q7r1s5t6u0v2w8y1z3"),  # lower case and digits
    ("note", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.Sf4Kx9Lq2Wm7Zp1Rt8Vb3Nc6",
     "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"),  # a JWT
    ("baselines", ["minilm", HEX32], HEX32),  # in a list
    ("02_train.options", {"hub": {"auth": "Zk9xQ2pLm7RtV3yH8sD1fG6jK0aB"}}, "Zk9xQ2pLm7RtV3yH8sD1fG6jK0aB"),
    ("new_abstract", f"We release the data; the key {HEX32} opens it.", HEX32),
]


@pytest.mark.parametrize("name, value, secret", VALUE_KEYS)
def test_a_key_without_a_known_prefix_is_refused_without_echoing_it(name, value, secret):
    message = refusal(name, value)
    assert f"'{name}'" in message and "looks like a key" in message and "environment variable" in message
    assert not leaks(secret, message)
    assert secret[:3] + "…" + secret[-3:] in message  # masked: enough to recognise which one


def test_forty_hex_outside_a_revision_says_how_to_pass_a_revision():
    assert "revision" in refusal("run_name", HEX40)


@pytest.mark.parametrize("value", [HEX32, HEX40, "Zk9xQ2pLm7RtV3yH8sD1fG6jK0aB", "MY_KEY_12345678901234"])
def test_a_key_given_as_an_env_name_is_refused(value):
    message = refusal("api_key_env", value)
    assert "NAME" in message and not leaks(value, message)


# --------------------------------------------------------------------------- no false alarms


ALLOWED = [
    # DOIs, paper ids (ACL Anthology old and new, arXiv, PubMed, PMC, Semantic Scholar corpus ids), ORCID
    "10.18653/v1/2020.acl-main.447", "https://doi.org/10.18653/v1/P19-1001", "10.1145/3292500.3330701",
    "P19-1001", "2020.acl-main.447", "2023.findings-emnlp.1002", "2101.00001v2", "arXiv:2101.00001v2",
    "https://arxiv.org/abs/2101.00001v2", "31452104", "PMID:31452104", "PMC6716439", "CorpusId:215416146",
    "0000-0002-1825-0097",
    # hub model ids and local model names
    "KISTI-AI/Scideberta-full", "sentence-transformers/all-mpnet-base-v2", "meta-llama/Meta-Llama-3-8B-Instruct",
    "allenai/specter2_base", "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
    "TheBloke/Llama-2-7B-Chat-GGUF", "Qwen/Qwen2-VL-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.2",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "NousResearch/Nous-Hermes-2-Mixtral-8x7B-DPO",
    "facebook/hf-seamless-m4t-medium", "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit",
    "intfloat/multilingual-e5-large-instruct", "BAAI/bge-large-en-v1.5", "microsoft/deberta-v3-base",
    "XLMRobertaForSequenceClassification",
    # paths and URLs without credentials
    "data/my_papers.csv", "/home/user/projects/workbench/data/my_papers_v2.csv", "runs/2024-01-01_12-30-45_aclsum",
    "runs/exp42_lr5e-5_bs16_seed0_maxlen256", "C:\\Users\\me\\papers\\scopus_export_2024.csv",
    "http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://localhost:11434/v1",
    "https://api.semanticscholar.org/graph/v1/paper/search?query=bert&fields=title,abstract&limit=10",
    "https://example.org/search?author=Smith&keyword=parsing&page=2",
    "https://huggingface.co/TheBloke/Llama-2-7B-Chat-GGUF/resolve/main/llama-2-7b-chat.Q4_K_M.gguf",
    # ids: UUIDs (as run names), short git SHAs, hex shorter than 32
    "550e8400-e29b-41d4-a716-446655440000", "runs/6fa459ea-ee8a-3ca4-894e-db77e160355e", "a1b2c3d", "9c1e4b7a2d5f",
    # text
    "A sk-learn-compatible pipeline; see https://doi.org/10.1/x or mail a@b.org",
    "We train on CoNLL2003 and SemEval2017Task10 with word2vec and GloVe840B300d vectors (C55H72MgN4O5).",
    "aclsum:validation", "aclsum:test[:20]", "medicine", "OPENAI_API_KEY",
]


@pytest.mark.parametrize("value", ALLOWED)
def test_ids_paths_and_urls_without_credentials_are_not_keys(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    assert load_params(None, {"01_generate.model": value})["stage_parameters"]["01_generate"]["model"] == value


@pytest.mark.parametrize("name, value", [
    ("revision", HEX40), ("01_generate.model_revision", HEX40), ("commit", HEX40), ("git_sha", HEX40),
    ("02_train.base_model_ref", HEX40.upper()), ("model", f"KISTI-AI/Scideberta-full@{HEX40}"),
    ("model", f"https://huggingface.co/KISTI-AI/Scideberta-full/resolve/{HEX40}/config.json"),
    ("source", f"https://github.com/org/repo/commit/{HEX40}"), ("source", f"https://github.com/org/repo/tree/{HEX40}"),
    ("model", f"hub://KISTI-AI/Scideberta-full?revision={HEX40}"),
])
def test_a_forty_hex_revision_passes_where_its_name_or_context_says_revision(tmp_path, monkeypatch, name, value):
    monkeypatch.chdir(tmp_path)
    config = load_params(None, {name: value})
    stage, _, key = name.rpartition(".")
    assert (config["stage_parameters"][stage] if stage else config["parameters"])[key] == value


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_params_file_passes_the_secret_check(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(runconfig, "check_inputs", lambda *args, **kwargs: None)  # data/my_papers.csv is made by a script
    config = load_params(path)
    raw = yaml.safe_load(path.read_text())
    assert set(config["parameters"]) == set(raw.get("parameters") or {})
    assert set(config["stage_parameters"]) == set(raw.get("stage_parameters") or {})


def test_params_files_are_shipped():
    assert len(list((ROOT / "params").glob("*.yaml"))) >= 3


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(k)
            yield from _texts(v)
    elif isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        for v in (value.tolist() if hasattr(value, "tolist") else value):
            yield from _texts(v)


@pytest.mark.parametrize("source", ["aclsum", "data/example.csv"])
def test_no_text_of_the_test_corpora_looks_like_a_key(source, monkeypatch):
    """Abstracts, titles, ids, human summaries and highlights: `-p new_abstract="..."` takes such text."""
    from workbench.data.corpus import load_corpus

    monkeypatch.chdir(ROOT)
    docs = load_corpus(source).docs
    texts = [t for column in docs.columns for cell in docs[column] for t in _texts(cell)]
    assert len(texts) >= len(docs) * 3
    refused = []
    for text in texts:
        try:
            runconfig.check_secret("new_abstract", text)
        except RunConfigError:
            refused.append(text[:80])
    assert refused == []


def test_no_text_of_the_aspect_files_looks_like_a_key():
    files = [*(ROOT / "tests" / "data").glob("*.yaml"), *(ROOT / "workbench" / "presets").rglob("*.yaml")]
    texts = [t for f in files for t in _texts(yaml.safe_load(f.read_text()))]
    assert texts
    for text in texts:
        runconfig.check_secret("aspects", text)
