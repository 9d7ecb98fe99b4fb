#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
lines = open("/app/error_report.txt").read().strip().splitlines()
lines = [" ".join(l.split()) for l in lines if l.strip()]
assert lines == ["api 4", "auth 2", "billing 1", "db 3"], lines
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
