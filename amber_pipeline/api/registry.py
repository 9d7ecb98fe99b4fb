"""Every operation: importing an area's module registers its operations, so this is the one list of areas."""

from amber_pipeline.api import account, audit, benchmarks, jobs, models, money, reports, sql  # noqa: F401
from amber_pipeline.api.operations import OPERATIONS

__all__ = ["OPERATIONS"]
