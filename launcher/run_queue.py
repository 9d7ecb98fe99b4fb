"""PromptRunCoordinator: Dagster's run queue, read several times a second.

Every run waits in the queue for the daemon's next look at it, and Dagster's
own coordinator takes whole seconds between looks (at least 1): up to a
second added to each start, twice for a Job launched from the UI (its
`submit_job` run, then its cell runs). This one takes a fraction of a second
(the daemon still waits in steps of half a second, so a look every half second
or so); each look is one query of the run storage. The queue's limits
(`concurrency.runs` in dagster.yaml) apply as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dagster import Field
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator
from dagster._serdes import ConfigurableClassData


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
