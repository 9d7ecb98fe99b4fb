#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
lines = [l.strip() for l in open("/app/active_emails.txt").read().splitlines() if l.strip()]
assert lines == ['ada@example.com', 'grace@example.com', 'edsger@example.com', 'ken@example.com', 'don@example.com'], lines
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
