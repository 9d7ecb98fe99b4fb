"""The evidence a report reads: one record per Trial attempt, whatever wrote it.

Amber's own Trials and Trials imported from any Harbor job folder become the
same `TrialEvidence`, so every analysis treats them alike. A record holds
numbers, names and flags only: never a prompt, a message, a log line or a
credential, so a report built from it can be shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TrialEvidence:
    source: str  # an Amber Job id, or "harbor:<job folder name>"
    trial_name: str
    task_name: str
    agent: str
    model: str | None  # the Model Configuration (Amber) or model name (Harbor); None for oracle/nop
    attempt: int  # 1.. in start order within (source, route, Task)
    reward: float | None  # the Verifier's Reward; None when there is no Verifier result
    errored: bool  # Amber's Errored: no trustworthy Reward because of a failure outside Model and Agent
    exception_type: str | None
    started_at: datetime | None
    finished_at: datetime | None
    agent_duration_sec: float | None  # the agent phase alone
    agent_timeout_sec: float | None  # the Task's agent time limit, when known
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    model_used: bool | None  # the trajectory shows the pinned model answered; None when unknown
    trajectory_steps: int | None  # agent steps in the trajectory; None without a trajectory
    trajectory_ended_with_error: bool  # the last step reports an error
    repeated_tool_error: bool  # the attempt repeated one tool error until its end
    tests_passed: int | None  # from verifier/ctrf.json
    tests_total: int | None
    trial_dir: str | None  # where the full Trial folder is (transcripts live there, not here)

    @property
    def route(self) -> str:
        """Agent + Model Configuration: what a comparison pairs on."""
        return f"{self.agent}/{self.model}" if self.model else self.agent

    @property
    def passed(self) -> bool:
        return self.reward is not None and self.reward >= 1.0

    @property
    def timed_out(self) -> bool:
        return self.exception_type == "AgentTimeoutError"

    @property
    def scored(self) -> bool:
        """Scored: a Verifier result exists and the Agent really worked (the pinned model answered with
        output tokens), or the attempt hit the agent time limit (scored even without a trajectory)."""
        if self.reward is None or self.errored:
            return False
        if self.timed_out or self.model is None:
            return True  # oracle and nop call no model
        worked = self.output_tokens is None or self.output_tokens > 0
        return worked and self.model_used is not False
