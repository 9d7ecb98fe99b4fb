"""The API's OpenAPI document describes what the analysis operations answer, field by field.

The reports, comparisons, placings and judgements are typed records, and the routes' response models are those
records (`operations/operation.py` takes them from the operations' return annotations), so a client reading
`/openapi.json` of the app `amber serve` runs (here on loopback, `servers/api.py`) learns every field of a report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from servers.api import ApiServer

from amber_pipeline.analysis.report import ReportCell, RoundReport
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.warehouse.catalog import Warehouse


@pytest.fixture
def document(warehouse: Warehouse) -> Iterator[dict[str, Any]]:
    server = ApiServer.start(warehouse.paths)
    try:
        yield httpx.get(f"{server.url}/openapi.json", timeout=60).json()
    finally:
        server.stop()


def answer(document: dict[str, Any], operation: str) -> dict[str, Any]:
    """The schema of an operation's 200 answer."""
    op = OPERATIONS[operation]
    described = document["paths"][op.route][op.method.lower()]
    schema: dict[str, Any] = described["responses"]["200"]["content"]["application/json"]["schema"]
    return schema


def component(document: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["schemas"][ref["$ref"].rpartition("/")[2]]
    return schema


def test_a_reports_cells_are_described_with_their_score_and_interval(document: dict[str, Any]) -> None:
    report = component(document, component(document, answer(document, "report"))["properties"]["report"])
    assert report["title"] == "RoundReport" and set(report["properties"]) == set(RoundReport.model_fields)
    cell = component(document, report["properties"]["cells"]["items"])
    assert set(cell["properties"]) == set(ReportCell.model_fields)
    score, ci = cell["properties"]["mean_reward"], cell["properties"]["ci95"]
    assert {"type": "number"} in score["anyOf"] and "mean Reward per Task" in score["description"]
    assert ci["type"] == "array" and ci["minItems"] == ci["maxItems"] == 2 and "bootstrap" in ci["description"]
    rate = component(document, cell["properties"]["pass_rate"])
    assert {"solved", "n", "percent", "ci95"} == set(rate["properties"])
    # the fields there only sometimes are not required; the rest are
    assert {"missing_tasks", "metering_disagreements", "n_labels", "cohen_kappa"}.isdisjoint(report["required"])
    assert {"cells", "comparisons", "pass_rate", "totals"} <= set(report["required"])
    comparison = component(document, report["properties"]["comparisons"]["items"])
    assert {"better", "worse", "mean_difference", "ci95", "too_close_to_call"} <= set(comparison["properties"])


def test_a_jobs_results_hold_the_same_report(document: dict[str, Any]) -> None:
    results = component(document, answer(document, "job_results"))
    assert {"$ref": "#/components/schemas/RoundReport"} in results["properties"]["report"]["anyOf"]


def test_comparisons_placings_and_judgements_are_described(document: dict[str, Any]) -> None:
    one, several = (component(document, ref) for ref in answer(document, "compare")["anyOf"])
    assert list(one["properties"])[:3] == ["baseline", "candidate", "baseline_rate_percent"]
    assert set(one["properties"]["verdict"]["enum"]) >= {"better", "worse", "no measurable difference"}
    assert "q_value" not in one["required"]
    each = component(document, several["properties"]["comparisons"]["additionalProperties"])
    assert "difference_ci95" in each["properties"] and "q_value" in each["properties"]
    placing = component(document, answer(document, "leaderboard"))
    assert {"source", "pass_rate_rank", "strict_pass_rate_ci95", "board"} <= set(placing["properties"])
    judged = component(document, answer(document, "judge"))
    assert {"stages", "samples_alpha", "trials", "labels"} <= set(judged["properties"])


def test_no_analysis_answer_is_an_untyped_object(document: dict[str, Any]) -> None:
    """Every field of every record the analysis operations answer has a type or a reference, none is a bare
    object (a dict the document could not describe)."""
    names = [n for n in document["components"]["schemas"] if n in {
        "Report", "RoundReport", "ReportCell", "Rate", "CellComparison", "Results", "NamedComparison",
        "NamedComparisons", "RoundComparison", "NamedPlacing", "BoardRow", "JudgeReport", "JudgedTrial"}]
    assert len(names) == 13
    for name in names:
        for field, schema in document["components"]["schemas"][name]["properties"].items():
            assert schema != {} and schema.get("additionalProperties") is not True, (name, field)
