#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail),
# plus a CTRF report (verifier/ctrf.json) with one test per check.
mkdir -p /logs/verifier
python3 - <<'PY'
import json, os
checks = {}
try:
    lines = open("/app/error_report.txt").read().strip().splitlines()
    lines = [" ".join(l.split()) for l in lines if l.strip()]
    checks["report_exists"] = True
except OSError:
    lines = []
    checks["report_exists"] = False
checks["one_line_per_service"] = len(lines) == 4
checks["sorted_by_service"] = lines == sorted(lines)
checks["counts_correct"] = lines == ["api 4", "auth 2", "billing 1", "db 3"]
passed = sum(checks.values())
tests = [{"name": k, "status": "passed" if v else "failed", "duration": 0} for k, v in checks.items()]
ctrf = {"results": {"tool": {"name": "amber-demo-checks"},
                    "summary": {"tests": len(tests), "passed": passed, "failed": len(tests) - passed,
                                "pending": 0, "skipped": 0, "other": 0, "start": 0, "stop": 0},
                    "tests": tests}}
json.dump(ctrf, open("/logs/verifier/ctrf.json", "w"), indent=2)
open("/logs/verifier/reward.txt", "w").write("1" if all(checks.values()) else "0")
PY
