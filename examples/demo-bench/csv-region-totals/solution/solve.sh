#!/bin/bash
set -e
python3 - <<'EOF'
import csv
totals = {}
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["amount"])
with open("/app/region_totals.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["region", "total"])
    for region in sorted(totals):
        w.writerow([region, totals[region]])
EOF
