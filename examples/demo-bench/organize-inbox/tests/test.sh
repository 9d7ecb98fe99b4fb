#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
import os
def read_dir(p):
    return {n: open(os.path.join(p, n)).read() for n in os.listdir(p)}
assert read_dir("/app/sorted/images") == {'cat.jpg': 'JPEG-DATA cat\n', 'Holiday.JPG': 'JPEG-DATA beach\n', 'logo.png': 'PNG-DATA logo\n', 'scan.jpeg': 'JPEG-DATA scan\n'}
assert read_dir("/app/sorted/documents") == {'notes.txt': 'remember the milk\n', 'report.pdf': '%PDF-1.4 fake report\n', 'README.md': '# inbox readme\n'}
if os.path.exists("/app/inbox"):
    left = [n for n in os.listdir("/app/inbox") if os.path.isfile(os.path.join("/app/inbox", n))]
    assert left == [], left
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
