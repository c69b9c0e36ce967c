# Two commands a user needs: `make run` and `make test`. Both set everything up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SOURCES := pyproject.toml CMakeLists.txt $(shell find astra_backend core/serving core/chakra -name '*.cpp' -o -name '*.hpp' -o -name 'CMakeLists.txt' 2>/dev/null)

.PHONY: run test validate bench bench-sweep bench-scale bench-faults validate-network bench-network report-check bench-report clean

$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# bytecode now, as a wheel install does: an editable install leaves it to the first run, which
	# never writes it where PYTHONDONTWRITEBYTECODE is set, and compiling costs each `rapid` ~35 ms
	$(BIN)/python -m compileall -q astra_backend core sweep
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rapid sweep studies/quickstart.yaml

test: $(STAMP)
	$(BIN)/python -m pytest

validate: $(STAMP)
	$(BIN)/rapid validate

bench: $(STAMP)
	$(BIN)/python scripts/bench_core.py

validate-network: $(STAMP)
	$(BIN)/python scripts/validate_network.py

bench-network: $(STAMP)
	$(BIN)/python scripts/bench_network.py

bench-sweep: $(STAMP)
	$(BIN)/python scripts/bench_sweep.py

# --dry-run of an 11,059,200-combination grid, a 1,843,200-combination --local --workers 2 run
# and its re-run: seconds, points/s and peak RSS (SCALE=0.1 for a quick look); the same kind of
# study on a local Ray cluster of 1, 2 and 4 one-CPU raylets with the 32-node extrapolation; a
# 1,000-trial TPE search and the parts a 10,000-trial search leaves
bench-scale: $(STAMP)
	$(BIN)/python scripts/bench_scale.py --scale $(or $(SCALE),1)
	$(BIN)/python scripts/bench_search_scale.py

# renders the reports of a training grid, a fault study, a constrained search and an inference
# study (studies/quickstart.yaml, *_quick.yaml) in headless Chromium at 1400 px wide (Debian's
# package, installed here when missing) and saves screenshots under results/screenshots/
report-check: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python scripts/report_check.py

bench-report: $(STAMP)
	$(BIN)/python scripts/bench_report.py

bench-faults: $(STAMP)
	$(BIN)/python scripts/bench_faults.py

clean:
	rm -rf $(VENV) build
