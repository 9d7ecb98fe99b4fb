"""Per-Task checks of an uploaded Benchmark: one test per rule, each reason as the user reads it, and real
published Tasks (tests/fixtures/task_checks/real, sources in its README) taken in stride."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from amber_pipeline.benchmarks.intake import checks
from amber_pipeline.benchmarks.intake.checks import TaskCheck, check_tasks
from amber_pipeline.benchmarks.tasks import load_task
from amber_pipeline.errors import AmberError

FIXTURES = Path(__file__).parent / "fixtures" / "task_checks"
LOCAL = {"amber-base:bookworm"}
DIGEST = "sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d"
REAL_IMAGES = LOCAL | {f"public.ecr.aws/docker/library/debian@{DIGEST}", "ubuntu:24.04", "python:3.13-slim-bookworm"}
MINIMAL = 'version = "1.0"\n\n[agent]\ntimeout_sec = 120.0\n'
UBUNTU_MISSING = ("which this machine does not have and cannot pull (no registry is reachable): load it with "
                  "`docker load` or build it under that name, or base the Task on amber-base:bookworm.")
COMPOSE_IGNORED = ("Amber builds environment/Dockerfile and runs one container per Task, ignoring the compose file")


def write_task(root: Path, folder: str = "t", toml: str | bytes = MINIMAL, *, instruction: str | None = "Do it.\n",
               dockerfile: str | None = "FROM amber-base:bookworm\nWORKDIR /app\n",
               files: dict[str, str] | None = None, verifier: bool = True) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    if verifier:
        (d / "tests").mkdir()
        (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (d / "task.toml").write_bytes(toml if isinstance(toml, bytes) else toml.encode())
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    if dockerfile is not None:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def reason(tmp_path: Path, *, local_images: set[str] = LOCAL, **task) -> str | None:
    """The one Task's reason (None when it passes)."""
    write_task(tmp_path, **task)
    [check] = check_tasks(tmp_path, local_images=local_images)
    assert check.ok == (check.reason is None)
    return check.reason


# ---- 1. task.toml, instruction.md, names ------------------------------------------------------------------------

@pytest.mark.parametrize(("toml", "expected"), [
    ('[agent]\ntimeout_sec = \n',
     "t/task.toml is not valid TOML (Invalid value (at line 2, column 15)): fix the file and submit again."),
    (b'version = "1.0"\n# caf\xe9\n', "t/task.toml is not UTF-8 text: save it as UTF-8 and submit again."),
    (b'\xef\xbb\xbfversion = "1.0"\n', "t/task.toml starts with a byte-order mark, which TOML does not allow: save "
                                       "it as UTF-8 without one and submit again."),
    ('[agent]\ntimeout_sec = "soon"\n',
     "t/task.toml breaks Harbor's task.toml schema at agent.timeout_sec: Input should be a valid number, unable to "
     "parse string as a number; fix the file and submit again."),
    ('[environment]\nmemory = "2GB"\n',
     "t/task.toml breaks Harbor's task.toml schema at environment: Value error, Invalid size format: 2GB. Expected "
     "format like '1G', '512M', etc.; fix the file and submit again."),
])
def test_task_toml_must_be_utf8_toml_that_fits_harbors_schema(tmp_path, toml, expected) -> None:
    assert reason(tmp_path, toml=toml) == expected


def test_an_instruction_is_needed(tmp_path) -> None:
    assert reason(tmp_path, instruction=None) == "Task t has no instruction.md: add one at t/instruction.md."


def test_a_multi_step_task_is_refused_here_and_by_load_task(tmp_path) -> None:
    toml = MINIMAL + '\n[[steps]]\nname = "first"\n\n[[steps]]\nname = "second"\n'
    expected = ("Task t is a multi-step Task ([[steps]] in its task.toml), which Amber cannot run: give it one "
                "instruction.md and no [[steps]], or leave it out.")
    assert reason(tmp_path, toml=toml, instruction=None) == expected
    with pytest.raises(AmberError, match=r"^Task t is a multi-step Task"):
        load_task(tmp_path / "t", tmp_path)


def test_names_use_letters_digits_dots_underscores_and_dashes(tmp_path) -> None:
    for folder in ("my task", "-dash", "a" * 129):
        assert reason(tmp_path, folder=folder) == (
            f"Task folder {folder} is named {folder}, but Task names use only letters, digits, '.', '_' and '-', "
            "start with a letter or digit and have at most 128 characters: rename the folder.")
        shutil.rmtree(tmp_path / folder)


def test_a_task_table_names_the_task_by_the_part_after_the_slash(tmp_path) -> None:
    write_task(tmp_path, "folder", '[task]\nname = "acme/hello.v2_x-y"\n')
    assert check_tasks(tmp_path, local_images=LOCAL) == [TaskCheck("hello.v2_x-y", "folder", True, None)]


# ---- 2. COPY and ADD read from inside environment/ ---------------------------------------------------------------

@pytest.mark.parametrize(("dockerfile", "expected"), [
    ("FROM amber-base:bookworm\nCOPY /etc/passwd /app/\n",
     "(line 2) copies from /etc/passwd, an absolute path: COPY and ADD read only from inside environment/, so give "
     "the path relative to it."),
    ("FROM amber-base:bookworm\nWORKDIR /app\nCOPY --chown=app:app --chmod=644 \\\n    ok.txt \\\n"
     "    # a comment inside the continuation\n    ../../secret /app/\n",
     "(line 3) copies from ../../secret, which is outside environment/: COPY and ADD read only from inside "
     "environment/, so move the file there."),
    ('FROM amber-base:bookworm\nCOPY ["ok.txt", "../my notes.txt", "/app/"]\n',
     "(line 2) copies from ../my notes.txt, which is outside environment/: COPY and ADD read only from inside "
     "environment/, so move the file there."),
    ("FROM amber-base:bookworm\nCOPY ../*.sh /app/\n",
     "(line 2) copies from ../*.sh, which is outside environment/: COPY and ADD read only from inside "
     "environment/, so move the file there."),
    ("FROM amber-base:bookworm\nADD https://example.com/data.tgz /app/\n",
     "(line 2) ADDs https://example.com/data.tgz, a download from the network: put the file in environment/ and "
     "COPY it instead."),
    ("FROM amber-base:bookworm\nADD --keep-git-dir=true git@github.com:o/r.git /src\n",
     "(line 2) ADDs git@github.com:o/r.git, a download from the network: put the file in environment/ and COPY it "
     "instead."),
    ("# escape=`\nFROM amber-base:bookworm\nCOPY ok.txt `\n  ../b.txt /app/\n",
     "(line 3) copies from ../b.txt, which is outside environment/: COPY and ADD read only from inside "
     "environment/, so move the file there."),
    ("ARG FROM_DIR=../solution\nFROM amber-base:bookworm\nARG FROM_DIR\nCOPY ${FROM_DIR}/solve.sh /app/\n",
     "(line 4) copies from ${FROM_DIR}/solve.sh, which is outside environment/: COPY and ADD read only from "
     "inside environment/, so move the file there."),
    ("FROM amber-base:bookworm\nRUN <<EOF\nCOPY ../ignored /x\nEOF\nRUN echo 'a<<b'\nCOPY ../tests /tests\n",
     "(line 6) copies from ../tests, which is outside environment/: COPY and ADD read only from inside "
     "environment/, so move the file there."),
])
def test_copy_and_add_must_read_from_inside_environment(tmp_path, dockerfile, expected) -> None:
    assert reason(tmp_path, dockerfile=dockerfile) == f"Task t's Dockerfile {expected}"


@pytest.mark.parametrize("dockerfile", [
    "FROM amber-base:bookworm AS build\nRUN mkdir /out\nFROM amber-base:bookworm\nCOPY --from=build /out /app\n"
    "COPY --from=0 /etc/hostname /x\n",
    "FROM amber-base:bookworm\nCOPY . /app\nCOPY ./ /app\nCOPY a/../b.txt data/*.csv /app/\n",
    "FROM amber-base:bookworm\nCOPY <<EOF /app/notes\nCOPY /etc/passwd ../x\nEOF\n"
    "COPY <<-'END' /app/more\n\t../x\n\tEND\n",
    "FROM amber-base:bookworm\nCOPY --link --parents src/ /app/\nADD --checksum=sha256:00 data.tgz /app/\n",
    "FROM amber-base:bookworm\nRUN echo '<<EOF never closed'\nCOPY ok.txt /app/\n",
])
def test_copies_from_inside_environment_stages_and_heredocs_pass(tmp_path, dockerfile) -> None:
    assert reason(tmp_path, dockerfile=dockerfile) is None


def test_every_dockerfile_under_environment_is_held_to_it(tmp_path) -> None:
    files = {"environment/worker/Dockerfile": "FROM amber-base:bookworm\nCOPY ../shared /s\nCOPY ../../tests /t\n"}
    assert reason(tmp_path, files=files) == (
        "Task t's environment/worker/Dockerfile (line 3) copies from ../../tests, which is outside environment/: "
        "COPY and ADD read only from inside environment/, so move the file there.")


# ---- 3. no env value from the machine running the Task ----------------------------------------------------------

@pytest.mark.parametrize(("table", "key", "value", "shown"), [
    ("[environment.env]", "AWS_ACCESS_KEY_ID", "${AWS_ACCESS_KEY_ID}", "[environment.env]"),
    ("[solution.env]", "MODE", "${MODE:-fast}", "[solution.env]"),
    ("[verifier.env]", "URL", "http://${HOST}/api", "[verifier.env]"),
    ("[verifier.environment.env]", "TOKEN", "${TOKEN}", "[verifier.environment.env]"),
    ('[[steps]]\nname = "one"\n[steps.agent.env]', "A", "${A}", "[steps.agent.env] of step one"),
    ('[[steps]]\nname = "one"\n[steps.verifier.env]', "B", "x${B:-1}", "[steps.verifier.env] of step one"),
])
def test_no_env_value_is_filled_from_the_host(tmp_path, table, key, value, shown) -> None:
    toml = f'{MINIMAL}\n{table}\n{key} = "{value}"\n'
    template = value[value.index("${"):value.index("}") + 1]
    assert reason(tmp_path, toml=toml) == (
        f"Task t's {shown} fills {key} from the machine running it ({template}): give a literal value.")


def test_no_mcp_header_is_filled_from_the_host(tmp_path) -> None:
    toml = (f'{MINIMAL}\n[[environment.mcp_servers]]\nname = "docs"\ntransport = "streamable-http"\n'
            'url = "http://docs:8000/mcp"\nheaders = { Authorization = "Bearer ${DOCS_TOKEN}" }\n')
    assert reason(tmp_path, toml=toml) == (
        "Task t's MCP server docs in [[environment.mcp_servers]] fills its Authorization header from the machine "
        "running it: remove the header, as Amber gives Tasks nothing of that machine's environment.")


def test_literal_env_values_pass(tmp_path) -> None:
    toml = f'{MINIMAL}\n[environment.env]\nLANG = "C.UTF-8"\nPRICE = "$5"\n[verifier.env]\nVERIFIER_SEED = "7"\n'
    assert reason(tmp_path, toml=toml) is None


# ---- 4. no GPUs or TPUs; 5. what one sandbox has ---------------------------------------------------------------

@pytest.mark.parametrize(("environment", "expected"), [
    ("[environment]\ngpus = 1", "Task t asks for GPUs ([environment].gpus = 1), which Amber's sandboxes do not "
                                "have: remove gpus."),
    ('[environment]\ngpu_types = ["H100"]', "Task t asks for GPU types ([environment].gpu_types), which Amber's "
                                            "sandboxes do not have: remove gpu_types."),
    ('[environment]\ntpu = { type = "v6e", topology = "2x2" }',
     "Task t asks for a TPU ([environment].tpu), which Amber's sandboxes do not have: remove tpu."),
    ("[verifier.environment]\ngpus = 2", "Task t asks for GPUs ([verifier.environment].gpus = 2), which Amber's "
                                         "sandboxes do not have: remove gpus."),
    ("[environment]\ncpus = 8", "Task t asks for 8 cpus ([environment].cpus = 8), more than a sandbox has: ask for "
                                "at most 4 cpus."),
    ('[environment]\nmemory = "16G"', 'Task t asks for 16384 MB of memory ([environment].memory = "16G", 16384 MB), '
                                      "more than a sandbox has: ask for at most 8192 MB of memory."),
    ("[environment]\nmemory_mb = 8193", "Task t asks for 8193 MB of memory ([environment].memory_mb = 8193), more "
                                        "than a sandbox has: ask for at most 8192 MB of memory."),
    ("[environment]\nstorage_mb = 20480", "Task t asks for 20480 MB of storage ([environment].storage_mb = 20480), "
                                          "more than a sandbox has: ask for at most 10240 MB of storage."),
    ("[environment]\ncpus = 0", "Task t gives [environment].cpus = 0, which is not positive: give a positive cpus."),
    ("[environment]\nmemory_mb = -512", "Task t gives [environment].memory_mb = -512, which is not positive: give a "
                                        "positive memory_mb."),
    ("[verifier]\ntimeout_sec = -1", "Task t gives [verifier].timeout_sec = -1, which is not a positive, finite "
                                     "number of seconds: give a positive timeout."),
    ("[verifier]\ntimeout_sec = inf", "Task t gives [verifier].timeout_sec = inf, which is not a positive, finite "
                                      "number of seconds: give a positive timeout."),
    ("[environment]\nbuild_timeout_sec = 0", "Task t gives [environment].build_timeout_sec = 0, which is not a "
                                             "positive, finite number of seconds: give a positive timeout."),
    ('[[steps]]\nname = "a"\n[steps.verifier.environment]\ngpus = 1',
     "Task t asks for GPUs ([steps.verifier.environment].gpus = 1 of step a), which Amber's sandboxes do not have: "
     "remove gpus."),
    ('[[steps]]\nname = "a"\n[steps.agent]\ntimeout_sec = 0',
     "Task t gives [steps.agent].timeout_sec = 0 of step a, which is not a positive, finite number of seconds: give "
     "a positive timeout."),
])
def test_no_accelerators_and_at_most_one_sandbox(tmp_path, environment, expected) -> None:
    toml = 'version = "1.0"\n' + environment + "\n"
    assert reason(tmp_path, toml=toml) == expected


def test_the_largest_sandbox_and_no_gpus_pass(tmp_path) -> None:
    toml = ('version = "1.0"\n[agent]\ntimeout_sec = 60\n[environment]\ncpus = 4\nmemory_mb = 8192\n'
            'storage_mb = 10240\ngpus = 0\ngpu_types = []\n')
    assert reason(tmp_path, toml=toml) is None
    shutil.rmtree(tmp_path / "t")
    assert reason(tmp_path, toml='version = "1.0"\n[environment]\ncpus = 0.5\nmemory = "8G"\n') is None


# ---- 6. the Environment and its compose file --------------------------------------------------------------------

def test_a_verifier_is_needed(tmp_path) -> None:
    assert reason(tmp_path, verifier=False) == (
        "Task t has no Verifier: add tests/test.sh, which writes a Reward from 0 to 1 to /logs/verifier/reward.txt.")


def test_an_environment_is_needed(tmp_path) -> None:
    assert reason(tmp_path, dockerfile=None) == (
        "Task t has no Environment: add environment/Dockerfile or set [environment].docker_image (or declare "
        "[metadata.amber.static] checks for a static Task).")
    shutil.rmtree(tmp_path / "t")
    assert reason(tmp_path, dockerfile=None, files={"environment/docker-compose.yaml": "services:\n  main: {}\n"}) == (
        "Task t's Environment is only environment/docker-compose.yaml, which Amber does not run: add the "
        "environment/Dockerfile it builds.")
    shutil.rmtree(tmp_path / "t")
    assert reason(tmp_path, dockerfile="# nothing yet\nRUN true\n") == (
        "Task t's Dockerfile has no FROM instruction: start it with one, such as FROM "
        "amber-base:bookworm.")


@pytest.mark.parametrize(("compose", "expected"), [
    ("services:\n  main: {}\n  db:\n    image: postgres:16\n  cache:\n    image: redis:7\n",
     "describes services beside main (cache, db), but Amber runs one container per Task: fold what they do into "
     "environment/Dockerfile, or leave the Task out."),
    ("services:\n  main:\n    privileged: true\n",
     "runs the main service privileged, which Amber never allows: remove privileged."),
    ("services:\n  main:\n    cap_add: [NET_ADMIN]\n",
     "adds Linux capabilities to the main service (cap_add), which Amber never grants: remove cap_add."),
    ("services:\n  main:\n    devices:\n      - /dev/kvm:/dev/kvm\n",
     "gives the main service host devices (devices), which Amber never does: remove devices."),
    ("services:\n  main:\n    network_mode: host\n",
     "puts the main service on the host's network (network_mode: host), which Amber never allows: remove "
     "network_mode."),
    ("services:\n  main:\n    pid: host\n",
     "shares the host's process namespace with the main service (pid: host), which Amber never allows: remove pid."),
    ("services:\n  main:\n    ipc: host\n",
     "shares the host's IPC namespace with the main service (ipc: host), which Amber never allows: remove ipc."),
    ("services:\n  main:\n    volumes:\n      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}\n"
     "      - /var/run/docker.sock:/var/run/docker.sock\n",
     "mounts the host path /var/run/docker.sock into the main service, which Amber never does: put what the Task "
     "needs into the image with environment/Dockerfile."),
    ("services:\n  main:\n    volumes:\n      - type: bind\n        source: ./data\n        target: /data\n",
     "mounts the host path ./data into the main service, which Amber never does: put what the Task needs into the "
     "image with environment/Dockerfile."),
    ("services:\n  main:\n    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - capabilities: [gpu]\n",
     "reserves devices (GPUs) for the main service, which Amber's sandboxes do not have: remove them."),
    ("services:\n  main:\n    security_opt: [seccomp:unconfined]\n",
     f"sets security_opt on the main service, which Amber cannot honour ({COMPOSE_IGNORED}): remove it, or do the "
     "same in environment/Dockerfile."),
    ("services:\n  main: {}\nnetworks:\n  outside: {}\n",
     f"declares top-level networks, which Amber cannot honour ({COMPOSE_IGNORED}): remove it."),
    ("services:\n  main:\n    image: ubuntu:24.04\n",
     "runs the main service from image ubuntu:24.04, but Amber runs the image it builds from "
     "environment/Dockerfile: use image: ${MAIN_IMAGE_NAME} or remove image."),
    ("services: [main\n",
     "is not valid YAML (did not find expected ',' or ']' at line 2, column 1): fix it or remove it."),
])
def test_a_compose_file_may_only_restate_harbors_main_service(tmp_path, compose, expected) -> None:
    assert reason(tmp_path, files={"environment/docker-compose.yaml": compose}) == (
        f"Task t's environment/docker-compose.yaml {expected}")


def test_harbors_own_compose_templates_pass(tmp_path) -> None:
    compose = ("version: '3.8'\nx-common: &common\n  init: true\nservices:\n  main:\n    <<: *common\n"
               "    build: ${CONTEXT_DIR}\n    image: ${PREBUILT_IMAGE_NAME}\n    network_mode: none\n"
               "    environment:\n      AWS_REGION: ${AWS_REGION:-us-east-1}\n    working_dir: /app\n"
               "    volumes:\n      - /scratch\n      - ${HOST_ARTIFACTS_PATH}:${ENV_ARTIFACTS_PATH}\n"
               "      - type: tmpfs\n        target: /tmp\n")
    assert reason(tmp_path, files={"environment/docker-compose.yaml": compose}) is None


# ---- 7. base images: local, since no registry is reachable ------------------------------------------------------

@pytest.mark.parametrize(("dockerfile", "local"), [
    ("FROM ubuntu:24.04\n", {"ubuntu:24.04"}),
    ("FROM ubuntu\n", {"ubuntu:latest"}),
    ("FROM docker.io/library/ubuntu:24.04\n", {"ubuntu:24.04"}),
    ("FROM ubuntu:24.04\n", {"docker.io/library/ubuntu:24.04"}),
    ("FROM index.docker.io/acme/tools:1\n", {"acme/tools:1"}),
    (f"FROM debian@{DIGEST}\n", {f"debian@{DIGEST}"}),
    (f"FROM debian:bookworm-slim@{DIGEST}\n", {f"docker.io/library/debian@{DIGEST}"}),
    ("FROM localhost:5000/team/base:2\n", {"localhost:5000/team/base:2"}),
    ("FROM --platform=$BUILDPLATFORM amber-base:bookworm AS base\nFROM base AS app\nFROM scratch\n"
     "COPY --from=app / /\n", LOCAL),
    ("ARG BASE=amber-base:bookworm\nFROM ${BASE}\n", LOCAL),
    ('ARG REPO="amber-base" TAG=bookworm\nFROM $REPO:${TAG:-latest}\n', LOCAL),
])
def test_base_images_on_this_machine_pass(tmp_path, dockerfile, local) -> None:
    assert reason(tmp_path, dockerfile=dockerfile, local_images=local) is None


@pytest.mark.parametrize(("dockerfile", "local", "expected"), [
    ("FROM ubuntu:24.04\n", {"ubuntu:22.04"}, f"Dockerfile starts FROM ubuntu:24.04, {UBUNTU_MISSING}"),
    ("FROM ubuntu\n", {"ubuntu:24.04"}, f"Dockerfile starts FROM ubuntu, {UBUNTU_MISSING}"),
    ("ARG TAG=24.04\nFROM ubuntu:$TAG\n", set(), f"Dockerfile starts FROM ubuntu:24.04, {UBUNTU_MISSING}"),
    ("FROM amber-base:bookworm AS b\nFROM ubuntu:24.04\n", LOCAL,
     f"Dockerfile has a build stage FROM ubuntu:24.04, {UBUNTU_MISSING}"),
    ("FROM amber-base:bookworm\nCOPY --from=busybox:1.36 /bin/busybox /bin/\n", LOCAL,
     f"Dockerfile (line 2) copies from the image busybox:1.36, {UBUNTU_MISSING}"),
    (f"FROM debian:bookworm-slim@{DIGEST}\n", {"debian:bookworm-slim"},
     f"Dockerfile starts FROM debian:bookworm-slim@{DIGEST}, a digest this machine does not have and "
     "cannot pull (no registry is reachable): drop the @sha256 pin and load the image under its tag with `docker "
     "load`, or base the Task on amber-base:bookworm."),
])
def test_a_missing_base_image_fails_naming_it_and_how_to_provide_it(tmp_path, dockerfile, local, expected) -> None:
    assert reason(tmp_path, dockerfile=dockerfile, local_images=local) == f"Task t's {expected}"


def test_the_missing_image_sentence_a_user_reads(tmp_path) -> None:
    assert reason(tmp_path, folder="hello-world", dockerfile="FROM ubuntu:24.04\n", local_images=set()) == (
        "Task hello-world's Dockerfile starts FROM ubuntu:24.04, which this machine does not have and cannot pull "
        "(no registry is reachable): load it with `docker load` or build it under that name, or base the Task on "
        "amber-base:bookworm.")


def test_a_base_image_needs_its_arg_default(tmp_path) -> None:
    assert reason(tmp_path, dockerfile="ARG BASE\nFROM ${BASE}\n") == (
        "Task t's Dockerfile (line 2) starts a stage FROM ${BASE}, which is empty once its ARG values are filled in: "
        "give the ARG a default, as Amber builds without build arguments.")


def test_a_prebuilt_docker_image_must_be_local_too(tmp_path) -> None:
    toml = 'version = "1.0"\n[environment]\ndocker_image = "ubuntu:24.04"\n'
    assert reason(tmp_path, toml=toml, dockerfile=None) == (
        f"Task t's [environment].docker_image is ubuntu:24.04, {UBUNTU_MISSING}")
    shutil.rmtree(tmp_path / "t")
    assert reason(tmp_path, toml=toml, dockerfile=None, local_images={"ubuntu:24.04"}) is None


def test_the_engine_is_asked_once_per_call_and_only_when_needed(tmp_path, monkeypatch) -> None:
    asked: list[int] = []

    def engine_images() -> set[str]:
        asked.append(1)
        return {"amber-base:bookworm"}

    monkeypatch.setattr(checks, "_engine_images", engine_images)
    for i in range(3):
        write_task(tmp_path, f"t{i}")
    write_task(tmp_path, "u", dockerfile="FROM ubuntu:24.04\n")
    found = check_tasks(tmp_path)
    assert asked == [1]
    assert [c.ok for c in found] == [True, True, True, False]
    check_tasks(tmp_path, local_images=LOCAL)
    assert asked == [1]
    static = tmp_path / "static"
    write_task(static, "s", 'version = "1.0"\n[metadata.amber.static]\ncontains = ["4"]\n', dockerfile=None)
    assert check_tasks(static) == [TaskCheck("s", "s", True, None, static=True)]
    assert asked == [1]


def test_an_engine_that_does_not_answer_skips_the_image_check(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    write_task(tmp_path / "bench", "u", dockerfile="FROM ubuntu:24.04\n")
    assert check_tasks(tmp_path / "bench") == [TaskCheck("u", "u", True, None)]


@pytest.mark.docker
def test_the_local_engine_has_amber_base_and_not_ubuntu(tmp_path) -> None:
    write_task(tmp_path, "on-base", dockerfile="FROM amber-base:bookworm\n")
    write_task(tmp_path, "on-ubuntu", dockerfile="FROM docker.io/library/ubuntu:24.04\n")
    assert check_tasks(tmp_path) == [
        TaskCheck("on-base", "on-base", True, None),
        TaskCheck("on-ubuntu", "on-ubuntu", False,
                  f"Task on-ubuntu's Dockerfile starts FROM docker.io/library/ubuntu:24.04, "
                  f"{UBUNTU_MISSING}"),
    ]


# ---- names are unique; one Task never sinks another -------------------------------------------------------------

def test_a_duplicate_name_fails_every_task_carrying_it(tmp_path) -> None:
    write_task(tmp_path, "a/same")
    write_task(tmp_path, "b/same")
    write_task(tmp_path, "c", '[task]\nname = "acme/same"\n')
    write_task(tmp_path, "d/other")
    assert check_tasks(tmp_path, local_images=LOCAL) == [
        TaskCheck("same", "a/same", False, "Task same in a/same has the same name as the Task in b/same and c: "
                                           "Task names are unique in an upload, so rename one of the folders (or its "
                                           "[task] name)."),
        TaskCheck("same", "b/same", False, "Task same in b/same has the same name as the Task in a/same and c: "
                                           "Task names are unique in an upload, so rename one of the folders (or its "
                                           "[task] name)."),
        TaskCheck("same", "c", False, "Task same in c has the same name as the Task in a/same and b/same: Task names "
                                      "are unique in an upload, so rename one of the folders (or its [task] name)."),
        TaskCheck("other", "d/other", True, None),
    ]


@pytest.mark.parametrize("files", [
    {"environment/Dockerfile": "\x00\xff garbage \\\n"},
    {"environment/docker-compose.yaml": "- just\n- a list\n"},
    {"environment/docker-compose.yaml": "services:\n  main: [not, a, mapping]\n"},
    {"environment/Dockerfile": "FROM amber-base:bookworm\nRUN <<EOF\nnever closed\n"},
    {"environment/Dockerfile": "FROM\nCOPY\nCOPY --from\nADD [\"unclosed\nARG\nENV\n"},
    {"task.toml": 'version = "1.0"\n[environment]\nmcp_servers = "no"\n'},
])
def test_odd_files_never_raise(tmp_path, files) -> None:
    write_task(tmp_path, "t")
    write_task(tmp_path, "fine")
    for rel, text in files.items():
        (tmp_path / "t" / rel).write_text(text)
    found = check_tasks(tmp_path, local_images=LOCAL)
    assert [c.folder for c in found] == ["fine", "t"] and found[0].ok
    assert found[1].reason is None or "\n" not in found[1].reason


def test_an_unexpected_error_fails_only_its_task(tmp_path, monkeypatch) -> None:
    real = checks.check_dockerfile

    def flaky(name, path, rel):
        if name == "t":
            raise RuntimeError("boom\nwith a second line")
        return real(name, path, rel)

    monkeypatch.setattr(checks, "check_dockerfile", flaky)
    write_task(tmp_path, "t")
    write_task(tmp_path, "u")
    assert check_tasks(tmp_path, local_images=LOCAL) == [
        TaskCheck("t", "t", False, "Task t could not be checked (boom): check its files and upload it again."),
        TaskCheck("u", "u", True, None),
    ]


def test_the_root_itself_may_be_a_task_and_a_relative_root_works(tmp_path, monkeypatch) -> None:
    d = write_task(tmp_path, "solo")
    assert check_tasks(d, local_images=LOCAL) == [TaskCheck("solo", ".", True, None)]
    monkeypatch.chdir(tmp_path)
    write_task(tmp_path, "two", dockerfile="FROM amber-base:bookworm\nCOPY ../x /x\n")
    found = check_tasks(Path("."), local_images=LOCAL)
    assert [(c.folder, c.ok) for c in found] == [("solo", True), ("two", False)]
    assert found[1].reason is not None and found[1].reason.startswith("Task two's Dockerfile (line 2)")


# ---- real published Tasks and a mixed upload --------------------------------------------------------------------

def test_real_tasks_pass_with_their_quirks_and_load(tmp_path) -> None:
    real = FIXTURES / "real"
    assert b"\r\n" in (real / "pam-trace" / "task.toml").read_bytes()  # the CRLF files stayed CRLF
    assert not (real / "pam-trace" / "tests" / "test.sh").stat().st_mode & 0o111  # and the scripts not executable
    found = check_tasks(real, local_images=REAL_IMAGES)
    assert found == [TaskCheck(name, folder, True, None, static=name == "static-capital") for name, folder in [
        ("hello-world", "hello"), ("legacy-sizes", "legacy-sizes"), ("pam-trace", "pam-trace"),
        ("prebuilt", "prebuilt"), ("static-capital", "static-capital"), ("tb-mapped", "tb-mapped")]]
    specs = {c.name: load_task(real / c.folder, real) for c in found}
    assert specs["pam-trace"].agent_timeout_sec == 1800.0 and "\r" not in specs["pam-trace"].instruction
    assert specs["legacy-sizes"].verifier_timeout_sec == 120.0
    assert specs["static-capital"].static is not None and specs["prebuilt"].docker_image == "amber-base:bookworm"


def test_a_mixed_upload_fails_its_bad_tasks_with_reasons_and_passes_the_rest() -> None:
    assert check_tasks(FIXTURES / "mixed", local_images=LOCAL) == [
        TaskCheck("bad-copy", "bad-copy", False,
                  "Task bad-copy's Dockerfile (line 2) copies from ../solution/solve.sh, which is outside "
                  "environment/: COPY and ADD read only from inside environment/, so move the file there."),
        TaskCheck("bad-gpu", "bad-gpu", False,
                  "Task bad-gpu asks for GPUs ([environment].gpus = 1), which Amber's sandboxes do not have: remove "
                  "gpus."),
        TaskCheck("broken-toml", "broken-toml", False,
                  "broken-toml/task.toml is not valid TOML (Illegal character '\\n' (at line 2, column 20)): fix the "
                  "file and submit again."),
        TaskCheck("good", "good", True, None),
        TaskCheck("missing-base", "missing-base", False,
                  f"Task missing-base's Dockerfile starts FROM ubuntu:24.04, {UBUNTU_MISSING}"),
        TaskCheck("good-two", "nested/deeper/good-two", True, None),
        TaskCheck("no-instruction", "no-instruction", False,
                  "Task no-instruction has no instruction.md: add one at no-instruction/instruction.md."),
    ]
