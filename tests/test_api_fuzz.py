"""The hosted API fuzzed from its own OpenAPI document, and asked route by route for another Workspace's objects.

A real server (the app `amber serve` runs, `servers/api.py`) over a temporary AMBER_HOME, with the world of
`servers/fuzz.py`: fuzz-member's Workspace holds one of everything, fuzz-outsider works in another. The fuzz
asks every operation as each of them (boundary values, then seeded cases of valid and of invalid data) and
holds every answer to the document: no 5xx, no traceback, a documented status, content type and schema, and a
refusal that is one sentence. Then, as the outsider, every route with a path value is asked twice per value:
naming the member's real object, and naming its made-up twin; the two answers must be the same status and body
but for the name asked, so nothing tells "exists elsewhere" from "does not exist".
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET
from servers import fuzz
from servers.api import ApiServer

from amber_pipeline.cli.client import tls
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import path_value
from amber_pipeline.warehouse.catalog import Warehouse

ORACLE_EXAMPLES = 1  # drawn bodies per route and path value, besides the one that reaches the lookup


@dataclass(frozen=True)
class Fuzzing:
    server: ApiServer
    world: fuzz.World


@pytest.fixture
def fuzzing(warehouse: Warehouse) -> Iterator[Fuzzing]:
    world = fuzz.populate(warehouse)
    server = ApiServer.start(warehouse.paths)
    try:
        yield Fuzzing(server, world)
    finally:
        server.stop()


@pytest.mark.slow
def test_no_answer_breaks_the_document_under_the_fuzz(fuzzing: Fuzzing) -> None:
    found = fuzz.fuzz(fuzzing.server.url, fuzzing.world)
    assert not found.failures, f"{len(found.failures)} failures in {found.cases} cases:\n\n" + "\n\n".join(
        found.failures)
    routes = {f"{op.method} {op.route}" for op in OPERATIONS.values()}
    assert set(found.asked) == routes and min(found.asked.values()) >= 2 * len(fuzz.MODES), found.asked


# What the fuzz found, pinned: each answered 500 before it was fixed.
@pytest.mark.parametrize(("operation", "params", "sentence"), [
    ("sql", {"query": ""}, "The query has no statement"),
    ("sql", {"query": " -- only a comment;"}, "The query has no statement"),
])
def test_what_the_fuzz_found_is_refused_in_a_sentence(fuzzing: Fuzzing, operation: str, params: dict[str, Any],
                                                      sentence: str) -> None:
    op = OPERATIONS[operation]
    with httpx.Client(verify=tls(), base_url=fuzzing.server.url, trust_env=False, timeout=60,
                      headers={"authorization": f"Bearer {fuzzing.world.tokens[fuzz.MEMBER]}"}) as http:
        answer = http.request(op.method, op.path_for(fuzzing.world.home[fuzz.MEMBER], params), json=params)
    assert answer.status_code == 400 and answer.json()["detail"].startswith(sentence), answer.text


@pytest.mark.parametrize("sent", ['"ab"', "[[1, 2, 3]]", '[["ceiling_usd", "1"]]', "null"])
def test_an_uploads_params_field_that_is_not_an_object_is_refused_in_a_sentence(fuzzing: Fuzzing,
                                                                                sent: str) -> None:
    op = OPERATIONS["job_quote"]
    with httpx.Client(verify=tls(), base_url=fuzzing.server.url, trust_env=False, timeout=60,
                      headers={"authorization": f"Bearer {fuzzing.world.tokens[fuzz.MEMBER]}"}) as http:
        answer = http.post(op.path_for(fuzzing.world.home[fuzz.MEMBER], {}), data={"params": sent})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"detail": "The params form field is not a JSON object: send the request's params "
                                       "as JSON."}


# ---- another Workspace's objects, route by route ---------------------------------------------------------------

def tarball(folder: Path) -> bytes:
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return sink.getvalue()


# Requests that get past the params to the lookup, where drawn ones seldom do: an upload's params travel as the
# text of one form field, which the document cannot describe, and a Member's user or a Credit's amount is
# checked before the Workspace (the params, and the files of an upload).
GSM8K = json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n"
LABEL_REQUEST = {"benchmark": "static-bench@1", "agent": "direct", "model_configurations": ["replay-strong"]}
REACHING: dict[str, tuple[dict[str, Any], dict[str, tuple[str, bytes]]]] = {
    "job_quote": (LABEL_REQUEST, {}),
    "job_submit": (LABEL_REQUEST, {}),
    "job_preview": (LABEL_REQUEST, {}),
    "benchmark_upload": ({"name": "b", "archive": "bench.tar.gz"},
                         {"archive": ("bench.tar.gz", tarball(fuzz.STATIC))}),
    "benchmark_adapt": ({"kind": "gsm8k", "name": "g", "file": "gsm8k.jsonl"},
                        {"file": ("gsm8k.jsonl", GSM8K.encode())}),
    "benchmark_review": ({"model": "replay-strong", "folder": "static-bench.tar.gz"},
                         {"folder": ("static-bench.tar.gz", tarball(fuzz.STATIC))}),
    "workspace_add_member": ({"user": fuzz.OUTSIDER}, {}),
    "credit_add": ({"amount": "1", "reason": "fuzz"}, {}),
}


@dataclass(frozen=True)
class Asked:
    """One request, sent once naming the member's object and once its twin."""

    method: str
    route: str  # with {field} placeholders
    query: dict[str, Any] | None = None
    json_body: Any = None
    form: dict[str, str] | None = None
    files: dict[str, tuple[str, bytes]] | None = None

    def send(self, http: httpx.Client, path: dict[str, str]) -> httpx.Response:
        url = self.route.format(**{name: path_value(value) for name, value in path.items()})
        if self.form is not None:
            return http.request(self.method, url, data=self.form, files=self.files or None)
        return http.request(self.method, url, params=self.query, json=self.json_body)


def requests_of(operation: Any, path: dict[str, str]) -> list[Asked]:
    """Drawn requests of `operation` (valid data, from the document), and the one of REACHING if it has one."""
    asked = []
    for case in fuzz.drawn(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=path),
                           ORACLE_EXAMPLES):
        body = None if case.body is NOT_SET else case.body
        if case.media_type and case.media_type.startswith("multipart/"):
            parts = body.items() if isinstance(body, dict) else []
            form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in parts if not isinstance(v, bytes)}
            asked.append(Asked(operation.method.upper(), operation.path, form=form))
        else:
            asked.append(Asked(operation.method.upper(), operation.path, query=case.query or None, json_body=body))
    op = next(op for op in OPERATIONS.values() if (op.method, op.route) == (operation.method.upper(),
                                                                              operation.path))
    if op.name in REACHING:
        params, files = REACHING[op.name]
        asked.append(Asked(operation.method.upper(), operation.path, form={"params": json.dumps(params)},
                           files=files) if op.uploads else
                     Asked(operation.method.upper(), operation.path, json_body=params))
    return asked


def test_another_workspaces_objects_answer_as_missing_ones(fuzzing: Fuzzing) -> None:
    world = fuzzing.world
    routes = [o for o in fuzz.operations(fuzz.load_schema(fuzzing.server.url)) if o.path_parameters]
    assert {o.path for o in routes} == {op.route for op in OPERATIONS.values() if "{" in op.route}
    unreached = []
    headers = {"authorization": f"Bearer {world.tokens[fuzz.OUTSIDER]}"}
    with httpx.Client(verify=tls(), base_url=fuzzing.server.url, headers=headers, trust_env=False, timeout=60) as http:
        for operation in routes:
            names = [p.name for p in operation.path_parameters]
            missing = [n for n in names if n not in world.real]
            assert not missing, f"{operation.label}: no object of the member for {missing}: add one to fuzz.populate"
            for name in names:
                reached = False
                for real, twin in world.real[name].items():
                    # The outsider names the object in their own Workspace, or the member's Workspace by name.
                    around = {n: (world.home[fuzz.OUTSIDER] if n == "workspace" else next(iter(world.real[n])))
                              for n in names if n != name}
                    for asked in requests_of(operation, around | {name: real}):
                        other = asked.send(http, around | {name: real})
                        absent = asked.send(http, around | {name: twin})
                        where = f"{operation.label}, {name} = {real} vs {twin}"
                        assert other.status_code == absent.status_code, (where, other.text, absent.text)
                        assert not other.is_success, (where, other.text)
                        assert other.text.replace(real, "<id>") == absent.text.replace(twin, "<id>"), where
                        assert real not in absent.text, where
                        reached |= other.status_code in (403, 404)
                if not reached:
                    unreached.append(f"{operation.label} ({name})")
    # Each value was looked up at least once (a refusal for a malformed body before it proves nothing).
    assert not unreached, f"never past the params to the lookup, add a request to REACHING: {unreached}"
