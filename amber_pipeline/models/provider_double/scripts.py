"""Which scripted reply answers a call, whatever wire format it came in.

Task = the one whose stripped instruction occurs in the first user message that contains one (the most specific
if several do: Agents may send context before it); turn = the number of assistant messages so far; past the end
of a script it answers ``DONE_REPLY`` (Terminus-2 needs ``task_complete`` twice to finish).

Tool-calling Agents (Claude Code, Codex CLI, pi, mini-swe-agent) get the same scripts as tool calls: when a
request offers a shell tool (``Bash``, ``bash``, ``shell``, ``exec_command``, found by name in ``tools``, its
command argument by the tool's own schema), a scripted reply with ``commands`` is answered with one call of
that tool running the commands' keystrokes, and a reply without commands with its ``analysis`` as plain text,
which ends such an Agent's run (or, when the prompt names mini-swe-agent's ``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, with a tool call of that, its way to finish). Each tool call counts as
a turn. So one replay script drives every Agent through the same steps.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

from amber_pipeline.models.provider_double.calls import Call, ProviderError, ToolCall
from amber_pipeline.models.provider_double.replay import DONE_REPLY, Replay, ScriptedReply

_FINISH_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # how mini-swe-agent's prompt says to finish


class Scripts:
    """The replays one double serves, and the Tasks' Instructions that tell a call's script (thread-safe).

    It counts the calls of each turn, so that a turn with alternatives answers each call with the next one.
    """

    def __init__(self, replays: list[Replay], instructions: dict[str, str]) -> None:
        self.replays = {r.model: r for r in replays}
        self._instructions = {t: i.strip() for t, i in instructions.items() if i.strip()}
        self._calls: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()

    def model_name(self, requested: str) -> str | None:
        """The replay model a requested name means: itself, or its last path part (``openai/x``)."""
        for name in (requested, requested.rsplit("/", 1)[-1]):
            if name in self.replays:
                return name
        return None

    def reply(self, call: Call) -> tuple[str, ToolCall | None]:
        """The scripted reply to this call: its text, or a tool call (with empty text)."""
        replay, instrs = call.replay, self._instructions
        matches: list[str] = []
        for user in call.users:
            matches = [t for t, i in instrs.items() if t in replay.scripts and i in user]
            if matches:
                break
        if not matches:
            msg = f"No scripted Task of replay '{replay.model}' matches a user message"
            raise ProviderError(400, msg, code="no_scripted_task")
        task = max(matches, key=lambda t: len(instrs[t]))  # most specific
        script = replay.scripts[task]
        reply: ScriptedReply = script[call.turn] if call.turn < len(script) else DONE_REPLY
        if isinstance(reply, dict) and "alternatives" in reply:  # k-th call of this turn: k-th one
            with self._lock:
                k = self._calls[(replay.model, task, call.turn)]
                self._calls[(replay.model, task, call.turn)] += 1
            reply = reply["alternatives"][k % len(reply["alternatives"])]
        if call.shell is None:
            return (reply if isinstance(reply, str) else json.dumps(reply)), None
        commands = reply.get("commands") if isinstance(reply, dict) else None
        if commands:
            return "", call.shell.call("".join(str(c.get("keystrokes", "")) for c in commands).strip())
        if any(_FINISH_COMMAND in segment for segment in call.segments[:2]):
            return "", call.shell.call(_FINISH_COMMAND)
        return (reply if isinstance(reply, str) else str(reply.get("analysis") or "Done.")), None
