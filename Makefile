# The two commands of the README. Each sets up whatever is missing first.
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/amber demo

# The suite runs on pytest-xdist's workers, three more than the cores: its tests wait on Docker and subprocesses
# as much as they compute. On 2 cores, 4 workers took 589 s and left the cores idle for 76 CPU-s of it; 5 workers took
# 567, 569 and 575 s, idle for 22-27 CPU-s (a fifth worker's own start, its collection, costs about 6). The tests of a
# module that share a module-scoped fixture go to one worker (--dist loadgroup, tests/scheduling.py), so it is made
# once. The suite's wall time is printed as a FIGURE line (issue 30), whether it passes or not.
WORKERS ?= $(shell echo $$(( $$(nproc) + 3 )))
# Its temporary folders (every test's AMBER_HOME: a catalog, a Dagster instance, Benchmark copies; 5 GB written in
# all) are made in memory, on /dev/shm, where it has 8 GB free: on this machine's disk (ext4, mounted with discard) the
# same files cost the kernel about a tenth of the suite's time. A passing test's folder is removed when it ends
# (pyproject.toml: tmp_path_retention_policy), so what the suite holds there at once stays small.
SUITE_TMP ?= $(shell [ "$$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $$4}')" -gt 8000000 ] 2>/dev/null \
                     && echo /dev/shm || echo /tmp)
# Python writes bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE): without it, each worker's
# collection rewrote the asserts of 378 modules (the tests', and those of the pytest plugins schemathesis, hypothesis
# and anyio) at every run, 5 of its 11 CPU-seconds.
test: setup
	@start=$$(date +%s); \
	PYTHONDONTWRITEBYTECODE= TMPDIR=$(SUITE_TMP) .venv/bin/python -m pytest -q -n $(WORKERS) --dist loadgroup; passed=$$?; \
	echo "FIGURE suite_seconds $$(( $$(date +%s) - start )) s"; \
	exit $$passed

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy
