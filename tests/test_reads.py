"""Reads are reads: every read command, and every GET route of the API, leaves the instance byte-identical.

The instance is the refusal tests' (`test_refusals.template`: Workspaces, Credits, a quoted Job, a cancelled
one, a completed one, another user's) plus what a read was once tempted to fix: a Quote past its hour that no
one has released yet. Each read runs against a copy and is compared before and after with the refusal tests'
`state` (every catalog row and sequence, every other file by size and hash, the user's config). The CLI's reads
run on the embedded default and as the API's client (`cli_mode`); the GET routes are also called one by one,
all of them, so a route no command reaches is held to the rule too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from helpers import cli, ok, request, sign_in
from servers.api import ApiServer
from test_refusals import STATIC, Instance, instance, state, template  # noqa: F401  # fixtures used below

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import lifecycle, quotes
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

# Every command that only reads, with the ids of `template` ({quoted}, {completed}, ...) and {due}, the Quote
# past its hour.
READS: list[list[str]] = [
    ["job", "status", "{quoted}"], ["job", "status", "{completed}"], ["job", "list"],
    ["job", "wait", "{completed}"], ["job", "wait", "{cancelled}"], ["job", "results", "{completed}"],
    ["job", "results", "{completed}", "--json"], ["wallet"], ["workspace", "list"], ["workspace", "show"],
    ["benchmark", "list"], ["model", "list"], ["model", "show", "replay-strong"], ["whoami"], ["audit"],
    ["sql", "select count(*) from jobs"], ["plan", "--tasks", "50"],
]


@pytest.fixture
def due(instance: Instance) -> Instance:  # noqa: F811  # the fixture imported above
    """The instance with a Quote past its hour, not yet released (the daemon's next minute would)."""
    wh = Warehouse(AmberPaths(instance.home))
    made = lifecycle.quote(wh, "default", local_user(), request(str(STATIC), "direct", ["replay-strong"]),
                           now=datetime.now(UTC) - timedelta(hours=2))
    assert quotes.due(wh, datetime.now(UTC)) == [made.id]
    return Instance(instance.home, instance.config, instance.tasks, {**instance.names, "due": made.id})


@pytest.mark.usefixtures("cli_mode")
@pytest.mark.parametrize("args", [pytest.param(a, id=" ".join(a)) for a in READS])
def test_a_read_command_changes_nothing(due: Instance, args: list[str]) -> None:
    argv = [a.format(**due.names) for a in args]
    sign_in(*argv)
    before = state(due)
    result = cli(*argv)
    assert result.exit_code in (0, 1) and result.exception is None or isinstance(result.exception, SystemExit), (
        result.stdout, result.stderr)
    assert state(due) == before
    wh = Warehouse(AmberPaths(due.home))
    assert due.names["due"] in quotes.due(wh, datetime.now(UTC))  # no read released the Quote past its hour


def test_the_reads_are_shown_truthfully_before_the_daemon_acts(due: Instance) -> None:
    """The Quote past its hour is released by the schedule (or the next Quote), not by reading the Wallet."""
    wallet_before = ok(cli("wallet"))
    wh = Warehouse(AmberPaths(due.home))
    assert lifecycle.expire_due(wh) == [due.names["due"]]  # what the daemon's schedule does
    assert ok(cli("wallet")) != wallet_before  # and the read shows it then


def test_every_get_route_changes_nothing(due: Instance) -> None:
    """Every GET route of the API, called with the ids the instance has, for the staff login and for a member."""
    paths = AmberPaths(due.home)
    server = ApiServer.start(paths)
    try:
        fills = {"job_id": due.names["completed"], "name": "replay-strong", "ref": "static-bench@1",
                 "upload_id": "upl-0000000000", "task": "capital-city", "trial": "capital-city__1"}
        gets = sorted((name, op) for name, op in OPERATIONS.items() if op.method == "GET")
        assert len(gets) >= 15, [name for name, _ in gets]
        tokens = [server.token(local_user()), server.token("alice")]
        before = state(due)
        with httpx.Client(verify=tls(), base_url=server.url, timeout=60) as client:
            for name, op in gets:
                url = op.path_for(None, {f: fills[f] for f in op.path_fields})
                for token in tokens:
                    answer = client.get(url, headers={"Authorization": f"Bearer {token}"})
                    assert answer.status_code < 500, (name, url, answer.text)
        assert state(due) == before
    finally:
        server.stop()
