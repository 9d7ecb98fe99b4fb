"""Text a user typed prints inert: no terminal escape, control or bidi character reaches another user's terminal.

Any member of a Workspace can type a credit reason, a token name or a Model Configuration's model and
description that the other members' commands print. Each is planted here with the escapes issue 27 found
(colour, a window title, C1's CSI, a right-to-left override, DEL, a carriage return) and read back by
another user: tables, lines, titles and refusals show them escaped as `quoted` shows them (`\\u001b`), and
`--json` stays valid JSON with the text whole. Commands run in this process through Typer's runner.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import cli, ok, refusal

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.cli import output
from amber_pipeline.cli.output import inert
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.user_text import quoted

BOTH_MODES = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

# Colour, a window title ended by BEL, C1's one-byte CSI, a right-to-left override, DEL and a carriage return.
PLANTED = "ok\x1b[31mred\x1b]0;owned\x07\x9b2J\u202etxt.exe\x7f\rend"
RAW = {"\x1b", "\x07", "\x9b", "\u202e", "\x7f", "\r"}


def amber(home: Path, user: str, *args: str):
    """`amber --user USER ARGS` with USER's own config file."""
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def assert_inert(printed: str) -> None:
    assert not RAW & set(printed), repr(printed)


@pytest.fixture
def shared(amber_home: Path) -> Path:
    """Workspace w of alice, with bob a member: what one of them types, the other reads."""
    ok(amber(amber_home, "alice", "workspace", "create", "w"))
    ok(amber(amber_home, "alice", "workspace", "add-member", "w", "bob"))
    return amber_home


# ---- the rule ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\x00", "\x07", "\x08", "\t", "\n", "\x0b", "\r", "\x1b", "\x1f", "\x7f", "\x80",
                                  "\x85", "\x9b", "\x9f", "\u061c", "\u200e", "\u200f", "\u202a", "\u202e",
                                  "\u2066", "\u2069", "\u2028", "\u2029"])
def test_each_control_escape_and_bidi_character_is_escaped(char: str) -> None:
    shown = inert(f"a{char}b")
    assert shown == "a" + json.dumps(char)[1:-1] + "b" and shown.isprintable()
    if char < "\x20":  # the characters `quoted` escapes, escaped the same way
        assert shown == quoted(f"a{char}b")[1:-1]


def test_everything_else_prints_as_typed() -> None:
    for text in ('Zürich "quoted" C:\\dir\\file [red]x[/] 100%', "שלום עולם", "数据", "👩‍💻 and é", ""):
        assert inert(text) == text


# ---- what another member reads ----------------------------------------------------------------------------

@BOTH_MODES
def test_a_credit_reason_prints_inert_in_the_wallet(shared: Path) -> None:
    ok(amber(shared, local_user(), "--workspace", "w", "credit", "add", "--amount", "5", "--reason", PLANTED))
    printed = ok(amber(shared, "bob", "--workspace", "w", "wallet"))
    assert_inert(printed)
    assert r"ok\u001b[31mred" in printed
    as_json = ok(amber(shared, "bob", "--workspace", "w", "wallet", "--json"))
    assert_inert(as_json)
    assert [e["reason"] for e in json.loads(as_json)["ledger"]] == [PLANTED]


@BOTH_MODES
def test_a_token_name_prints_inert_in_the_token_list(shared: Path) -> None:
    ok(amber(shared, local_user(), "user", "add", "bob"))  # against a server, bob already is one
    ok(amber(shared, "bob", "token", "create", "--name", PLANTED))
    printed = ok(amber(shared, "bob", "token", "list"))
    assert_inert(printed)
    assert r"ok\u001b[31mred" in printed


@BOTH_MODES
def test_a_model_configurations_model_and_description_print_inert(shared: Path, tmp_path: Path) -> None:
    config = tmp_path / "planted.toml"
    config.write_text(f'name = "planted"\nmodel = {json.dumps(PLANTED)}\nprovider = "anthropic"\n'
                      f"description = {json.dumps(PLANTED)}\n"
                      '[prices]\ninput = 1.0\ncached_input = 0.1\noutput = 5.0\nsource = "a test"\n')
    ok(amber(shared, "alice", "--workspace", "w", "model", "add", str(config)))
    listed = ok(amber(shared, "bob", "--workspace", "w", "model", "list"))
    assert_inert(listed)
    assert r"ok\u001b[31mred" in listed
    shown = ok(amber(shared, "bob", "--workspace", "w", "model", "show", "planted"))
    assert_inert(shown)
    assert json.loads(shown.split("model = ", 1)[1].splitlines()[0]) == PLANTED  # the TOML still reads back
    as_json = ok(amber(shared, "bob", "--workspace", "w", "model", "list", "--json"))
    assert_inert(as_json)
    [mine] = [m for m in json.loads(as_json) if m["name"] == "planted"]
    assert mine["model"] == mine["description"] == PLANTED


@BOTH_MODES
def test_sql_values_and_column_names_print_inert(shared: Path) -> None:
    printed = ok(amber(shared, "bob", "--workspace", "w", "sql", f"select '{PLANTED}' as \"{PLANTED}\""))
    assert_inert(printed)
    assert printed.count(r"ok\u001b[31m") == 2  # the header and the value


@BOTH_MODES
def test_a_refusal_prints_inert(shared: Path) -> None:
    sentence = refusal(amber(shared, "bob", "--workspace", PLANTED, "wallet"))
    assert_inert(sentence)
    assert r"ok\u001b[31mred" in sentence


# ---- one way out ------------------------------------------------------------------------------------------

PRINTS = {"print", "echo", "secho", "write", "Console"}


def test_every_command_prints_through_output() -> None:
    """No module of the CLI but output.py prints by itself (print, typer.echo, sys.stdout.write, a Console of its
    own), so the escaping there covers everything the commands print."""
    found = []
    for module in sorted((PROJECT_ROOT / "amber_pipeline" / "cli").glob("*.py")):
        if module.name == Path(output.__file__).name:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                if name in PRINTS and not (name == "write" and isinstance(receiver, ast.Name)
                                           and receiver.id not in ("sys", "stdout", "stderr")):
                    found.append(f"{module.name}:{node.lineno} {ast.unparse(node.func)}")
    assert not found, found
