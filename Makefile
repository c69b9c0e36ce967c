# Two commands a user needs: `make run` and `make test`. Both set everything up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SOURCES := pyproject.toml CMakeLists.txt $(shell find astra_backend -name '*.cpp' -o -name '*.hpp' -o -name 'CMakeLists.txt' 2>/dev/null)

.PHONY: run test validate bench validate-network bench-network clean

$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rapid run --model llama3.1-8b --hardware a100-sxm4-80gb --gpus 8 --tp 2 --pp 1 --dp auto \
		--mode train --global-batch 64 --micro-batch 1 --seq 4096

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

clean:
	rm -rf $(VENV) build
