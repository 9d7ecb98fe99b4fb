#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
# Run the script from a clean slate so only the script's own work counts.
rm -rf /app/backup
timeout 10 bash /app/backup.sh >/dev/null 2>&1
if python3 - <<'PY'
import os
expected = {'meeting notes.txt': 'Q3 planning: ship v2, hire one SRE.\n', 'budget 2024.csv': 'item,eur\nservers,1200\nlicenses,300\n', 'todo.txt': '- renew TLS certificate\n- rotate backups\n'}
docs = {n: open(os.path.join("/app/docs", n)).read() for n in os.listdir("/app/docs")}
assert docs == expected, "docs were changed"
backup = {n: open(os.path.join("/app/backup", n)).read() for n in os.listdir("/app/backup")}
assert backup == expected, sorted(backup)
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
