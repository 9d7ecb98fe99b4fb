# The two commands of the README. Each sets up whatever is missing first.
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/amber demo

# The suite's wall time is printed as a FIGURE line (issue 30), whether it passes or not.
test: setup
	@start=$$(date +%s); .venv/bin/python -m pytest -q; status=$$?; \
	echo "FIGURE suite_seconds $$(( $$(date +%s) - start )) s"; exit $$status

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy
