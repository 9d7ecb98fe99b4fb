"""Which engine pool runs a cell: chosen when the cell is claimed for its run, kept on its catalog row.

The engines that run sandboxes come in pools (`sandbox.engines`, AMBER_SANDBOX_HOSTS), each with its slots:
how many cell runs it takes at once. A claimed cell goes to the pool that answers and has the most free
slots (slots less the cells placed there and not ended), so a Job's cells spread over the engines. Its run
carries the pool as a Dagster tag (`engines.POOL_TAG`), and the instance's run queue holds each pool to its slots
(a tag concurrency limit per pool, written into the instance's dagster.yaml), so a pool never runs more cell
runs than it has slots, while another pool's runs go ahead.

A cell whose sandboxes need a sandbox network (its Agent runs in the sandbox and reaches the model proxy, or
its Benchmark Version lets Tasks reach allowlisted hosts through the egress proxy) goes to pools of an engine
on this machine's socket when there are any: those give a sandbox network (`sandbox.network`), the cheaper way
to the proxies. On another host's engine each sandbox reaches them through a relay (`sandbox.relay`) instead,
which costs a container per Trial, so a deployment whose engines are all elsewhere still runs every Agent.

A cell whose engine stops answering mid-run is handed back (`lifecycle.move_cell`): its finished Trials keep
their rows and charges, it is placed again on a pool that answers, and its new run charges each Trial once
(a charge is keyed by its Trial attempt).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from amber_pipeline import settings
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import engines
from amber_pipeline.warehouse.catalog import Connection


def answering_pools() -> dict[str, int]:
    """The pools with an engine that answers, with their slots; every pool when there is one, or when none
    answers (their runs then say why, and Errored Trials are not charged)."""
    listed = engines.engines()
    slots = engines.pools(listed)
    if len(slots) == 1:
        return slots
    from amber_pipeline.sandbox import docker_engine  # the Docker SDK: only where an engine is asked

    alive = {e.pool for e in listed if docker_engine.answers_within(0, e)}
    return {pool: n for pool, n in slots.items() if pool in alive} or slots


def needs_sandbox_network(agent: str, allowed_hosts: Sequence[str]) -> bool:
    """Whether a cell's sandboxes need a way to the proxies: a sandbox network, or relays on a remote engine."""
    return agent_spec(agent).software is not None or bool(allowed_hosts)


def place(con: Connection, claimed: Sequence[tuple[str, str, str]], pools: dict[str, int]) -> dict[tuple[str, str],
                                                                                                      str]:
    """A pool for each claimed (Job, cell key, Agent): the one with the most free slots, in turn."""
    local = {e.pool for e in engines.engines() if e.local}
    busy = dict(con.execute(
        "select engine_pool, count(*) from job_cells where status in ('pending', 'running') "
        "and launched_at is not null and engine_pool is not null group by engine_pool").fetchall())
    hosts = {job: json.loads(listed) if listed else [] for job, listed in con.execute(
        "select j.id, b.allowed_hosts from jobs j left join benchmark_versions b on b.id = j.benchmark_version_id "
        "and b.owner = j.benchmark_owner "
        "where j.id in (select unnest(?))", [sorted({job for job, _, _ in claimed})]).fetchall()}
    chosen = {}
    for job_id, cell_key, agent in claimed:
        # (with no such pool, any: its sandboxes then reach the proxies through relays)
        networked = needs_sandbox_network(agent, hosts.get(job_id, []))
        fits = [p for p in sorted(pools) if p in local or not networked] or sorted(pools)
        pool = max(fits, key=lambda p: (pools[p] - busy.get(p, 0), -busy.get(p, 0)))  # ties: the emptier
        busy[pool] = busy.get(pool, 0) + 1
        chosen[job_id, cell_key] = pool
    return chosen


def engine_of(pool: str | None) -> engines.Engine | None:
    """The engine a cell run on ``pool`` uses: the pool's first that answers (None: no pool was placed, so
    DOCKER_HOST or the local socket, as before pools)."""
    if pool is None or settings.sandbox_hosts_file() is None:
        return None
    members = [e for e in engines.engines() if e.pool == pool]
    if not members:
        raise AmberError(f"The engine pool {pool} is no longer in AMBER_SANDBOX_HOSTS: put it back, or cancel "
                         "the Job and submit it again.")
    from amber_pipeline.sandbox import docker_engine

    return next((e for e in members if docker_engine.answers_within(0, e)), members[0])


class EngineLost(AmberError):
    """A cell run's engine stopped answering and did not come back in time: the cell goes to another engine."""

    def __init__(self, engine: engines.Engine):
        super().__init__(f"The Docker engine {engine.name} ({engine.url}) stopped answering: the cell goes to "
                         "another engine, and its finished Trials keep their Rewards and charges.")
        self.engine = engine
