"""Benchmarks: uploads checked before anything is kept, their validation and publication, and what a Workspace
sees."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import SIGNED_IN
from amber_pipeline.analysis import task_review
from amber_pipeline.benchmarks import external, registry, task_files, uploads
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.jobs import validation
from amber_pipeline.jobs.quotes import Quote
from amber_pipeline.jobs.records import Job
from amber_pipeline.jobs.validation import TaskValidation
from amber_pipeline.operations.jobs import folder_sent, launch, require_docker
from amber_pipeline.operations.operation import Acting, operation


class UploadRequest(BaseModel):
    archive: str = Field(description="The archive: a .tar.gz, .tar or .zip of one Task folder or a folder of Task "
                                     "folders, sent as the request's file.")
    name: str = Field(description="The Benchmark's name; its Versions are NAME@N.")
    allow_host: list[str] = Field([], description="Hosts the Tasks' Environments may reach (the network "
                                                  "allowlist). Without any, they reach only the model proxy.")


class Uploaded(BaseModel):
    upload: uploads.Upload
    validation_cost: Decimal | None  # at most this; None: static Tasks, validated at no cost (or none passed)


class UploadRef(BaseModel):
    upload_id: str = Field(description="An upload's id (upl-...).")


class Validation(BaseModel):
    upload: uploads.Upload
    verdicts: list[TaskValidation]


class ValidationStarted(BaseModel):
    quote: Quote | None  # None: static Tasks, validated at once
    job: Job | None
    notice: str | None = None
    validation: Validation


class PublishRequest(BaseModel):
    upload_id: str = Field(description="An upload's id (upl-...).")
    exclude: list[str] = Field([], description="Tasks to leave out although they passed.")


class Published(BaseModel):
    workspace: str
    version_id: str
    label: str
    n_tasks: int
    left_out: list[TaskValidation]


class Listing(BaseModel):
    workspace: str
    versions: list[registry.Listed]
    uploads: list[uploads.Upload]


class VersionRef(BaseModel):
    ref: str = Field(description="A Benchmark Version's label or id.")


class TaskRow(BaseModel):
    name: str
    static: bool
    agent_timeout_sec: float | None


class VersionShown(BaseModel):
    workspace: str
    listed: registry.Listed
    tasks: list[TaskRow]


@operation("POST", "/uploads", uploads=("archive",))
def benchmark_upload(acting: Acting, params: UploadRequest) -> Uploaded:
    """Check an archive of Tasks into the Workspace: each Task's format and limits, then its validation Quote."""
    made = uploads.create(acting.wh, acting.workspace, acting.actor.user, Path(params.archive), params.name,
                          params.allow_host)
    priced = validation.estimate(acting.wh, acting.workspace, acting.actor.user, made) if made.passed else None
    return Uploaded(upload=made, validation_cost=None if priced is None else priced.total)


@operation("POST", "/uploads/{upload_id}/validate")
def benchmark_validate(acting: Acting, params: UploadRef) -> ValidationStarted:
    """Accept an upload's validation Quote and run it: one oracle and one nop Trial per Task."""
    found = uploads.get(acting.wh, acting.workspace, params.upload_id)
    if not (found.passed and all(c.static for c in found.passed)):
        require_docker(None)
    started = validation.start(acting.wh, acting.workspace, acting.actor.user, params.upload_id)
    made, job = started if started is not None else (None, None)
    notice = launch(acting.wh, job.id) if job is not None else None
    return ValidationStarted(quote=made, job=job, notice=notice,
                             validation=benchmark_validation(acting, params))


@operation("GET", "/uploads/{upload_id}")
def benchmark_validation(acting: Acting, params: UploadRef) -> Validation:
    """One upload: each Task's verdict (its checks, then its oracle and nop Trials)."""
    found = uploads.get(acting.wh, acting.workspace, params.upload_id)
    return Validation(upload=found, verdicts=validation.results(acting.wh, found))


@operation("POST", "/uploads/{upload_id}/publish")
def benchmark_publish(acting: Acting, params: PublishRequest) -> Published:
    """Make a private Benchmark Version of an upload's Tasks that passed validation."""
    version, label, left_out = validation.publish(acting.wh, acting.workspace, params.upload_id, params.exclude)
    return Published(workspace=acting.workspace, version_id=version.id, label=label, n_tasks=len(version.tasks),
                     left_out=left_out)


@operation("GET", "/benchmarks")
def benchmark_list(acting: Acting) -> Listing:
    """Public Benchmark Versions and the Workspace's private ones, then its uploads not yet published."""
    return Listing(workspace=acting.workspace, versions=registry.visible(acting.wh, acting.workspace),
                   uploads=uploads.of_workspace(acting.wh, acting.workspace))


@operation("GET", "/benchmarks/{ref}")
def benchmark_show(acting: Acting, params: VersionRef) -> VersionShown:
    """One Benchmark Version: its Tasks, hash, visibility and validation."""
    found = registry.lookup(acting.wh, params.ref, acting.workspace)
    version = registry.version(acting.wh, found.id, found.owner)
    tasks = [TaskRow(name=t.name, static=t.static is not None, agent_timeout_sec=t.agent_timeout_sec)
             for t in version.tasks]
    return VersionShown(workspace=acting.workspace, listed=found, tasks=tasks)


class TaskRef(BaseModel):
    ref: str = Field(description="A Benchmark Version's label or id, or an upload's id (upl-...).")
    task: str = Field(description="The Task's name.")


class TaskShown(BaseModel):
    """One Task of a Benchmark Version (or of an upload's Tasks that passed their checks): its Instruction and
    files, bounded (`benchmarks/task_files.py`)."""

    workspace: str
    ref: str  # as asked
    label: str  # the Version's label, or the upload's id
    name: str
    static: bool
    agent_timeout_sec: float | None
    verifier_timeout_sec: float | None
    instruction: str
    instruction_clipped: bool  # the Instruction is longer than shown
    files: list[task_files.TaskFile]  # sorted by path, at most `task_files.MAX_LISTED`
    n_files: int  # all of them
    total_bytes: int


@operation("GET", "/benchmarks/{ref}/tasks/{task}")
def benchmark_task(acting: Acting, params: TaskRef) -> TaskShown:
    """One Task of a Benchmark Version or upload: its Instruction and its files, with the text of the small ones.

    An upload shows the Tasks that passed their checks (those it stored); another Workspace's Version or upload
    answers as a missing one does.
    """
    if params.ref.startswith("upl-"):
        found = uploads.get(acting.wh, acting.workspace, params.ref)
        if found.status == "expired":
            raise AmberError(f"The Tasks of upload {found.id} were deleted after its retention period: upload the "
                             "archive again.")
        if found.benchmark_version_id is None:
            raise NotFound(f"No Task {params.task} in upload {found.id}: none of its Tasks passed its checks.")
        version, label = registry.version(acting.wh, found.benchmark_version_id, acting.workspace), found.id
    else:
        listed = registry.lookup(acting.wh, params.ref, acting.workspace)
        version, label = registry.version(acting.wh, listed.id, listed.owner), listed.label
    task = next((t for t in version.tasks if t.name == params.task), None)
    if task is None:
        raise NotFound(f"No Task {params.task} in {label}: its Tasks are listed by `amber benchmark show {label}`.")
    listed_files = task_files.read(version.task_path(task))
    instruction, clipped = task_files.instruction(task.instruction)
    return TaskShown(workspace=acting.workspace, ref=params.ref, label=label, name=task.name,
                     static=task.static is not None, agent_timeout_sec=task.agent_timeout_sec,
                     verifier_timeout_sec=task.verifier_timeout_sec, instruction=instruction,
                     instruction_clipped=clipped, files=listed_files.files, n_files=listed_files.n_files,
                     total_bytes=listed_files.total_bytes)


class ImportRequest(BaseModel):
    registry: str = Field(description="A Harbor registry JSON: an http(s) URL (on the server's host, a file too).")
    dataset: str = Field(description="The dataset, name@version (or name: the version Harbor would pick).")


class Made(BaseModel):
    """A Benchmark Version just made."""

    version_id: str
    label: str
    n_tasks: int
    public: bool
    refused: list[str] = []  # items an adapter left out, each with its reason


class AdaptRequest(BaseModel):
    kind: str = Field(description="The dataset's kind (gsm8k, humaneval, longmemeval, ...).")
    file: str = Field(description="The dataset file, in its published format (JSONL, JSON or Parquet, gzipped or "
                                  "not), sent as the request's file.")
    name: str = Field(description="The Benchmark's name; its Versions are NAME@N.")
    shards: str | None = Field(None, description="A shards file, sent as the request's file: make the sharded "
                                                 "variant NAME-sharded and its control NAME-concat.")
    limit: int | None = Field(None, description="Only the first N items.")
    public: bool = Field(False, description="A public Version (Amber staff only).")


class ReviewRequest(BaseModel):
    folder: str = Field(description="A Task folder or a folder of Task folders, sent as the request's file: "
                                    "NAME.tar.gz holding the folder NAME.")
    model: str = Field(description="The Model Configuration that grades each Task against Amber's rubric.")


@operation("POST", "/benchmarks/imports")
def benchmark_import(acting: Acting, params: ImportRequest) -> Made:
    """Make a public Benchmark Version of a Harbor registry dataset, its Tasks fetched at their pinned commits
    (Amber staff only)."""
    require_staff(acting)
    if SIGNED_IN.get() is not None and urlsplit(params.registry).scheme not in ("http", "https"):
        raise AmberError(f"{params.registry!r} is not an http(s) URL: through the API a registry is read from one "
                         "(a registry file is read on the server's host only).")
    version, label = external.import_dataset(acting.wh, params.registry, params.dataset)
    return Made(version_id=version.id, label=label, n_tasks=len(version.tasks), public=True)


@operation("POST", "/benchmarks/adaptations", uploads=("file", "shards"))
def benchmark_adapt(acting: Acting, params: AdaptRequest) -> list[Made]:
    """Make a Benchmark of static Tasks (the Direct Agent's) from a published dataset's file."""
    if params.public:
        require_staff(acting)
    owner = registry.PUBLIC if params.public else acting.workspace
    made = external.adapt_dataset(acting.wh, owner, params.kind, Path(params.file), params.name, limit=params.limit,
                                  shards=None if params.shards is None else Path(params.shards))
    return [Made(version_id=v.id, label=label, n_tasks=len(v.tasks), public=params.public,
                 refused=list(adapted.refused)) for v, label, adapted in made]


@operation("POST", "/benchmarks/reviews", uploads=("folder",))
def benchmark_review(acting: Acting, params: ReviewRequest) -> list[task_review.Review]:
    """Have a Model Configuration grade each Task of a folder against Amber's rubric, through the model proxy
    (metered, not charged to the Wallet)."""
    given = Path(params.folder)  # through the API always the file the request brought: the folder as NAME.tar.gz
    with folder_sent(given) if given.is_file() else contextlib.nullcontext(given) as root:
        return task_review.review(root, params.model, acting.wh.paths, acting.workspace,
                                  allowed_providers=workspaces.provider_policy(acting.wh, acting.workspace))


def require_staff(acting: Acting) -> None:
    with acting.wh.read() as con:
        if not workspaces.is_staff(con, acting.actor.user):
            raise Forbidden("Only Amber staff can make a public Benchmark Version: make a private one with "
                            "`amber benchmark upload`.")
