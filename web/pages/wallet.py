"""Wallet: the Workspace's balance, reserved and available amounts, and its ledger, filtered by Job and by kind
(`?job=JOB&kind=KIND`); the figures are the whole Wallet's whatever the filter."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request

from amber_pipeline.errors import AmberError
from amber_pipeline.user_text import quoted
from web.render import Page
from web.viewer import Viewer

KINDS = ("credit", "reservation", "charge", "refund")
PAGE_ROWS = 200  # ledger entries per page, the newest first: a busy Wallet has tens of thousands


def wallet(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace = request.path_params["workspace"]
    job = request.query_params.get("job") or None
    kind = request.query_params.get("kind") or None
    if kind is not None and kind not in KINDS:
        raise AmberError(f"{quoted(kind)} is not a kind of ledger entry: pick {', '.join(KINDS[:-1])} or "
                         f"{KINDS[-1]}.")
    read = viewer.run("wallet_read", workspace)
    matching = [e for e in reversed(read.entries)
                if (job is None or e.job_id == job) and (kind is None or e.kind == kind)]
    pages = max(1, -(-len(matching) // PAGE_ROWS))
    page = min(max(1, _number(request.query_params.get("page"))), pages)
    jobs = sorted({e.job_id for e in read.entries if e.job_id is not None})
    return Page("wallet.html", {"state": read.state, "entries": matching[(page - 1) * PAGE_ROWS:page * PAGE_ROWS],
                                "n_matching": len(matching), "n_entries": len(read.entries), "page": page,
                                "pages": pages, "jobs": jobs, "kinds": KINDS, "job": job or "", "kind": kind or ""},
                title="Wallet")


def _number(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() and len(text) < 9 else 1


ROUTES = [("/w/{workspace}/wallet", wallet, ["GET"])]
