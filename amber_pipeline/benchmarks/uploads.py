"""Uploads: a Workspace's archive of Tasks, checked, staged for validation, then published or expired.

An upload goes checked -> validating -> validated -> published, or expires:

- `create` unpacks the archive (`archive.unpack`: untrusted, limits counted
  while unpacking), checks every Task on its own (`checks.check_tasks`), and
  stages the Tasks that passed as an unpublished Benchmark Version of the
  Workspace, which the validation Job runs. The unpacked archive is deleted
  at once, whatever happens: nothing but the staged copy of passing Tasks
  stays. A rejected archive leaves nothing at all.
- Validation (`jobs.validation`) runs one oracle and one nop Trial per Task
  and decides each Task; publishing makes a Benchmark Version of the Tasks
  that passed.
- `expire` deletes the Tasks of an upload checked but not validated within
  7 days, or validated but not published within 30 (the upload_retention
  schedule runs it daily). The record stays, marked expired, so the user
  learns what happened to it.

An upload is private to its Workspace: `get` answers for another
Workspace's upload exactly as for one that does not exist.

The two gates an archive passes are the `intake` package's: `archive`
unpacks it, `checks` checks each Task.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from amber_pipeline.benchmarks import registry
from amber_pipeline.benchmarks.intake import archive, checks
from amber_pipeline.benchmarks.intake.checks import TaskCheck
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.warehouse.catalog import Warehouse

KEEP_CHECKED = timedelta(days=7)
KEEP_VALIDATED = timedelta(days=30)
MIXED = ("This upload mixes static Tasks with Tasks that have an Environment, and no Agent runs both: upload "
         "them as two Benchmarks.")


@dataclass(frozen=True)
class Upload:
    id: str
    workspace: str
    name: str
    uploaded_by: str
    archive: str  # the file's name, as uploaded
    created_at: datetime
    allowed_hosts: tuple[str, ...]
    checks: tuple[TaskCheck, ...]
    status: str  # checked, validating, validated, published or expired
    benchmark_version_id: str | None  # the staged Version of the Tasks that passed their checks
    validation_job_id: str | None
    published_version_id: str | None
    validated_at: datetime | None

    @property
    def passed(self) -> list[TaskCheck]:
        return [c for c in self.checks if c.ok]


def check_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    """The network allowlist in Harbor's form (lower case, no trailing dot), or one sentence refusing an entry."""
    from harbor.models.task.config import EnvironmentConfig  # deferred: Harbor imports are slow

    if not hosts:
        return ()
    for host in hosts:
        try:
            EnvironmentConfig(network_mode="allowlist", allowed_hosts=[host])
        except ValidationError:
            raise AmberError(f"--allow-host {host!r} is not a host name, *.wildcard, IP address or CIDR range: "
                             "give hosts only, without scheme, port or path.") from None
    allowed = EnvironmentConfig(network_mode="allowlist", allowed_hosts=list(hosts)).allowed_hosts or []
    return tuple(sorted(set(allowed)))


def no_archive(source: Path) -> AmberError:
    return AmberError(f"No archive at {source}: give a .tar.gz, .tar or .zip file of Task folders.")


def create(wh: Warehouse, workspace: str, user: str, source: Path, name: str,
           allowed_hosts: Sequence[str] = (), *, now: datetime | None = None) -> Upload:
    """Unpack and check an archive, and stage its passing Tasks; a rejected archive raises and leaves nothing."""
    registry.check_name(name)
    hosts = check_hosts(allowed_hosts)
    if not source.is_file() or wh.paths.holds(source):  # paths are not permissions
        raise no_archive(source)
    upload_id = f"upl-{uuid.uuid4().hex[:10]}"
    work = wh.paths.uploads / upload_id
    work.mkdir(parents=True)
    try:
        unpacked = archive.unpack(source, work / "tasks")
        found = _rules(checks.check_tasks(unpacked.root))
        passed = [c.folder for c in found if c.ok]
        version = (registry.stage(wh, unpacked.root, workspace, name, upload_id, passed, hosts) if passed
                   else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with wh.write() as con:
        con.execute("insert into uploads (id, workspace, name, uploaded_by, archive, created_at, allowed_hosts, "
                    "checks, status, benchmark_version_id) values (?, ?, ?, ?, ?, ?, ?, ?, 'checked', ?)",
                    [upload_id, workspace, name, user, source.name, now or datetime.now(UTC), json.dumps(hosts),
                     json.dumps([c.__dict__ for c in found]), version.id if version else None])
    return get(wh, workspace, upload_id)


def _rules(found: Sequence[TaskCheck]) -> list[TaskCheck]:
    """Upload rules on top of each Task's own checks: Tasks sit at most one folder down, and an upload is all
    static Tasks or all Tasks with an Environment."""
    out = [TaskCheck(c.name, c.folder, False, "Task folders must sit at the top of the archive or in one folder "
                                              "there: move it up.") if c.ok and "/" in c.folder else c
           for c in found]
    static = {c.folder for c in out if c.ok and c.static}
    if static and len(static) < sum(c.ok for c in out):
        out = [TaskCheck(c.name, c.folder, False, MIXED, c.static) if c.folder in static else c for c in out]
    return out


_SELECT = """select u.id, u.workspace, u.name, u.uploaded_by, u.archive, u.created_at, u.allowed_hosts, u.checks,
                    u.status, u.benchmark_version_id, u.validation_job_id, u.published_version_id,
                    coalesce(u.validated_at, j.finished_at), j.status
             from uploads u left join jobs j on j.id = u.validation_job_id"""


def _upload(row: tuple) -> Upload:
    """A stored upload; one whose validation Job has ended is validated (the Job's end is when)."""
    (id_, workspace, name, user, archive_name, created_at, hosts, found, status, version_id, job_id, published_id,
     validated_at, job_status) = row
    if status == "validating" and job_status in ("completed", "cancelled", "ceiling_reached", "failed"):
        status = "validated"
    return Upload(id_, workspace, name, user, archive_name, created_at, tuple(json.loads(hosts)),
                  tuple(TaskCheck(**c) for c in json.loads(found)), status, version_id, job_id, published_id,
                  validated_at)


def get(wh: Warehouse, workspace: str, upload_id: str) -> Upload:
    """An upload of the Workspace; another Workspace's answers as a missing one does."""
    with wh.read() as con:
        row = con.execute(f"{_SELECT} where u.id = ? and u.workspace = ?", [upload_id, workspace]).fetchone()
    if row is None:
        raise NotFound(f"No upload {upload_id} in Workspace {workspace}: list them with `amber benchmark list`.")
    return _upload(row)


def of_workspace(wh: Warehouse, workspace: str) -> list[Upload]:
    """The Workspace's uploads not yet published, oldest first."""
    with wh.read() as con:
        rows = con.execute(f"{_SELECT} where u.workspace = ? and u.status != 'published' "
                           "order by u.created_at", [workspace]).fetchall()
    return [_upload(r) for r in rows]


def expire(wh: Warehouse, now: datetime | None = None) -> list[Upload]:
    """Delete the Tasks of uploads checked but not validated for 7 days, or validated but not published for
    30; idempotent. A staged copy is kept when a published Version or another upload still holds it."""
    now = now or datetime.now(UTC)
    with wh.read() as con:
        rows = con.execute(f"{_SELECT} where u.status in ('checked', 'validating', 'validated')").fetchall()
    due = [u for u in map(_upload, rows)
           if (u.status == "checked" and now - u.created_at >= KEEP_CHECKED)
           or (u.status == "validated" and u.validated_at is not None and now - u.validated_at >= KEEP_VALIDATED)]
    for u in due:
        with wh.write() as con:
            con.execute("update uploads set status = 'expired', deleted_at = ? where id = ?", [now, u.id])
        if u.benchmark_version_id is not None:
            release(wh, u.benchmark_version_id)
    return due


def release(wh: Warehouse, version_id: str) -> None:
    """Delete a staged copy of Tasks that no published Version and no live upload holds any more."""
    with wh.read() as con:
        held = con.execute("select 1 from benchmark_versions where id = ? and published union all "
                           "select 1 from uploads where benchmark_version_id = ? and status in ('checked', "
                           "'validating', 'validated')", [version_id, version_id]).fetchone()
    if not held:
        shutil.rmtree(wh.paths.benchmarks / version_id, ignore_errors=True)  # this machine's copy
        if wh.store.remote:
            wh.store.remove(wh.paths.benchmarks / version_id)  # and the stored one, which other machines fetch
