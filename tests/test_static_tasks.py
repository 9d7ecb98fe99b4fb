"""Static Tasks: the [metadata.amber.static] format, multi-turn Instructions and the built-in Verifier.

Each check kind passes and fails with its one-sentence detail; bad definitions are
one-line AmberErrors naming task.toml; the example Benchmark's Tasks accept their
own solutions, and the replay models score exactly as examples/README.md says.
"""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from amber_pipeline.benchmarks import static, versions
from amber_pipeline.benchmarks.static import NEXT_TURN, StaticChecks, Verdict, static_checks, turns, verify
from amber_pipeline.benchmarks.tasks import load_task
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT

EXAMPLES = PROJECT_ROOT / "examples"
STATIC_BENCH = EXAMPLES / "static-bench"
EXAMPLE_TASKS = sorted(d.name for d in STATIC_BENCH.iterdir() if (d / "task.toml").is_file())

CHECK_PY = """#!/usr/bin/env python3
import sys
answer = sys.stdin.read()
if "ok" not in answer:
    print("some progress output", file=sys.stderr)
    sys.exit("The answer does not say ok")
"""


def write_task(root: Path, checks: str, instruction: str = "What is the answer?\n", name: str = "t") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text(f'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n'
                                 f"[metadata.amber.static]\n{checks}\n")
    (d / "instruction.md").write_text(instruction)
    return d


def one_line_error(excinfo: pytest.ExceptionInfo[AmberError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# --- every check kind, pass and fail, with the detail sentence ---------------------------------------------------

@pytest.mark.parametrize(("checks", "answer", "detail"), [
    (StaticChecks(contains=("Paris", "France")), "Paris is in France.", ""),
    (StaticChecks(contains=("Paris", "France")), "Paris, Texas.", 'The answer does not contain "France".'),
    (StaticChecks(not_contains=("Lyon",)), "Paris.", ""),
    (StaticChecks(not_contains=("Lyon",)), "Lyon or Paris.", 'The answer contains "Lyon", which it must not.'),
    (StaticChecks(regex=r"^\d{4}-\d{2}-\d{2}$"), "The date:\n2024-01-31\n", ""),
    (StaticChecks(regex=r"^\d{4}-\d{2}-\d{2}$"), "31/01/2024",
     r'The answer does not match the regular expression "^\d{4}-\d{2}-\d{2}$".'),
    (StaticChecks(number=42.0), "6 x 7 = 42.", ""),
    (StaticChecks(number=42.0), "6 x 7 = 41", "The answer's last number is 41, not 42."),
    (StaticChecks(number=42.0), "forty-two", "The answer has no number; expected 42."),
    (StaticChecks(number=1234.5, tolerance=0.01), "It is 1,234.5", ""),
    (StaticChecks(number=1234.5, tolerance=0.01), "It is 1,235",
     "The answer's last number is 1,235, not 1234.5 (tolerance 0.01)."),
])
def test_each_check_kind_passes_and_fails_with_its_detail(tmp_path, checks, answer, detail) -> None:
    assert verify(checks, answer, tmp_path) == Verdict(0.0 if detail else 1.0, detail)


def test_the_first_failed_check_is_named_in_declaration_order(tmp_path) -> None:
    checks = StaticChecks(contains=("a",), not_contains=("b",), regex="c", number=1.0)
    assert verify(checks, "a c 1", tmp_path).passed
    assert verify(checks, "b", tmp_path).detail == 'The answer does not contain "a".'
    assert verify(checks, "a b", tmp_path).detail == 'The answer contains "b", which it must not.'
    assert verify(checks, "a 1", tmp_path).detail == 'The answer does not match the regular expression "c".'
    assert verify(checks, "a c 2", tmp_path).detail == "The answer's last number is 2, not 1."


@pytest.mark.parametrize(("answer", "passed"), [
    ("1.1", True), ("0.9", True), ("1.1000001", False), ("0.8999999", False), ("1", True),
])
def test_tolerance_is_inclusive_on_the_written_decimals(tmp_path, answer, passed) -> None:
    # As binary floats 1.1 - 1.0 > 0.1; decimals make the edge exact.
    assert verify(StaticChecks(number=1.0, tolerance=0.1), answer, tmp_path).passed is passed


def test_default_tolerance_and_zero_tolerance(tmp_path) -> None:
    assert verify(StaticChecks(number=0.3), "0.3000005", tmp_path).passed
    assert not verify(StaticChecks(number=0.3), "0.300002", tmp_path).passed
    assert verify(StaticChecks(number=0.3, tolerance=0.0), "0.30", tmp_path).passed
    assert not verify(StaticChecks(number=0.3, tolerance=0.0), "0.3000001", tmp_path).passed


@pytest.mark.parametrize(("answer", "number"), [
    ("The total is $1,234,567.89.", 1234567.89),
    ("Between 10-20 people: 20", 20),
    ("from 3 to -5", -5),
    ("version 1.2.3 then 7", 7),
    ("1,2,3", 3),
    ("about 2.5e3 metres", 2500),
    ("a fraction .5", 0.5),
    ("Dates like 2024-01-31 end in 31", 31),
])
def test_the_last_number_is_read_as_written(tmp_path, answer, number) -> None:
    assert verify(StaticChecks(number=number), answer, tmp_path).passed, answer


def test_case_insensitive_contains_and_not_contains(tmp_path) -> None:
    insensitive = StaticChecks(contains=("Canberra",), not_contains=("SYDNEY",), case_sensitive=False)
    assert verify(insensitive, "CANBERRA", tmp_path).passed
    assert verify(insensitive, "canberra, not sydney", tmp_path).detail == (
        'The answer contains "SYDNEY", which it must not.')
    sensitive = StaticChecks(contains=("Canberra",))
    assert verify(sensitive, "canberra", tmp_path).detail == 'The answer does not contain "Canberra".'
    # the option is for texts only: a regex states its own case rules
    assert not verify(StaticChecks(regex="^abc$", case_sensitive=False), "ABC", tmp_path).passed


def test_program_check_accepts_on_exit_0_and_reports_the_last_stderr_line(tmp_path) -> None:
    d = write_task(tmp_path, 'program = "tests/check.py"')
    (d / "tests").mkdir()
    (d / "tests" / "check.py").write_text(CHECK_PY)
    (d / "tests" / "check.py").chmod(0o755)
    checks = static_checks(d)
    assert checks == StaticChecks(program="tests/check.py")
    assert verify(checks, "it is ok", d) == Verdict(1.0, "")
    assert verify(checks, "no", d) == Verdict(
        0.0, "The check program tests/check.py rejected the answer: The answer does not say ok.")


def test_program_check_without_message_or_past_its_timeout(tmp_path, monkeypatch) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "quiet.sh").write_text("#!/bin/sh\nexit 3\n")
    (d / "slow.sh").write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")
    for p in d.iterdir():
        p.chmod(0o755)
    assert verify(StaticChecks(program="quiet.sh"), "x", d).detail == (
        "The check program quiet.sh rejected the answer (exit code 3).")
    monkeypatch.setattr(static, "PROGRAM_TIMEOUT_SEC", 0.3)
    started = time.monotonic()
    assert verify(StaticChecks(program="slow.sh"), "x", d) == Verdict(
        0.0, "The check program slow.sh did not finish within 0.3 seconds.")
    assert time.monotonic() - started < 5  # the background sleep holding stderr was killed too


def test_program_check_gets_no_credentials_from_the_environment(tmp_path, monkeypatch) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "env.sh").write_text('#!/bin/sh\n[ -z "$AMBER_TEST_SECRET" ] || { echo "leaked" >&2; exit 1; }\n')
    (d / "env.sh").chmod(0o755)
    monkeypatch.setenv("AMBER_TEST_SECRET", "s3cret")
    assert verify(StaticChecks(program="env.sh"), "x", d).passed


def test_checks_without_a_program_start_no_process_and_are_fast(tmp_path, monkeypatch) -> None:
    def no_process(*args, **kwargs):
        raise AssertionError("a check without a program started a process")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    checks = StaticChecks(contains=("total",), not_contains=("error",), regex=r"\$\d+", number=27.94,
                          tolerance=0.005, case_sensitive=False)
    answer = "Adding it all up, the TOTAL is $27.94. " * 20
    started = time.perf_counter()
    for _ in range(2000):
        assert verify(checks, answer, tmp_path).passed
    assert time.perf_counter() - started < 1.0  # ~1,000 verifies a second is the need; this is far faster


# --- multi-turn Instructions --------------------------------------------------------------------------------------

def test_a_single_turn_instruction_is_one_turn_without_surrounding_blank_lines() -> None:
    assert turns("\n\n# Title\n\n  indented line\n\n  \n") == ["# Title\n\n  indented line"]


def test_turns_split_at_marker_lines() -> None:
    text = f"First message.\n\n{NEXT_TURN}\n\nSecond\nmessage.\n{NEXT_TURN}  \r\nThird.\n"
    assert turns(text) == ["First message.", "Second\nmessage.", "Third."]
    # the marker inside a line is text, not a turn break
    assert turns(f"See {NEXT_TURN} here.") == [f"See {NEXT_TURN} here."]


@pytest.mark.parametrize(("text", "message"), [
    (f"One.\n{NEXT_TURN}\n\n  \n{NEXT_TURN}\nThree.", "has an empty turn 2 of 3"),
    (f"One.\n{NEXT_TURN}\n", "has an empty turn 2 of 2"),
    ("\n \n", "is empty"),
])
def test_empty_turns_are_format_errors(text, message) -> None:
    with pytest.raises(AmberError) as e:
        turns(text, source="bench/t/instruction.md")
    assert one_line_error(e).startswith(f"bench/t/instruction.md {message}")


def test_an_empty_turn_fails_the_static_tasks_format_check(tmp_path) -> None:
    d = write_task(tmp_path, "number = 1", instruction=f"{NEXT_TURN}\nWhat is 1?\n")
    with pytest.raises(AmberError) as e:
        load_task(d, tmp_path)
    assert one_line_error(e) == (
        f"{d / 'instruction.md'} has an empty turn 1 of 2: write a user message between the {NEXT_TURN} lines, "
        "or remove the extra marker line.")


# --- the format and its errors ------------------------------------------------------------------------------------

def test_load_task_fills_static_for_a_static_task_only(tmp_path) -> None:
    d = write_task(tmp_path, 'contains = ["a", "b"]\nnot_contains = ["c"]\ncase_sensitive = false\n'
                             "regex = '^x'\nnumber = 3\ntolerance = 0.5")
    assert load_task(d, tmp_path).static == StaticChecks(
        contains=("a", "b"), not_contains=("c",), case_sensitive=False, regex="^x", number=3.0, tolerance=0.5)

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "task.toml").write_text('version = "1.0"\n[metadata]\ndifficulty = "easy"\n')
    (plain / "instruction.md").write_text("Do it.\n")
    assert load_task(plain, tmp_path).static is None  # no environment/ and no checks: today's behaviour
    (plain / "environment").mkdir()
    assert load_task(plain, tmp_path).static is None


def test_the_checks_table_survives_harbors_schema() -> None:
    from harbor.models.task.config import TaskConfig

    text = (STATIC_BENCH / "moon-landing-date" / "task.toml").read_text()
    config = TaskConfig.model_validate(tomllib.loads(text))
    assert config.metadata["amber"]["static"] == {"regex": r"^\s*1969-07-20\s*$"}
    assert "[metadata.amber.static]" in config.model_dump_toml()


@pytest.mark.parametrize(("checks", "problem"), [
    ("case_sensitive = false", "[metadata.amber.static] declares no check; add at least one of contains, "
                               "not_contains, regex, number or program."),
    ("regex = '(unclosed'", 'regex "(unclosed" is not a valid regular expression (missing ), unterminated '
                            "subpattern at position 0); fix the pattern in [metadata.amber.static]."),
    ('program = "../outside.py"', 'program "../outside.py" is outside the Task folder; ship the program in the '
                                  'Task folder and give its relative path, such as "tests/check.py".'),
    ('program = "/usr/bin/true"', 'program "/usr/bin/true" is outside the Task folder; ship the program in the '
                                  'Task folder and give its relative path, such as "tests/check.py".'),
    ('program = "tests/missing.py"', 'program "tests/missing.py" does not exist in the Task folder; add the file '
                                     "or fix the path."),
    ('number = "42"', "number is '42', not a finite number; write number as a TOML number without quotes, "
                      "such as number = 42.0."),
    ("number = nan", "number is nan, not a finite number; write number as a TOML number without quotes, "
                     "such as number = 42.0."),
    ("number = 1\ntolerance = -1", "tolerance is -1, which is negative; give a tolerance of 0 or more."),
    ("tolerance = 1", "[metadata.amber.static] gives a tolerance without a number; add number or remove tolerance."),
    ('contains = "x"', "contains is 'x', not a list of non-empty texts; write contains = [\"text\", ...]."),
    ('not_contains = [""]', "not_contains is [''], not a list of non-empty texts; write not_contains = "
                            "[\"text\", ...]."),
    ('contain = ["x"]', "[metadata.amber.static] has an unknown key 'contain'; use only contains, not_contains, "
                        "case_sensitive, regex, number, tolerance, program."),
])
def test_bad_check_definitions_are_one_line_errors_naming_task_toml(tmp_path, checks, problem) -> None:
    d = write_task(tmp_path, checks)
    (tmp_path / "outside.py").write_text("#!/usr/bin/env python3\n")
    with pytest.raises(AmberError) as e:
        static_checks(d)
    assert one_line_error(e) == f"{d / 'task.toml'} has an invalid static check: {problem}"


def test_a_program_must_be_executable(tmp_path) -> None:
    d = write_task(tmp_path, 'program = "check.py"')
    (d / "check.py").write_text("import sys\n")
    with pytest.raises(AmberError) as e:
        static_checks(d)
    assert one_line_error(e).endswith('program "check.py" is not executable; give it a first line such as '
                                      "#!/usr/bin/env python3 and mark it executable (chmod +x).")


def test_static_checks_and_an_environment_conflict(tmp_path) -> None:
    d = write_task(tmp_path, 'contains = ["x"]')
    (d / "environment").mkdir()
    with pytest.raises(AmberError) as e:
        static_checks(d)
    assert "declares [metadata.amber.static] checks but the Task has an Environment" in one_line_error(e)


def test_verify_rejects_bad_definitions_it_is_given_directly(tmp_path) -> None:
    with pytest.raises(AmberError) as e:
        verify(StaticChecks(regex="["), "x", tmp_path)
    assert one_line_error(e).startswith(f"{tmp_path / 'task.toml'} has an invalid static check: regex \"[\"")
    with pytest.raises(AmberError) as e:
        verify(StaticChecks(program="../x.py"), "x", tmp_path)
    assert "is outside the Task folder" in one_line_error(e)


# --- the example Benchmark and the replay models ------------------------------------------------------------------

@pytest.fixture(scope="module")
def static_version(tmp_path_factory) -> versions.BenchmarkVersion:
    return versions.snapshot(STATIC_BENCH, tmp_path_factory.mktemp("store"), name="static-bench")


def test_the_example_benchmark_snapshots_with_every_task_static(static_version) -> None:
    assert [t.name for t in static_version.tasks] == EXAMPLE_TASKS
    assert len(EXAMPLE_TASKS) == 12
    assert all(t.static is not None for t in static_version.tasks)
    kinds = {k for t in static_version.tasks for k in ("contains", "not_contains", "regex", "number", "program")
             if getattr(t.static, k)}
    assert kinds == {"contains", "not_contains", "regex", "number", "program"}
    assert any(t.static and not t.static.case_sensitive for t in static_version.tasks)
    assert sorted(len(turns(t.instruction)) for t in static_version.tasks)[-1] in (2, 3)
    # the replay server finds a Task by its (first) message, so none may occur inside another's
    firsts = {t.name: turns(t.instruction)[0] for t in static_version.tasks}
    assert not [(a, b) for a in firsts for b in firsts if a != b and firsts[a] in firsts[b]]


@pytest.mark.parametrize("name", EXAMPLE_TASKS)
def test_each_example_task_accepts_its_solution_and_rejects_a_wrong_answer(static_version, name) -> None:
    task = next(t for t in static_version.tasks if t.name == name)
    task_dir = static_version.task_path(task)
    assert task.static is not None
    assert verify(task.static, (task_dir / "solution" / "answer.txt").read_text(), task_dir) == Verdict(1.0, "")
    wrong = verify(task.static, "I don't know.", task_dir)
    assert wrong.reward == 0.0 and wrong.detail.startswith("The ") and wrong.detail.endswith(".")


@pytest.mark.parametrize(("model", "solved"), [("replay-strong", 11), ("replay-weak", 5)])
def test_replay_answers_score_as_the_readme_says(static_version, model, solved) -> None:
    replay = json.loads((EXAMPLES / "replays" / f"{model}.json").read_text(encoding="utf-8"))
    verdicts = {}
    for task in static_version.tasks:
        replies = replay["tasks"][task.name]
        assert all(isinstance(r, str) for r in replies)
        assert len(replies) == len(turns(task.instruction))
        assert task.static is not None
        verdicts[task.name] = verify(task.static, replies[-1], static_version.task_path(task))
    assert sum(v.reward for v in verdicts.values()) == solved
    readme = (EXAMPLES / "README.md").read_text()
    assert f"`{model}` answers {solved}/12" in readme
    for name, verdict in verdicts.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` |"))
        cell = row.split("|")[3 if model == "replay-strong" else 4].strip().lstrip("*")
        assert cell.startswith("yes" if verdict.passed else "no"), (model, name, verdict)


def test_both_replay_models_fail_different_tasks(static_version) -> None:
    failed = {}
    for model in ("replay-strong", "replay-weak"):
        replay = json.loads((EXAMPLES / "replays" / f"{model}.json").read_text(encoding="utf-8"))
        failed[model] = {t.name for t in static_version.tasks
                         if t.static and not verify(t.static, replay["tasks"][t.name][-1],
                                                     static_version.task_path(t)).passed}
    assert failed["replay-strong"] - failed["replay-weak"]  # the weak model is not merely a superset of errors
