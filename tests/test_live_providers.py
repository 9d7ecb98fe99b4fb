"""Live Providers: one small static Job per Provider, with real keys, over the internet. Opt-in.

Runs only with ``AMBER_LIVE_TESTS=1`` and the Provider's key set (in the environment or the secrets file,
where Amber reads it); otherwise each test is skipped. Each Job is two short static Tasks answered by the
Direct Agent with one of the catalog's cheapest configurations, so a run costs a fraction of a cent. What is
checked is what the provider double cannot prove: that the real APIs accept the pinned requests, that their
usage fields are read (tokens metered > 0 and equal to the transcripts'), and that the ledger charged those
tokens at the catalog's prices.

    AMBER_LIVE_TESTS=1 .venv/bin/python -m pytest tests/test_live_providers.py
"""

from __future__ import annotations

import os
import shutil
import tomllib
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import funded, request

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.jobs import cell_run, lifecycle
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.models import secrets
from amber_pipeline.models.providers import PROVIDERS
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

LIVE = os.environ.get("AMBER_LIVE_TESTS") == "1"
STATIC = PROJECT_ROOT / "examples" / "static-bench"
CATALOG = PROJECT_ROOT / "amber_pipeline" / "models" / "catalog.toml"
TASKS = ["capital-city", "moon-landing-date"]  # one-word answers: the cheapest calls there are
CHEAPEST = {"anthropic": "claude-haiku-4.5", "openai": "gpt-5-mini", "openrouter": "or-deepseek-v3.1-deepinfra"}

pytestmark = pytest.mark.skipif(not LIVE, reason="live Provider tests run only with AMBER_LIVE_TESTS=1")


def prices_of(name: str) -> dict[str, float]:
    (table,) = [t for t in tomllib.loads(CATALOG.read_text())["configuration"] if t["name"] == name]
    return dict(table["prices"])


def cost(prices: dict[str, float], input_tokens: int, cached: int, output: int) -> Decimal:
    per_million = (Decimal(str(prices["input"])) * (input_tokens - cached)
                   + Decimal(str(prices["cached_input"])) * cached + Decimal(str(prices["output"])) * output)
    return (per_million / 1_000_000).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


def rows(wh: Warehouse, query: str, params: list[Any]) -> list[dict[str, Any]]:
    with wh.query(DEFAULT_WORKSPACE) as con:
        cursor = con.execute(query, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


@pytest.mark.parametrize("provider", list(CHEAPEST))
def test_a_small_static_job_against_the_real_provider_is_metered_and_charged(
        provider: str, tmp_path: Path, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = PROVIDERS[provider]
    assert spec.key_env is not None
    if not secrets.api_key(spec.key_env):
        pytest.skip(f"{spec.key_env} is not set")
    monkeypatch.delenv(spec.env_base_url, raising=False)  # the real API, not an override
    bench = tmp_path / "bench"
    for name in TASKS:
        shutil.copytree(STATIC / name, bench / name)
    wh, name = warehouse, CHEAPEST[provider]
    funded(wh, DEFAULT_WORKSPACE, "5")
    _, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(), request(str(bench), "direct", [name]))
    (cell,) = cells_of(wh, job.id)
    cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    assert get_job(wh, job.id, DEFAULT_WORKSPACE).status == "completed"

    trials = rows(wh, "select * from trials where job_id = ?", [job.id])
    transcripts = rows(wh, "select * from transcripts where job_id = ?", [job.id])
    charged = {r["trial_key"]: r["amount"] for r in
               rows(wh, "select trial_key, amount from ledger where kind = 'charge' and job_id = ?", [job.id])}
    assert len(trials) == len(TASKS)
    for t in trials:
        assert t["outcome"] == "scored" and t["reward"] in (0.0, 1.0), t["error_message"]
        calls = [c for c in transcripts if c["trial_key"].endswith(f"/{t['task_name']}/{t['attempt']}")
                 and c["retry"] == t["retries"]]
        assert calls and all(c["status"] == 200 and c["signal"] is None for c in calls)
        metered = (sum(c["input_tokens"] for c in calls), sum(c["cached_input_tokens"] for c in calls),
                   sum(c["output_tokens"] for c in calls))
        assert metered[0] > 0 and metered[2] > 0
        assert (t["input_tokens"], t["cached_input_tokens"], t["output_tokens"]) == metered
        (key,) = {c["trial_key"] for c in calls}
        assert charged[key] == cost(prices_of(name), *metered) == Decimal(str(t["cost_usd"])) > 0
    assert len(charged) == len(TASKS)
