"""Cells: one (Benchmark Version, Agent Version, Model Configuration) triple.

A cell is the unit Amber schedules, stores and reports. Its key is short,
stable and derived from the three ids (the Model Configuration's as
``name@id``, so a changed configuration is a new cell even if someone reused
its name), using only `[A-Za-z0-9=|@._-]` so that
Dagster partition keys and its UI never trip on it; files are named by a hash
of the key, never the raw key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

NO_MODEL = "none"


@dataclass(frozen=True)
class Cell:
    benchmark_version_id: str
    agent: str
    agent_spec_id: str
    model_configuration: str  # the Model Configuration's name@id; NO_MODEL for agents that call no model

    @property
    def key(self) -> str:
        return f"bv={self.benchmark_version_id[:12]}|{self.agent_model}"

    @property
    def agent_model(self) -> str:
        """The cell's Agent Version and Model Configuration, whatever its Benchmark Version (`agent_model`)."""
        return f"agent={self.agent}@{self.agent_spec_id}|mc={self.model_configuration}"

    @property
    def file_id(self) -> str:
        return cell_file_id(self.key)

    @property
    def label(self) -> str:
        if self.model_configuration == NO_MODEL:
            return self.agent
        return f"{self.agent} / {self.model_name}"

    @property
    def model_name(self) -> str:
        return model_name(self.model_configuration)


def model_name(ref: str) -> str:
    """A Model Configuration's name from its ``name@id``, as Trials and reports show it (a name never changes
    its content: the catalog adds a new name for new prices, and a Workspace cannot reuse one)."""
    return ref.split("@", 1)[0]


def agent_model(key: str) -> str:
    """The part of a cell key that names its Agent Version and Model Configuration (``agent=...|mc=...``): what
    its Agent uses is learned across Benchmark Versions under it (`jobs.history`)."""
    return key.split("|", 1)[1] if key.startswith("bv=") else key


def cell_file_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def agent_version_sql(key_column: str) -> str:
    """SQL for the Agent Version part (``agent@spec``) of a cell key column."""
    return f"split_part(split_part({key_column}, '|agent=', 2), '|', 1)"
