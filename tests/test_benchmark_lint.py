"""`amber benchmark lint`: each rule against a Task that breaks it and a fair twin that does not, the bundled
examples, input a reader could choke on, the speed at 1,000 Tasks; and the model review against the provider
double, with the tokens it reports checked against what the model proxy metered."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from amber_pipeline.analysis import task_review
from amber_pipeline.benchmarks.lint import RULES, Finding, lint
from amber_pipeline.errors import AmberError
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.models.proxy import Grant, ModelProxy
from amber_pipeline.money.prices import PRICES
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "lint"
UNFAIR, FAIR = FIXTURES / "unfair", FIXTURES / "fair"
EXAMPLES = PROJECT_ROOT / "examples"


def line_of(path: Path, marker: str) -> int:
    """The line of ``path`` that holds ``marker`` (so an expected line number says what it points at)."""
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


# (unfair Task, its fair twin, rule, severity, file the finding names, marker of its line, words of its message)
CASES = [
    ("unnamed-output", "named-output", "test-reads-unnamed-file", "error",
     "tests/test_outputs.py", 'COUNT = Path("/app/count.txt")', ["reads /app/count.txt", "never names"]),
    ("solution-copied", "inputs-copied", "solution-in-image", "error",
     "environment/Dockerfile", "COPY . /app/", ["solution/", "reference solution"]),
    ("grader-copied", "inputs-copied", "tests-in-image", "error",
     "environment/Dockerfile", "COPY checks/", ["checks/", "Verifier"]),
    ("output-baked-in", "output-made-by-agent", "start-state-passes", "error",
     "tests/test.sh", "grep -qx", ["/app/greeting.txt", '"Hello, Ada Lovelace!"', "Dockerfile line 4"]),
    ("reward-always-one", "reward-from-check", "start-state-passes", "error",
     "tests/test.sh", "echo 1 >", ["Reward 1", "every path"]),
    ("exit-code-ignored", "exit-code-used", "verifier-ignores-exit-code", "error",
     "tests/test.sh", "echo 1 >", ["runs pytest (line 5)", "whatever it returned"]),
    ("answer-in-instruction", "answer-described", "instruction-quotes-expected-output", "warning",
     "tests/test_outputs.py", "41.75", ["41.75", "copy it"]),
    ("static-answer-quoted", "static-answer-asked", "instruction-quotes-expected-output", "warning",
     "task.toml", "number = 1440", ["1440", "number check"]),
]


@pytest.mark.parametrize(("unfair", "twin", "rule", "severity", "file", "marker", "words"), CASES,
                         ids=[f"{c[2]}:{c[0]}" for c in CASES])
def test_a_rule_fires_on_its_unfair_task_and_not_on_the_fair_twin(
        unfair: str, twin: str, rule: str, severity: str, file: str, marker: str, words: list[str]) -> None:
    found = lint(UNFAIR / unfair)
    line = line_of(UNFAIR / unfair / file, marker)
    assert [(f.task, f.rule, f.severity, f.path, f.line) for f in found] == [(unfair, rule, severity, file, line)]
    message = found[0].message
    for word in words:
        assert word in message
    assert "\n" not in message and message.endswith(".") and ": " in message  # one sentence: the problem, the fix
    assert lint(FAIR / twin) == []


def test_a_folder_of_tasks_gets_one_finding_per_unfair_task_and_every_rule_is_covered() -> None:
    found = lint(UNFAIR)
    assert sorted(f.task for f in found) == sorted(p.name for p in UNFAIR.iterdir())
    assert {f.rule for f in found} == set(RULES)
    assert lint(FAIR) == []


@pytest.mark.parametrize("bench", ["demo-bench", "static-bench"])
def test_the_bundled_examples_have_no_error(bench: str) -> None:
    errors = [f for f in lint(EXAMPLES / bench) if f.severity == "error"]
    assert errors == []


def test_the_demo_warnings_are_values_its_instructions_must_state() -> None:
    """The one demo Task that warns asks the Agent to set given values (TTL 600, an origin): by design."""
    warnings = {(f.task, f.rule) for f in lint(EXAMPLES / "demo-bench")}
    assert warnings <= {("json-settings-update", "instruction-quotes-expected-output")}
    assert lint(EXAMPLES / "static-bench") == []


# -- more shapes of the same rules, built in a temporary folder ----------------------------------------------------

def make_task(root: Path, name: str, files: dict[str, str | bytes]) -> Path:
    task = root / name
    defaults: dict[str, str | bytes] = {"task.toml": 'version = "1.0"\n', "instruction.md": "Do the thing.\n",
                                        "environment/Dockerfile": "FROM amber-base:bookworm\nWORKDIR /app\n"}
    for rel, content in (defaults | files).items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return task


def rules(found: list[Finding]) -> list[tuple[str, str, int | None]]:
    return [(f.rule, f.path or "", f.line) for f in found]


def test_python_checks_the_image_already_satisfies(tmp_path: Path) -> None:
    test = ('import os\n\nDONE = "/app/done.flag"\n\n\ndef test_done():\n    assert os.path.exists(DONE)\n')
    files = {"instruction.md": "Run the setup; it leaves `/app/done.flag` when it finishes.\n",
             "tests/test.sh": "#!/bin/bash\nif pytest /tests/test_state.py; then echo 1 > /logs/verifier/reward.txt; "
                              "else echo 0 > /logs/verifier/reward.txt; fi\n",
             "tests/test_state.py": test}
    baked = make_task(tmp_path, "baked", files | {
        "environment/Dockerfile": "FROM amber-base:bookworm\nWORKDIR /app\nRUN touch /app/done.flag\n"})
    assert rules(lint(baked)) == [("start-state-passes", "tests/test_state.py", 7)]
    fair = make_task(tmp_path, "fair", files)
    assert lint(fair) == []
    # A Verifier that never writes Reward 1 cannot pass, whatever the image holds.
    never = make_task(tmp_path, "never", files | {
        "environment/Dockerfile": "FROM amber-base:bookworm\nRUN touch /app/done.flag\n",
        "tests/test.sh": "#!/bin/bash\npytest /tests/test_state.py\necho 0 > /logs/verifier/reward.txt\n"})
    assert [f.rule for f in lint(never)] == ["verifier-ignores-exit-code"]
    # A check this reader cannot follow (a loop) keeps it silent rather than guessing.
    unread = make_task(tmp_path, "unread", files | {
        "environment/Dockerfile": "FROM amber-base:bookworm\nRUN touch /app/done.flag\n",
        "tests/test_state.py": test + "\n\ndef test_more():\n    for n in range(3):\n        assert n < 3\n"})
    assert lint(unread) == []


def test_relative_reads_and_named_folders(tmp_path: Path) -> None:
    test_sh = ("#!/bin/bash\ncd /app\nif [ -f reports/summary.csv ] && grep -q total results.txt; then\n"
               "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n")
    task = make_task(tmp_path, "relative", {"tests/test.sh": test_sh,
                                            "instruction.md": "Put a summary CSV in /app/reports.\n"})
    found = {f.message.split(" ")[2].rstrip(";,"): f for f in lint(task)}
    assert set(found) == {"/app/reports/summary.csv", "/app/results.txt"}
    assert found["/app/reports/summary.csv"].severity == "warning"  # its folder is named, the file is not
    assert found["/app/results.txt"].severity == "error"
    assert found["/app/results.txt"].line == 3


def test_inputs_system_files_and_what_the_verifier_writes_are_not_outputs(tmp_path: Path) -> None:
    test_sh = ("#!/bin/bash\nprintf 'a\\nb\\n' > /app/fixture.txt\nsort /app/fixture.txt > /tmp/sorted\n"
               "diff /tmp/sorted /tests/expected.txt && cmp /app/data/input.csv /etc/hostname\n"
               "python3 /app/tool.py /usr/share/dict/words\n"
               "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt\n"
               "else echo 0 > /logs/verifier/reward.txt; fi\n")
    task = make_task(tmp_path, "inputs", {
        "tests/test.sh": test_sh, "instruction.md": "Write a tool at /app/tool.py.\n",
        "environment/Dockerfile": "FROM amber-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n",
        "environment/data/input.csv": "a,b\n"})
    assert lint(task) == []


def test_a_run_step_that_builds_the_image_makes_its_folder_unknown_not_unnamed(tmp_path: Path) -> None:
    task = make_task(tmp_path, "generated", {
        "environment/Dockerfile": "FROM amber-base:bookworm\nWORKDIR /app\nCOPY gen.py .\nRUN python3 gen.py\n",
        "environment/gen.py": "open('records.json', 'w').write('[]')\n",
        "tests/test.sh": "#!/bin/bash\nif python3 -c \"import json; json.load(open('/app/records.json'))\"; then "
                         "echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"})
    assert lint(task) == []


def test_dockerfile_shapes_for_answers_in_the_image(tmp_path: Path) -> None:
    shapes = {
        "json-form": ('COPY ["solve.sh", "/usr/local/bin/"]\n', {"environment/solve.sh": "#!/bin/bash\n"},
                      "solution-in-image"),
        "continued": ("COPY data.csv \\\n     tests/ \\\n     /app/\n",
                      {"environment/data.csv": "x\n", "environment/tests/test.sh": "#!/bin/bash\n"},
                      "tests-in-image"),
        "ignored": ("COPY . /app/\n", {"environment/.dockerignore": "solution\n",
                                      "environment/solution/solve.sh": "#!/bin/bash\n"}, None),
        "project-tests": ("COPY tests/ /app/tests/\n", {"environment/tests/test_parser.py": "def test_x(): pass\n"},
                          "tests-in-image"),
        # The buggy input and the solution's fixed file share a name, not their bytes: not the answer.
        "fixed-file": ("COPY main.py /app/\n", {"environment/main.py": "print(1 +)\n",
                                                "solution/main.py": "print(1 + 1)\n"}, None),
        "same-bytes": ("COPY lib/ /app/lib/\n", {"environment/lib/fix.py": "print(1 + 1)\n",
                                                 "solution/fix.py": "print(1 + 1)\n"}, "solution-in-image"),
    }
    for name, (copy, files, rule) in shapes.items():
        task = make_task(tmp_path, name, files | {
            "environment/Dockerfile": "FROM amber-base:bookworm\nWORKDIR /app\n" + copy})
        found = lint(task)
        assert [f.rule for f in found] == ([rule] if rule else []), (name, found)
    project = lint(tmp_path / "project-tests")[0]
    assert project.severity == "warning" and "project's own tests" in project.message


def test_exit_code_and_constant_reward_shapes(tmp_path: Path) -> None:
    def verdict(script: str) -> list[str]:
        task = make_task(tmp_path, f"t{len(list(tmp_path.iterdir()))}",
                         {"tests/test.sh": script, "instruction.md": "Write /app/out.\n"})
        return [f.rule for f in lint(task)]

    reward = "/logs/verifier/reward.txt"
    assert verdict(f"#!/bin/bash\nset -e\npytest /tests\necho 1 > {reward}\n") == []
    assert verdict(f"pytest /tests && echo 1 > {reward} || echo 0 > {reward}\n") == []
    assert verdict(f"pytest /tests\nstatus=$?\necho $(( status == 0 )) > {reward}\n") == []
    assert verdict(f"pytest /tests || exit 0\necho 1 > {reward}\n") == []
    assert verdict(f"uvx -p 3.13 -w pytest pytest /tests/test_x.py\nprintf 0 > {reward}\n") == [
        "verifier-ignores-exit-code"]
    assert verdict("node /tests/check.js; echo '{\"reward\": 1}' > /logs/verifier/reward.json\n") == [
        "verifier-ignores-exit-code"]
    assert verdict(f"echo 0 > {reward}\necho 1 > {reward}\n") == ["start-state-passes"]
    assert verdict(f"echo 1 > {reward}\nif ! grep -q x /app/out; then echo 0 > {reward}; fi\n") == []
    # Installing the test tools is not running the tests.
    assert verdict(f"curl -LsSf https://astral.sh/uv/install.sh | sh\nuv pip install pytest\necho 1 > {reward}\n") == [
        "start-state-passes"]


def test_odd_input_never_raises(tmp_path: Path) -> None:
    crlf = make_task(tmp_path, "crlf", {
        "tests/test.sh": "#!/bin/bash\r\npytest /tests/test_a.py\r\necho 1 > /logs/verifier/reward.txt\r\n"})
    assert rules(lint(crlf)) == [("verifier-ignores-exit-code", "tests/test.sh", 3)]
    odd = {
        "binary": {"tests/test.sh": b"\x7fELF\x00\x01\x02", "instruction.md": b"\xff\xfe\x00bad"},
        "bad-toml": {"task.toml": "[task\nname = ", "tests/test.sh": "echo 'unterminated\n"},
        "no-instruction": {"instruction.md": b"", "tests/test.sh": "cat <<EOF\nnever closed\n"},
        "broken-python": {"tests/test.sh": "python3 - <<'PY'\ndef (:\nPY\n", "tests/test_x.py": "assert (\n"},
        "odd-dockerfile": {"environment/Dockerfile": "FROM x AS a\nCOPY --from=a / /\nADD https://x/y.tgz /opt/\n"
                                                     "RUN <<EOF\nset -e\necho hi > /app/a\nEOF\nCOPY\nWORKDIR $X\n"
                                                     "RUN [\"bash\", \"-c\", \"echo 'x' > /app/b\"]\nCOPY [broken\n",
                           "tests/test.sh": "if [[ $(cat /app/a) == hi ]]; then case $x in a|b) ;; esac; fi\n"},
        "deep-quotes": {"tests/test.sh": "echo \"$(echo \"$(echo 'a(b')\")\" `date` ${X:-/app/y} >> /dev/null\n"
                                         "f() { grep -e ; }\n( cd /app && ls )\n"},
    }
    for name, files in odd.items():
        task = make_task(tmp_path, name, files)
        if name == "no-instruction":
            (task / "instruction.md").unlink()
        assert isinstance(lint(task), list), name
    (make_task(tmp_path, "dir-as-script", {}) / "tests" / "test.sh").mkdir(parents=True)
    assert all(isinstance(f, Finding) for f in lint(tmp_path))


def test_task_names_come_from_task_toml(tmp_path: Path) -> None:
    task = make_task(tmp_path, "folder-name", {
        "task.toml": '[task]\nname = "acme/real-name"\n', "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n"})
    assert [f.task for f in lint(task)] == ["real-name"]


def test_a_missing_root_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(AmberError, match="No Benchmark at"):
        lint(tmp_path / "nowhere")


def test_a_thousand_tasks_lint_in_well_under_a_few_seconds(tmp_path: Path) -> None:
    sources = sorted([*UNFAIR.iterdir(), *FAIR.iterdir()])
    for k in range(1000):
        shutil.copytree(sources[k % len(sources)], tmp_path / f"task-{k:04d}")
    started = time.perf_counter()
    found = lint(tmp_path)
    elapsed = time.perf_counter() - started
    print(f"linted 1,000 Tasks in {elapsed:.2f} s")
    assert len(found) == sum(1 for k in range(1000) if sources[k % len(sources)].parent == UNFAIR)
    assert elapsed < 5.0  # about 1 s on a 2-core machine shared with other work


# -- the model review ------------------------------------------------------------------------------------------------

REPLAY = json.loads((FIXTURES / "review-replay.json").read_text())
EXPECTED = {  # task -> (verdict, words of the reason)
    "unnamed-output": ("unfair", "never names"),
    "solution-copied": ("unfair", "reference solution"),
    "grader-copied": ("unfair", "copy of the grader"),  # answered inside a ```json fence
    "output-baked-in": ("cannot tell", "cannot run it"),  # a valid "cannot tell"
    "reward-always-one": ("cannot tell", "not the JSON asked for"),  # prose
    "exit-code-ignored": ("cannot tell", "no valid reason and verdict"),  # a verdict outside the three
    "answer-in-instruction": ("unfair", "expected mean"),  # verdict before reason: still read
    "static-answer-quoted": ("cannot tell", "model call failed"),  # no script: the double answers 400
}


@pytest.fixture
def review_home(tmp_path: Path) -> AmberPaths:
    """An Amber home whose Workspace has a replay Model Configuration answering from the fixture script."""
    paths = AmberPaths(tmp_path / "amber")
    folder = paths.models / "team"
    folder.mkdir(parents=True)
    (folder / "review-replay.toml").write_text(
        'name = "review-replay"\nmodel = "review-replay"\nprovider = "replay"\n'
        f'replay = "{FIXTURES / "review-replay.json"}"\n'
        '[prices]\ninput = 2.0\ncached_input = 0.2\noutput = 10.0\nsource = "made up for a test"\n')
    return paths


@pytest.fixture
def metered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Grant]]:
    """Every grant the model proxy revokes, with the calls and usage it metered."""
    seen: list[Grant] = []
    revoke = ModelProxy.revoke

    def spy(self: ModelProxy, token: str) -> Grant | None:
        grant = revoke(self, token)
        if grant is not None:
            seen.append(grant)
        return grant

    monkeypatch.setattr(ModelProxy, "revoke", spy)
    yield seen


def test_review_verdicts_and_metered_tokens(review_home: AmberPaths, metered: list[Grant]) -> None:
    reviews = task_review.review(UNFAIR, "review-replay", review_home, "team")
    by_task = {r.task: r for r in reviews}
    assert set(by_task) == set(EXPECTED) == {p.name for p in UNFAIR.iterdir()}
    for task, (verdict, words) in EXPECTED.items():
        assert by_task[task].verdict == verdict, task
        assert words in by_task[task].reason, (task, by_task[task].reason)
        assert len(by_task[task].reason) <= task_review.REASON_CHARS

    mc = model_configuration("review-replay", review_home, "team")
    grants = {g.trial.removeprefix("review/"): g for g in metered}
    assert set(grants) == set(EXPECTED)  # one proxy token per Task, each revoked
    for task, grant in grants.items():
        review = by_task[task]
        assert (review.input_tokens, review.output_tokens) == (grant.usage.input_tokens, grant.usage.output_tokens)
        assert review.cost_usd == PRICES.model_cost(mc, grant.usage)
        assert all(call.usage.input_tokens > 0 for call in grant.calls if call.status == 200)
    assert by_task["static-answer-quoted"].input_tokens == 0  # the refused call used nothing
    assert grants["unnamed-output"].usage.input_tokens > 0 and grants["unnamed-output"].usage.output_tokens > 0

    total = task_review.totals(reviews)
    assert total.tasks == 8 and total.verdicts == {"unfair": 4, "cannot tell": 4}
    assert total.input_tokens == sum(g.usage.input_tokens for g in metered)
    assert total.output_tokens == sum(g.usage.output_tokens for g in metered)
    assert total.cost_usd == sum((PRICES.model_cost(mc, g.usage) for g in metered), Decimal(0)) > 0

    # What the model was shown: the rubric, the Instruction, the Verifier and the Dockerfile, with the answer format.
    request = json.loads(grants["unnamed-output"].calls[0].request)
    prompt = request["messages"][0]["content"]
    task_dir = UNFAIR / "unnamed-output"
    for part in (task_review.RUBRIC, (task_dir / "instruction.md").read_text().strip(),
                 (task_dir / "tests" / "test_outputs.py").read_text().strip(),
                 (task_dir / "environment" / "Dockerfile").read_text().strip(), '"reason"'):
        assert part in prompt
    assert prompt.index('"reason"') < prompt.index('"verdict"')
    assert request["model"] == "review-replay"  # pinned by the proxy to the Model Configuration


def test_review_cuts_long_files_to_their_bounds(tmp_path: Path, review_home: AmberPaths,
                                                metered: list[Grant]) -> None:
    task = shutil.copytree(UNFAIR / "unnamed-output", tmp_path / "bench" / "unnamed-output")
    (task / "tests" / "huge.txt").write_text("x" * 100_000)
    (task / "environment" / "Dockerfile").write_text("FROM amber-base:bookworm\n" + "RUN true\n" * 5_000)
    [review] = task_review.review(task, "review-replay", review_home, "team")
    assert review.verdict == "unfair"
    prompt = json.loads(metered[0].calls[0].request)["messages"][0]["content"]
    assert "more characters left out" in prompt
    assert len(prompt) < task_review.VERIFIER_CHARS + task_review.DOCKERFILE_CHARS + task_review.INSTRUCTION_CHARS \
        + task_review.TASK_TOML_CHARS + 4_000


@pytest.mark.parametrize(("answer", "verdict", "reason"), [
    ('{"reason": "All six points hold.", "verdict": "fair"}', "fair", "All six points hold."),
    ('```json\n{"reason": "Needs the network.", "verdict": "Unfair"}\n```', "unfair", "Needs the network."),
    ('{"reason": "Too little to go on.", "verdict": "cannot tell"}', "cannot tell", "Too little to go on."),
    ("Fair, I think.", "cannot tell", "The answer was not the JSON asked for: Fair, I think."),
    ('{"verdict": "fair"}', "cannot tell", 'The answer had no valid reason and verdict: {"verdict": "fair"}'),
    ('{"reason": "x", "verdict": "okay"}', "cannot tell", "no valid reason and verdict"),
    ("[1, 2]", "cannot tell", "not the JSON asked for"),
    ("", "cannot tell", "The answer was not the JSON asked for: (empty)"),
    (None, "cannot tell", "(empty)"),
])
def test_parse_answer(answer: str | None, verdict: str, reason: str) -> None:
    got = task_review.parse_answer(answer)
    assert got[0] == verdict and reason in got[1]


def test_a_long_odd_answer_is_kept_short() -> None:
    verdict, reason = task_review.parse_answer("word " * 1_000)
    assert verdict == "cannot tell" and len(reason) == task_review.REASON_CHARS and reason.endswith("…")


def test_review_refusals_are_one_sentence(tmp_path: Path, review_home: AmberPaths,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AmberError, match="Unknown Model Configuration 'gpt-99'"):
        task_review.review(UNFAIR, "gpt-99", review_home, "team")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))
    with pytest.raises(AmberError, match="No API key for anthropic: set ANTHROPIC_API_KEY"):
        task_review.review(UNFAIR, "claude-sonnet-4.6", review_home, "team")
    with pytest.raises(AmberError, match="does not send its private Benchmarks to replay"):
        task_review.review(UNFAIR, "review-replay", review_home, "team", allowed_providers=frozenset({"anthropic"}))
