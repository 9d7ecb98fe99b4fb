"""Static adapters: published datasets' files as Benchmarks of static Tasks that the Direct Agent runs.

Each fixture in tests/fixtures/adapters is a small file in its dataset's published format. Every adapter's
output is checked the way a user would: the Task names, checks and Instructions it writes; that Amber loads it as
a Benchmark whose id is the same on a second conversion; that each Task's reference answer passes its check and a
wrong answer fails it; that a malformed file is one sentence naming the file and the line; and, end to end, that
the Direct Agent runs each adapted Benchmark through the model proxy against a provider double on loopback
serving the replay scripts in tests/fixtures/adapters/replays, with the Rewards those scripts earn.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import funded, request

from amber_pipeline.benchmarks import static, versions
from amber_pipeline.benchmarks.adapters import (
    ADAPTERS,
    MAX_INSTRUCTION_BYTES,
    AdaptedBenchmark,
    adapt,
    adapt_sharded,
    gsm8k,
    humaneval,
    longmemeval,
    mrcr,
    sharded,
)
from amber_pipeline.benchmarks.adapters.checks import longmemeval as longmemeval_check
from amber_pipeline.benchmarks.adapters.checks import mrcr as mrcr_check
from amber_pipeline.benchmarks.static import NEXT_TURN, StaticChecks, Verdict, verify
from amber_pipeline.errors import AmberError

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
SOURCES = {"gsm8k": FIXTURES / "gsm8k.jsonl", "humaneval": FIXTURES / "humaneval.jsonl",
           "longmemeval": FIXTURES / "longmemeval.json", "mrcr": FIXTURES / "mrcr.jsonl"}
SHARDS = {"gsm8k": FIXTURES / "gsm8k-shards.jsonl", "humaneval": FIXTURES / "humaneval-shards.jsonl"}
# every Benchmark the fixtures make: the four plain ones, and sharded + concat of both bases
BENCHMARKS = [*SOURCES, "gsm8k-sharded", "gsm8k-concat", "humaneval-sharded", "humaneval-concat"]


def convert(name: str, root: Path) -> AdaptedBenchmark:
    """One of BENCHMARKS, converted from its fixture into a new folder under ``root``."""
    if name in SOURCES:
        return adapt(name, SOURCES[name], root / name)
    base, variant = name.split("-")
    pair = adapt_sharded(base, SOURCES[base], SHARDS[base], root / base)
    return pair[0] if variant == "sharded" else pair[1]


@pytest.fixture(scope="module")
def adapted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AdaptedBenchmark]:
    root = tmp_path_factory.mktemp("adapted")
    out = {name: convert(name, root) for name in SOURCES}
    for base in SHARDS:
        out[f"{base}-sharded"], out[f"{base}-concat"] = adapt_sharded(base, SOURCES[base], SHARDS[base],
                                                                      root / f"{base}-sharded-pair")
    return out


@pytest.fixture(scope="module")
def loaded(adapted: dict[str, AdaptedBenchmark], tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, versions.BenchmarkVersion]:
    store = tmp_path_factory.mktemp("store")
    return {name: versions.snapshot(b.root, store, name=b.name) for name, b in adapted.items()}


def task_dir(b: AdaptedBenchmark, name: str) -> Path:
    return b.root / name


def toml(b: AdaptedBenchmark, name: str) -> dict[str, Any]:
    return tomllib.loads((task_dir(b, name) / "task.toml").read_text())


def instruction(b: AdaptedBenchmark, name: str) -> str:
    return (task_dir(b, name) / "instruction.md").read_text()


def check(b: AdaptedBenchmark, name: str, answer: str) -> Verdict:
    """The built-in Verifier's verdict on an answer to the Task, from its task.toml as Amber reads it."""
    checks = static.static_checks(task_dir(b, name))
    assert checks is not None
    return verify(checks, answer, task_dir(b, name))


def one_line_error(excinfo: pytest.ExceptionInfo[AmberError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and "Traceback" not in message and message.endswith("."), message
    return message


# ---- each adapter: the Tasks it writes -------------------------------------------------------------------------

def test_gsm8k_items_become_number_tasks_named_by_line(adapted) -> None:
    b = adapted["gsm8k"]
    assert (b.name, b.n_tasks, b.kind, b.refused) == ("gsm8k", 3, "gsm8k", ())
    assert sorted(p.name for p in b.root.iterdir()) == ["gsm8k-0001", "gsm8k-0002", "gsm8k-0003"]
    assert toml(b, "gsm8k-0002") == {
        "version": "1.0",
        "metadata": {"dataset": "GSM8K", "dataset_index": 1, "amber": {"static": {"number": 2250.0,
                                                                                  "tolerance": 1e-6}}},
        "agent": {"timeout_sec": gsm8k.TIMEOUT_SEC}}
    assert instruction(b, "gsm8k-0001") == (
        "A baker makes 4 trays of muffins with 12 muffins on each tray. She sells 30 muffins in the morning. "
        "How many muffins does she have left?\n\n"
        "Solve the problem step by step, then give the final answer as a number on the last line.\n")
    assert (task_dir(b, "gsm8k-0003") / "solution" / "answer.txt").read_text().endswith("#### 8.75\n")
    assert check(b, "gsm8k-0002", "The library has 2,250 books.").passed
    assert check(b, "gsm8k-0002", "2250.0000001").passed  # within the tolerance
    assert check(b, "gsm8k-0002", "It has 2,250 books, or 2251 counting mine.").detail == (
        "The answer's last number is 2251, not 2250.")


def test_humaneval_items_become_program_tasks_named_by_their_ids(adapted) -> None:
    b = adapted["humaneval"]
    assert sorted(p.name for p in b.root.iterdir()) == ["HumanEval-0", "HumanEval-1", "HumanEval-2"]
    meta = toml(b, "HumanEval-1")["metadata"]
    assert meta == {"dataset": "HumanEval", "dataset_index": 1, "dataset_id": "HumanEval/1",
                    "amber": {"static": {"program": "tests/check.py"}}}
    item = json.loads(SOURCES["humaneval"].read_text().splitlines()[1])
    assert instruction(b, "HumanEval-1") == (
        f"Complete the following Python function.\n\n```python\n{item['prompt'].strip()}\n```\n\n"
        "Reply with the complete Python function `count_vowels`, its signature and its body, in one ```python "
        "code block.\n")
    shipped = json.loads((task_dir(b, "HumanEval-1") / "tests" / "humaneval.json").read_text())
    assert shipped == {k: item[k] for k in ("entry_point", "prompt", "task_id", "test")}
    program = task_dir(b, "HumanEval-1") / "tests" / "check.py"
    assert program.stat().st_mode & 0o111 and program.read_text().startswith("#!/usr/bin/env python3\n")
    assert (task_dir(b, "HumanEval-1") / "solution" / "answer.txt").read_text() == (
        f"```python\n{(item['prompt'] + item['canonical_solution']).strip()}\n```\n")


def test_longmemeval_items_hold_the_dated_history_then_the_question(adapted) -> None:
    b = adapted["longmemeval"]
    assert sorted(p.name for p in b.root.iterdir()) == [
        "longmemeval-e47becba", "longmemeval-e47becba_abs", "longmemeval-gpt4_2655b836"]
    text = instruction(b, "longmemeval-gpt4_2655b836")
    assert static.turns(text) == [text.strip()]  # one user message
    order = ["Below are your earlier chat sessions with the user",
             "## Session 1, on 2023/06/01 (Thu) 18:30",
             "User: I just bought a basil plant and a small lemon tree for my balcony.",
             "Assistant: Water the basil when the top of the soil is dry",
             "## Session 2, on 2023/06/05 (Mon) 08:45",
             "User: Today I picked up a lavender plant",
             "## The question, asked on 2023/06/10 (Sat) 09:12\n\nHow many plants did I buy for my balcony?",
             'If the history does not hold the answer, say "I don\'t know".']
    at = [text.index(part) for part in order]
    assert at == sorted(at)
    meta = toml(b, "longmemeval-gpt4_2655b836")["metadata"]
    assert meta["dataset_id"] == "gpt4_2655b836" and meta["question_type"] == "multi-session"
    assert meta["amber"]["static"] == {"program": "tests/check.py"}
    # the expected answer 3 is a JSON number in the dataset; the check looks for it as a whole word
    assert check(b, "longmemeval-gpt4_2655b836", "You bought 3 plants.").passed
    assert check(b, "longmemeval-gpt4_2655b836", "You bought three plants.").passed
    assert check(b, "longmemeval-gpt4_2655b836", "You bought 13 plants in 2023.").detail == (
        'The check program tests/check.py rejected the answer: The answer lacks "3" of the expected answer.')
    assert check(b, "longmemeval-e47becba", "A BUSINESS-ADMINISTRATION degree!").passed
    assert check(b, "longmemeval-e47becba", "Business studies.").detail.endswith(
        'The answer lacks "administration" of the expected answer.')
    # abstention: a regex for "I don't know", and the reference answer says it before the dataset's explanation
    assert toml(b, "longmemeval-e47becba_abs")["metadata"]["amber"]["static"] == {"regex": longmemeval.REFUSAL}
    assert (task_dir(b, "longmemeval-e47becba_abs") / "solution" / "answer.txt").read_text().startswith(
        "I don't know. You did not mention this information.")
    for refusal in ("I don't know.", "Sorry, I do not know that.", "i dont know", "I don\u2019t know"):
        assert check(b, "longmemeval-e47becba_abs", refusal).passed, refusal
    assert not check(b, "longmemeval-e47becba_abs", "You studied music.").passed


@pytest.mark.parametrize(("expected", "answer", "lacking"), [
    ("Business Administration", "business administration", []),
    ("1,200 dollars", "It cost 1200 dollars.", []),
    ("1200", "It cost $1,200.", []),
    ("don't", "I dont", []),
    ("3:30 PM", "at 3.30 pm", []),
    ("cat", "concatenate", ["cat"]),
    ("2", "in 2023", ["2"]),
    ("seven", "7 times", []),
    ("Dr. Smith's clinic", "The clinic of dr smiths", []),
])
def test_longmemeval_words_are_whole_case_and_punctuation_aside(expected, answer, lacking) -> None:
    assert longmemeval_check.missing(expected, answer) == lacking


def test_mrcr_rows_become_a_transcript_then_the_request(adapted) -> None:
    b = adapted["mrcr"]
    assert sorted(p.name for p in b.root.iterdir()) == ["mrcr-0001", "mrcr-0002", "mrcr-0003"]
    row = json.loads(SOURCES["mrcr"].read_text().splitlines()[0])
    messages = json.loads(row["prompt"])
    text = instruction(b, "mrcr-0001")
    assert static.turns(text) == [text.strip()]
    assert text.startswith(mrcr.LEAD + "\n\n## Message 1, user\n\nwrite a poem about tapirs\n\n## Message 2, "
                                       "assistant\n\nThe tapir walks the forest floor,")
    assert text.endswith(f"## The user's next message\n\n{messages[-1]['content']}\n")
    assert text.count("## Message ") == len(messages) - 1
    meta = toml(b, "mrcr-0001")["metadata"]
    assert {k: meta[k] for k in ("dataset", "dataset_index", "n_needles", "desired_msg_index", "total_messages")} == {
        "dataset": "MRCR", "dataset_index": 0, "n_needles": 2, "desired_msg_index": 5, "total_messages": 7}
    expected = row["answer"]
    assert check(b, "mrcr-0001", expected).passed
    assert check(b, "mrcr-0001", " " + expected).detail.endswith(
        'The answer does not start with the requested prefix "kX9pQ2mZ7w".')  # as strict as the official grader
    assert check(b, "mrcr-0001", expected.replace("stream", "river")).passed  # one word off: over 90% similar
    half = expected[:len(expected) // 2]
    assert check(b, "mrcr-0001", half).detail.startswith(
        "The check program tests/check.py rejected the answer: The answer matches the expected text at ")


def test_mrcr_score_is_the_official_grader() -> None:
    assert mrcr_check.score("abcHello world", "abcHello world", "abc") == 1.0
    assert mrcr_check.score("Hello world", "abcHello world", "abc") == 0.0
    assert mrcr_check.score("abcHello", "abcHello world", "abc") == pytest.approx(2 * 5 / (5 + 11))


@pytest.mark.parametrize("base", list(SHARDS))
def test_sharded_and_concat_have_the_same_names_and_checks(adapted, base) -> None:
    split, joined = adapted[f"{base}-sharded"], adapted[f"{base}-concat"]
    assert (split.kind, joined.kind) == ("sharded", "concat")
    names = sorted(p.name for p in split.root.iterdir())
    assert names == sorted(p.name for p in joined.root.iterdir()) and split.n_tasks == joined.n_tasks == 2
    shards = {}
    for line in SHARDS[base].read_text().splitlines():
        entry = json.loads(line)
        shards[entry.get("task_id", f"gsm8k-{entry.get('index', 0) + 1:04d}").replace("/", "-")] = entry["shards"]
    assert sorted(shards) == names
    plain = adapted[base]
    for name in names:
        checks = toml(split, name)["metadata"]["amber"]["static"]
        assert checks == toml(joined, name)["metadata"]["amber"]["static"] == toml(plain, name)["metadata"]["amber"][
            "static"]
        for f in ("solution/answer.txt", "tests/check.py", "tests/humaneval.json"):
            same = [(b.root / name / f).read_bytes() if (b.root / name / f).exists() else None
                    for b in (split, joined, plain)]
            assert same[0] == same[1] == same[2], f
        turns = static.turns(instruction(split, name))
        assert turns[:-1] == shards[name]
        assert turns[-1].startswith(sharded.LAST_TURN + " ")
        (single,) = static.turns(instruction(joined, name))
        assert single.startswith(sharded.CONCAT_LEAD) and turns[-1].removeprefix(sharded.LAST_TURN + " ") in single
        assert all(f"- {s}" in single for s in shards[name])
        assert {toml(split, name)["metadata"]["variant"], toml(joined, name)["metadata"]["variant"]} == {
            "sharded", "concat"}


# ---- every adapted Benchmark: loads, hashes the same twice, accepts its references, rejects a wrong answer ------

@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_output_is_a_benchmark_whose_id_is_the_same_on_a_second_conversion(loaded, name, tmp_path) -> None:
    version = loaded[name]
    assert version.tasks and all(t.static is not None for t in version.tasks)
    again = convert(name, tmp_path / "again")
    assert versions.snapshot(again.root, tmp_path / "store").id == version.id
    files = sorted(p.relative_to(again.root) for p in again.root.rglob("*") if p.is_file())
    assert [(f, (again.root / f).read_bytes()) for f in files] == [(f, (version.root / f).read_bytes())
                                                                    for f in files]


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_reference_answer_passes_and_a_wrong_answer_fails(loaded, name) -> None:
    version = loaded[name]
    for task in version.tasks:
        folder = version.task_path(task)
        assert task.static is not None
        reference = (folder / "solution" / "answer.txt").read_text()
        assert verify(task.static, reference, folder) == Verdict(1.0, ""), task.name
        wrong = verify(task.static, "I cannot say.", folder)
        assert wrong.reward == 0.0 and wrong.detail.startswith("The ") and wrong.detail.endswith("."), task.name


# ---- HumanEval's check runs answers on the host: right, wrong, endless and harmful ones ------------------------

HARMFUL = {
    "a shell command": "import os\n\ndef add(x, y):\n    os.system('touch {marker}')\n    return x + y\n",
    "a shell command at top level": "import os\nos.system('touch {marker}')\n\ndef add(x, y):\n    return x + y\n",
    "a subprocess": "def add(x, y):\n    import subprocess\n    subprocess.run(['touch', '{marker}'])\n"
                    "    return x + y\n",
    "a file write": "def add(x, y):\n    open('{marker}', 'w').write('x')\n    return x + y\n",
    "ctypes": "def add(x, y):\n    import ctypes\n    ctypes.CDLL(None).system(b'touch {marker}')\n    return x + y\n",
    "an early exit": "def add(x, y):\n    import sys\n    sys.exit(0)\n",
    "an immediate exit": "def add(x, y):\n    import os\n    os._exit(0)\n",
}


@pytest.fixture
def add_task(adapted) -> Iterator[tuple[StaticChecks, Path]]:
    folder = task_dir(adapted["humaneval"], "HumanEval-2")
    checks = static.static_checks(folder)
    assert checks is not None
    yield checks, folder


def fenced(code: str) -> str:
    return f"Here you go:\n\n```python\n{code}```\n"


def test_humaneval_accepts_a_right_function_and_names_the_failure_of_a_wrong_one(add_task) -> None:
    checks, folder = add_task
    assert verify(checks, fenced("def add(x, y):\n    return x + y\n"), folder).passed
    assert verify(checks, "def add(x, y):\n    return y + x", folder).passed  # no fence: the whole answer
    assert verify(checks, fenced("def helper():\n    pass\n\ndef plus(a, b):\n    return a + b\n"), folder).passed
    # the last block that defines a function counts, and in it the one named like the entry point
    two = fenced("def add(x, y):\n    return 0\n") + fenced("def add(x, y):\n    return x + y\n\ndef other():\n"
                                                            "    pass\n")
    assert verify(checks, two, folder).passed
    assert verify(checks, fenced("def add(x, y):\n    return x - y\n"), folder) == Verdict(
        0.0, "The check program tests/check.py rejected the answer: The function fails the item's tests: "
             "AssertionError.")
    assert verify(checks, "I would rather not.", folder) == Verdict(
        0.0, "The check program tests/check.py rejected the answer: The answer holds no Python function that "
             "parses (expected one named add).")


def test_humaneval_uses_the_prompts_helpers(adapted) -> None:
    folder = task_dir(adapted["humaneval"], "HumanEval-1")
    checks = static.static_checks(folder)
    assert checks is not None
    assert verify(checks, fenced("def count_vowels(s):\n    return sum(map(is_vowel, s))\n"), folder).passed


def test_humaneval_stops_an_endless_function_in_its_time_limit(add_task) -> None:
    checks, folder = add_task
    started = time.monotonic()
    verdict = verify(checks, fenced("def add(x, y):\n    while True:\n        pass\n"), folder)
    took = time.monotonic() - started
    assert verdict == Verdict(0.0, "The check program tests/check.py rejected the answer: The function did not "
                                   "finish its tests within 3 seconds.")
    assert took < static.PROGRAM_TIMEOUT_SEC


@pytest.mark.parametrize("kind", list(HARMFUL))
def test_humaneval_refuses_harmful_calls_without_harm(add_task, tmp_path, kind) -> None:
    checks, folder = add_task
    marker = tmp_path / "harmed"
    verdict = verify(checks, fenced(HARMFUL[kind].format(marker=marker)), folder)
    assert not marker.exists()
    if kind == "a shell command at top level":
        assert verdict.passed  # only the answer's imports and function are run, not its other statements
    elif kind.endswith("exit"):
        assert verdict.detail.endswith("The function ended the program before the tests finished.")
    else:
        assert verdict.reward == 0.0 and "is not allowed in this check" in verdict.detail, verdict.detail
    assert sorted(p.name for p in folder.rglob("*")) == ["answer.txt", "check.py", "humaneval.json",
                                                         "instruction.md", "solution", "task.toml", "tests"]


# ---- malformed input: one sentence naming the file and the item, and nothing written ---------------------------

def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


GSM_OK = json.dumps({"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"})
HE_OK = SOURCES["humaneval"].read_text().splitlines()[2]


@pytest.mark.parametrize(("kind", "name", "text", "where", "problem"), [
    ("gsm8k", "a.jsonl", GSM_OK + "\n{not json\n", "line 2", "is not valid JSON (Expecting property name enclosed "
                                                             "in double quotes at column 2): give the GSM8K file"),
    ("gsm8k", "a.jsonl", GSM_OK + "\n\n" + json.dumps({"question": "Q?", "answer": "It is four."}), "line 3",
     "has no #### line where a GSM8K answer ends with #### and the final number"),
    ("gsm8k", "a.jsonl", json.dumps({"question": "Q?", "answer": "#### four"}), "line 1",
     'has "four" after its #### where a GSM8K answer ends'),
    ("gsm8k", "a.jsonl", json.dumps({"answer": "#### 4"}), "line 1",
     'has no "question" field where a GSM8K item has a text'),
    ("gsm8k", "a.jsonl", "[1, 2]", "item 1", "is not a JSON object"),
    ("humaneval", "h.jsonl", HE_OK.replace('"entry_point": "add"', '"entry_point": "subtract"'), "line 1",
     "has no function subtract in its prompt and canonical_solution"),
    ("humaneval", "h.jsonl", HE_OK.replace("def check(candidate)", "def verify(candidate)"), "line 1",
     "has a test without a check function"),
    ("humaneval", "h.jsonl", HE_OK.replace("def add(x: int, y: int):", "def add(x: int, y: int)"), "line 1",
     "has a prompt that is not valid Python (line 3: expected ':')"),
    ("longmemeval", "l.json", '{\n  "question_id": "x"\n}\n', None, "is one JSON object, not a JSON list of items"),
    ("longmemeval", "l.json", '[{"question_id": "x"},\n', None, "is not valid JSON (Expecting value at line 2, "
                                                                 "column 1): give the LongMemEval file as published"),
    ("longmemeval", "l.json", json.dumps([{**json.loads(SOURCES["longmemeval"].read_text())[0],
                                           "haystack_dates": ["2023/05/20"]}]), "item 1",
     "has haystack_dates that are not 2 texts, one per session"),
    ("mrcr", "m.jsonl", json.dumps({"prompt": "[{", "answer": "x", "random_string_to_prepend": "x"}), "line 1",
     "has a prompt that is not JSON"),
    ("mrcr", "m.jsonl", json.dumps({"prompt": '[{"role": "user", "content": "Prepend ab to it."}]',
                                    "answer": "poem", "random_string_to_prepend": "ab"}), "line 1",
     "has an answer that does not start with its random_string_to_prepend"),
])
def test_a_malformed_file_is_one_sentence_naming_it_and_writes_nothing(tmp_path, kind, name, text, where,
                                                                        problem) -> None:
    source = write(tmp_path / name, text)
    dest = tmp_path / "out"
    with pytest.raises(AmberError) as e:
        adapt(kind, source, dest)
    message = one_line_error(e)
    assert message.startswith(f"{source} {where} " if where else f"{source} "), message
    assert problem in message
    assert not dest.exists() and [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize(("shards", "problem"), [
    ('{"index": 7, "shards": ["a"]}', "line 1 names an item that"),
    ('{"index": 0, "shards": []}', 'line 1 has no "shards" list of non-empty texts'),
    ('{"shards": ["a"]}', "line 1 has neither a task_id text nor a 0-based index"),
    ('{"index": 0, "shards": ["a"]}\n{"index": 0, "shards": ["b"]}', "line 1 and "),
])
def test_a_malformed_shards_file_is_one_sentence(tmp_path, shards, problem) -> None:
    path = write(tmp_path / "shards.jsonl", shards)
    with pytest.raises(AmberError) as e:
        adapt_sharded("gsm8k", SOURCES["gsm8k"], path, tmp_path / "out")
    assert problem in one_line_error(e) and str(path) in str(e.value)
    assert not (tmp_path / "out").exists()


def test_unknown_kinds_missing_files_and_used_folders_are_one_sentence(tmp_path) -> None:
    with pytest.raises(AmberError) as e:
        adapt("mmlu", SOURCES["gsm8k"], tmp_path / "out")
    assert one_line_error(e) == "There is no adapter for mmlu: choose one of gsm8k, humaneval, sharded, " \
                                "longmemeval, mrcr."
    with pytest.raises(AmberError) as e:
        adapt("gsm8k", tmp_path / "missing.jsonl", tmp_path / "out")
    assert one_line_error(e) == f"No file at {tmp_path / 'missing.jsonl'}: give the path of the GSM8K file."
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    with pytest.raises(AmberError) as e:
        adapt("gsm8k", SOURCES["gsm8k"], tmp_path / "used")
    assert one_line_error(e).startswith(f"{tmp_path / 'used'} already exists and is not an empty folder")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["keep.txt"]
    with pytest.raises(AmberError) as e:
        adapt("sharded", SOURCES["gsm8k"], tmp_path / "out")
    assert "needs a base dataset and a shards file" in one_line_error(e)
    with pytest.raises(AmberError) as e:
        adapt_sharded("mrcr", SOURCES["mrcr"], SHARDS["gsm8k"], tmp_path / "out")
    assert one_line_error(e) == "There is no sharded variant of mrcr: choose a base of gsm8k, humaneval."


# ---- the forms of the files, the limit, the long-input guard ----------------------------------------------------

def test_gzip_and_parquet_files_give_the_same_tasks(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    gz = tmp_path / "HumanEval.jsonl.gz"
    gz.write_bytes(gzip.compress(SOURCES["humaneval"].read_bytes()))
    rows = [json.loads(line) for line in SOURCES["mrcr"].read_text().splitlines()]
    parquet = tmp_path / "mrcr.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    store = tmp_path / "store"
    for kind, other in (("humaneval", gz), ("mrcr", parquet)):
        a = adapt(kind, SOURCES[kind], tmp_path / f"{kind}-a")
        b = adapt(kind, other, tmp_path / f"{kind}-b")
        assert versions.snapshot(a.root, store).id == versions.snapshot(b.root, store).id


def test_limit_takes_the_first_items(tmp_path) -> None:
    b = adapt("gsm8k", SOURCES["gsm8k"], tmp_path / "two", limit=2)
    assert b.n_tasks == 2 and sorted(p.name for p in b.root.iterdir()) == ["gsm8k-0001", "gsm8k-0002"]


def test_an_instruction_over_the_limit_is_left_out_in_one_sentence(tmp_path) -> None:
    long = {"question": "Count the words. " + "word " * (MAX_INSTRUCTION_BYTES // 5), "answer": "#### 1"}
    marker = {"question": f"First part.\n{NEXT_TURN}\nSecond part.", "answer": "#### 2"}
    source = write(tmp_path / "g.jsonl", "\n".join([GSM_OK, json.dumps(long), json.dumps(marker)]) + "\n")
    b = adapt("gsm8k", source, tmp_path / "out")
    assert b.n_tasks == 1 and [p.name for p in b.root.iterdir()] == ["gsm8k-0001"]
    size = len(f"{long['question'].strip()}\n\n{gsm8k.REQUEST}\n")
    assert MAX_INSTRUCTION_BYTES == 2 * 1024 * 1024 < size
    assert b.refused == (
        f"{source} line 2 is left out: its Instruction is {size:,} bytes, over the 2,097,152 (2 MiB) a static Task "
        "may hold, so shorten the item or use a smaller variant of the dataset.",
        f"{source} line 3 is left out: its text holds a line that reads as Amber's turn marker {NEXT_TURN}, which "
        "would split it into turns the dataset does not have.")
    only_long = write(tmp_path / "long.jsonl", json.dumps(long) + "\n")
    with pytest.raises(AmberError) as e:
        adapt("gsm8k", only_long, tmp_path / "none")
    assert one_line_error(e).startswith(f"No item of {only_long} could be written")
    assert not (tmp_path / "none").exists()


def test_every_adapter_is_registered_with_a_one_line_description() -> None:
    assert list(ADAPTERS) == ["gsm8k", "humaneval", "sharded", "longmemeval", "mrcr"]
    for kind, adapter in ADAPTERS.items():
        assert adapter.kind == kind
        assert "\n" not in adapter.description and adapter.description.endswith(".")
        assert (adapter.items is None) == (kind == "sharded")
    assert humaneval.DESCRIPTION.endswith("(not a sandbox).")


# ---- end to end: the Direct Agent runs each adapted Benchmark ---------------------------------------------------

# What the replay scripts (tests/fixtures/adapters/replays) answer, Task by Task, as the built-in Verifier scores it.
EXPECTED_REWARDS = {
    "gsm8k": {"gsm8k-0001": 1.0, "gsm8k-0002": 1.0, "gsm8k-0003": 0.0},
    "humaneval": {"HumanEval-0": 1.0, "HumanEval-1": 1.0, "HumanEval-2": 0.0},
    "longmemeval": {"longmemeval-e47becba": 1.0, "longmemeval-gpt4_2655b836": 1.0, "longmemeval-e47becba_abs": 0.0},
    "mrcr": {"mrcr-0001": 1.0, "mrcr-0002": 0.0, "mrcr-0003": 1.0},
    "gsm8k-sharded": {"gsm8k-0001": 1.0, "gsm8k-0002": 0.0},  # lost in the conversation ...
    "gsm8k-concat": {"gsm8k-0001": 1.0, "gsm8k-0002": 1.0},  # ... but not when given everything at once
}


@pytest.mark.parametrize("name", list(EXPECTED_REWARDS))
def test_the_direct_agent_runs_each_adapted_benchmark(adapted, name, tmp_path, monkeypatch, warehouse) -> None:
    from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
    from amber_pipeline.jobs import cell_run, lifecycle
    from amber_pipeline.jobs.records import cells_of, get_job
    from amber_pipeline.models import configurations
    from amber_pipeline.models.configurations import ModelConfiguration, Prices
    from amber_pipeline.models.provider_double import ProviderDouble, load_replay

    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))  # never the developer's file
    bench = tmp_path / name
    shutil.copytree(adapted[name].root, bench)
    replay = load_replay(FIXTURES / "replays" / f"{name}.json")
    assert sorted(replay.scripts) == sorted(EXPECTED_REWARDS[name])
    firsts = {d.name: static.turns((d / "instruction.md").read_text())[0] for d in sorted(bench.iterdir())}
    for task, script in replay.scripts.items():
        assert len(script) == len(static.turns((bench / task / "instruction.md").read_text())), task
    funded(warehouse, DEFAULT_WORKSPACE, "20")
    with ProviderDouble([replay], firsts) as double:
        configurations.add(warehouse.paths, DEFAULT_WORKSPACE, ModelConfiguration(
            name=replay.model, model=replay.model, provider="openai-compatible", base_url=double.base_url,
            prices=Prices(input=1.0, cached_input=0.1, output=5.0, source="made up for the tests"),
            description="replay: the adapter fixtures' scripted answers"))
        _, job = lifecycle.submit(warehouse, DEFAULT_WORKSPACE, local_user(),
                                  request(str(bench), "direct", [replay.model]))
        for cell in cells_of(warehouse, job.id):
            cell_run.run_cell_of_job(warehouse, job.id, cell.cell_key)
        assert double.requests_served(replay.model) == sum(len(s) for s in replay.scripts.values())
    assert get_job(warehouse, job.id, DEFAULT_WORKSPACE).status == "completed"
    with warehouse.query(DEFAULT_WORKSPACE) as con:
        trials = con.execute("select task_name, reward, errored from trials where job_id = ?", [job.id]).fetchall()
    assert {t: r for t, r, _ in trials} == EXPECTED_REWARDS[name]
    assert not any(errored for _, _, errored in trials)
