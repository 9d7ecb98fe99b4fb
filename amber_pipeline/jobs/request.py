"""A Job request: what a user asks Amber to run, in one typed record.

The CLI builds it from its options, Dagster's `submit_job` takes it as its
run config (the launchpad shows these fields and their descriptions), and the
Job keeps it. Its checks are the rules a user can break, each refused in one
sentence: Trials per Task from 1 to 10, an Agent Amber ships, a Model
Configuration for an Agent that needs one and none for one that does not,
the Agent's own Provider rule (Claude Code with Anthropic, Codex CLI with
OpenAI), an API key for each Provider, and a Job that stops once decided
comparing at least two Model Configurations (a margin and an order seed only
with it). The rules that need the Benchmark or the Workspace (static Tasks,
Provider policy) are checked where those are known, in `lifecycle.quote`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from amber_pipeline.agents.specs import AGENTS, DEFAULT_AGENT, agent_spec
from amber_pipeline.benchmarks.versions import BenchmarkVersion
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.models.configurations import ModelConfiguration, known_model_configurations, model_configuration
from amber_pipeline.models.endpoint import require_key
from amber_pipeline.money.amounts import as_text, parse_amount
from amber_pipeline.paths import AmberPaths

MIN_TRIALS, MAX_TRIALS = 1, 10
MAX_MARGIN_POINTS = 50
BOUNDS = ("oracle", "nop")


class JobRequest(BaseModel):
    """A Benchmark against one Agent with its Model Configurations, each Task tried Trials-per-Task times."""

    model_config = ConfigDict(extra="forbid")

    benchmark: str = Field(description="A Benchmark folder, or a Benchmark Version label name@N.")
    agent: str = Field(DEFAULT_AGENT, description=f"The Agent: one of {', '.join(AGENTS)}.")
    model_configurations: list[str] = Field(
        default_factory=list, description="The Model Configurations to compare (none for oracle and nop).")
    trials_per_task: int = Field(1, description=f"Trials per Task, {MIN_TRIALS} to {MAX_TRIALS}.")
    bounds: bool = Field(False, description="Add oracle and nop cells as the upper and lower bounds.")
    public: bool = Field(False, description="Register the Benchmark folder as public (Amber staff only).")
    ceiling_usd: float | None = Field(
        None, description="A spending ceiling of your own in USD, reserved instead of the estimate: at least the "
                          "estimate and at most what the Wallet has available.")
    stop_when_decided: bool = Field(
        False, description="Run the Tasks in a random order and stop once every comparison of the Model "
                           "Configurations is decided by an anytime-valid 95% confidence sequence for the whole "
                           "Benchmark Version; the unspent reservation is refunded.")
    margin_points: float | None = Field(
        None, description="With stop_when_decided: a difference of fewer points than this does not matter, so a "
                          "comparison is also decided once its interval lies within it (0 to 50).")
    order_seed: int | None = Field(
        None, description="With stop_when_decided: the seed of the Tasks' random order (chosen when the Job is "
                          "quoted if not given).")

    def check(self, paths: AmberPaths | None = None, workspace: str | None = None) -> list[ModelConfiguration]:
        """The request's Model Configurations, or one sentence refusing a request Amber cannot run (the
        Benchmark is checked when it is read). A refusal names the field it is about (`AmberError.field`), so
        the Dagster launchpad can say which of its fields to fix."""
        with _about("ceiling_usd"):
            if self.ceiling_usd is not None:  # the float of a run config, held to the rule for typed amounts
                parse_amount(as_text(self.ceiling_usd), "--ceiling")
        with _about("trials_per_task"):
            if not MIN_TRIALS <= self.trials_per_task <= MAX_TRIALS:
                raise AmberError(f"Trials per Task must be from {MIN_TRIALS} to {MAX_TRIALS}, not "
                                 f"{self.trials_per_task}: pick a number in that range.")
        with _about("agent"):
            spec = agent_spec(self.agent)
        self._check_stopping(spec.needs_model)
        with _about("model_configurations"):
            if spec.needs_model and not self.model_configurations:
                known = ", ".join(sorted(known_model_configurations(paths, workspace)))
                raise AmberError(f"{self.agent} needs a Model Configuration: add --model NAME (known: {known}).")
            if not spec.needs_model and self.model_configurations:
                raise AmberError(f"{self.agent} calls no model: drop --model.")
            mcs = [model_configuration(name, paths, workspace) for name in dict.fromkeys(self.model_configurations)]
            for mc in mcs:
                # A replay is a script, not a Provider's Model: it answers every Agent in that Agent's own protocol.
                if spec.providers is not None and mc.provider not in spec.providers and not mc.is_replay:
                    raise AmberError(f"{self.agent} runs only with {' or '.join(sorted(spec.providers))} Model "
                                     f"Configurations, and {mc.name} is {mc.provider}: pick another Agent or Model.")
                require_key(mc)
        return mcs

    def _check_stopping(self, needs_model: bool) -> None:
        with _about("margin_points"):
            if self.margin_points is not None and not self.stop_when_decided:
                raise AmberError("A margin decides when a Job stops: add --stop-when-decided, or drop "
                                 "--margin-points.")
            if self.margin_points is not None and not 0 <= self.margin_points <= MAX_MARGIN_POINTS:
                raise AmberError(f"The margin must be from 0 to {MAX_MARGIN_POINTS} points, not "
                                 f"{self.margin_points:g}: pick a number in that range.")
        with _about("order_seed"):
            if self.order_seed is not None and not self.stop_when_decided:
                raise AmberError("Only a Job that stops once decided runs its Tasks in a seeded order: add "
                                 "--stop-when-decided, or drop the seed.")
            if self.order_seed is not None and not 0 <= self.order_seed < 2**63:
                raise AmberError(f"The order seed must be from 0 to 2^63 - 1, not {self.order_seed}.")
        with _about("stop_when_decided"):
            if self.stop_when_decided and (not needs_model or len(set(self.model_configurations)) < 2):
                raise AmberError("A Job stops once its comparison is decided, so it needs two Model Configurations "
                                 "to compare: give --model twice, or drop --stop-when-decided.")

    def cells(self, version: BenchmarkVersion, mcs: list[ModelConfiguration]) -> list[Cell]:
        """The cells of a checked request: the Agent with each of its Model Configurations (``mcs``, from
        `check`), then oracle and nop when asked for as bounds."""
        spec = agent_spec(self.agent)
        models = list(dict.fromkeys(mc.ref for mc in mcs)) if spec.needs_model else [NO_MODEL]
        cells = [Cell(version.id, self.agent, spec.spec_id, m) for m in models]
        if self.bounds:
            cells += [c for c in (Cell(version.id, b, agent_spec(b).spec_id, NO_MODEL) for b in BOUNDS)
                      if c not in cells]
        return cells


@contextlib.contextmanager
def _about(field: str) -> Iterator[None]:
    """A refusal raised in the block is about `field` (unless it already names one)."""
    try:
        yield
    except AmberError as refusal:
        if refusal.field is None:
            refusal.field = field
        raise
