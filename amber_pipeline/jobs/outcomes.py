"""What a finished Trial counts as: a Reward (scored), Errored, or cancelled.

This is the one place that decides, from one table, `RULES`, keyed by Harbor's
exception class name (section 2.6 of the Harbor reference) and by the
Provider-side signals a model proxy reports. A row says what the failure means
on a public and on a private Benchmark, and whether an Errored Trial is retried
(up to `MAX_RETRIES` more times). Only a scored Trial is charged.

Readings of the rows the rules leave open:
- Harbor's `sandbox_failed` is split. Environment build/start failures and
  timeouts, Agent setup timeouts, the Task's own healthcheck and running out of
  memory (`SandboxLikelyOutOfMemoryError`, `MemoryLimitExceededError`: the Task
  sets its own memory) are the Task's ("task_environment"): Errored on a public
  Benchmark, Reward 0 on a private one. SSH, GKE and runtime-request failures
  and `AddTestsDirError` / `DownloadVerifierDirError` (copying files in and out
  is the platform's job) are the sandbox's: Errored on both.
- Verifier failures (timeout, no/empty/unparsable reward file), and a Trial
  with no exception but no Verifier result, are Errored and retried on a public
  Benchmark and Reward 0 on a private one. So is a Reward outside [0, 1]
  ("InvalidReward": a Reward is a number from 0 to 1).
- `NonZeroAgentExitCodeError` (Harbor: unclassified) is the Agent's own crash
  ("agent_error"): scored like a timeout, since Harbor still runs the Verifier.
  Provider errors surfacing through an Agent have their own `Api*Error` names.
- Non-retryable provider errors (bad request, auth, unknown model, budget) and
  `harbor_failed` (configuration/installation) are Errored without retry on
  both: they fail the same way every time.
- A cancelled Trial stays cancelled even with Provider signals: a cancelled Job
  or a reached ceiling (the proxy's `ceiling_reached` signal) must never be
  retried. Otherwise any signal wins: a Trial whose calls hit a 429, a 5xx, a
  timeout, a dropped stream or another Provider is Errored, never Reward 0.
- A Trial stopped at its wall-clock limit (`TrialTimeLimitError`: validation
  Trials stop at 1.5 times the sandbox time their Quote expected) is the Task's:
  Reward 0 on a private Benchmark, and never retried, since it would run as long
  again.
- An unknown exception type is taken as the platform's: Errored, retried.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from amber_pipeline.models.signals import ProviderSignal

MAX_RETRIES = 2


class Kind(StrEnum):
    SCORED = "scored"
    ERRORED = "errored"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Rule:
    """What one failure means. Charged iff the outcome is SCORED."""

    cause: str
    public: Kind
    private: Kind
    retry: bool  # only ever acted on when the outcome is ERRORED

    def kind(self, private: bool) -> Kind:
        return self.private if private else self.public


S, E, C = Kind.SCORED, Kind.ERRORED, Kind.CANCELLED
AGENT_CAUSES = frozenset({"agent_budget", "agent_refusal", "agent_error"})
_GROUPS: dict[Rule, tuple[str, ...]] = {
    Rule("sandbox", E, E, retry=True): (
        "EngineUnreachableError", "SSHAccessError", "GKEExecStreamClosedError", "GKEPodNotFoundError",
        "RuntimeRequestError", "AddTestsDirError", "DownloadVerifierDirError"),
    Rule("task_environment", E, S, retry=True): (
        "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError", "HealthcheckError",
        "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError"),
    Rule("provider", E, E, retry=True): (
        "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError", "ApiConnectionClosedError",
        "ApiResponseStalledError", "UnknownApiError", "NetworkConnectionError", "ApiConnectionError",
        "ApiUsageLimitError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
        "APIConnectionError", "APIError", "Timeout",
        *(s.value for s in ProviderSignal if s is not ProviderSignal.CEILING)),
    Rule("provider_fatal", E, E, retry=False): (
        "BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError", "APIResponseValidationError",
        "BudgetExceededError", "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError",
        "AuthenticationError", "PermissionDeniedError", "NotFoundError"),
    Rule("harbor", E, E, retry=False): (
        "ServiceOperationsUnsupportedError", "VercelScopeError", "DspyImportError", "MissingExtraError",
        "RegradeError"),
    Rule("agent_budget", S, S, retry=False): (
        "AgentTimeoutError", "ContextWindowExceededError", "OutputTokenExceededError", "ContextLengthExceededError",
        "OutputLengthExceededError"),
    Rule("agent_refusal", S, S, retry=False): ("AgentSafetyRefusalError", "ContentPolicyViolationError"),
    Rule("agent_error", S, S, retry=False): ("NonZeroAgentExitCodeError",),
    Rule("verifier", E, S, retry=True): (
        "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError",
        "NoVerifierResult", "InvalidReward"),
    Rule("trial_limit", E, S, retry=False): ("TrialTimeLimitError",),
    Rule("cancelled", C, C, retry=False): ("CancelledError", ProviderSignal.CEILING.value),
}
RULES: dict[str, Rule] = {name: rule for rule, names in _GROUPS.items() for name in names}
UNKNOWN_RULE = Rule("unknown", E, E, retry=True)


def rule_for(error_type: str) -> Rule:
    return RULES.get(error_type, UNKNOWN_RULE)


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    reward: float | None  # None unless SCORED
    error_type: str | None
    error_message: str | None  # one line
    retry: bool

    @property
    def errored(self) -> bool:
        return self.kind is Kind.ERRORED

    @property
    def charged(self) -> bool:
        return self.kind is Kind.SCORED


def one_line(message: str | None, limit: int = 300) -> str | None:
    if not message or not message.strip():
        return None
    return message.strip().splitlines()[0][:limit] or None


def _pick_reward(rewards: dict[str, float] | None) -> float | None:
    if not rewards:
        return None
    return float(rewards["reward"] if "reward" in rewards else rewards[sorted(rewards)[0]])


def _apply(rule: Rule, private: bool, error_type: str, message: str | None, reward: float | None) -> Outcome:
    kind = rule.kind(private)
    if kind is not Kind.SCORED:
        return Outcome(kind, None, error_type, one_line(message), rule.retry and kind is Kind.ERRORED)
    score = reward if rule.cause in AGENT_CAUSES and reward is not None else 0.0
    return Outcome(kind, score, error_type, one_line(message), False)


def classify(*, exception_type: str | None, exception_message: str | None, rewards: dict[str, float] | None,
             private: bool, provider_signals: Sequence[ProviderSignal] = ()) -> Outcome:
    """Decide a Trial's outcome from its first exception, its Verifier rewards and any Provider signals."""
    if exception_type and rule_for(exception_type).cause == "cancelled":
        return _apply(rule_for(exception_type), private, exception_type, exception_message, None)
    if provider_signals:
        signals = [ProviderSignal(s) for s in provider_signals]
        signal = ProviderSignal.CEILING if ProviderSignal.CEILING in signals else signals[0]  # a ceiling stops
        return _apply(RULES[signal.value], private, signal.value,
                      f"Provider signal: {', '.join(ProviderSignal(s).value for s in provider_signals)}", None)
    reward = _pick_reward(rewards)
    if reward is not None and not (math.isfinite(reward) and 0.0 <= reward <= 1.0):
        return _apply(RULES["InvalidReward"], private, "InvalidReward",
                      f"The Verifier wrote a Reward outside [0, 1]: {reward}", None)
    if exception_type:
        return _apply(rule_for(exception_type), private, exception_type, exception_message or exception_type, reward)
    if reward is None:
        return _apply(RULES["NoVerifierResult"], private, "NoVerifierResult", "The Verifier produced no Reward.", None)
    return Outcome(Kind.SCORED, reward, None, None, False)


def from_harbor(result: Any, *, private: bool, provider_signals: Sequence[ProviderSignal] = ()) -> Outcome:
    """Classify a `harbor.models.trial.result.TrialResult`.

    The trial-level exception comes first, then step exceptions (multi-step);
    the first one that is not the Agent's own decides, else the first one.
    """
    infos = [result.exception_info] + [s.exception_info for s in result.step_results or []]
    infos = [i for i in infos if i is not None]
    info = next((i for i in infos if rule_for(i.exception_type).cause not in AGENT_CAUSES), infos[0] if infos else None)
    verifier = result.verifier_result
    return classify(exception_type=info.exception_type if info else None,
                    exception_message=info.exception_message if info else None,
                    rewards=verifier.rewards if verifier else None, private=private,
                    provider_signals=provider_signals)


def from_exception(exc: BaseException, *, private: bool, provider_signals: Sequence[ProviderSignal] = ()) -> Outcome:
    """A Trial Harbor could not even run, classified by the exception's type name."""
    name = type(exc).__name__
    return classify(exception_type=name, exception_message=one_line(str(exc)) or name, rewards=None, private=private,
                    provider_signals=provider_signals)


# The exception names litellm gives an HTTP status, so a call that failed outside litellm (the Direct Agent's)
# is classified by the same rows.
_STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                  404: "NotFoundError", 422: "UnprocessableEntityError", 429: "RateLimitError"}


def from_status(status: int, message: str, *, private: bool,
                provider_signals: Sequence[ProviderSignal] = ()) -> Outcome:
    """A model call that came back with an HTTP error, classified as litellm's exception of that status."""
    name = _STATUS_ERRORS.get(status, "InternalServerError" if status >= 500 else "APIError")
    return classify(exception_type=name, exception_message=one_line(message) or name, rewards=None,
                    private=private, provider_signals=provider_signals)
