"""Every operation: importing an area's module registers its operations, so this is the one list of areas.

`OPERATIONS` here is every operation (the API serves them all). A CLI command runs one, so `find` imports
areas only until one has registered it: `amber job status` loads the Jobs area, not all nine.
"""

from __future__ import annotations

import importlib
from typing import Any

from amber_pipeline.operations.operation import OPERATIONS as _REGISTERED
from amber_pipeline.operations.operation import Operation

# the most used first, so a command's lookup imports the fewest areas
AREAS = ("jobs", "money", "results", "trials", "benchmarks", "models", "reports", "sql", "account", "audit")


def find(name: str) -> Operation:
    """The operation `name`, its area imported if it is not yet (KeyError for no such operation)."""
    for area in AREAS:
        if name in _REGISTERED:
            break
        importlib.import_module(f"amber_pipeline.operations.{area}")
    return _REGISTERED[name]


def __getattr__(name: str) -> Any:
    if name == "OPERATIONS":
        for area in AREAS:
            importlib.import_module(f"amber_pipeline.operations.{area}")
        return _REGISTERED
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
