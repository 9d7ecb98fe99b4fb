"""Every operation: importing an area's module registers its operations, so this is the one list of areas.

Each operation runs for its actor (`audit.acting_as`), whichever face asks for it (the CLI in its own process,
or the server over HTTP), so an action the core library logs without being told who took it (a start, a
cancel, a token made) names the user who asked for it.
"""

import dataclasses
import functools
from typing import Any

from amber_pipeline.api import account, audit, benchmarks, jobs, models, money, reports, sql  # noqa: F401
from amber_pipeline.api.operations import OPERATIONS, Acting, Operation
from amber_pipeline.money.audit import acting_as

__all__ = ["OPERATIONS"]


def _for_its_actor(op: Operation) -> Operation:
    @functools.wraps(op.run)  # keeps the module the API's documentation groups the operation by
    def run(acting: Acting, params: Any) -> Any:
        with acting_as(acting.actor.user):
            return op.run(acting, params)

    return dataclasses.replace(op, run=run)


OPERATIONS.update({name: _for_its_actor(op) for name, op in OPERATIONS.items()})
