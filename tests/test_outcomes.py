"""The outcome table: every row, on a public and a private Benchmark, plus Harbor results end to end."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from harbor.models.task.id import LocalTaskId
from harbor.models.trial.config import TaskConfig, TrialConfig
from harbor.models.trial.error_policy import ERROR_POLICIES
from harbor.models.trial.result import AgentInfo, ExceptionInfo, StepResult, TrialResult
from harbor.models.verifier.result import VerifierResult

from amber_pipeline.jobs import outcomes
from amber_pipeline.jobs.outcomes import RULES, UNKNOWN_RULE, Kind, ProviderSignal, classify

S, E, C = Kind.SCORED, Kind.ERRORED, Kind.CANCELLED
# Written out by hand from the concepts page, independent of the module: cause -> (public, private, retry).
EXPECTED = {
    "sandbox": (E, E, True),
    "task_environment": (E, S, True),
    "provider": (E, E, True),
    "provider_fatal": (E, E, False),
    "harbor": (E, E, False),
    "agent_budget": (S, S, False),
    "agent_refusal": (S, S, False),
    "agent_error": (S, S, False),
    "verifier": (E, S, True),
    "trial_limit": (E, S, False),
    "cancelled": (C, C, False),
}
AGENT = {"agent_budget", "agent_refusal", "agent_error"}
SIGNALS = {s.value for s in ProviderSignal}


def _inputs(key: str, verifier_reward: float | None) -> dict[str, Any]:
    rewards = None if verifier_reward is None else {"reward": verifier_reward}
    if key in SIGNALS:  # a valid reward is there, and overridden
        return dict(exception_type=None, exception_message=None, rewards={"reward": 1.0},
                    provider_signals=[ProviderSignal(key)])
    if key == "NoVerifierResult":
        return dict(exception_type=None, exception_message=None, rewards=None)
    if key == "InvalidReward":
        return dict(exception_type=None, exception_message=None, rewards={"reward": 1.5})
    return dict(exception_type=key, exception_message="boom\n  Traceback ...", rewards=rewards)


@pytest.mark.parametrize("verifier_reward", [None, 0.6])
@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
@pytest.mark.parametrize("key", sorted(RULES))
def test_every_rule(key: str, private: bool, verifier_reward: float | None) -> None:
    rule = RULES[key]
    public_kind, private_kind, retry = EXPECTED[rule.cause]
    assert (rule.public, rule.private, rule.retry) == (public_kind, private_kind, retry)
    kind = private_kind if private else public_kind

    out = classify(private=private, **_inputs(key, verifier_reward))

    assert out.kind is kind
    assert out.error_type == key
    assert out.error_message and "\n" not in out.error_message
    assert out.retry == (retry and kind is E)
    assert out.charged == (kind is S)
    assert out.errored == (kind is E)
    if kind is not S:
        assert out.reward is None
    elif rule.cause in AGENT and verifier_reward is not None and key not in SIGNALS:
        assert out.reward == verifier_reward
    else:
        assert out.reward == 0.0


def test_every_harbor_type_has_a_row() -> None:
    assert set(ERROR_POLICIES) <= set(RULES)
    assert SIGNALS.issubset(RULES)
    assert {"NonZeroAgentExitCodeError", "NoVerifierResult", "CancelledError"} <= set(RULES)


@pytest.mark.parametrize(("name", "cause"), [
    ("SandboxBuildFailedError", "task_environment"), ("EnvironmentStartTimeoutError", "task_environment"),
    ("AgentSetupTimeoutError", "task_environment"), ("SandboxLikelyOutOfMemoryError", "task_environment"),
    ("AddTestsDirError", "sandbox"), ("DownloadVerifierDirError", "sandbox"), ("GKEPodNotFoundError", "sandbox"),
    ("ApiRateLimitError", "provider"), ("upstream_429", "provider"), ("provider_mismatch", "provider"),
    ("AuthenticationError", "provider_fatal"), ("ModelNotFoundError", "provider_fatal"), ("RegradeError", "harbor"),
    ("AgentTimeoutError", "agent_budget"), ("AgentSafetyRefusalError", "agent_refusal"),
    ("NonZeroAgentExitCodeError", "agent_error"), ("VerifierTimeoutError", "verifier"),
    ("RewardFileNotFoundError", "verifier"), ("CancelledError", "cancelled"),
])
def test_causes(name: str, cause: str) -> None:
    assert RULES[name].cause == cause


@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_unknown_exception_is_the_platforms(private: bool) -> None:
    out = classify(exception_type="WeirdError", exception_message="?", rewards={"reward": 1.0}, private=private)
    assert (out.kind, out.reward, out.retry, out.charged) == (E, None, True, False)
    assert UNKNOWN_RULE.public is UNKNOWN_RULE.private is E


def test_provider_signal_overrides_a_valid_reward() -> None:
    out = classify(exception_type=None, exception_message=None, rewards={"reward": 1.0}, private=True,
                   provider_signals=[ProviderSignal.UPSTREAM_SERVER_ERROR, ProviderSignal.PROVIDER_MISMATCH])
    assert (out.kind, out.reward, out.retry, out.error_type) == (E, None, True, "upstream_5xx")
    assert "provider_mismatch" in (out.error_message or "")


def test_cancelled_wins_over_provider_signals() -> None:
    out = classify(exception_type="CancelledError", exception_message="", rewards=None, private=False,
                   provider_signals=[ProviderSignal.UPSTREAM_TIMEOUT])
    assert (out.kind, out.retry, out.charged) == (C, False, False)


@pytest.mark.parametrize("private", [False, True])
def test_agent_timeout_keeps_the_verifiers_reward(private: bool) -> None:
    with_reward = classify(exception_type="AgentTimeoutError", exception_message="t", rewards={"reward": 0.6},
                           private=private)
    without = classify(exception_type="AgentTimeoutError", exception_message="t", rewards=None, private=private)
    assert (with_reward.kind, with_reward.reward, with_reward.charged) == (S, 0.6, True)
    assert (without.kind, without.reward, without.charged) == (S, 0.0, True)


def test_reward_key_choice() -> None:
    multi = classify(exception_type=None, exception_message=None, rewards={"a": 0.1, "reward": 0.7, "z": 1},
                     private=False)
    assert (multi.kind, multi.reward, multi.error_type) == (S, 0.7, None)
    first = classify(exception_type=None, exception_message=None, rewards={"b": 1, "a": 0.25}, private=False)
    assert first.reward == 0.25


@pytest.mark.parametrize(("private", "kind", "reward"), [(False, E, None), (True, S, 0.0)])
def test_no_exception_no_reward(private: bool, kind: Kind, reward: float | None) -> None:
    empty: dict[str, float] = {}
    for rewards in (None, empty):
        out = classify(exception_type=None, exception_message=None, rewards=rewards, private=private)
        assert (out.kind, out.reward, out.error_type) == (kind, reward, "NoVerifierResult")


@pytest.mark.parametrize(("private", "kind", "reward"), [(False, E, None), (True, S, 0.0)])
def test_reward_outside_0_1(private: bool, kind: Kind, reward: float | None) -> None:
    out = classify(exception_type=None, exception_message=None, rewards={"tests_passed": 7}, private=private)
    assert (out.kind, out.reward, out.error_type) == (kind, reward, "InvalidReward")


def _result(exception: str | None = None, rewards: dict[str, float | int] | None = None,
            steps: list[StepResult] | None = None) -> TrialResult:
    info = (ExceptionInfo(exception_type=exception, exception_message=f"{exception} happened\nmore",
                          exception_traceback="tb", occurred_at=datetime.now(UTC)) if exception else None)
    return TrialResult(
        task_name="t", trial_name="t__1", trial_uri="file:///tmp/t__1", task_id=LocalTaskId(path="/tmp/t"),
        task_checksum="0", config=TrialConfig(task=TaskConfig(path="/tmp/t"), trials_dir="/tmp", trial_name="t__1"),
        agent_info=AgentInfo(name="nop", version="1"), exception_info=info,
        verifier_result=VerifierResult(rewards=rewards) if rewards is not None else None, step_results=steps)


def test_from_harbor_success() -> None:
    out = outcomes.from_harbor(_result(rewards={"reward": 1}), private=False)
    assert (out.kind, out.reward, out.error_type, out.error_message, out.retry) == (S, 1.0, None, None, False)


@pytest.mark.parametrize("exception", ["SandboxBuildFailedError", "VerifierTimeoutError"])
def test_from_harbor_task_failures(exception: str) -> None:
    public = outcomes.from_harbor(_result(exception), private=False)
    private = outcomes.from_harbor(_result(exception), private=True)
    assert (public.kind, public.reward, public.retry, public.errored, public.charged) == (E, None, True, True, False)
    assert (private.kind, private.reward, private.retry, private.charged) == (S, 0.0, False, True)
    assert public.error_type == private.error_type == exception
    assert public.error_message == f"{exception} happened"


def test_from_harbor_agent_timeout_with_reward() -> None:
    for private in (False, True):
        out = outcomes.from_harbor(_result("AgentTimeoutError", {"reward": 0.6}), private=private)
        assert (out.kind, out.reward, out.error_type, out.charged) == (S, 0.6, "AgentTimeoutError", True)


def test_from_harbor_provider_signal() -> None:
    out = outcomes.from_harbor(_result(rewards={"reward": 1}), private=True,
                               provider_signals=[ProviderSignal.UPSTREAM_RATE_LIMIT])
    assert (out.kind, out.reward, out.retry) == (E, None, True)


def test_from_harbor_step_exception_that_is_not_the_agents_decides() -> None:
    at = datetime.now(UTC)
    steps = [StepResult(step_name="one", exception_info=ExceptionInfo(
                 exception_type="AgentTimeoutError", exception_message="", exception_traceback="", occurred_at=at)),
             StepResult(step_name="two", exception_info=ExceptionInfo(
                 exception_type="ApiRateLimitError", exception_message="429", exception_traceback="", occurred_at=at))]
    out = outcomes.from_harbor(_result(rewards={"reward": 0.5}, steps=steps), private=False)
    assert (out.kind, out.error_type, out.retry) == (E, "ApiRateLimitError", True)


def test_from_exception() -> None:
    cancelled = outcomes.from_exception(asyncio.CancelledError(), private=False)
    assert (cancelled.kind, cancelled.reward, cancelled.retry, cancelled.charged) == (C, None, False, False)
    assert not cancelled.errored
    crashed = outcomes.from_exception(RuntimeError("x\ny"), private=True)
    assert (crashed.kind, crashed.reward, crashed.error_type, crashed.error_message) == (E, None, "RuntimeError", "x")
    assert crashed.retry and not crashed.charged
    bare = outcomes.from_exception(ValueError(), private=False)
    assert bare.error_message == "ValueError"


def test_one_line() -> None:
    assert outcomes.one_line(None) is None
    assert outcomes.one_line("  \n ") is None
    assert outcomes.one_line("  a\nb") == "a"
    assert outcomes.one_line("x" * 400) == "x" * 300
    assert outcomes.MAX_RETRIES == 2
