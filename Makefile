# Two commands are the contract: `make test` and `make demo`.
# Both create .venv when it is missing (a fresh machine has only python3) and install into it
# exactly the versions pinned in uv.lock, the project editable; the install reruns when
# pyproject.toml or uv.lock changes. They install different sets, each with its own stamp:
#   make demo          the runtime only, what `nqf reproduce --quick` needs: no extra
#                      (uv sync --locked --no-dev --inexact; stamp .venv/.installed-runtime)
#   make test, check, docs, bench, venv   every extra: test, flax, ray, slurm, parquet,
#                      dataframe, check, docs (uv sync --locked --all-extras; stamp .venv/.installed)
#   make venv-runtime  the runtime install alone
# One .venv serves both, and switching is safe either way: the all-extras sync after a
# runtime-only one adds the extras; the runtime-only sync is --inexact (it removes nothing), so
# `make demo` after `make test` leaves the extras installed and .venv/.installed still valid.
# The all-extras sync is exact: it removes whatever uv.lock no longer names.
#   make lock         refresh uv.lock after editing pyproject.toml (keeps the other pins)
#   make lock-upgrade move every pin to the newest release that pyproject.toml allows
#   make check        ruff lint, ruff format --check, mypy on src/
#   make docs         the documentation site (mkdocs.yml) in build/site, warnings as errors
#   make test-latest  the suite on the newest allowed releases, in build/venv-latest (not run by CI;
#                     PYTHON=python3.12 there to reach the releases that need a newer Python, e.g. jax 0.12)
#   make test-fast    the suite without the tests that start processes (the `slow` marker): the dev loop
# TEST_ARGS passes arguments to pytest, e.g. make test TEST_ARGS='-k lotka'.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
UV_VERSION := 0.13.9
UV := $(BIN)/uv
VENV_LATEST := build/venv-latest
# uv: the project environment is .venv; never download a Python (python3 is the interpreter).
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never
export UV_NO_PROGRESS := 1

.PHONY: test test-fast demo bench venv venv-runtime check docs lock lock-upgrade test-latest clean

$(STAMP): pyproject.toml uv.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	# --locked: fail, rather than install stale pins, when uv.lock does not match pyproject.toml
	$(UV) sync --locked --all-extras --python $(BIN)/python
	touch $(STAMP)

# The runtime only (no extra), for `make demo`. --inexact: extras a `make test` installed stay.
$(RUNTIME_STAMP): pyproject.toml uv.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(UV) sync --locked --no-dev --inexact --python $(BIN)/python
	touch $(RUNTIME_STAMP)

venv: $(STAMP)

venv-runtime: $(RUNTIME_STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(TEST_ARGS)

# The developer's loop: everything but the tests that start processes, run the tutorial or are
# the heaviest equivalences (the `slow` marker, where each test is defined), one pytest-xdist worker per
# core (FAST_WORKERS=1 for one process). `make test` stays the full contract CI runs.
# Compiled programs are kept between runs in build/test-cache (JAX's persistent compilation cache,
# keyed by the program, the JAX version and the compile options, so an edit compiles afresh what it
# changed): on 2 cores the first run took 5.4 min, a later one 2.6-2.9 min (most of a cold run is
# XLA compiling). NQF_CACHE_DIR set by the caller wins; `make clean` removes the cache.
FAST_WORKERS ?= auto
TEST_CACHE ?= $(abspath build/test-cache)
test-fast: $(STAMP)
	NQF_CACHE_DIR="$${NQF_CACHE_DIR-$(TEST_CACHE)}" $(BIN)/python -m pytest -q -m "not slow" -n $(FAST_WORKERS) $(TEST_ARGS)

# All three run; the target fails if any of them found something. One line a finding
# (`.venv/bin/ruff check src tests` / `ruff format --diff src tests` show the full context).
check: $(STAMP)
	@rc=0; \
	echo '+ ruff check src tests'; $(BIN)/ruff check --output-format concise src tests || rc=1; \
	echo '+ ruff format --check src tests'; $(BIN)/ruff format --check --output-format concise src tests || rc=1; \
	echo '+ mypy (src/nqf, src/nqf_paper; config in pyproject.toml)'; $(BIN)/mypy || rc=1; \
	exit $$rc

# The documentation site (mkdocs.yml) into build/site. --strict: any warning fails the build (a
# broken internal link or anchor, a page missing from the nav, a docstring griffe cannot read);
# external links are not checked. The API reference comes from the docstrings, the CLI page from
# every command's --help (docs/hooks/). First, docs/tutorial.ipynb must be the conversion of
# docs/tutorial.md (regenerate it with `$(BIN)/python docs/tutorial_notebook.py`).
docs: $(STAMP)
	$(BIN)/python docs/tutorial_notebook.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# Two worker processes where there are two cores: `reproduce --quick` from an empty cache took
# 60.8 s wall with --jobs 2 against 70.3 s with one (2026-12-05, 2 cores; 10% more CPU).
DEMO_JOBS ?= $(shell $(PYTHON) -c "import os; print(min(len(os.sched_getaffinity(0)), 2))" 2>/dev/null || echo 1)

demo: $(RUNTIME_STAMP)
	$(BIN)/nqf reproduce --quick --jobs $(DEMO_JOBS) --out results

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# uv itself comes from the package index through pip (its config: PyPI and the local mirrors).
$(UV):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

lock: $(UV)
	$(UV) lock

lock-upgrade: $(UV)
	$(UV) lock --upgrade

# Newest releases allowed by pyproject.toml, ignoring uv.lock; a separate venv, so .venv stays locked.
test-latest: $(UV)
	rm -rf $(VENV_LATEST)
	$(PYTHON) -m venv $(VENV_LATEST)
	$(UV) pip install --python $(VENV_LATEST)/bin/python --upgrade --resolution highest \
	    -e '.[test,flax,ray,slurm,parquet]'
	$(UV) pip list --python $(VENV_LATEST)/bin/python
	$(VENV_LATEST)/bin/python -m pytest -q $(TEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV_LATEST) results build/test-cache
