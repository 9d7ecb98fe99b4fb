"""Quotes from what is already known: the Benchmark summaries give the Quote a re-derivation gives, and a summary
never outlives what it was made from (a stale summary would be a wrong price).

A Quote reads a Benchmark's Tasks from their summaries (`benchmarks/summaries.py`: a stored Version's by its id, a
folder's by its fingerprint) and their image tags from a summary of the Version (`quotes.image_tags`); history
comes from the catalog, written when Trials are charged; Docker is asked every time. Each test compares a Quote
made from the summaries with one made after they were removed (every Task read and hashed again), or shows what
makes them derived again: an edited Task (even one whose size and modification time are put back), a Task added,
new reading rules, a torn summary file. Only the last test needs Docker.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from decimal import Decimal
from pathlib import Path

import pytest
from helpers import funded, request

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import registry, summaries, versions
from amber_pipeline.cells import Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import history, lifecycle, quotes
from amber_pipeline.jobs.quotes import TaskFacts
from amber_pipeline.jobs.records import get_job
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
WS = DEFAULT_WORKSPACE
MODELS = ["replay-strong", "replay-weak"]
TASKS = ["count-log-errors", "fix-off-by-one", "json-settings-update"]


RACY_SEC = 0.05  # the racy window here: a real one (2 s) would make every test wait


@pytest.fixture(autouse=True)
def short_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summaries, "RACY_SEC", RACY_SEC)


@pytest.fixture(autouse=True)
def no_docker_asked(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Docker's answer, as the test sets it (none built unless added): the same for every Quote of a test."""
    held: set[str] = set()
    monkeypatch.setattr(quotes, "_local_images", lambda tags: tags & held)
    return held


def settled_copy(tmp_path: Path, names: list[str] = TASKS) -> Path:
    """Demo Tasks copied into a Benchmark folder, older than the racy window once this returns."""
    root = tmp_path / "bench"
    for name in names:
        shutil.copytree(DEMO / name, root / name)
    settle()
    return root


def settle() -> None:
    time.sleep(2 * RACY_SEC)


def priced(wh: Warehouse, bench: Path | str) -> tuple[Decimal, list[dict]]:
    """The amount a Quote of the request would reserve and its cells, as `lifecycle.price` makes them."""
    made = lifecycle.price(wh, WS, local_user(), request(str(bench), "terminus-2", MODELS, bounds=True))
    return made.amount, [dataclasses.asdict(c) for c in made.cells]


def quoted(wh: Warehouse, bench: Path | str) -> tuple[Decimal, list[dict]]:
    """A Quote made (reserved) of the request: what keeps the summaries of what it priced."""
    made = lifecycle.quote(wh, WS, local_user(), request(str(bench), "terminus-2", MODELS, bounds=True))
    return made.amount, [dataclasses.asdict(c) for c in made.cells]


def forget() -> None:
    """This process's own memory of Task hashes and image tags: what follows comes from disk."""
    versions._task_hashes.clear()
    quotes._derived_tags.clear()


def rederived(wh: Warehouse, bench: Path | str) -> tuple[Decimal, list[dict]]:
    """The same, with every summary removed and this process's memory forgotten: every Task read again."""
    shutil.rmtree(wh.paths.cache / "summaries", ignore_errors=True)
    forget()
    return priced(wh, bench)


def summary_files(wh: Warehouse) -> list[Path]:
    return sorted((wh.paths.cache / "summaries").rglob("*.json"))


def no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, reading a task.toml or hashing a Task fails the test: what follows must come from summaries."""
    def refused(*_: object) -> None:
        raise AssertionError("a Task was read again")
    monkeypatch.setattr(versions, "load_task", refused)
    monkeypatch.setattr(versions, "hash_tasks", refused)
    forget()


def test_a_folder_quoted_again_is_priced_from_its_summary_as_a_rederivation_prices_it(
        tmp_path: Path, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse, amount="1000")
    bench = settled_copy(tmp_path)
    first = priced(warehouse, bench)
    assert summary_files(warehouse) == []  # pricing alone (a preview) keeps nothing
    assert quoted(warehouse, bench) == first
    assert {p.parent.name for p in summary_files(warehouse)} == {"folders", "versions", "image-tags"}
    with monkeypatch.context() as m:
        no_reading(m)
        from_summary = priced(warehouse, bench)
        assert quoted(warehouse, bench) == from_summary
    assert from_summary == first == rederived(warehouse, bench)
    assert first[0] > 0 and len(first[1]) == 4


def test_a_refused_quote_keeps_no_summary(tmp_path: Path, warehouse: Warehouse) -> None:
    """A refused command changes nothing (`test_refusals.py`), summaries included."""
    bench = settled_copy(tmp_path)
    funded(warehouse, amount="0.01")
    with pytest.raises(AmberError, match="available"):
        quoted(warehouse, bench)
    assert summary_files(warehouse) == []


def test_a_stored_version_opens_from_its_summary_with_the_same_tasks_and_hashes(
        tmp_path: Path, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse, amount="1000")
    made = lifecycle.quote(warehouse, WS, local_user(), request(str(settled_copy(tmp_path)), "terminus-2", MODELS,
                                                                 bounds=True))
    shutil.rmtree(warehouse.paths.cache / "summaries")  # as for a Version stored before summaries
    forget()
    job = get_job(warehouse, made.job_id, WS)
    version = registry.version(warehouse, job.benchmark_version_id, job.benchmark_owner)
    hashes = [version.task_hash(t) for t in version.tasks]
    by_label = priced(warehouse, job.benchmark_label)
    assert summary_files(warehouse) == []
    assert quoted(warehouse, job.benchmark_label) == by_label  # a Quote of the label made: its summaries kept
    with monkeypatch.context() as m:
        no_reading(m)
        again = registry.version(warehouse, job.benchmark_version_id, job.benchmark_owner)
        assert again.tasks == version.tasks
        assert [again.task_hash(t) for t in again.tasks] == hashes
        assert priced(warehouse, job.benchmark_label) == by_label
    assert rederived(warehouse, job.benchmark_label) == by_label
    # What the summary says is what hashing the stored files says.
    assert hashes == [versions.content_hash([version.task_path(t)], version.task_path(t)) for t in version.tasks]


@pytest.mark.parametrize("keep_size_and_time", [False, True])
def test_an_edited_task_is_read_again_and_priced_as_edited(tmp_path: Path, warehouse: Warehouse,
                                                           keep_size_and_time: bool) -> None:
    """The oracle is priced at its Tasks' agent timeouts: doubling one changes the Quote. An edit that keeps the
    file's size and puts its modification time back still changes its change time, which no user can set."""
    funded(warehouse, amount="1000")
    bench = settled_copy(tmp_path)
    before = quoted(warehouse, bench)
    toml = bench / "count-log-errors" / "task.toml"
    text = toml.read_text()
    assert "timeout_sec = 120.0" in text
    info = toml.stat()
    toml.write_text(text.replace("timeout_sec = 120.0", "timeout_sec = 240.0", 1))
    if keep_size_and_time:
        assert toml.stat().st_size == info.st_size
        os.utime(toml, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = priced(warehouse, bench)
    assert after[0] > before[0]
    assert quoted(warehouse, bench) == after == rederived(warehouse, bench)


def test_a_task_added_or_removed_is_read_again(tmp_path: Path, warehouse: Warehouse) -> None:
    funded(warehouse, amount="1000")
    bench = settled_copy(tmp_path)
    quoted(warehouse, bench)
    shutil.copytree(DEMO / "organize-inbox", bench / "organize-inbox")
    grown = priced(warehouse, bench)
    assert all(c["n_tasks"] == 4 for c in grown[1]) and grown == rederived(warehouse, bench)
    quoted(warehouse, bench)
    shutil.rmtree(bench / "fix-off-by-one")
    shrunk = priced(warehouse, bench)
    assert all(c["n_tasks"] == 3 for c in shrunk[1]) and shrunk == rederived(warehouse, bench)


def test_a_folder_just_written_is_not_summarized_until_it_settles(tmp_path: Path, warehouse: Warehouse,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit in the same clock tick as a fingerprint would leave it equal (git's "racy" files): a folder changed
    within RACY_SEC is read every time, and summarized once it is older."""
    funded(warehouse, amount="1000")
    bench = tmp_path / "bench"
    for name in TASKS:
        shutil.copytree(DEMO / name, bench / name)
    with monkeypatch.context() as m:
        m.setattr(summaries, "RACY_SEC", 30.0)  # the files are seconds old at most, however slow this machine
        quoted(warehouse, bench)
    folders = warehouse.paths.cache / "summaries" / "folders"
    assert not folders.exists() or not list(folders.iterdir())
    settle()
    quoted(warehouse, bench)
    assert len(list(folders.iterdir())) == 1


def test_a_refused_folder_is_refused_again_in_the_same_sentence(tmp_path: Path, warehouse: Warehouse) -> None:
    funded(warehouse)
    bench = settled_copy(tmp_path)
    shutil.copytree(bench / "fix-off-by-one", bench / "fix-off-by-one-again")
    toml = bench / "fix-off-by-one-again" / "task.toml"
    toml.write_text(toml.read_text() + "\n[[steps]]\ninstruction = \"again\"\n")
    settle()
    sentences = []
    for _ in range(2):
        with pytest.raises(AmberError) as refused:
            priced(warehouse, bench)
        sentences.append(str(refused.value))
    assert sentences[0] == sentences[1] and "fix-off-by-one-again/task.toml" in sentences[0]


def test_new_reading_rules_or_a_torn_summary_are_derived_again(tmp_path: Path, warehouse: Warehouse,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse, amount="1000")
    bench = settled_copy(tmp_path)
    first = quoted(warehouse, bench)
    for path in summary_files(warehouse):
        path.write_text(path.read_text()[:20])  # torn
    forget()
    assert priced(warehouse, bench) == first
    with monkeypatch.context() as m:
        m.setattr(summaries, "reading_rules", lambda: "other rules")
        reads = []
        real = versions.load_task
        m.setattr(versions, "load_task", lambda *a: reads.append(a) or real(*a))
        assert priced(warehouse, bench) == first
        assert len(reads) == len(TASKS)


def test_history_stored_after_a_quote_prices_the_next_quote(tmp_path: Path, warehouse: Warehouse) -> None:
    """A cell's history is the catalog's, written when its Trials are charged, and read by every Quote: nothing
    cached stands between a stored Trial and the next price."""
    funded(warehouse)
    bench = settled_copy(tmp_path)
    made = lifecycle.quote(warehouse, WS, local_user(), request(str(bench), "terminus-2", MODELS, bounds=True))
    job = get_job(warehouse, made.job_id, WS)
    version = registry.version(warehouse, job.benchmark_version_id, job.benchmark_owner)
    before = priced(warehouse, bench)
    assert before[1][0]["sources"]["agent"] == {"prior": 3}
    task = version.tasks[0]
    trial = TrialRecord.model_construct(job_id=job.id, task_name=task.name, attempt=0,
                                        task_hash=version.task_hash(task), cell_key=made.cells[0].cell_key,
                                        outcome="scored", image_sec=0.1, environment_sec=50.0, agent_sec=70.0,
                                        verifier_sec=40.0, duration_sec=160.1, input_tokens=90_000,
                                        cached_input_tokens=0, output_tokens=9_000)
    with warehouse.write() as con:
        history.record(con, WS, job.benchmark_owner, [trial])
    after = priced(warehouse, bench)
    assert after[0] > before[0]
    assert after[1][0]["sources"]["agent"] == {"cell history on the Task": 1, "cell history": 2}
    assert after[1][0]["sources"]["task"] == {"Task history": 1, "declared limits": 2}
    assert after == rederived(warehouse, bench)


def test_tasks_of_one_kind_are_priced_once_and_each_still_by_its_own_history(warehouse: Warehouse) -> None:
    """Tasks with the same limits and the same history share one estimate (1,000 Tasks of a kind are priced a few
    times, not 1,000), but a Task with history of its own is priced from it: here the cell's Agent took 100 s on
    t0 (140 s with headroom), which bounds no other Task's part (each is held to its 120 s agent timeout)."""
    cell = Cell("f" * 64, "terminus-2", agent_spec("terminus-2").spec_id, model_configuration("replay-weak").ref)
    tasks = [TaskFacts(f"t{i}", 120.0, 60.0, 300.0, task_hash=f"h-{i}") for i in range(3)]
    trial = TrialRecord.model_construct(job_id="job-x", task_name="t0", attempt=0, task_hash="h-0", cell_key=cell.key,
                                        outcome="scored", image_sec=None, environment_sec=None, agent_sec=100.0,
                                        verifier_sec=None, duration_sec=100.0, input_tokens=1_000,
                                        cached_input_tokens=0, output_tokens=100)
    with warehouse.write() as con:
        history.record(con, WS, WS, [trial])
    by_task = {e.task: e for e in quotes.estimate_tasks(warehouse, WS, cell, tasks)}
    assert by_task["t0"].agent_basis == "cell history on the Task"
    assert by_task["t1"].agent_basis == by_task["t2"].agent_basis == "cell history"
    assert by_task["t0"].per_trial > by_task["t1"].per_trial == by_task["t2"].per_trial


def test_image_states_are_asked_every_quote_and_image_tags_come_from_the_summary(
        tmp_path: Path, warehouse: Warehouse, no_docker_asked: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from amber_pipeline.sandbox.task_image import image_tag

    funded(warehouse, amount="1000")
    bench = settled_copy(tmp_path)
    unbuilt = quoted(warehouse, bench)
    assert "3 image builds" in unbuilt[1][0]["basis"]
    version = versions.read_folder(bench, warehouse.paths.benchmarks).version
    tags = {t.folder: image_tag(version.task_path(t) / "environment", t.docker_image) for t in version.tasks}
    assert quotes.image_tags(version, warehouse.paths) == tags
    no_docker_asked.update(tags.values())  # the images are built now
    forget()
    with monkeypatch.context() as m:
        m.setattr("amber_pipeline.sandbox.task_image.image_tag", lambda *a: pytest.fail("a tag was derived again"))
        built = priced(warehouse, bench)
    assert built[0] < unbuilt[0] and "image build" not in built[1][0]["basis"]
    assert built == rederived(warehouse, bench)


@pytest.mark.docker
def test_the_engine_is_asked_which_tags_it_holds_as_the_sdk_lists_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """One by one (a few tags) or by one list (many), over the socket without the SDK, the answer is the SDK's
    list: a name the engine would resolve (`python` for `python:latest`, an id's prefix) or refuses is not held."""
    from amber_pipeline.sandbox import docker_engine, held_images

    listed = {t for image in docker_engine.connect().api.images() for t in image.get("RepoTags") or ()
              if t != "<none>:<none>"}  # how this engine lists an untagged image: no tag of one
    some = sorted(listed)[:3]
    asked = {*some, *(t.split(":")[0] for t in some), "amber-never-built:0", "Not A Reference!"}
    for at_most in (64, 0):
        monkeypatch.setattr(held_images, "INSPECT_AT_MOST", at_most)
        assert held_images.held(asked, 5) == listed & asked
        assert held_images._held_through_sdk(asked, 5) == listed & asked
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert held_images.held(asked, 5) is None
