"""The pages, one module each; `ROUTES` is every page's (path, handler, methods), paths under /w/{workspace}."""

from __future__ import annotations

from web.pages import benchmarks, compare, job, jobs, new_job, trial, wallet
from web.render import Handler

ROUTES: list[tuple[str, Handler, list[str]]] = [*jobs.ROUTES, *job.ROUTES, *trial.ROUTES, *compare.ROUTES,
                                                *benchmarks.ROUTES, *wallet.ROUTES, *new_job.ROUTES]
