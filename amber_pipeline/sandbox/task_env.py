"""A Task's env tables, filled as if the server had no environment.

Harbor lets a Task's env tables (``[environment].env``, ``[verifier].env``,
``[solution].env``, a step's Verifier) take a value from the machine that runs
the Task: a value that is ``${VAR}`` or ``${VAR:-default}`` is replaced by that
machine's ``VAR``. In Amber that machine holds the Providers' keys (the model
proxy's) and its operator's environment, and the value would go into a user's
sandbox. So Amber fills these tables as if that environment were empty:
``${VAR:-default}`` becomes its default, and ``${VAR}`` stops the Trial with
one sentence, as Harbor stops it when the variable is missing. Uploads refuse
such Tasks outright (`benchmarks.intake.checks`, rule 2); this holds for every
Benchmark, a public one imported from Harbor's registry included. A template
inside a longer value is none for Harbor either: it goes in as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from harbor.models.task.config import TaskConfig

_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")  # Harbor 0.25's (harbor.utils.env), matched whole


class HostValueRequired(ValueError):
    """A Task's env table takes a value from the server's environment and has no default."""


def without_host(env: Mapping[str, str], table: str) -> dict[str, str]:
    """``env`` (the Task's table ``table``) with each template filled from an empty environment."""
    filled = {}
    for name, value in env.items():
        template = _TEMPLATE.fullmatch(value)
        if template is None:
            filled[name] = value
        elif template[2] is not None:
            filled[name] = template[2]
        else:
            raise HostValueRequired(
                f"The Task's {table} sets {name} from the server's environment (${{{template[1]}}}), which Amber "
                f"never passes into a sandbox: give {name} a value, or a default (${{{template[1]}:-...}}).")
    return filled


def confine(config: TaskConfig) -> None:
    """Fill every env table of a loaded Task as if the server had no environment, in place (Harbor reads them
    from the loaded Task when the sandbox starts, the oracle runs and the Verifier runs)."""
    config.environment.env = without_host(config.environment.env, "[environment].env")
    config.verifier.env = without_host(config.verifier.env, "[verifier].env")
    config.solution.env = without_host(config.solution.env, "[solution].env")
    for step in config.steps or []:
        step.verifier.env = without_host(step.verifier.env, f"[verifier].env of step {step.name}")
