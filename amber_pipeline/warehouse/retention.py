"""Transcript expiry: what a Trial's Agent said and did is kept for 90 days.

After that its transcripts (the trial folder's `agent/` files: trajectory,
terminal logs, oracle output), its `trial.log` and the model proxy's record of
its calls (``warehouse/transcripts/date=.../``, one folder per day, so expiry
drops whole days) are deleted. The Trial's
Reward, tokens, cost and duration stay in the warehouse, and so do the
aggregates; `result.json` and the Verifier's files stay in the folder. Each
expiry is recorded (`transcript_expiries`), so a user can see what went.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from amber_pipeline.warehouse.catalog import Warehouse

TRANSCRIPT_DAYS = 90
MARKER = "TRANSCRIPT_EXPIRED"


@dataclass(frozen=True)
class Expired:
    trial_dir: str
    finished_at: datetime
    bytes_freed: int


def expire_transcripts(wh: Warehouse, now: datetime | None = None) -> list[Expired]:
    """Delete the transcripts of Trials that finished more than 90 days before `now`; idempotent."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(days=TRANSCRIPT_DAYS)
    with wh.query(names={"trials"}) as con:
        rows = con.execute("select distinct trial_dir, finished_at from trials where finished_at < ?",
                           [cutoff]).fetchall()
    expired = []
    for trial_dir, finished_at in rows:
        folder = Path(trial_dir)
        if not folder.is_dir() or (folder / MARKER).exists():
            continue
        freed = _remove(folder / "agent") + _remove(folder / "trial.log")
        (folder / MARKER).write_text(f"Transcripts deleted {now.isoformat()} ({TRANSCRIPT_DAYS}-day retention).\n")
        expired.append(Expired(str(folder), finished_at, freed))
    for day in sorted(wh.paths.transcripts.glob("date=*")):
        if day.name.removeprefix("date=") < cutoff.date().isoformat():
            expired.append(Expired(str(day), cutoff, _remove(day)))
    if expired:
        with wh.write() as con:
            con.executemany("insert into transcript_expiries values (?, ?, ?, ?)",
                            [[e.trial_dir, e.finished_at, now, e.bytes_freed] for e in expired])
    return expired


def _remove(path: Path) -> int:
    if path.is_dir():
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path)
        return size
    if path.is_file():
        size = path.stat().st_size
        path.unlink()
        return size
    return 0
