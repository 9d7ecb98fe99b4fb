#!/bin/bash
set -e
python3 -c 'import json; d = json.load(open("/app/users.json")); print("\n".join(u["email"] for u in d["users"] if u["active"] is True))' > /app/active_emails.txt
