#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
import csv
with open("/app/region_totals.csv", newline="") as f:
    rows = [[c.strip() for c in r] for r in csv.reader(f) if r]
assert rows == [['region', 'total'], ['east', '295'], ['north', '225'], ['south', '335'], ['west', '180']], rows
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
