"""Model Configurations: the catalog, a Workspace's own, their ids, and where their keys come from."""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from decimal import Decimal
from pathlib import Path

import pytest

from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.budget import Budget, Pool
from amber_pipeline.models import configurations, secrets
from amber_pipeline.models.configurations import ModelConfiguration, model_configuration
from amber_pipeline.models.providers import PROVIDERS, Wire
from amber_pipeline.models.wire import Usage, pin
from amber_pipeline.money.prices import PRICES
from amber_pipeline.paths import AmberPaths

GOLDEN = Path(__file__).parent / "golden" / "model_configuration_ids.json"
MINE = """name = "my-vllm"
model = "qwen2.5-coder-7b"
provider = "openai-compatible"
base_url = "http://127.0.0.1:8000/v1"
[prices]
input = 0.0
cached_input = 0.0
output = 0.0
source = "our own GPU"
[settings]
temperature = 0.2
"""


def test_a_catalog_name_never_changes_its_content() -> None:
    """Results are shown by name, so a catalog entry is never edited in place: new prices get a new name."""
    golden = json.loads(GOLDEN.read_text())
    now = {mc.name: mc.id for mc in configurations.catalog()}
    changed = {n for n in golden if n in now and now[n] != golden[n]}
    assert not changed, f"catalog entries edited in place (add a new name instead): {sorted(changed)}"
    assert set(golden) <= set(now), "a catalog entry was removed: Jobs that used it could no longer run"


def test_the_catalog_covers_each_provider_with_sourced_prices() -> None:
    real = [mc for mc in configurations.catalog() if not mc.is_replay]
    assert {mc.provider for mc in real} == {"anthropic", "openai", "openrouter"}
    for mc in real:
        assert mc.prices.source.startswith("https://"), mc.name
        assert 0 <= mc.prices.cached_input <= mc.prices.input <= mc.prices.output, mc.name
    for mc in (m for m in real if m.provider == "openrouter"):
        assert mc.upstream and mc.quantization, mc.name


def test_the_id_is_a_hash_of_all_of_it() -> None:
    mc = model_configuration("gpt-5")
    canonical = json.dumps(mc.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    assert mc.id == hashlib.sha256(canonical.encode()).hexdigest()
    assert mc.ref == f"gpt-5@{mc.id[:8]}"
    for change in ({"settings": {"reasoning_effort": "high"}}, {"prices": {**mc.prices.model_dump(), "output": 11}},
                   {"model": "gpt-5-2026"}):
        other = ModelConfiguration.model_validate({**mc.model_dump(), **change})
        assert other.id != mc.id, change


def test_toml_round_trip_keeps_the_id(tmp_path: Path) -> None:
    for mc in configurations.catalog():
        path = tmp_path / f"{mc.name}.toml"
        path.write_text(mc.to_toml())
        assert configurations.read_file(path).id == mc.id, mc.name
        tomllib.loads(path.read_text())


def test_a_workspace_adds_its_own_and_sees_it_first(tmp_path: Path) -> None:
    paths = AmberPaths(tmp_path / "home").ensure()
    path = tmp_path / "mine.toml"
    path.write_text(MINE)
    mc, new = configurations.add(paths, "team", configurations.read_file(path))
    assert new and mc.served_by == "127.0.0.1:8000"
    assert configurations.add(paths, "team", configurations.read_file(path)) == (mc, False)  # same content: no-op
    assert model_configuration("my-vllm", paths, "team") == mc
    assert model_configuration(mc.ref, paths, "team") == mc
    with pytest.raises(AmberError, match="Unknown Model Configuration 'my-vllm'"):
        model_configuration("my-vllm", paths, "other-team")  # another Workspace's is not there
    path.write_text(MINE.replace("temperature = 0.2", "temperature = 0.7"))
    with pytest.raises(AmberError, match="already exists .* with other content: give the new one another name"):
        configurations.add(paths, "team", configurations.read_file(path))


def test_a_stale_ref_is_refused_by_name() -> None:
    with pytest.raises(AmberError, match=r"'gpt-5' is now gpt-5@\w{8}, not gpt-5@00000000"):
        model_configuration("gpt-5@00000000")


@pytest.mark.parametrize(("text", "message"), [
    ("name = 'x'\nmodel = 'm'\nprovider = 'openrouter'\n[prices]\ninput=1\ncached_input=1\noutput=1\nsource='s'\n",
     "pins its upstream Provider and quantization"),
    ("name = 'x'\nmodel = 'm'\nprovider = 'openai-compatible'\n[prices]\ninput=1\ncached_input=1\noutput=1\n"
     "source='s'\n", "base_url is required"),
    ("name = 'x'\nmodel = 'm'\nprovider = 'acme'\n[prices]\ninput=1\ncached_input=1\noutput=1\nsource='s'\n",
     "provider must be one of"),
    ("name = 'x y'\nmodel = 'm'\nprovider = 'openai'\n[prices]\ninput=1\ncached_input=1\noutput=1\nsource='s'\n",
     "name must be"),
    ("name = 'x'\nmodel = 'm'\nprovider = 'openai'\n[prices]\ninput=-1\ncached_input=1\noutput=1\nsource='s'\n",
     "prices.input"),
    ("name = 'x'\nmodel = 'm'\nprovider = 'openai'\n[prices]\ninput=1\ncached_input=1\noutput=1\nsource='s'\n"
     "[settings]\ntemprature = 1\n", "settings.temprature"),
    ("name = 'x'\nmodel = 'm'\nprovider = 'anthropic'\n[prices]\ninput=1\ncached_input=1\noutput=1\nsource='s'\n"
     "[settings]\nreasoning_effort = 'high'\n", "reasoning_effort is for OpenAI-style endpoints"),
    ("name = [", "is not valid TOML"),
])
def test_a_bad_file_is_one_sentence(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(AmberError, match=message) as e:
        configurations.read_file(path)
    assert "\n" not in str(e.value) and str(e.value).endswith("add it again.")


def test_keys_come_from_the_environment_then_an_owner_only_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "secrets.env"
    file.write_text("# keys\nexport OPENAI_API_KEY='sk-from-file'\nOTHER=1\n")
    os.chmod(file, 0o600)
    monkeypatch.setenv(secrets.SECRETS_FILE_ENV, str(file))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert secrets.api_key("OPENAI_API_KEY") == "sk-from-file"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert secrets.api_key("OPENAI_API_KEY") == "sk-from-env"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AmberError, match=f"set ANTHROPIC_API_KEY in the environment or in {file}"):
        secrets.require("ANTHROPIC_API_KEY", "anthropic")
    os.chmod(file, 0o644)
    with pytest.raises(AmberError, match=f"chmod 600 {file}") as e:
        secrets.api_key("ANTHROPIC_API_KEY")
    assert "sk-from-file" not in str(e.value)


def test_pin_applies_the_configuration_to_each_wire() -> None:
    or_mc = model_configuration("or-qwen3-coder-deepinfra")
    body = {"model": "whatever", "messages": [], "stream": True, "temperature": 1.0, "provider": {"order": ["x"]}}
    pinned = pin(Wire.CHAT, body, or_mc)
    assert pinned["model"] == "qwen/qwen3-coder" and pinned["temperature"] == 0.0
    assert pinned["provider"] == {"order": ["deepinfra"], "allow_fallbacks": False, "quantizations": ["fp8"]}
    assert pinned["stream_options"] == {"include_usage": True}
    assert body["model"] == "whatever"  # the caller's body is not changed
    gpt = model_configuration("gpt-5")
    assert pin(Wire.RESPONSES, {"input": "hi"}, gpt)["reasoning"] == {"effort": "medium"}
    assert pin(Wire.CHAT, {"max_tokens": 5}, gpt)["reasoning_effort"] == "medium"
    claude = model_configuration("claude-haiku-4.5")
    assert pin(Wire.MESSAGES, {"max_tokens": 5, "messages": []}, claude)["max_tokens"] == 16000
    assert Wire.MESSAGES in PROVIDERS["anthropic"].wires and Wire.MESSAGES not in PROVIDERS["openrouter"].wires


def test_model_cost_prices_cached_input_apart() -> None:
    mc = model_configuration("claude-sonnet-4.6")  # $3 input, $0.30 cached, $15 output per million
    cost = PRICES.model_cost(mc, Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000))
    assert cost == Decimal("3.0") * Decimal("0.6") + Decimal("0.3") * Decimal("0.4") + Decimal("1.5")


def test_budget_holds_each_call_and_refuses_what_no_longer_fits() -> None:
    """The budget is what is left of the Job's pool: the ledger's remainder as last read, less what this run's
    calls spent on Trials not charged yet."""
    mc = model_configuration("claude-sonnet-4.6")  # $3 input, $15 output per million
    ledger = [Decimal("0.01")]  # what the ledger has left of the Job's reservations
    pool = Pool(lambda: ledger[0])
    budget = Budget(pool, PRICES, mc)
    spend = budget.of_trial("job/cell/task/1")
    first = spend.hold(Usage(1_000, 0, 0))  # no call yet: its input, all uncached, $0.003
    assert first == Decimal("0.003") and budget.held == Decimal("0.003")
    assert spend.hold(Usage(2_500, 0, 0)) is None  # $0.003 held + $0.0075 > $0.01
    spend.settle(first, Usage(1_000, 0, 200))  # it cost $0.003 + $0.003, not charged yet
    assert (budget.spent, budget.held, pool.left()) == (Decimal("0.006"), Decimal(0), Decimal("0.004"))
    # From now on a call is expected to cost what the calls so far cost on average: $0.006.
    assert spend.hold(Usage(50_000, 0, 0)) is None  # $0.006 > $0.004 left, whatever its size
    # Its Trial is charged ($0.006 from the ledger) and `amber job continue` adds $0.008 to the pool.
    ledger[0] = Decimal("0.01") - Decimal("0.006") + Decimal("0.008")
    pool.settled(["job/cell/task/1"])
    assert pool.left() == Decimal("0.012")
    assert spend.hold(Usage(50_000, 0, 0)) == Decimal("0.006")
    # Another cell's charges, seen at the next refresh, leave less than a call's worth beside what is held.
    ledger[0] = Decimal("0.011")
    pool.refresh()
    assert spend.hold(Usage(1, 0, 0)) is None  # $0.006 held + $0.006 > $0.011
    assert Budget(None, PRICES, mc).hold(Usage(10**9, 0, 0)) is not None
