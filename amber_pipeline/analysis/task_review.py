"""Task review: a model grades each Task against a written rubric, before anyone pays for Trials of it.

`amber_pipeline.benchmarks.lint` catches the unfair Tasks a rule can see. Some
unfairness needs reading: an Instruction that prescribes the method, a
Verifier that checks how rather than what, a Task that quietly needs the
network. The review shows a Model Configuration the Instruction, the Verifier's
files, task.toml and the Dockerfile (each cut to a bound, so one huge file
cannot make a call expensive) and asks for a verdict against `RUBRIC`.

The answer must be one JSON object with the reason first and the verdict last,
so the model reasons before it commits: ``{"reason": "...", "verdict": "fair"
| "unfair" | "cannot tell"}``. Anything else (prose, another verdict, a call
that fails) becomes "cannot tell" with a short reason, so one odd answer never
sinks the review of the rest.

Every call goes through Amber's model proxy (`ModelProxy` in front of
`serving`, the pair a cell run uses), one Trial-like token per Task, so the
tokens and cost reported are what the proxy metered from the Provider's own
usage fields, not what the client says. The review reserves nothing in the
Wallet; the caller shows its metered cost.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from amber_pipeline.benchmarks.lint import task_name
from amber_pipeline.benchmarks.tasks import find_task_dirs
from amber_pipeline.errors import AmberError
from amber_pipeline.models.configurations import ModelConfiguration, model_configuration
from amber_pipeline.models.endpoint import offline_litellm, require_key, serving
from amber_pipeline.money.prices import PRICES
from amber_pipeline.paths import AmberPaths

RUBRIC = """A fair Task:
1. has one clear outcome;
2. says in its Instruction what to achieve, not how to achieve it;
3. checks that outcome deterministically, not the method used to reach it;
4. names in its Instruction everything the Verifier needs (every file, path, format and value it checks);
5. cannot be passed by doing nothing (the starting state fails the Verifier);
6. needs no network access (dependencies are in the image)."""

VERDICTS = ("fair", "unfair", "cannot tell")
INSTRUCTION_CHARS = 8_000
FILE_CHARS = 6_000  # per Verifier file
VERIFIER_CHARS = 16_000  # all Verifier files together
DOCKERFILE_CHARS = 4_000
TASK_TOML_CHARS = 2_000
REASON_CHARS = 300
CONCURRENCY = 4

PROMPT = """You review one task of a benchmark for AI agents. An agent gets the instruction, works in the \
environment the Dockerfile builds, and then the verifier decides whether it succeeded. Judge the task against \
this rubric:

{rubric}

Answer with one JSON object and nothing else, the reason first and the verdict last:
{{"reason": "<one or two sentences: which rubric points the task breaks, or why it is fair>", \
"verdict": "fair" or "unfair" or "cannot tell"}}

Instruction (instruction.md):
{instruction}

task.toml:
{task_toml}

Verifier files:
{verifier}

Environment (environment/Dockerfile):
{dockerfile}
"""


@dataclass(frozen=True)
class Review:
    """One Task's verdict, with what its review call used as the model proxy metered it."""

    task: str
    verdict: str  # one of VERDICTS
    reason: str
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


@dataclass(frozen=True)
class ReviewTotals:
    tasks: int
    verdicts: dict[str, int]
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


@dataclass(frozen=True)
class _Case:
    task: str
    instruction: str
    prompt: str


def review(root: Path, model: str, paths: AmberPaths | None = None, workspace: str | None = None,
           allowed_providers: frozenset[str] | None = None, concurrency: int = CONCURRENCY) -> list[Review]:
    """Grade every Task under ``root`` with the Model Configuration ``model``, through the model proxy.

    ``allowed_providers`` is the Workspace's Provider policy for its private Benchmarks (None: no policy); a
    configuration served elsewhere is refused before any Task leaves the machine.
    """
    mc = model_configuration(model, paths, workspace)
    require_key(mc)
    if allowed_providers is not None and mc.served_by not in allowed_providers:
        raise AmberError(f"This Workspace does not send its private Benchmarks to {mc.served_by}: review with a "
                         "Model Configuration its provider policy allows, or change the policy with "
                         "`amber workspace provider-policy`.")
    from amber_pipeline.models.proxy import Grant, ModelProxy  # its server (aiohttp, uvicorn): only for a review

    cases = [_case(task_dir) for task_dir in find_task_dirs(root)]
    offline_litellm()
    import litellm  # once, before the threads that call it

    litellm.suppress_debug_info = True  # a failed call is a "cannot tell" row, not a help banner on the terminal
    with serving(mc, {c.task: c.instruction for c in cases}) as upstream, ModelProxy() as proxy:
        def one(case: _Case) -> Review:
            grant = proxy.grant(Grant(f"review/{case.task}", mc, upstream.url, upstream.key, None,
                                      allowed_providers))
            try:
                verdict, reason = _ask(mc, proxy.base_url(), grant.token, case.prompt)
            finally:
                proxy.revoke(grant.token)
            used = grant.usage
            return Review(case.task, verdict, reason, used.input_tokens, used.output_tokens,
                          PRICES.model_cost(mc, used))

        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            return list(pool.map(one, cases))


def totals(reviews: Iterable[Review]) -> ReviewTotals:
    """The verdict counts and the metered tokens and cost of a review, summed."""
    found = list(reviews)
    return ReviewTotals(len(found), dict(Counter(r.verdict for r in found)), sum(r.input_tokens for r in found),
                        sum(r.output_tokens for r in found), sum((r.cost_usd for r in found), Decimal(0)))


def parse_answer(text: str | None) -> tuple[str, str]:
    """(verdict, reason) from the model's answer; anything but the asked-for JSON is "cannot tell"."""
    raw = (text or "").strip()
    start, end = raw.find("{"), raw.rfind("}")
    try:
        data = json.loads(raw[start:end + 1]) if 0 <= start < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return "cannot tell", _short(f"The answer was not the JSON asked for: {raw or '(empty)'}")
    verdict, reason = data.get("verdict"), data.get("reason")
    verdict = verdict.strip().lower() if isinstance(verdict, str) else verdict
    if verdict not in VERDICTS or not isinstance(reason, str) or not reason.strip():
        return "cannot tell", _short(f"The answer had no valid reason and verdict: {raw}")
    return str(verdict), _short(reason.strip())


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


def _ask(mc: ModelConfiguration, proxy_url: str, token: str, prompt: str) -> tuple[str, str]:
    import litellm
    import openai

    anthropic = mc.provider_spec.litellm_prefix == "anthropic"  # Anthropic's clients add /v1/messages themselves
    try:
        reply = litellm.completion(model=f"{mc.provider_spec.litellm_prefix}/{mc.model}",
                                   api_base=proxy_url if anthropic else f"{proxy_url}/v1", api_key=token,
                                   messages=[{"role": "user", "content": prompt}])
        text = reply.choices[0].message.content
    except openai.APIError as e:  # litellm's errors derive from the OpenAI client's
        return "cannot tell", f"The model call failed ({type(e).__name__})."
    except (AttributeError, IndexError):
        return "cannot tell", "The model's reply had no message."
    return parse_answer(text if isinstance(text, str) else None)


# -- what the model is shown -------------------------------------------------------------------------------------

def _case(task_dir: Path) -> _Case:
    instruction = _text(task_dir / "instruction.md", INSTRUCTION_CHARS)
    prompt = PROMPT.format(rubric=RUBRIC, instruction=_block(instruction),
                           task_toml=_block(_text(task_dir / "task.toml", TASK_TOML_CHARS)),
                           verifier=_verifier(task_dir), dockerfile=_dockerfile(task_dir))
    full = _text(task_dir / "instruction.md", None)
    return _Case(task_name(task_dir), full.strip(), prompt)


def _verifier(task_dir: Path) -> str:
    """tests/test.sh first, then the other text files of tests/, each and all cut to their bounds; a static
    Task's built-in checks and its check program."""
    tests = task_dir / "tests"
    files = [tests / "test.sh"] if (tests / "test.sh").is_file() else []
    try:
        files += sorted(p for p in tests.rglob("*") if p.is_file() and p.name != "test.sh"
                        and "__pycache__" not in p.parts)
    except OSError:
        pass
    parts, left = [], VERIFIER_CHARS
    if _is_static(task_dir):
        parts.append("This is a static task: no environment, one model answer checked by the [metadata.amber.static] "
                     "checks in task.toml.")
    for k, path in enumerate(files):
        if left <= 0:
            parts.append(f"(and {len(files) - k} more files, left out)")
            break
        text = _text(path, min(FILE_CHARS, left))
        left -= len(text)
        parts.append(f"{path.relative_to(task_dir).as_posix()}:\n{_block(text)}")
    return "\n\n".join(parts) or "(no verifier files)"


def _dockerfile(task_dir: Path) -> str:
    path = task_dir / "environment" / "Dockerfile"
    if path.is_file():
        return _block(_text(path, DOCKERFILE_CHARS))
    return "(none: a static task has no environment)" if _is_static(task_dir) else "(no Dockerfile)"


def _is_static(task_dir: Path) -> bool:
    try:
        raw = tomllib.loads((task_dir / "task.toml").read_text(errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    metadata = raw.get("metadata")
    amber = metadata.get("amber") if isinstance(metadata, dict) else None
    return isinstance(amber, dict) and isinstance(amber.get("static"), dict)


def _text(path: Path, limit: int | None) -> str:
    """A file's text (binary files named as such), cut to ``limit`` characters with a note saying so."""
    try:
        data = path.read_bytes()
    except OSError:
        return "(missing)"
    if b"\0" in data[:8192]:
        return f"(a binary file of {len(data)} bytes)"
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    if limit is not None and len(text) > limit:
        return text[:limit] + f"\n[... {len(text) - limit} more characters left out]"
    return text


def _block(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    body = text.rstrip("\n")
    return f"{fence}\n{body}\n{fence}"
