"""The hosted API fuzzed from its own OpenAPI document with schemathesis, as two users of a real server on
loopback: a member of a Workspace that holds one of everything, and a user of another Workspace.

One home for the test (`tests/test_api_fuzz.py`, which fails on any failure found here) and the bench
(`bench/api_load.py`, which prints how many cases were tried). Each operation is asked, as each user, the
valid values at the edges of what the document allows (schemathesis' coverage: empty texts, the least and the
most) in the user's own Workspace, then `examples` drawn cases of valid data and as many of invalid data
(positive and negative modes), their path values drawn from the document or taken from the member's real
objects, under a fixed seed: a run asks the same cases each time. Every answer is held to:

- no 5xx (`not_a_server_error`), and no traceback or path of the server's Python in any body;
- a status code the document lists for the operation, with the content type and schema it documents;
- a refusal (4xx) is one sentence, `{"detail": "..."}`, whatever the document says of it.

The world is made on the server's host with library calls, as `servers/api.py` makes tokens: nothing in it
needs Docker or the network (the member's Job runs the Direct Agent against the replay double on loopback),
neither user is staff, so nothing staff-only (a registry import that fetches a URL) gets past its check, and
the token the member may revoke is a spare, never the one it signs in with.
"""

from __future__ import annotations

import itertools
import json
import re
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.benchmarks import uploads
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.models import configurations
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

STATIC = PROJECT_ROOT / "examples" / "static-bench"
MEMBER, OUTSIDER = "fuzz-member", "fuzz-outsider"
EXAMPLES = 3  # drawn cases per operation, user and mode: the test stays well within a minute on CI
SEED = 27
TIMEOUT_S = 60.0
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
# A traceback or the server's own Python, which no answer shows a user.
LEAK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|site-packages|dist-packages")


@dataclass(frozen=True)
class World:
    """Who asks with which token, where each works, and the member's objects by the path field that names them,
    each with a made-up twin of the same shape that names nothing."""

    tokens: dict[str, str]  # user -> token
    home: dict[str, str]  # user -> their Workspace
    real: dict[str, dict[str, str]]  # path field -> {the member's object: its made-up twin}


@dataclass
class Fuzzed:
    cases: int = 0  # requests sent
    asked: Counter[str] = field(default_factory=Counter)  # operation -> its cases
    failures: list[str] = field(default_factory=list)  # one per operation, user and kind of failure


def populate(wh: Warehouse) -> World:
    """Two users in two funded Workspaces; the member's holds a finished Job, a Quote not started, an upload, a
    private Benchmark Version, a Model Configuration and a spare token."""
    staff = Actor(local_user(), None)
    home = {user: f"{user}-ws" for user in (MEMBER, OUTSIDER)}
    for user, ws in home.items():
        users.add(wh, user, "fuzz")
        workspaces.create(wh, Actor(user, None), ws)
        wallet.add_credit(wh, staff, ws, "100", "fuzz credit")
    ws = home[MEMBER]
    request = JobRequest(benchmark=str(STATIC), agent="direct", model_configurations=["replay-strong"])
    finished = lifecycle.quote(wh, ws, MEMBER, request)
    lifecycle.start(wh, ws, finished.id)
    for cell in records.cells_of(wh, finished.job_id):
        cell_run.run_cell_of_job(wh, finished.job_id, cell.cell_key)
    quoted = lifecycle.quote(wh, ws, MEMBER, request.model_copy(update={"benchmark": finished.benchmark_label}))
    with tempfile.TemporaryDirectory(prefix="amber-fuzz-") as scratch:  # outside AMBER_HOME, as an upload must be
        archive = Path(scratch) / "fuzz-bench.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(STATIC, arcname=STATIC.name)
        upload = uploads.create(wh, ws, MEMBER, archive, "fuzz-bench")
    model = configurations.parse({"name": "fuzz-model", "model": "replay-strong", "provider": "replay",
                                  "replay": "replay-strong.json",
                                  "prices": {"input": 1.0, "cached_input": 0.1, "output": 2.0, "source": "fuzz"}},
                                 "fuzz")
    configurations.add(wh.paths, ws, model)
    spare = tokens.create(wh, MEMBER, "spare").token.id
    return World(
        tokens={user: tokens.create(wh, user, "fuzz").secret for user in home},
        home=home,
        real={"workspace": {ws: "fuzz-absent-ws"},
              "job_id": {finished.job_id: twin(finished.job_id), quoted.job_id: twin(quoted.job_id)},
              "quote_id": {quoted.id: twin(quoted.id)}, "upload_id": {upload.id: twin(upload.id)},
              "ref": {finished.benchmark_label: "absent-bench@1"}, "task": {"capital-city": "absent-task"},
              "trial": {"capital-city__1": "absent-task__1"},
              "name": {"fuzz-model": "fuzz-absent", ws: "fuzz-absent-ws"},  # a model's, a Workspace's
              "token_id": {spare: twin(spare)}})


def twin(object_id: str) -> str:
    """An id of the same shape that names nothing: its hex digits replaced by zeros."""
    return re.sub(r"[0-9a-f]{6,}$", lambda m: "0" * len(m.group()), object_id)


def load_schema(url: str) -> schemathesis.BaseSchema:
    """The server's own OpenAPI document, read over loopback (never through a proxy), its uploads' forms as sent."""
    with httpx.Client(verify=tls(), trust_env=False, timeout=TIMEOUT_S) as http:
        document = http.get(f"{url}/openapi.json").raise_for_status().json()
    return schemathesis.openapi.from_dict(forms_as_sent(document))


def forms_as_sent(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with each multipart form as its parts are sent, which schemathesis cannot read from it: a text
    field whose `contentSchema` gives the JSON it holds becomes that object, sent as a JSON part; a file field is
    left out (optional in every form), since schemathesis sends a file as a part without a file name, which the
    server reads as text. Otherwise every upload's case would stop at the form's parsing."""
    components = document.get("components", {}).get("schemas", {})
    for operation in (op for path in document["paths"].values() for op in path.values()):
        form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
        if form is None or "$ref" not in form["schema"]:
            continue
        body = components[form["schema"]["$ref"].rsplit("/", 1)[-1]]
        for name, part in list(body["properties"].items()):
            if _is_file(part) and name not in body.get("required", []):
                del body["properties"][name]
            elif isinstance(part.get("contentSchema"), dict) and "$defs" not in part["contentSchema"]:
                body["properties"][name] = part["contentSchema"]
                form.setdefault("encoding", {})[name] = {"contentType": part.get("contentMediaType",
                                                                                 "application/json")}
    return document


def _is_file(part: dict[str, Any]) -> bool:
    return any(p.get("format") == "binary" or p.get("contentMediaType") == "application/octet-stream"
               for p in [part, *part.get("anyOf", [])])


def operations(schema: schemathesis.BaseSchema) -> list[APIOperation]:
    """Every operation of the document; one it cannot describe is an error, not an operation left out."""
    found = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()
        found.append(result.ok())
    return found


def no_leak(_ctx: Any, response: Any, _case: Case) -> None:
    """No body shows a traceback or where the server's Python lives."""
    found = LEAK.search(response.content.decode("utf-8", "replace"))
    if found:
        raise AssertionError(f"the body shows {found.group(0)!r}")


def refusal_is_a_sentence(_ctx: Any, response: Any, _case: Case) -> None:
    """A refusal is `{"detail": "one sentence"}`, what the client prints (`server/routes.py`)."""
    if not 400 <= response.status_code < 500:
        return
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError("the refusal is not JSON") from None
    if not (isinstance(body, dict) and set(body) == {"detail"} and isinstance(body["detail"], str)
            and body["detail"].strip()):
        raise AssertionError("the refusal is not {\"detail\": \"a sentence\"}")


CHECKS: list[Callable[..., Any]] = [not_a_server_error, status_code_conformance, content_type_conformance,
                                    response_schema_conformance, no_leak, refusal_is_a_sentence]


def real_paths(operation: APIOperation, world: World) -> list[dict[str, str]]:
    """Every combination of real path values for `operation`: the member's objects, named in either Workspace."""
    names = [p.name for p in operation.path_parameters]
    if not names or any(n not in world.real for n in names):
        return []
    pools = {n: list(world.real[n]) for n in names} | ({"workspace": list(world.home.values())}
                                                       if "workspace" in names else {})
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(pools[n] for n in names))]


def cases(operation: APIOperation, world: World, mode: GenerationMode) -> st.SearchStrategy[Case]:
    """Cases of `operation` whose path values are drawn from the schema or are real ones."""
    fixed = [operation.as_strategy(mode, path_parameters=p) for p in real_paths(operation, world)]
    return st.one_of(operation.as_strategy(mode), *fixed)


def session() -> requests.Session:
    """An HTTP session that never goes through a proxy: every request stays on loopback."""
    http = requests.Session()
    http.trust_env = False
    return http


def fuzz(url: str, world: World, examples: int = EXAMPLES, seed_value: int = SEED, edges: bool = True) -> Fuzzed:
    """Every operation of the server at `url`, asked as each user; the cases tried and what failed.

    Per operation and user: the schema's boundary values (schemathesis' coverage of valid data: empty strings,
    the least and the most each field allows; left out when not ``edges``, as a bench's smoke run does, since
    tests/test_api_fuzz.py asks them all), then `examples` drawn cases of valid data and as many of invalid
    data."""
    schema = load_schema(url)
    found = Fuzzed()
    with session() as http:
        for user, operation in itertools.product(world.tokens, operations(schema)):
            headers = {"authorization": f"Bearer {world.tokens[user]}"}
            asked = (boundaries(schema, operation, own_path(operation, world, user)) if edges else []) + [
                case for mode in MODES for case in drawn(cases(operation, world, mode), examples, seed_value)]
            found.cases += len(asked)
            found.asked[operation.label] += len(asked)
            problems: dict[tuple[str, int], str] = {}  # (failure, status) -> its first case, as `label: what`
            for case in asked:
                for key, problem in _failures(case, url, http, headers):
                    problems.setdefault(key, problem)
            found.failures += [f"as {user}: {p}" for p in problems.values()]
    return found


def boundaries(schema: schemathesis.BaseSchema, operation: APIOperation, path: dict[str, str]) -> list[Case]:
    """The valid cases at the edges of what the schema allows (a fixed list: no randomness), asked at `path`, so
    they reach the operation's work rather than a lookup of a made-up name."""
    config = schema.config.generation_for(operation=operation)
    found = list(schema.iter_coverage_cases(operation, generation_modes=[GenerationMode.POSITIVE],
                                            generation_config=config))
    for case in found:
        case.path_parameters.update(path)
    return found


def own_path(operation: APIOperation, world: World, user: str) -> dict[str, str]:
    """The path values where `user` works: their own Workspace, and the member's objects."""
    return {p.name: world.home[user] if p.name == "workspace" else next(iter(world.real[p.name]))
            for p in operation.path_parameters if p.name in world.real}


def drawn(strategy: st.SearchStrategy[Case], examples: int, seed_value: int = SEED) -> list[Case]:
    """Up to `examples` cases of `strategy`, the same ones for the same seed. Cases are drawn first and sent
    after, so a failure is reported, never shrunk: Hypothesis spends nothing past the budget."""
    found: list[Case] = []

    @seed(seed_value)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def keep(case: Case) -> None:
        found.append(case)

    keep()
    return found


def _failures(case: Case, url: str, http: requests.Session, headers: dict[str, str]
              ) -> list[tuple[tuple[str, int], str]]:
    """What is wrong with the answer to `case`: each as (kind, status) and a line with how to reproduce it."""
    label = case.operation.label
    try:
        response = case.call(base_url=url, session=http, headers=headers, timeout=TIMEOUT_S)
    except requests.RequestException as e:
        return [((type(e).__name__, 0), f"{label}: no answer ({e})")]
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except FailureGroup as group:
        body = response.content[:300].decode("utf-8", "replace")
        shown = case.as_curl_command(headers={"authorization": "Bearer TOKEN"}, base_url=url)
        return [((f.title, response.status_code), f"{label}: {f.title} ({response.status_code} {body})\n    {shown}")
                for f in group.exceptions]
    return []
