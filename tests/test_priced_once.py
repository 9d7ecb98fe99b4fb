"""A Quote shown is the one started: priced once per launch, from the Dagster launchpad and from the New Job page
(issue 30: "A Quote made on a page is the one that is started: no second pricing").

Each test counts the calls of the pricing function itself (`quotes.estimate_cells`, wrapped in this process) over
a whole launch: submit_job then start_quote run in this process as the run worker runs them, or the page's See
the Quote then Confirm. What is reserved is what was shown, to the micro-dollar; a confirm that no longer holds
(a token altered, made for someone else, past its hour, a Benchmark folder edited since, a Wallet drained since)
is refused in one sentence and reserves nothing.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from helpers import funded, request
from starlette.testclient import TestClient
from test_ui_launch import failure, run
from test_ui_launch import shown as shown_by

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.benchmarks import registry
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, quotes, records, shown_tokens
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from web.webapp import create_web

STATIC = PROJECT_ROOT / "examples" / "static-bench"
WS = DEFAULT_WORKSPACE
ASK = {"benchmark": "static-bench@1", "agent": "direct", "model_configurations": ["replay-strong", "replay-weak"],
       "trials_per_task": "2"}


@pytest.fixture
def pricings(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many times the pricing function has been called in this process since the test began."""
    calls = [0]
    real = quotes.estimate_cells

    def counted(*args: Any, **kwargs: Any) -> list[quotes.CellQuote]:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(quotes, "estimate_cells", counted)
    return lambda: calls[0]


def reserved(wh: Warehouse, workspace: str = WS) -> list[tuple[str, Decimal]]:
    with wh.read() as con:
        return con.execute("select job_id, amount from ledger where kind = 'reservation' and workspace = ? "
                           "order by seq", [workspace]).fetchall()


def nothing_made(wh: Warehouse, workspace: str = WS) -> bool:
    with wh.read() as con:
        jobs = con.execute("select count(*) from jobs").fetchone()
        quoted = con.execute("select count(*) from quotes").fetchone()
    return reserved(wh, workspace) == [] and jobs == quoted == (0,)


# ---- the Dagster launchpad: submit_job, then start_quote --------------------------------------------------------

@pytest.fixture
def instance(amber_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


def one_task_bench(tmp_path: Path) -> Path:
    bench = tmp_path / "one-static-bench"
    shutil.copytree(STATIC / "capital-city", bench / "capital-city")
    return bench


def test_a_launchpad_launch_prices_once_and_reserves_the_quote_shown(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance, pricings: Callable[[], int]) -> None:
    funded(warehouse)
    config = {"benchmark": str(one_task_bench(tmp_path)), "agent": "direct",
              "model_configurations": ["replay-strong", "replay-weak"], "trials_per_task": 2}
    quoted = run(instance, "submit_job", "quote_job", config)
    assert quoted.success and pricings() == 1
    shown = shown_by(quoted)
    assert shown["pricings"] == 1

    started = run(instance, "start_quote", "confirm_quote", {"quote_id": shown["quote_id"]})
    assert started.success, failure(started)
    assert pricings() == 1 and shown_by(started)["pricings"] == 0  # confirmed as shown: not priced again
    job_id = shown["quote_id"]
    assert records.get_job(warehouse, job_id, WS).status == "running"
    assert reserved(warehouse) == [(job_id, Decimal(shown["quote"]["reserves"]))]
    made = quotes.get(warehouse, WS, job_id)
    assert [(c.cell_key, c.total, c.cost_per_trial) for c in made.cells] == [
        (c["cell_key"], c["total"], c["cost_per_trial"]) for c in shown["quote"]["cells"]]

    again = run(instance, "start_quote", "confirm_quote", {"quote_id": job_id})  # a resumed run: the same Job
    assert again.success and len(reserved(warehouse)) == 1 and pricings() == 1


def test_a_benchmark_folder_edited_after_its_quote_was_shown_is_not_reserved_at_the_old_price(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance, pricings: Callable[[], int]) -> None:
    funded(warehouse)
    bench = one_task_bench(tmp_path)
    quoted = run(instance, "submit_job", "quote_job", {"benchmark": str(bench), "agent": "direct",
                                                          "model_configurations": ["replay-strong"]})
    assert quoted.success
    instruction = bench / "capital-city" / "instruction.md"
    instruction.write_text(instruction.read_text() + "\nAnswer in French.\n")

    refused = run(instance, "start_quote", "confirm_quote", {"quote_id": shown_by(quoted)["quote_id"]})
    assert not refused.success
    assert failure(refused) == (f'The Tasks of "{bench}" changed since their Quote was shown, so that price is not '
                                "theirs: see the Quote again and confirm that one.")
    assert nothing_made(warehouse) and pricings() == 1
    with warehouse.read() as con:
        assert con.execute("select count(*) from benchmark_versions").fetchone() == (0,)  # nor the folder kept


def test_a_wallet_drained_after_the_quote_was_shown_refuses_the_confirm(
        warehouse: Warehouse, tmp_path: Path) -> None:
    """The Quote shown is reserved as shown, but only if the Wallet still has it: the one check that needs no
    pricing is still made, in its own sentence."""
    funded(warehouse, WS, "0.01")
    asked = request(str(one_task_bench(tmp_path)), "direct", ["replay-strong"])
    shown = lifecycle.price(warehouse, WS, local_user(), asked).shown(lifecycle.new_job_id())
    other = lifecycle.quote(warehouse, WS, local_user(), asked)  # spends the Wallet meanwhile
    with pytest.raises(AmberError) as refused:
        lifecycle.submit(warehouse, WS, local_user(), asked, shown=shown)
    assert re.fullmatch(r"Workspace default has \$[0-9.]+ available but this Quote needs \$[0-9.]+: \$[0-9.]+ is "
                        r"missing; ask Amber staff for a Credit\.", str(refused.value))
    assert reserved(warehouse) == [(other.job_id, other.amount)]


# ---- the New Job page: See the Quote, then Confirm ------------------------------------------------------------------

@pytest.fixture
def client(warehouse: Warehouse) -> Iterator[TestClient]:
    registry.register(warehouse, STATIC, registry.PUBLIC)
    with TestClient(create_web(warehouse, local=True)) as made:
        yield made


def previewed(client: TestClient, ask: dict[str, Any] = ASK) -> tuple[str, str, Decimal]:
    """The form token, the shown Quote's token and its amount, from a preview."""
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/w/{WS}/new").text)
    assert csrf
    page = client.post(f"/w/{WS}/new", data={**ask, "csrf": csrf.group(1), "action": "preview"})
    assert page.status_code == 200, page.text
    shown = re.search(r'name="shown" value="([^"]+)"', page.text)
    assert shown
    exact = re.search(r'Confirming reserves <strong title="\$([0-9.]+)"', page.text)
    assert exact
    return csrf.group(1), shown.group(1), Decimal(exact.group(1))


def confirm(client: TestClient, csrf: str, shown: str, ask: dict[str, Any] = ASK) -> Any:
    return client.post(f"/w/{WS}/new", data={**ask, "csrf": csrf, "action": "confirm", "shown": shown},
                       follow_redirects=False)


def sentence(page: Any) -> str:
    found = re.search(r'<p role="alert" class="refusal">(.*?)</p>', page.text, re.S)
    assert found, page.text
    return found.group(1).replace("&#34;", '"').replace("&#39;", "'").replace("&amp;", "&")


def test_the_new_job_page_prices_once_and_reserves_the_quote_shown(
        warehouse: Warehouse, client: TestClient, pricings: Callable[[], int]) -> None:
    funded(warehouse, WS, "10")
    csrf, shown, amount = previewed(client)
    assert pricings() == 1 and nothing_made(warehouse)
    confirmed = confirm(client, csrf, shown)
    assert confirmed.status_code == 303, sentence(confirmed)
    assert pricings() == 1  # Confirm reserved what was shown, without pricing again
    job_id = confirmed.headers["location"].rsplit("/", 1)[1]
    assert records.get_job(warehouse, job_id, WS).status == "running"
    assert reserved(warehouse) == [(job_id, amount)]
    # Confirming the same Quote again (a second click, a resent form) makes no second Job and reserves nothing more.
    again = confirm(client, csrf, shown)
    assert again.status_code == 303 and again.headers["location"] == confirmed.headers["location"]
    assert reserved(warehouse) == [(job_id, amount)] and pricings() == 1


def test_a_forged_altered_or_someone_elses_quote_is_refused_in_one_sentence_and_reserves_nothing(
        warehouse: Warehouse, client: TestClient) -> None:
    funded(warehouse, WS, "10")
    csrf, shown, _ = previewed(client)
    body, signature = shown.split(".")
    cheaper = shown_tokens.seal(warehouse.paths, WS, local_user(), request("static-bench@1", "direct"),
                                lifecycle.ShownQuote("job-0000000000", "v", [], datetime.now(UTC)))
    forged_sentence = ("This Quote was not shown by this Amber, or was changed since: see the Quote again and "
                       "confirm that one.")
    for forged in (f"{body[:-2]}{'AB' if body[-2:] != 'AB' else 'CD'}.{signature}", f"{body}.{'0' * 64}",
                   "made-up", f"{cheaper.split('.')[0]}.{signature}"):
        refused = confirm(client, csrf, forged)
        assert refused.status_code == 400 and sentence(refused) == forged_sentence
    # Shown for two Trials per Task: not the Quote of one.
    other = confirm(client, csrf, shown, {**ASK, "trials_per_task": "1"})
    assert other.status_code == 400
    assert sentence(other) == ("This Quote was shown for another request, user or Workspace: see the Quote of this "
                               "one and confirm that.")
    assert nothing_made(warehouse)


def test_an_expired_quote_is_refused_in_one_sentence_and_reserves_nothing(
        warehouse: Warehouse, client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse, WS, "10")
    csrf, shown, _ = previewed(client)
    monkeypatch.setattr(quotes, "LIFETIME", timedelta(0))
    refused = confirm(client, csrf, shown)
    assert refused.status_code == 400
    assert re.fullmatch(r"The Quote you confirm was shown at \d{4}-\d\d-\d\d \d\d:\d\d UTC, more than an hour ago: "
                        r"see the Quote again and confirm that one\.", sentence(refused))
    assert nothing_made(warehouse)


def test_a_token_is_bound_to_the_user_it_was_shown_to(warehouse: Warehouse) -> None:
    asked = request("static-bench@1", "direct", ["replay-strong"])
    token = shown_tokens.seal(warehouse.paths, "team", "alice", asked,
                              lifecycle.ShownQuote("job-0000000000", "v", [], datetime.now(UTC)))
    assert shown_tokens.unseal(warehouse.paths, token, "team", "alice", asked).job_id == "job-0000000000"
    for workspace, user in (("team", "bob"), ("other", "alice")):
        with pytest.raises(AmberError, match="^This Quote was shown for another request, user or Workspace"):
            shown_tokens.unseal(warehouse.paths, token, workspace, user, asked)
    assert oct((warehouse.paths.home / shown_tokens.KEY_FILE).stat().st_mode & 0o777) == "0o600"
