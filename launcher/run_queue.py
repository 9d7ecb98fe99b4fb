"""PromptRunCoordinator: Dagster's run queue, read several times a second, and the door every run comes through.

Every run waits in the queue for the daemon's next look at it, and Dagster's
own coordinator takes whole seconds between looks (at least 1): up to a
second added to each start, twice for a Job launched from the UI (its
`submit_job` run, then its cell runs). This one takes a fraction of a second
(the daemon still waits in steps of half a second, so a look every half second
or so); each look is one query of the run storage. The queue's limits
(`concurrency.runs` in dagster.yaml) apply as before.

Every launch comes through `submit_run` (the UI's Launch and Materialize, the
sensors, the warm worker), right after Dagster made the run and before it is
queued, so this is where Amber refuses what it would only refuse later:
- a launchpad job whose config a rule of Amber's refuses (an unknown Model
  Configuration, a Benchmark folder that is not there: `assets.job_requests.launch_refusal`);
- a run of a cell's Trials that names no Job (Materialize on `trials`:
  `assets.cell_job.launch_refusal`), which would fail its step and mark a good
  cell failed.
A refused run is deleted before anything ran (Dagster counts a partition failed
when the run that planned it failed, and a deleted run as never planned), and
the Launch gets one sentence: for the UI's GraphQL, as a config error naming
the field (the launchpad shows it under "Please fix the following errors") or
the sentence alone; for anyone else, an exception carrying the sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dagster import DagsterRun, Field
from dagster._config.stack import EvaluationStackEntry, EvaluationStackRoot
from dagster._core.run_coordinator.base import SubmitRunContext
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator
from dagster._serdes import ConfigurableClassData
from dagster_graphql.implementation.utils import UserFacingGraphQLError
from dagster_graphql.schema.errors import GrapheneInvalidSubsetError
from dagster_graphql.schema.pipelines.config import (
    GrapheneEvaluationStack,
    GrapheneRunConfigValidationInvalid,
    GrapheneRuntimeMismatchConfigError,
)

from amber_pipeline.paths import AmberPaths
from assets import cell_job, job_requests


class PromptRunCoordinator(QueuedRunCoordinator):
    def __init__(self, dequeue_interval_seconds: float = 0.25, inst_data: ConfigurableClassData | None = None,
                 **kwargs: Any):
        super().__init__(inst_data=inst_data, dequeue_interval_seconds=1, **kwargs)
        self._prompt_interval = float(dequeue_interval_seconds)

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]  # Dagster's is a whole number
        return self._prompt_interval

    @classmethod
    def config_type(cls) -> dict:
        fields = dict(cast(Mapping[str, Any], super().config_type()))
        fields["dequeue_interval_seconds"] = Field(
            float, is_required=False, description="Seconds between looks at the run queue (fractions allowed).")
        return fields

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> PromptRunCoordinator:
        return cls(inst_data=inst_data, **{k: v for k, v in config_value.items() if v is not None})

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        """Queue the run, unless Amber refuses it (see the module's docstring): then it is deleted, and the launch
        gets one sentence."""
        run = context.dagster_run
        refused = self._refusal(run)
        if refused is not None:
            self._instance.delete_run(run.run_id)
            raise refused
        return super().submit_run(context)

    def _refusal(self, run: DagsterRun) -> LaunchRefused | None:
        plan = self._instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id) \
            if run.execution_plan_snapshot_id else None
        steps = plan.step_keys_to_execute if plan is not None else []
        sentence = cell_job.launch_refusal(steps, run.tags)
        if sentence is not None:
            return LaunchRefused(GrapheneInvalidSubsetError(message=sentence, pipeline=None))
        refusal = job_requests.launch_refusal(self._instance, run.job_name, run.run_config, AmberPaths.from_env())
        if refusal is None:
            return None
        field = refusal.field or "config"
        path = ["ops", job_requests.LAUNCHPAD_OPS[run.job_name], "config", field]
        stack: EvaluationStackEntry = EvaluationStackRoot()
        for name in path:
            stack = stack.for_field(name)
        return LaunchRefused(GrapheneRunConfigValidationInvalid(pipeline_name=run.job_name, errors=[
            GrapheneRuntimeMismatchConfigError(message=f"{field}: {refusal}", path=path, reason="RUNTIME_TYPE_MISMATCH",
                                               value_rep=None, stack=GrapheneEvaluationStack(stack))]))


class LaunchRefused(UserFacingGraphQLError):
    """A launch Amber refuses before its run is queued: the GraphQL launch mutation returns `error` as its result
    (the UI shows its sentence, no traceback); anyone else sees the sentence as the exception's message."""

    def __init__(self, error: Any):
        super().__init__(error)
        self.args = (_sentence(error),)

    def __str__(self) -> str:
        return str(self.args[0])


def _sentence(error: Any) -> str:
    errors = getattr(error, "errors", None)
    return str(errors[0].message if errors else error.message)
