# The two commands of the README. Each sets up whatever is missing first.
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/amber demo

# The suite runs on pytest-xdist's workers, one more than the cores (its tests wait on Docker and subprocesses
# as much as they compute). The tests of a module that share a module-scoped fixture go to one worker
# (--dist loadgroup, tests/scheduling.py), so it is made once. Its wall time is printed as a FIGURE line
# (issue 30), whether it passes or not.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: setup
	@start=$$(date +%s); \
	.venv/bin/python -m pytest -q -n $(WORKERS) --dist loadgroup; passed=$$?; \
	echo "FIGURE suite_seconds $$(( $$(date +%s) - start )) s"; \
	exit $$passed

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy
