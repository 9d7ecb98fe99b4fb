"""`amber benchmark ...`: upload, validate and publish private Benchmarks; list and show what a Workspace sees."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.analysis import task_review
from amber_pipeline.benchmarks import adapters, lint, registry, uploads
from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out

if TYPE_CHECKING:
    from amber_pipeline.operations.benchmarks import Validation

app = typer.Typer()
benchmark_app = typer.Typer(no_args_is_help=True, help="Upload, validate and publish Benchmarks; list and show "
                                                       "the ones your Workspace sees.")
app.add_typer(benchmark_app, name="benchmark")

UploadId = Annotated[str, typer.Argument(help="An upload's id (upl-...), from `amber benchmark upload`.")]
ORIGINS = {"folder": "not validated (registered from a folder)", "upload": "validated (oracle 1, nop 0)",
           "registry": "pinned (Harbor registry)", "adapter": "built-in Verifier (static adapter)"}


@benchmark_app.command("upload")
def upload(ctx: typer.Context,
           file: Annotated[Path, typer.Argument(help="A .tar.gz, .tar or .zip of one Task folder or a folder of "
                                                     "Task folders (at most 100 MB, 1 GB and 50,000 files unpacked, "
                                                     "1,000 Tasks).")],
           name: Annotated[str, typer.Option("--name", help="The Benchmark's name; its Versions are NAME@N.")],
           allow_host: Annotated[list[str] | None, typer.Option(
               "--allow-host", help="A host the Tasks' Environments may reach (the network allowlist); repeat for "
                                    "several. Without any, they reach only the model proxy.")] = None) -> None:
    """Check an archive of Tasks into your Workspace: each Task's format and limits, then its validation Quote."""
    from amber_pipeline.jobs import quotes
    from amber_pipeline.money.prices import show

    c = Context.of(ctx)
    if not file.is_file() or (c.remote is None and c.paths.holds(file)):  # paths are not permissions
        raise uploads.no_archive(file)
    found = c.call("benchmark_upload", archive=str(file), name=name, allow_host=allow_host or [])
    made = found.upload
    _print_checks(made)
    if not made.passed:
        out.line("No Task passed its checks: fix them and upload again.")
        return
    if found.validation_cost is None:
        out.line(f"Its {len(made.passed)} static Tasks are validated on this machine at no cost: "
                 f"amber benchmark validate {made.id}")
        return
    out.line(f"Validating its {len(made.passed)} Tasks runs one oracle and one nop Trial each, charged for sandbox "
             f"time: at most {show(found.validation_cost)}, each Trial at its Task's time limits and stopped at "
             f"{quotes.VALIDATION_STOP:g} times that; what it does not spend is refunded.")
    out.line(f"Accept the Quote and validate: amber benchmark validate {made.id}")


@benchmark_app.command("validate")
def validate(ctx: typer.Context, upload_id: UploadId,
             wait: Annotated[bool, typer.Option("--wait", help="Follow the validation Job, then print each Task's "
                                                              "verdict.")] = False) -> None:
    """Accept an upload's validation Quote and run it: one oracle and one nop Trial per Task."""
    from amber_pipeline.cli.jobs import print_notice, print_quote, watch

    c = Context.of(ctx)
    started = c.call("benchmark_validate", upload_id=upload_id)
    if started.job is None:
        _print_validation(started.validation)
        return
    print_notice(started.notice)
    print_quote(started.quote)
    out.line(f"Started {started.job.id}, the validation of {upload_id}. Its runs show in the Dagster UI under the "
             f"tag amber/job={started.job.id}.")
    if wait:
        watch(c, started.job.id)
        _print_validation(c.call("benchmark_validation", upload_id=upload_id))


@benchmark_app.command("publish")
def publish(ctx: typer.Context, upload_id: UploadId,
            exclude: Annotated[list[str] | None, typer.Option(
                "--exclude", help="A Task to leave out although it passed; repeat for several.")] = None) -> None:
    """Make a private Benchmark Version of an upload's Tasks that passed validation."""
    c = Context.of(ctx)
    made = c.call("benchmark_publish", upload_id=upload_id, exclude=exclude or [])
    out.line(f"Published {made.label} ({made.version_id[:12]}): {made.n_tasks} Tasks, private to Workspace "
             f"{made.workspace}. Run it with: amber job submit {made.label}")
    if made.left_out:
        out.table(["Task", "left out because"],
                  ([r.name, "excluded" if r.passed else r.reason] for r in made.left_out))


@benchmark_app.command("lint", help="Rules that catch unfair Tasks before anyone pays: " + " ".join(
    f"{rule}: {what}" for rule, what in lint.RULES.items()) + " Exits 1 when a rule finds an error.")
def lint_(ctx: typer.Context,
          path: Annotated[Path, typer.Argument(help="A Task folder or a folder of Task folders.")],
          review_model: Annotated[str | None, typer.Option(
              "--review-model", help="Also have this Model Configuration grade each Task against Amber's rubric, "
                                     "through the model proxy: " + task_review.RUBRIC.replace("\n", " "))] = None,
          strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
          as_json: options.Json = False) -> None:
    from amber_pipeline.benchmarks.tasks import no_benchmark
    from amber_pipeline.cli.client import folder_archive
    from amber_pipeline.money.prices import show

    c = Context.of(ctx)
    if c.remote is None and c.paths.holds(path):  # paths are not permissions: stored Tasks are not yours to read
        raise no_benchmark(path)
    findings = lint.lint(path)
    reviews: list[task_review.Review] = []
    if review_model is not None:
        if not path.is_dir():
            raise no_benchmark(path)
        with folder_archive(path) if c.remote is not None else contextlib.nullcontext(path) as sent:
            reviews = c.call("benchmark_review", folder=str(sent), model=review_model)
    if as_json:
        out.json({"findings": [f.__dict__ for f in findings], "reviews": [r.__dict__ for r in reviews]})
    else:
        if findings:
            out.table(["Task", "rule", "severity", "finding"], ([f.task, f.rule, f.severity, f.message]
                                                                for f in findings))
        else:
            out.line("No rule found an unfair Task.")
        if reviews:
            out.table(["Task", "verdict", "reason", "cost"],
                      ([r.task, r.verdict, r.reason, show(r.cost_usd)] for r in reviews),
                      title=f"Review by {review_model}")
            total = task_review.totals(reviews)
            out.line(f"{total.tasks} Tasks reviewed: {total.input_tokens:,} input and {total.output_tokens:,} output "
                     f"tokens, {show(total.cost_usd)} as the model proxy metered (not charged to the Wallet).")
    if any(f.severity == "error" or strict for f in findings):
        raise typer.Exit(1)


@benchmark_app.command("import")
def import_(ctx: typer.Context,
            source: Annotated[str, typer.Argument(help="A Harbor registry JSON: a file, or an http(s) URL.")],
            dataset: Annotated[str, typer.Argument(help="The dataset, name@version (or name: the version Harbor "
                                                        "would pick).")]) -> None:
    """Make a public Benchmark Version of a Harbor registry dataset, its Tasks fetched at their pinned commits
    (Amber staff only)."""
    made = Context.of(ctx).call("benchmark_import", registry=source, dataset=dataset)
    out.line(f"Public {made.label} ({made.version_id[:12]}): {made.n_tasks} Tasks. Run it with: amber job submit "
             f"{made.label}")


@benchmark_app.command("adapt")
def adapt(ctx: typer.Context,
          kind: Annotated[str, typer.Argument(help="The dataset's kind. " + " ".join(
              f"{a.kind}: {a.description}" for a in adapters.ADAPTERS.values() if a.items is not None))],
          file: Annotated[Path, typer.Argument(help="The dataset file you have, in its published format (JSONL, "
                                                    "JSON or Parquet, gzipped or not).")],
          name: Annotated[str, typer.Option("--name", help="The Benchmark's name; its Versions are NAME@N.")],
          shards: Annotated[Path | None, typer.Option(
              "--shards", help="A shards file: make the sharded multi-turn variant of KIND (gsm8k or humaneval), "
                               "NAME-sharded, and its one-turn control NAME-concat, with the same Task names.")] = None,
          limit: Annotated[int | None, typer.Option("--limit", help="Only the first N items.")] = None,
          public: options.Public = False) -> None:
    """Make a Benchmark of static Tasks (the Direct Agent's) from a published dataset's file."""
    for made in Context.of(ctx).call("benchmark_adapt", kind=kind, file=str(file), name=name,
                                     shards=None if shards is None else str(shards), limit=limit, public=public):
        out.line(f"{'Public' if made.public else 'Private'} {made.label} ({made.version_id[:12]}): {made.n_tasks} "
                 f"static Tasks. Run it with: amber job submit {made.label} --agent direct --model MODEL")
        for sentence in made.refused:
            out.line(f"Left out: {sentence}")


@benchmark_app.command("list")
def list_(ctx: typer.Context, as_json: options.Json = False) -> None:
    """Public Benchmark Versions and your Workspace's private ones, then your uploads not yet published."""
    found = Context.of(ctx).call("benchmark_list")
    if as_json:
        out.json({"versions": [_version_json(v) for v in found.versions],
                  "uploads": [{"id": u.id, "name": u.name, "status": u.status, "tasks": len(u.checks),
                               "passed_checks": len(u.passed), "created_at": u.created_at} for u in found.uploads]})
        return
    out.table(["label", "visibility", "Tasks", "hash", "validation"],
              ([v.label, "public" if v.public else "private", v.n_tasks, v.id[:12], ORIGINS.get(v.origin, v.origin)]
               for v in found.versions), title=f"Benchmark Versions Workspace {found.workspace} sees")
    if found.uploads:
        out.table(["upload", "name", "status", "Tasks", "passed checks", "uploaded"],
                  ([u.id, u.name, u.status, len(u.checks), len(u.passed), f"{u.created_at:%Y-%m-%d %H:%M}"]
                   for u in found.uploads), title="Uploads not yet published")


def _version_json(v: registry.Listed) -> dict:
    return {"label": v.label, "id": v.id, "visibility": "public" if v.public else "private", "tasks": v.n_tasks,
            "origin": v.origin, "validation": ORIGINS.get(v.origin, v.origin), "allowed_hosts": list(v.allowed_hosts),
            "created_at": v.created_at}


@benchmark_app.command("show")
def show_(ctx: typer.Context, ref: Annotated[str, typer.Argument(help="A Benchmark Version's label or id, or an "
                                                                     "upload's id.")],
          as_json: options.Json = False) -> None:
    """One Benchmark Version (its Tasks, hash, visibility, validation) or one upload (each Task's verdict)."""
    c = Context.of(ctx)
    if ref.startswith("upl-"):
        _print_validation(c.call("benchmark_validation", upload_id=ref), as_json)
        return
    shown = c.call("benchmark_show", ref=ref)
    found = shown.listed
    if as_json:
        out.json(_version_json(found) | {"tasks": [t.name for t in shown.tasks]})
        return
    visibility = "public" if found.public else f"private to Workspace {shown.workspace}"
    out.line(f"{found.label}: {found.n_tasks} Tasks, {visibility}, {ORIGINS.get(found.origin, found.origin)}")
    out.line(f"hash {found.id}")
    out.line("network allowlist: " + (", ".join(found.allowed_hosts) or "none (the model proxy only)"))
    out.table(["Task", "kind", "agent timeout (s)"],
              ([t.name, "static" if t.static else "Environment",
                "" if t.agent_timeout_sec is None else f"{t.agent_timeout_sec:g}"] for t in shown.tasks))


def _print_checks(made: uploads.Upload) -> None:
    out.table(["Task", "folder", "check", "reason"],
              ([c.name, c.folder, "passed" if c.ok else "failed", c.reason or ""] for c in made.checks),
              title=f"Upload {made.id} of {made.name}: {len(made.passed)} of {len(made.checks)} Tasks passed "
                    "their checks")


def _print_validation(found: Validation, as_json: bool = False) -> None:
    upload, verdicts = found.upload, found.verdicts
    if as_json:
        out.json({"upload": upload.id, "name": upload.name, "status": upload.status,
                  "validation_job": upload.validation_job_id, "allowed_hosts": list(upload.allowed_hosts),
                  "tasks": [r.__dict__ for r in verdicts]})
        return
    out.table(["Task", "verdict", "oracle", "nop", "reason"],
              ([r.name, {True: "pass", False: "fail", None: "pending"}[r.passed], _reward(r.oracle), _reward(r.nop),
                r.reason or ""] for r in verdicts),
              title=f"Upload {upload.id} of {upload.name}: {upload.status}")
    passed = sum(r.passed is True for r in verdicts)
    if upload.status == "validated":
        if passed:
            out.line(f"{passed} of {len(verdicts)} Tasks passed. Publish them: amber benchmark publish {upload.id}"
                     " [--exclude TASK ...]")
        else:
            out.line("No Task passed validation: fix them and upload again.")


def _reward(value: float | None) -> str:
    return "" if value is None else f"{Decimal(str(value)):g}"
