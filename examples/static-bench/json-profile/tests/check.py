#!/usr/bin/env python3
"""Accept a JSON object describing Ada, a 34-year-old with a non-empty list of skills.

The answer comes on standard input; exit 0 accepts, and the last line of standard
error says why an answer is rejected.
"""

import json
import sys

JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
              bool: "a boolean", type(None): "null"}

try:
    profile = json.loads(sys.stdin.read())
except json.JSONDecodeError as e:
    sys.exit(f"It is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}).")
if not isinstance(profile, dict):
    sys.exit(f"It is {JSON_TYPES[type(profile)]}, not a JSON object.")
if sorted(profile) != ["age", "name", "skills"]:
    sys.exit(f"Its keys are {sorted(profile)}, not age, name and skills.")
if profile["name"] != "Ada":
    sys.exit(f"Its name is {profile['name']!r}, not 'Ada'.")
if type(profile["age"]) is not int:
    sys.exit(f"Its age is {JSON_TYPES[type(profile['age'])]}, not an integer.")
if profile["age"] != 34:
    sys.exit(f"Its age is {profile['age']}, not 34.")
skills = profile["skills"]
if not isinstance(skills, list) or not skills or not all(isinstance(s, str) and s for s in skills):
    sys.exit("Its skills are not a non-empty list of texts.")
