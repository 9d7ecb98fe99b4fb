"""What a finished Trial counts as: a Reward, or Errored.

This is the one place that decides. For now it follows Harbor's own rule
(`TrialResult.reward_valid`: a Verifier result exists and every recorded
exception is the Agent's own, such as a timeout); the full table of Harbor
exception types and Provider-side signals, with retries and the private
Benchmark rules, extends this module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    reward: float | None
    errored: bool
    error_type: str | None
    error_message: str | None


def one_line(message: str | None, limit: int = 300) -> str | None:
    if not message:
        return None
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first[:limit] or None


def from_harbor(result) -> Outcome:
    """Classify a `harbor.models.trial.result.TrialResult`."""
    info = result.exception_info
    error_type = info.exception_type if info else None
    error_message = one_line(info.exception_message) if info else None
    if not result.reward_valid:
        return Outcome(None, True, error_type or "NoVerifierResult",
                       error_message or "The Verifier produced no Reward.")
    rewards = result.verifier_result.rewards
    reward = rewards.get("reward", rewards[sorted(rewards)[0]])
    return Outcome(float(reward), False, error_type, error_message)


def from_exception(exc: BaseException) -> Outcome:
    """A Trial that Harbor could not even run is Errored: a platform failure."""
    return Outcome(None, True, type(exc).__name__, one_line(str(exc)) or type(exc).__name__)
