"""Validation of an upload, and publishing the Tasks that passed.

A Task is included only when every check passes (amber-task-format.md,
"Validation"): its format (`benchmarks.uploads`), its Environment builds, the
oracle Agent (the Task's own solution) gets Reward 1 and the nop Agent
(nothing) gets Reward 0.

For Tasks with an Environment that is a Job of its own on the upload's staged
Tasks, with an oracle and a nop cell of one Trial per Task: quoted first, run
by the daemon as Dagster runs like any Job, and charged for sandbox time.
The Tasks are the Workspace's own (a private Benchmark), so a Trial whose
Environment does not build or whose Verifier fails is Reward 0 and charged,
and each Trial is stopped at 1.5 times the sandbox time its Quote expected
(`quotes.validation_stop_seconds`). Static Tasks have no Environment: the
built-in Verifier checks their reference answer (`solution/answer.txt`) for
the oracle and an empty answer for nop, on the host, at no cost.

Each Task's verdict is read from its two Trials, in one place (`_decide`).
Nop and oracle both at Reward 0 means the Task is broken, not hard: a
Verifier that downloads its test runner at run time fails that way offline,
and looks like a wrong answer if only the oracle is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from amber_pipeline.benchmarks import registry, uploads
from amber_pipeline.benchmarks.static import verify
from amber_pipeline.benchmarks.tasks import TaskSpec
from amber_pipeline.benchmarks.uploads import Upload
from amber_pipeline.benchmarks.versions import BenchmarkVersion, snapshot
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, quotes
from amber_pipeline.jobs.quotes import Quote
from amber_pipeline.jobs.records import Job, get_job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.warehouse.catalog import Warehouse

BUILD_ERRORS = ("SandboxBuildFailedError", "EnvironmentStartTimeoutError")
BROKEN = ("Nop and oracle both got Reward 0: the Task is broken, not hard (a Verifier that needs the network, "
          "for instance to download its test runner, fails this way)")


@dataclass(frozen=True)
class TaskValidation:
    """One Task of an upload: whether it may be published, and if not, why."""

    name: str
    folder: str
    passed: bool | None  # None: its Trials have not finished yet
    reason: str | None = None
    oracle: float | None = None
    nop: float | None = None


def request_of(upload: Upload) -> JobRequest:
    """A validation Job's request: the oracle with nop beside it, one Trial per Task."""
    return JobRequest(benchmark=upload.id, agent="oracle", bounds=True, trials_per_task=1)


def _target(wh: Warehouse, upload: Upload) -> lifecycle.Validation:
    if upload.status == "expired":
        raise AmberError(f"The Tasks of upload {upload.id} were deleted after its retention period: upload the "
                         "archive again.")
    if upload.benchmark_version_id is None:
        raise AmberError(f"No Task of upload {upload.id} passed its checks: fix them and upload again.")
    return lifecycle.Validation(registry.version(wh, upload.benchmark_version_id, upload.workspace),
                                f"validation of {upload.id}")


def is_static(version: BenchmarkVersion) -> bool:
    return all(t.static is not None for t in version.tasks)


def estimate(wh: Warehouse, workspace: str, user: str, upload: Upload) -> lifecycle.Estimate | None:
    """What validating the upload would cost, reserving nothing; None for static Tasks, which cost nothing."""
    target = _target(wh, upload)
    if is_static(target.version):
        return None
    return lifecycle.estimate(wh, workspace, user, request_of(upload), validation=target)


def start(wh: Warehouse, workspace: str, user: str, upload_id: str, *,
          now: datetime | None = None) -> tuple[Quote, Job] | None:
    """Accept the validation Quote and start the Job; static Tasks are validated at once (None)."""
    upload = uploads.get(wh, workspace, upload_id)
    if upload.status != "checked":
        raise AmberError(f"Upload {upload.id} is {upload.status}" + (
            f" by Job {upload.validation_job_id}: follow it with `amber job wait {upload.validation_job_id}`."
            if upload.status == "validating" else ": see it with `amber benchmark show " + upload.id + "`."))
    target = _target(wh, upload)
    now = now or datetime.now(UTC)
    if is_static(target.version):
        with wh.write() as con:
            con.execute("update uploads set status = 'validated', validated_at = ? where id = ?", [now, upload.id])
        return None
    made, job = lifecycle.submit(wh, workspace, user, request_of(upload), now=now, validation=target)
    with wh.write() as con:
        con.execute("update uploads set status = 'validating', validation_job_id = ? where id = ?",
                    [job.id, upload.id])
    return made, job


def results(wh: Warehouse, upload: Upload) -> list[TaskValidation]:
    """Every Task of the upload with its verdict: failed checks first as they were, then validation's."""
    out = [TaskValidation(c.name, c.folder, False, c.reason) for c in upload.checks if not c.ok]
    if upload.status == "checked" or upload.benchmark_version_id is None:
        out += [TaskValidation(c.name, c.folder, None, "Not validated yet.") for c in upload.checks if c.ok]
        return sorted(out, key=lambda r: r.folder)
    if upload.status == "expired":
        out += [TaskValidation(c.name, c.folder, None, "Its Tasks were deleted after the retention period.")
                for c in upload.checks if c.ok]
        return sorted(out, key=lambda r: r.folder)
    version = registry.version(wh, upload.benchmark_version_id, upload.workspace)
    folders = {t.name: t.folder for t in version.tasks}
    if is_static(version):
        out += [_static(version, t) for t in version.tasks]
    else:
        assert upload.validation_job_id is not None
        job = get_job(wh, upload.validation_job_id, upload.workspace)
        with wh.query(upload.workspace, {"trials"}) as con:
            rows = con.execute("select task_name, agent, reward, outcome, error_type, error_message from trials "
                               "where job_id = ?", [job.id]).fetchall()
        trials: dict[tuple[str, str], tuple] = {(r[0], r[1]): r[2:] for r in rows}
        out += [_decide(t.name, folders[t.name], trials.get((t.name, "oracle")), trials.get((t.name, "nop")), job)
                for t in version.tasks]
    return sorted(out, key=lambda r: r.folder)


def _static(version: BenchmarkVersion, task: TaskSpec) -> TaskValidation:
    """A static Task's verdict: its reference answer passes its checks, an empty answer does not."""
    name = task.name
    assert task.static is not None
    folder = version.task_path(task)
    answer_file = folder / "solution" / "answer.txt"
    nop = verify(task.static, "", folder).reward
    if not answer_file.is_file():
        return TaskValidation(name, task.folder, nop == 0, None if nop == 0 else "An empty answer passes its "
                              "checks: the checks accept anything.", None, nop)
    oracle_verdict = verify(task.static, answer_file.read_text(), folder)
    if oracle_verdict.reward != 1:
        return TaskValidation(name, task.folder, False, f"Its reference answer (solution/answer.txt) fails its own "
                              f"checks: {oracle_verdict.detail}", oracle_verdict.reward, nop)
    if nop != 0:
        return TaskValidation(name, task.folder, False, "An empty answer passes its checks: the checks accept "
                              "anything.", oracle_verdict.reward, nop)
    return TaskValidation(name, task.folder, True, None, oracle_verdict.reward, nop)


def _decide(name: str, folder: str, oracle: tuple | None, nop: tuple | None, job: Job) -> TaskValidation:
    """A Task's verdict from its oracle and nop Trials: (reward, outcome, error_type, error_message) each."""
    if oracle is None or nop is None:
        if job.ended:
            return TaskValidation(name, folder, False, f"Not validated: the validation Job ended {job.status} "
                                                       "before its Trials ran.")
        return TaskValidation(name, folder, None, "Its Trials have not finished yet.")
    o_reward, n_reward = oracle[0], nop[0]

    def fail(reason: str) -> TaskValidation:
        return TaskValidation(name, folder, False, reason, o_reward, n_reward)

    for (agent, (_, outcome, error_type, message)) in (("oracle", oracle), ("nop", nop)):
        if error_type in BUILD_ERRORS:
            return fail(f"Its Environment did not build ({error_type}: {message}).")
        if error_type == "TrialTimeLimitError":
            return fail(f"Its {agent} Trial was {message}, {quotes.VALIDATION_STOP:g} times the sandbox time its "
                        "Quote expected.")
        if outcome == "errored":
            return fail(f"Its {agent} Trial could not run ({error_type}: {message}): validate it again.")
    if o_reward == 0 and n_reward == 0:
        return fail(BROKEN + _detail(oracle) + ".")
    if o_reward != 1:
        return fail(f"The oracle got Reward {o_reward:g}, not 1: the Task's own solution does not pass its "
                    "Verifier" + _detail(oracle) + ".")
    if n_reward != 0:
        return fail(f"The nop Agent got Reward {n_reward:g}, not 0: the start state already passes the Verifier.")
    return TaskValidation(name, folder, True, None, o_reward, n_reward)


def _detail(trial: tuple) -> str:
    _, _, error_type, message = trial
    return f" ({error_type}: {message})" if error_type else ""


def publish(wh: Warehouse, workspace: str, upload_id: str,
            exclude: Sequence[str] = ()) -> tuple[BenchmarkVersion, str, list[TaskValidation]]:
    """A private Benchmark Version of the Tasks that passed, less ``exclude``; the same Tasks again give the
    Version they already have. Returns it, its label and the Tasks left out with their reasons."""
    upload = uploads.get(wh, workspace, upload_id)
    if upload.status == "validating":
        raise AmberError(f"Upload {upload.id} is still being validated by Job {upload.validation_job_id}: wait for it "
                         f"with `amber job wait {upload.validation_job_id}`.")
    if upload.status in ("checked", "expired"):
        raise AmberError(f"Upload {upload.id} is {upload.status}, not validated: " + (
            f"validate it first with `amber benchmark validate {upload.id}`." if upload.status == "checked"
            else "upload the archive again."))
    verdicts = results(wh, upload)
    names = {r.name for r in verdicts}
    unknown = sorted(set(exclude) - names)
    if unknown:
        raise AmberError(f"Upload {upload.id} has no Task named {unknown[0]}: --exclude takes names from "
                         f"`amber benchmark show {upload.id}`.")
    chosen = [r.folder for r in verdicts if r.passed and r.name not in exclude]
    if not chosen:
        raise AmberError(f"No Task of upload {upload.id} passed validation" + (" and was not excluded" if exclude
                                                                              else "") + ": nothing to publish.")
    assert upload.benchmark_version_id is not None
    staged = registry.version(wh, upload.benchmark_version_id, workspace)
    version = snapshot(staged.root, wh.paths.benchmarks, upload.name, folders=chosen,
                       allowed_hosts=upload.allowed_hosts)
    with wh.write() as con:
        label = registry.publish(con, version, workspace)
        con.execute("update uploads set status = 'published', published_version_id = ? where id = ?",
                    [version.id, upload.id])
    if version.id != staged.id:
        uploads.release(wh, staged.id)
    left_out = [r for r in verdicts if not r.passed or r.name in exclude]
    return version, label, left_out

