"""Replay files: the scripted replies the double answers with, per replay model and Task, in turn order.

A Model Configuration pointing at the double is a "replay" configuration and must be labelled as such: its
scores measure the script, not a model. A scripted reply that is an object is sent as its JSON text
(Terminus-2 parses it); a string is sent as it is (a Direct Agent's answer). ``{"alternatives": [...]}`` answers
the k-th call of that turn with the k-th alternative (cycling): how a replay judge gives several samples.
Which reply answers a call is ``scripts``' business.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DONE_REPLY: dict[str, Any] = {
    "analysis": "The task is done.",
    "plan": "Confirm completion.",
    "commands": [],
    "task_complete": True,
}

ScriptedReply = dict[str, Any] | str


@dataclass(frozen=True)
class Replay:
    """Scripted replies of one replay model: ``scripts[task_name][turn]``."""

    model: str
    description: str
    scripts: dict[str, list[ScriptedReply]]


def load_replay(path: Path) -> Replay:
    """Read and validate a replay JSON file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        raise ValueError(f"{path}: replay needs a string 'model'")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise ValueError(f"{path}: replay needs an object 'tasks'")
    for task, script in tasks.items():
        if not isinstance(script, list) or not all(isinstance(r, dict | str) for r in script):
            raise ValueError(f"{path}: script for task {task!r} must be a list of objects or strings")
        for reply in script:
            alternatives = reply["alternatives"] if isinstance(reply, dict) and "alternatives" in reply else [""]
            if not isinstance(alternatives, list) or not alternatives:
                raise ValueError(f"{path}: alternatives of task {task!r} must be a non-empty list")
            if not all(isinstance(a, dict | str) for a in alternatives):
                raise ValueError(f"{path}: alternatives of task {task!r} must be objects or strings")
    return Replay(data["model"], str(data.get("description", "")), tasks)
