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

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from amber_pipeline.warehouse import storage
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
    store = wh.store
    for trial_dir, finished_at in rows:
        folder = Path(trial_dir)
        here = folder.is_dir() and not (folder / MARKER).exists()
        # A Trial folder copied to a remote store (`storage.py`) loses its transcripts there too.
        there = store.remote and folder.is_relative_to(wh.paths.home) and not store.exists(folder / MARKER)
        if not here and not there:
            continue
        note = f"Transcripts deleted {now.isoformat()} ({TRANSCRIPT_DAYS}-day retention).\n"
        freed = 0
        if here:
            freed += storage.remove_local(folder / "agent") + storage.remove_local(folder / "trial.log")
            (folder / MARKER).write_text(note)
        if there:
            remote = store.remove(folder / "agent") + store.remove(folder / "trial.log")
            freed = freed or remote
            store.write_bytes(folder / MARKER, note.encode())
        expired.append(Expired(str(folder), finished_at, freed))
    days = sorted({f.path.parent for f in store.files(wh.paths.transcripts, "date=*/*.parquet")})
    for day in days:
        if day.name.removeprefix("date=") < cutoff.date().isoformat():
            expired.append(Expired(str(day), cutoff, store.remove(day)))
    if expired:
        with wh.write() as con:
            con.executemany("insert into transcript_expiries values (?, ?, ?, ?)",
                            [[e.trial_dir, e.finished_at, now, e.bytes_freed] for e in expired])
    return expired
