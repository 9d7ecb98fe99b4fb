# The two commands of the README. Each sets up whatever is missing first.
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/amber demo

test: setup
	@.venv/bin/python -m pytest -q

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy
