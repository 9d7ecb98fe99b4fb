"""Every operation: importing an area's module registers its operations, so this is the one list of areas."""

from amber_pipeline.operations import account, audit, benchmarks, jobs, models, money, reports, sql, trials  # noqa: F401
from amber_pipeline.operations.operation import OPERATIONS

__all__ = ["OPERATIONS"]
