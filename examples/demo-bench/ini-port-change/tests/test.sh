#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
import configparser
c = configparser.ConfigParser()
assert c.read("/app/config/app.ini") == ["/app/config/app.ini"]
assert c["server"]["port"].strip() == "8080"
assert c["server"]["host"].strip() == "0.0.0.0"
assert c["server"]["workers"].strip() == "2"
assert c["database"]["host"].strip() == "db.internal"
assert c["database"]["port"].strip() == "5432"
assert c["database"]["name"].strip() == "shop"
assert c["logging"]["level"].strip() == "info"
assert sorted(c.sections()) == ["database", "logging", "server"]
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
