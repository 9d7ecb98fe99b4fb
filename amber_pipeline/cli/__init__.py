"""The `amber` command line: one sub-app per area over a shared context object and output helper."""

import os

# pydantic looks for plugins among the entry points of every installed distribution the first time it builds a
# model, about 25 ms of every command; Amber uses none. A user who needs one sets the variable (empty: every one).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
