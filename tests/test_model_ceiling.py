"""The Quote holds inside a Trial too, and it is one pool: the model proxy refuses the calls that would pass
what is left of the Job's reservation, whichever cell makes them.

A static Job whose model answers at length (about 1,000 output tokens where the Quote's prior expects 300)
spends its Quote long before its Tasks are done. The ledger alone would only notice when a Trial is charged;
the proxy weighs every call against what is left of the pool, refuses the one that no longer fits, and the Job
ends ``ceiling_reached`` with nothing charged past its reservation. A cell that spends somewhat more than its
own estimate while another spends less finishes: the Job stops only when the whole reservation is spent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from helpers import costs_and_charges, funded, request

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.jobs import cell_run, lifecycle, quotes
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.models import configurations
from amber_pipeline.models.configurations import ModelConfiguration, Prices
from amber_pipeline.models.provider_double import ProviderDouble, load_replay
from amber_pipeline.warehouse.catalog import Warehouse

N_TASKS = 80
ANSWER = "The answer is 42. " + "Let me explain at length. " * 150  # about 1,000 tokens
SOMEWHAT_LONG = "The answer is 42. " + "Let me explain at length. " * 75  # about 500 tokens: over the prior's 300
TERSE = "42"


@pytest.fixture
def talkative(tmp_path: Path, warehouse: Warehouse) -> Iterator[Path]:
    bench = tmp_path / "bench"
    instructions = {}
    for i in range(N_TASKS):
        task = bench / f"q-{i:03d}"
        task.mkdir(parents=True)
        (task / "task.toml").write_text('version = "1.0"\n\n[metadata.amber.static]\nnumber = 42\n')
        instructions[task.name] = f"Question {i:03d}: what is six times seven?"
        (task / "instruction.md").write_text(instructions[task.name] + "\n")
    replays = []
    for model, answer in (("talkative", ANSWER), ("somewhat-long", SOMEWHAT_LONG), ("terse", TERSE)):
        replay = tmp_path / f"{model}.json"
        replay.write_text(json.dumps({"model": model, "tasks": {name: [answer] for name in instructions}}))
        replays.append(load_replay(replay))
    with ProviderDouble(replays, instructions) as double:
        for model in ("talkative", "somewhat-long", "terse"):
            configurations.add(warehouse.paths, DEFAULT_WORKSPACE, ModelConfiguration(
                name=model, model=model, provider="openai-compatible", base_url=double.base_url,
                prices=Prices(input=1.0, cached_input=0.1, output=10.0, source="made up for the test")))
        yield bench


def test_the_proxy_stops_a_job_at_its_quote(talkative: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh, DEFAULT_WORKSPACE, "10")
    made, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(), request(str(talkative), "direct", ["talkative"]))
    (cell,) = cells_of(wh, job.id)
    records = cell_run.run_cell_of_job(wh, job.id, cell.cell_key)

    assert get_job(wh, job.id, DEFAULT_WORKSPACE).status == "ceiling_reached"
    refused = [r for r in records if r.error_type == "ceiling_reached"]
    scored = [r for r in records if r.outcome == "scored"]
    assert refused and all(r.outcome == "cancelled" and r.cost_usd == 0 for r in refused)
    assert scored and len(records) < N_TASKS  # no new Trial started once the proxy refused a call
    assert all(r.reward == 1.0 for r in scored)
    with wh.query(DEFAULT_WORKSPACE) as con:
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job.id]).fetchone()
        refusals = con.execute("select count(*) from transcripts where job_id = ? and status = 402",
                               [job.id]).fetchone()[0]
    assert reserved == made.amount == Decimal(quotes.get(wh, DEFAULT_WORKSPACE, made.id).cells[0].total)
    assert charged <= reserved and settled and charged + refunded == reserved
    assert charged == sum(Decimal(str(r.cost_usd)) for r in scored)
    costs, charges = costs_and_charges(wh, job.id)  # the trials view shows what the ledger charged
    assert costs == charges and charges
    # Every call the proxy let through fitted at the time; only the refused ones were never sent.
    assert refusals == 0  # refused calls are not transcribed: they never reached the Provider


def test_a_cell_over_its_estimate_uses_what_the_other_cells_did_not_need(talkative: Path,
                                                                          warehouse: Warehouse) -> None:
    """somewhat-long spends more than its own cell's estimate, terse far less: the Job's pool holds both, so
    every Trial is scored and the Job completes, each Trial charged in full."""
    wh = warehouse
    funded(wh, DEFAULT_WORKSPACE, "10")
    made, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(),
                                 request(str(talkative), "direct", ["somewhat-long", "terse"]))
    estimates = {c.cell_key: c.estimated for c in made.cells}
    spent = {}
    for cell in cells_of(wh, job.id):  # the one over its estimate first: the other's part is not spent yet
        records = cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
        assert len(records) == N_TASKS and all(r.outcome == "scored" and r.reward == 1.0 for r in records)
        spent[cell.model_configuration.split("@")[0]] = (sum(Decimal(str(r.cost_usd)) for r in records),
                                                         estimates[cell.cell_key])
    assert get_job(wh, job.id, DEFAULT_WORKSPACE).status == "completed"
    over, its_estimate = spent["somewhat-long"]
    assert over > its_estimate, spent  # past its own estimate, within the Job's reservation
    assert spent["terse"][0] < spent["terse"][1] / 10
    with wh.query(DEFAULT_WORKSPACE) as con:
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job.id]).fetchone()
    assert settled and reserved == made.amount and charged == over + spent["terse"][0]
    costs, charges = costs_and_charges(wh, job.id)
    assert costs == charges
