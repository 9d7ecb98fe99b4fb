"""Where the embedded Amber keeps its state.

Everything lives under one folder, `AMBER_HOME` (default: `.amber` in the
current directory), so a test can point Amber at a temporary folder and a user
can delete one folder to start over:

    AMBER_HOME/
      warehouse/catalog.duckdb     catalog: Benchmark Versions, Jobs, cells
      warehouse/trials/            Parquet Trial rows, one file per cell run
      warehouse/rewards/           Parquet per-Task Rewards, one file per cell and Workspace
      warehouse/aggregates/        Parquet cell aggregates, one file per cell and Workspace
      warehouse/comparisons/       Parquet paired comparisons, one file
      warehouse/imports/           Parquet evidence of imported Harbor job folders
      warehouse/evidence/          Parquet evidence of Amber's own Trials, derived when read
      warehouse/transcripts/       Parquet model-call transcripts by date (90-day retention)
      benchmarks/<hash>/           immutable copies of Benchmark Versions
      uploads/                     archives being unpacked and checked (nothing stays after the check)
      cache/git/                   clones of the Harbor registry's git repositories, and the Tasks taken from them
      cache/summaries/             what reading Benchmark Versions found (their Tasks, hashes, image tags), for Quotes
      models/<workspace>/          a Workspace's own Model Configurations (TOML)
      runs/<job>/<cell>/           Harbor trial folders (readable by `harbor view`)
      dagster/                     DAGSTER_HOME of the embedded instance
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class AmberPaths:
    home: Path

    @classmethod
    def from_env(cls) -> AmberPaths:
        return cls(Path(os.environ.get("AMBER_HOME", ".amber")).resolve())

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def catalog(self) -> Path:
        return self.warehouse / "catalog.duckdb"

    @property
    def trials(self) -> Path:
        return self.warehouse / "trials"

    @property
    def rewards(self) -> Path:
        return self.warehouse / "rewards"

    @property
    def aggregates(self) -> Path:
        return self.warehouse / "aggregates"

    @property
    def comparisons(self) -> Path:
        return self.warehouse / "comparisons"

    @property
    def imports(self) -> Path:
        """Imported Harbor job folders: one Parquet file per (Workspace, folder)."""
        return self.warehouse / "imports"

    @property
    def evidence(self) -> Path:
        """Evidence of Amber's own Trials (trajectory flags, failure causes), derived when read."""
        return self.warehouse / "evidence"

    @property
    def transcripts(self) -> Path:
        """Model-call transcripts: ``date=YYYY-MM-DD/<cell file id>_<job>.parquet``, deleted after 90 days."""
        return self.warehouse / "transcripts"

    @property
    def benchmarks(self) -> Path:
        return self.home / "benchmarks"

    @property
    def uploads(self) -> Path:
        """Where an uploaded archive is unpacked and checked; its Tasks then go to `benchmarks`."""
        return self.home / "uploads"

    @property
    def cache(self) -> Path:
        """Fetched public Tasks (Harbor registry git repositories), kept between imports."""
        return self.home / "cache"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def models(self) -> Path:
        """Each Workspace's own Model Configurations: ``models/<workspace>/<name>.toml``."""
        return self.home / "models"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    def holds(self, path: Path | str) -> bool:
        """Whether ``path``, as the file system resolves it (`~`, `..` and links followed), lies inside this
        instance: paths are not permissions, so a command that takes a path from a user refuses these (each
        place is checked too, as any of them may be a link to another disk)."""
        where = resolved(path)
        places = (self.home, self.runs, self.warehouse, self.benchmarks, self.uploads, self.cache, self.models,
                  self.dagster_home)
        return any(where.is_relative_to(resolved(place)) for place in places)

    def ensure(self) -> AmberPaths:
        for p in (self.warehouse, self.trials, self.rewards, self.aggregates,
                  self.benchmarks, self.runs, self.dagster_home):
            p.mkdir(parents=True, exist_ok=True)
        return self


def resolved(path: Path | str) -> Path:
    """The path as the file system resolves it: `~` expanded, `..` and every symbolic link followed."""
    return Path(os.path.realpath(Path(path).expanduser()))
