"""Launches from the Dagster UI behind sign-in: which user a run acts for.

Dagster's runs have no users, and a run's tags are whatever the browser sent
with its launch, or what a re-execution copied from its parent. So the sign-in
gate (`server/dagster_ui.py`) issues, for each run a signed-in user
launches, a launch id: random, recorded here with the user, and put on the run
as its tag `amber/launch` in place of any the browser sent. The run claims it
(`user_of`): the first run that shows an id gets its user; an id Amber never
issued, or one another run claimed already, is refused. A run that shows none
was launched on the server's host (`amber ui`, Dagster's own tools), where the
embedded default's user acts, as on the CLI.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from amber_pipeline.accounts import identity
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.catalog import Warehouse

LAUNCH_TAG = "amber/launch"  # the launch id the gate set
USER_TAG = "amber/user"  # whom the run acts for: set by the gate, and again by the run once it has claimed its id
IDENTITY_TAGS = (LAUNCH_TAG, USER_TAG)
NOT_ISSUED = ("This run's sign-in is not one Amber gave it (a re-execution carries its parent's): launch it again "
              "from the Dagster UI's launchpad.")


def issue(wh: Warehouse, user: str) -> str:
    """A new launch id for a run `user` launches, signed in."""
    launch_id = f"launch-{secrets.token_hex(16)}"
    with wh.write() as con:
        con.execute("insert into ui_launches (id, user_name, issued_at) values (?, ?, ?)",
                    [launch_id, user, datetime.now(UTC)])
    return launch_id


def user_of(wh: Warehouse, launch_id: str | None, run_id: str) -> str:
    """The user run `run_id` acts for: the one its launch id was issued to (claimed by this run now, or earlier
    by this same run before it was resumed), else, with no launch id, the embedded default's user; an id not
    issued, or claimed by another run, is refused in one sentence."""
    if launch_id is None:
        return identity.resolve(None, None).user
    with wh.write() as con:
        row = con.execute("select user_name, run_id from ui_launches where id = ?", [launch_id]).fetchone()
        if row is None or row[1] not in (None, run_id):
            raise AmberError(NOT_ISSUED)
        if row[1] is None:
            con.execute("update ui_launches set run_id = ? where id = ?", [run_id, launch_id])
    return str(row[0])
