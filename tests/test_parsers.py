"""The Dockerfile and shell readers on the inputs that hide things: continuations, here-documents, directives,
substitutions, case arms. And the libraries that were tried in their place (dockerfile-parse, bashlex) as a
second opinion: wherever a library reads a script or Dockerfile of examples/ and tests/fixtures/, both find the
same instructions and commands; and what the readers' docstrings say the libraries get wrong still holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import bashlex
import pytest
from dockerfile_parse import DockerfileParser

from amber_pipeline.benchmarks.intake.dockerfiles import check_dockerfile, instructions
from amber_pipeline.benchmarks.intake.task_refusals import Refused
from amber_pipeline.benchmarks.lint import lint
from amber_pipeline.benchmarks.lint.shell import is_test_command, program, shell_commands
from amber_pipeline.paths import PROJECT_ROOT

BASE = "FROM amber-base:bookworm\n"
OUTSIDE = "which is outside environment/: COPY and ADD read only from inside environment/, so move the file there."


def refusal(tmp_path: Path, dockerfile: str) -> str | None:
    """What the upload check says of a Dockerfile: its refusal, or None when it passes."""
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile, newline="")
    try:
        check_dockerfile("t", path, "Dockerfile")
    except Refused as refused:
        return str(refused)
    return None


# ---- Dockerfiles: what BuildKit joins, splits and hides ---------------------------------------------------------

@pytest.mark.parametrize(("dockerfile", "line", "source"), [
    # BuildKit skips a blank line inside a continuation; it does not end the COPY there.
    (BASE + "COPY ok.txt \\\n\n  ../secret /app/\n", 2, "../secret"),
    (BASE.replace("\n", "\r\n") + "COPY ok.txt \\\r\n  ../b.txt /app/\r\n", 2, "../b.txt"),
    # `check` is a directive too, so the escape directive after it still counts.
    ("# syntax=docker/dockerfile:1\n# check=skip=all\n# escape=`\n" + BASE + "COPY ok.txt `\n  ../b.txt /app/\n",
     5, "../b.txt"),
    # Any other `# key=value` is a comment and ends the directives: `\` stays the escape character.
    ("# owner=team-a\n# escape=`\n" + BASE + "COPY ok.txt \\\n  ../b.txt /app/\n", 4, "../b.txt"),
    # A heredoc opens only as a word of its own: `cat<<EOF`, a quoted "<<EOF" or a JSON-form RUN hide nothing.
    (BASE + "RUN cat<<EOF\nCOPY ../secret /x\nEOF\n", 3, "../secret"),
    (BASE + 'RUN echo "<<EOF"\nCOPY ../secret /x\nEOF\n', 3, "../secret"),
    (BASE + 'RUN ["sh", "-c", "cat <<EOF"]\nCOPY ../secret /x\nEOF\n', 3, "../secret"),
    # ARG and ENV values are filled in, in all their forms.
    (BASE + "ENV DIR ../up\nCOPY ${DIR}/x /y\n", 3, "${DIR}/x"),
    (BASE + "ARG UP=1\nCOPY ${UP:+../}x /y\n", 3, "${UP:+../}x"),
    ("ARG D=../solution\n" + BASE + "ARG D\nENV E=$D\nCOPY [\"$E/solve.sh\", \"/app/\"]\n", 5, "$E/solve.sh"),
])
def test_a_copy_from_outside_is_found_wherever_buildkit_reads_it(tmp_path, dockerfile, line, source) -> None:
    assert refusal(tmp_path, dockerfile) == f"Task t's Dockerfile (line {line}) copies from {source}, {OUTSIDE}"


@pytest.mark.parametrize("dockerfile", [
    BASE + "RUN cat << EOF > /app/notes\nCOPY ../not-an-instruction /x\nEOF\n",  # a space after << is allowed
    BASE + "RUN <<END-OF-SETUP\nCOPY ../not-an-instruction /x\nEND-OF-SETUP\n",
    BASE + "RUN 3<<EOF cat <&3\nCOPY ../not-an-instruction /x\nEOF\n",
    BASE + "COPY <<A <<B /app/\nCOPY ../x /y\nA\nCOPY ../x /y\nB\n",
    BASE + "RUN printf 'a\x0cCOPY ../x /y\x85ADD ../z /z'\n",  # BuildKit breaks lines at \n only
])
def test_heredoc_bodies_and_odd_characters_are_no_instructions(tmp_path, dockerfile) -> None:
    assert refusal(tmp_path, dockerfile) is None


def test_every_stage_and_copied_image_is_seen(tmp_path) -> None:
    dockerfile = ("ARG BASE=amber-base:bookworm\nFROM ${BASE} AS build\nRUN make\n"
                  "from ubuntu:24.04 as final\nCOPY --from=build /out /app\nCOPY --from=busybox:1.36 /bin/sh /bin/\n"
                  "FROM final\n")
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile)
    assert [(i.ref, i.where) for i in check_dockerfile("t", path, "Dockerfile")] == [
        ("amber-base:bookworm", "Task t's Dockerfile starts FROM"),
        ("ubuntu:24.04", "Task t's Dockerfile has a build stage FROM"),
        ("busybox:1.36", "Task t's Dockerfile (line 6) copies from the image"),
    ]


# ---- shell: what the lint rules are shown -------------------------------------------------------------------------

def commands(script: str) -> list[tuple[int, str, list[str]]]:
    """(line, the operator before, words) of each simple command."""
    return [(c.line, c.before, c.words) for c in shell_commands(script)]


def test_a_pipe_into_sh_behind_line_continuations_is_one_pipeline() -> None:
    found = shell_commands("curl -fsSL https://example.com/install.sh \\\n  | s\\\nh\n")
    assert [(c.line, c.before, c.words) for c in found] == [
        (1, "\n", ["curl", "-fsSL", "https://example.com/install.sh"]), (2, "|", ["sh"])]
    assert not is_test_command(found[1])  # an installer, not a test run


def test_substitutions_stay_one_word_the_rules_do_not_trust() -> None:
    [cmd] = shell_commands('echo "$(curl -fsSL https://x | sh)" `wget -qO- https://y | bash` <(curl z)\n')
    assert cmd.words == ["echo", "$(curl -fsSL https://x | sh)", "`wget -qO- https://y | bash`", "<(curl z)"]
    assert cmd.dynamic == [False, True, True, True]


@pytest.mark.parametrize("opening", [
    "expected=$(cat <<'EOF'\nit's done\nEOF\n)\n",  # an apostrophe in a here-document inside $(...)
    "expected=$(ls /app # what's there\n)\n",  # or in a comment inside it
    'expected="$(echo "a)b")"\n',  # a parenthesis in quotes inside it
    "shift=$(( 1 << 2 ))\n",  # << in arithmetic is no here-document
])
def test_what_follows_a_substitution_is_still_read(opening: str) -> None:
    found = commands(opening + "pytest /tests/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n")
    first = opening.count("\n") + 1
    assert found[-2:] == [(first, "\n", ["pytest", "/tests/test_outputs.py"]), (first + 1, "\n", ["echo", "1"])]


def test_a_verifier_that_ignores_its_tests_is_caught_after_a_here_document_in_a_substitution(tmp_path) -> None:
    task = tmp_path / "t"
    for rel, text in {"task.toml": 'version = "1.0"\n', "instruction.md": "Write /app/out.\n",
                      "environment/Dockerfile": BASE,
                      "tests/test.sh": "#!/bin/bash\nexpected=$(cat <<'EOF'\nit's done\nEOF\n)\n"
                                       "pytest /tests/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n"}.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    assert [(f.rule, f.line) for f in lint(task)] == [("verifier-ignores-exit-code", 7)]


def test_case_arms_are_commands_and_their_patterns_are_not() -> None:
    script = ('case "$MODE" in\n  quick|fast) pytest -x /tests ;;\n  (full) pytest /tests; echo ran ;&\n'
              "  *) echo 1 > /logs/verifier/reward.txt\nesac\necho after\n")
    found = shell_commands(script)
    assert [(c.line, c.words, c.depth) for c in found] == [
        (2, ["pytest", "-x", "/tests"], 1), (3, ["pytest", "/tests"], 1), (3, ["echo", "ran"], 1),
        (4, ["echo", "1"], 1), (6, ["echo", "after"], 0)]
    assert [program(c)[0] for c in found[:2]] == ["pytest", "pytest"] and is_test_command(found[0])
    assert found[3].writes == [("/logs/verifier/reward.txt", False, False)]


def test_process_substitution_arrays_functions_quoting_and_redirections() -> None:
    found = shell_commands(
        "diff <(python3 /app/solve.py) /tests/expected.txt && echo 1 > r || echo 0 >> r\n"
        "args=(pytest -q)\n"
        "check() { grep -q 'a b' \"/app/my file\" 2>/dev/null; }\n"
        "cat < /app/in.txt > /tmp/out\n"
        "echo it\\'s # a comment with an apostrophe: it's\n")
    diff, one, zero, args, grep, cat, echo = found
    assert (program(diff)[0], is_test_command(diff), diff.chained) == ("diff", True, True)
    assert (one.writes, zero.writes) == ([("r", False, False)], [("r", False, True)])
    assert args.words == ["args=(pytest -q)"] and program(args) == ("", 1)  # an array, no pytest run
    assert (grep.words, grep.depth) == (["grep", "-q", "a b", "/app/my file"], 1)
    assert grep.writes == [("/dev/null", False, False)]
    assert (cat.reads, cat.writes) == (["/app/in.txt"], [("/tmp/out", False, False)])
    assert echo.words == ["echo", "it's"]


def test_here_documents_keep_their_bodies_and_lines() -> None:
    script = "python3 - <<'PY'\nprint(1)\nPY\ncat <<-EOF > /app/a\n\tx\n\tEOF\r\necho done\n"
    py, cat, done = shell_commands(script)
    assert (py.heredoc, cat.heredoc, done.line) == ([2, "print(1)"], [5, "\tx"], 7)


# ---- the libraries as a second opinion ---------------------------------------------------------------------------

CORPUS = sorted(p for root in ("examples", "tests/fixtures") for p in (PROJECT_ROOT / root).rglob("*")
                if p.is_file() and (p.suffix == ".sh" or p.name == "Dockerfile"))
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
STALE = "the library now reads this: the reader's docstring is out of date, and moving to the library may pay"


def scripts() -> list[str]:
    """Every shell script of the corpus: .sh files and the shell-form RUN lines of Dockerfiles."""
    out = []
    for path in CORPUS:
        text = path.read_text(errors="replace")
        out += [text] if path.suffix == ".sh" else [
            i.rest for i in instructions(text) if i.keyword == "RUN" and not i.rest.startswith("[") and not i.heredocs]
    return out


def bashlex_programs(script: str) -> list[str]:
    """The program of each simple command bashlex finds outside substitutions (raises where it cannot read)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
        elif hasattr(node, "kind") and node.kind not in ("commandsubstitution", "processsubstitution"):
            words = [p for p in node.parts if p.kind == "word"] if node.kind == "command" else []
            if words and not words[0].parts:
                found.append(words[0].word)
            for attr in ("parts", "list", "command", "word"):  # a second elif's branches hang under `word`
                walk(getattr(node, attr, None))

    walk(bashlex.parse(script))
    return sorted(found)


def hand_programs(script: str) -> list[str]:
    """The same, as this reader finds them: the first word that is no assignment, when it is static."""
    found = []
    for cmd in shell_commands(script):
        first = next((k for k, w in enumerate(cmd.words) if not ASSIGNMENT.fullmatch(w)), None)
        if first is not None and not cmd.dynamic[first]:
            found.append(cmd.words[first])
    return sorted(found)


def test_the_reader_finds_the_commands_bashlex_finds_wherever_bashlex_can_read() -> None:
    read = 0
    for script in scripts():
        try:
            expected = bashlex_programs(script)
        except (bashlex.errors.ParsingError, NotImplementedError):  # what the docstring lists, tested below
            continue
        read += 1
        assert hand_programs(script) == expected, script
    assert read >= 50  # the corpus still holds enough that bashlex reads


def test_the_reader_finds_the_instructions_dockerfile_parse_finds(tmp_path) -> None:
    compared = 0
    for path in CORPUS:
        text = path.read_text(errors="replace")
        if path.name != "Dockerfile" or "<<" in text:  # dockerfile-parse reads no here-documents
            continue
        parser = DockerfileParser(path=str(tmp_path))
        parser.content = text
        expected = [(s["instruction"], s["startline"] + 1) for s in parser.structure if s["instruction"] != "COMMENT"]
        assert [(i.keyword, i.line) for i in instructions(text)] == expected, path
        compared += 1
    assert compared >= 10


@pytest.mark.parametrize(("script", "runs"), [
    ("python3 - <<'PY'\nprint(1)\nPY\n", "python3"),
    ("case $x in a|b) pytest ;; esac\n", "pytest"),
    ("echo $(( status == 0 )) > /logs/verifier/reward.txt\n", "echo"),
    ("[[ $(cat /app/a) == hi ]]\n", "[["),
    ("[[ -f a && -f b ]] && pytest\n", "pytest"),
    ("args=(a b)\npytest\n", "pytest"),
    ("time pytest /tests\n", "pytest"),
    ("select x in a b; do pytest; done\n", "pytest"),
    ("cat <<EOF\nhi\nEOF\r\npytest\n", "pytest"),
])
def test_what_bashlex_cannot_read_this_reader_reads(script: str, runs: str) -> None:
    with pytest.raises((bashlex.errors.ParsingError, NotImplementedError)):
        bashlex.parse(script)
    assert runs in {program(c)[0] for c in shell_commands(script)}


def test_what_bashlex_misreads_this_reader_reads() -> None:
    assert bashlex.parse('echo "a\\nb"')[0].parts[1].word == "anb", STALE
    assert shell_commands('echo "a\\nb"')[0].words == ["echo", "a\\nb"]


def test_what_dockerfile_parse_misreads_the_upload_check_refuses(tmp_path) -> None:
    def structure(text: str) -> list[tuple[str, int]]:
        parser = DockerfileParser(path=str(tmp_path))
        parser.content = text
        return [(s["instruction"], s["startline"] + 1) for s in parser.structure if s["instruction"] != "COMMENT"]

    heredoc = BASE + "RUN <<EOF\nCOPY ../ignored /x\nEOF\n"
    assert ("COPY", 3) in structure(heredoc), STALE
    assert refusal(tmp_path, heredoc) is None
    blank = BASE + "COPY ok.txt \\\n\n  ../secret /app/\n"
    assert ("../SECRET", 4) in structure(blank), STALE
    assert refusal(tmp_path, blank) is not None
    check = "# check=skip=all\n# escape=`\n" + BASE + "COPY ok.txt `\n  ../b.txt /app/\n"
    assert ("../B.TXT", 5) in structure(check), STALE
    assert refusal(tmp_path, check) is not None
    parser = DockerfileParser(path=str(tmp_path), env_replace=True)
    parser.content = 'ARG REPO="amber-base" TAG=bookworm\nFROM $REPO:${TAG:-latest}\n'
    assert parser.parent_images == ["amber-base:bookworm:-latest}"], STALE
    parser.content = "ARG A=1 B\n" + BASE
    with pytest.raises(ValueError):
        parser.context_structure  # noqa: B018 - reading it is what raises
