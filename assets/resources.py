"""The warehouse as a Dagster resource: where the embedded Amber keeps its state."""


from pathlib import Path

import dagster as dg

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """Amber's warehouse; `home` defaults to AMBER_HOME (or ./.amber), read when a run starts."""

    home: str | None = None

    def get(self) -> Warehouse:
        return Warehouse(AmberPaths(Path(self.home).resolve()) if self.home else AmberPaths.from_env())
