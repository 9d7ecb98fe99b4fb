#!/bin/bash
set -e
python3 - <<'EOF'
import json
with open("/app/settings.json") as f:
    s = json.load(f)
s["cache"]["enabled"] = True
s["cache"]["ttl_seconds"] = 600
if "https://admin.example.com" not in s["allowed_origins"]:
    s["allowed_origins"].append("https://admin.example.com")
with open("/app/settings.json", "w") as f:
    json.dump(s, f, indent=2)
    f.write("\n")
EOF
