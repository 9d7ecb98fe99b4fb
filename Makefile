# The two commands of the README. Each sets up whatever is missing first.
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/amber demo

# The suite runs on pytest-xdist's workers, one more than the cores (its tests wait on Docker and subprocesses
# as much as they compute), then the tests that restart the machine's own Docker engine alone. Its wall time is
# printed as a FIGURE line (issue 30), whether it passes or not.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: setup
	@start=$$(date +%s); \
	.venv/bin/python -m pytest -q -n $(WORKERS) -m "not serial"; parallel=$$?; \
	.venv/bin/python -m pytest -q -m serial; serial=$$?; \
	echo "FIGURE suite_seconds $$(( $$(date +%s) - start )) s"; \
	[ $$parallel -eq 0 ] && { [ $$serial -eq 0 ] || [ $$serial -eq 5 ]; }  # 5: no serial test is left

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy
