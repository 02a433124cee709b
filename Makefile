# The two commands of the README:
#   make demo   set up (idempotent) and run the whole pipeline on ACLSum
#   make test   set up (idempotent) and run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# Python writes its bytecode (under __pycache__/, ignored by git) even where the environment says not to:
# otherwise every test worker, kernel and script the suite starts compiles the package and the tests again.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup demo test test-timed test-fast bench clean-runs

setup:
	@VENV=$(VENV) bash scripts/setup.sh

demo: setup
	$(PY) -m workbench run --params params/demo.yaml

# -n auto: one pytest-xdist worker per free core and at least two on two cores, each computing
# on one thread (tests/conftest.py). PYTEST_ARGS="-n 0" runs it in-process.
test: setup
	$(PY) -m pytest -q -n auto $(PYTEST_ARGS)

# The pane's and the page's wall-clock bars: the tests marked `timed` (which `make test` runs with their times
# unchecked), in-process on a machine with nothing else running, their times asserted. Only the files that mark
# some (TIMED), since collecting every test module imports them all (about 10 s, on one core).
TIMED = $(shell grep -l "mark.timed" tests/test_*.py)
test-timed: setup
	WORKBENCH_TIMED=1 $(PY) -m pytest -q -m timed -s $(PYTEST_ARGS) $(TIMED)

# The inner loop: every test not marked slow. A test is marked slow where it loads a packaged LM, starts a
# server, kernel, pipeline or browser, or takes a second or more with its fixtures (`--durations` shows it).
test-fast: setup
	$(PY) -m pytest -q -n auto -m "not slow" $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/generate.py
	$(PY) benchmarks/train.py
	$(PY) benchmarks/heads.py
	$(PY) benchmarks/embed.py
	$(PY) benchmarks/decode.py
	$(PY) benchmarks/decode_synthetic.py
	$(PY) benchmarks/maps.py
	$(PY) benchmarks/weights.py
	$(PY) benchmarks/health.py
	$(PY) benchmarks/families.py
	$(PY) benchmarks/generator_c.py
	$(PY) benchmarks/evaluate.py
	$(PY) benchmarks/questions.py
	$(PY) benchmarks/threads.py
	$(PY) benchmarks/runner.py
	$(PY) benchmarks/corpus_check.py

clean-runs:
	rm -rf runs reports/*/
