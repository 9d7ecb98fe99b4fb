#!/bin/bash
# Verifier: checks only the end state and writes 1 (pass) or 0 (fail).
mkdir -p /logs/verifier
if python3 - <<'PY'
import json
s = json.load(open("/app/settings.json"))
exp = {'app_name': 'inventory', 'logging': {'level': 'info', 'file': '/var/log/inventory.log'}, 'cache': {'enabled': True, 'ttl_seconds': 600, 'backend': 'memory'}, 'allowed_origins': ['https://shop.example.com', 'https://admin.example.com'], 'max_upload_mb': 10}
assert s["cache"]["enabled"] is True
assert s["cache"]["ttl_seconds"] == 600 and not isinstance(s["cache"]["ttl_seconds"], bool)
assert sorted(s["allowed_origins"]) == sorted(exp["allowed_origins"]), s["allowed_origins"]
assert s == exp, s
PY
then
    printf 1 > /logs/verifier/reward.txt
else
    printf 0 > /logs/verifier/reward.txt
fi
