#!/bin/bash
set -e
awk '$2 == "ERROR" { s = $3; gsub(/[][]/, "", s); n[s]++ } END { for (s in n) print s, n[s] }' /app/app.log \
    | sort > /app/error_report.txt
