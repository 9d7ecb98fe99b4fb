"""The root's commands: each with the CLI module that defines it and its help as `amber --help` lists it.

With this index, `amber --help` lists every command without importing one module of them, and `amber job status`
imports `cli/jobs.py` alone (`app.py`). The index is made from the modules themselves:

    python -m amber_pipeline.cli.command_index

rewrites `COMMANDS` below, and `tests/test_cli_imports.py` fails while it differs from what the modules say.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

# The CLI's areas, in the order `amber --help` lists their commands.
AREAS = ("jobs", "benchmarks", "models", "agents", "money", "audit", "report", "compare", "sql", "instance",
         "account")

# ---- generated: python -m amber_pipeline.cli.command_index ----------------------------------------------
COMMANDS: dict[str, tuple[str, str]] = {
    'results': ('jobs', "The cells of a Job's report: each cell's score with its 95% bootstrap CI, and "
                        'the paired comparisons; for a\nJob that stopped early (ceiling_reached or '
                        'cancelled), also the Tasks it left without a scored Trial; for one\nrun with '
                        "--stop-when-decided, each comparison's anytime-valid interval and verdict, and "
                        'what stopping saved.'),
    'job': ('jobs', 'Quote, start, follow and cancel Jobs.'),
    'benchmark': ('benchmarks', 'Upload, validate and publish Benchmarks; list and show the ones your Workspace '
                                'sees.'),
    'model': ('models', 'Model Configurations: a Model, its pinned Provider, its settings and its prices.'),
    'agent': ('agents', 'Agents: the software that drives a Model through a Task.'),
    'wallet': ('money', 'The Wallet of the acting Workspace: balance, reserved, available, and its '
                        'ledger.'),
    'workspace': ('money', 'Workspaces and their members.'),
    'credit': ('money', 'Credits: money Amber staff add to a Wallet by hand.'),
    'audit': ('audit', 'Who did what in the acting Workspace, and when, newest first: Quotes, starts, '
                       'cancels, continuations and\nCredits, and the tokens made or revoked that are '
                       'yours.'),
    'report': ('report', 'Pass rates with 95% intervals, why attempts failed, near misses and the cells of '
                         'one round.'),
    'import-harbor': ('report', "Import a Harbor job folder's finished trials for reports and `amber sql` (view "
                                'imported_trials).'),
    'judge': ('report', 'Sort failed Trials into stages (understand, write, verify, other) with a model '
                        'judge.'),
    'compare': ('compare', 'Compare candidates with a baseline on paired cases: interval, verdict, caveats, '
                           'advice and costs.'),
    'leaderboard': ('compare', 'Place a round on a public board by pass rate and strict pass rate, each as a '
                               'range of ranks.'),
    'plan': ('compare', 'What a round can detect (80% power), and how many Tasks a change needs; rates in '
                        'percent.'),
    'sql': ('sql', "SQL over the acting Workspace's views (the README lists them with their "
                   'columns).'),
    'ui': ('instance', "Serve Amber's web app and the Dagster UI, and run the daemon, on the embedded "
                       'instance (Ctrl-C stops both).'),
    'view': ('instance', "Show a Job's Trials in Harbor's viewer, each cell as a Harbor job, read-only "
                         '(Ctrl-C stops it).'),
    'demo': ('instance', 'Run the bundled demo: an Agent (terminus-2 unless --agent says otherwise) with '
                         'two replay Model\nConfigurations, oracle and nop as bounds; then the Direct Agent '
                         'on the static example Benchmark. Every model\ncall goes through the model proxy, '
                         'which meters it.'),
    'daemon': ('instance', 'The embedded Dagster daemon that starts cell runs.'),
    'serve': ('account', 'Serve the hosted API (OpenAPI at /docs, the Dagster UI for staff at /ui) and run '
                         'the daemon (Ctrl-C stops\nboth).'),
    'login': ('account', 'Sign in to a hosted Amber: check the token with the server, then keep it in a '
                         'file only you can read.'),
    'logout': ('account', 'Forget the token `amber login` kept.'),
    'whoami': ('account', 'Who you act as, and your roles.'),
    'user': ('account', 'Users of a hosted Amber and their roles (staff only).'),
    'token': ('account', 'Personal API tokens: shown once, stored as hashes, revocable, expiring.'),
}
# ---- end generated --------------------------------------------------------------------------------------------


def index() -> dict[str, tuple[str, str]]:
    """Every root command, by name: the area that defines it and its help, as the modules say now."""
    import typer
    import typer.main

    found: dict[str, tuple[str, str]] = {}
    for area in AREAS:
        group = typer.main.get_group(importlib.import_module(f"amber_pipeline.cli.{area}").app)
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None and name not in found, name
            found[name] = (area, command.help or "")
    return found


def _write() -> None:
    path = Path(__file__)
    text = path.read_text()
    lines = ["COMMANDS: dict[str, tuple[str, str]] = {"]
    for name, (area, help_text) in index().items():
        head = f"    {name!r}: ({area!r}, "
        pieces = [repr(p) for p in re.findall(r".{1,80}(?:\s+|$)|.{80}", help_text, re.S)] or ["''"]
        lines += [head + pieces[0]] + [" " * len(head) + p for p in pieces[1:]]
        lines[-1] += "),"
    generated = "\n".join([*lines, "}"])
    text = re.sub(r"(?s)(# ---- generated:[^\n]*\n).*?(\n# ---- end generated)", lambda m: m[1] + generated + m[2],
                  text)
    path.write_text(text)


if __name__ == "__main__":
    _write()
