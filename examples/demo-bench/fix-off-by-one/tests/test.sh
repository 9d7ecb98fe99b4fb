#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("pagination", "/app/pagination.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
items = list(range(1, 11))
assert m.get_page(items, 1, 3) == [1, 2, 3]
assert m.get_page(items, 2, 3) == [4, 5, 6]
assert m.get_page(items, 4, 3) == [10]
assert m.get_page(items, 5, 3) == []
assert m.get_page(items, 1, 10) == items
assert m.get_page(list("abcdefg"), 2, 2) == ["c", "d"]
assert m.get_page([], 1, 5) == []
assert m.page_count(10, 3) == 4
assert m.page_count(9, 3) == 3
assert items == list(range(1, 11))
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
