"""The layers the README draws are the layers the imports make.

The README's Layout section lists the core library's layers from the top
(peers on one line, split by "|"). Every import of every module of
`amber_pipeline/` (deferred imports inside functions included) is read with
`ast` and held to that picture: nothing imports a higher layer, peers never
import each other, no modules import each other in a loop, every package is
on the picture, and nothing but the Dagster definitions imports dagster.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from amber_pipeline.paths import PROJECT_ROOT

LIBRARY = PROJECT_ROOT / "amber_pipeline"
DAGSTER_LAYER = {"amber_pipeline.definitions"}  # the thin Dagster layer's entry point, above every layer


def layers() -> list[list[str]]:
    """The README's layers, top first: each a list of peer package (or base module) names."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    block = re.search(r"```text\n(.*?)```", layout, re.S)
    assert block, "the README's Layout section has no ```text block of layers"
    rows = []
    for line in block.group(1).strip().splitlines():
        names = re.match(r"^([a-z_]+(?:\s*\|\s*[a-z_]+)*)\s{2,}", line)
        assert names, f"not a layer line: {line!r}"
        rows.append([n.strip() for n in names.group(1).split("|")])
    return rows


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code, as absolute names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): p for p in sorted(LIBRARY.rglob("*.py"))}


def unit(module: str) -> str:
    """The layer unit of a library module: its package (amber_pipeline.jobs.x -> jobs) or base module."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def library_imports(module: str) -> set[str]:
    """The library modules a module imports (a name that is a package's attribute counts as the package)."""
    out = set()
    for name in imports(MODULES[module]):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != "amber_pipeline" and name != module:
            out.add(name)
    return out


def test_the_readme_draws_every_package_once() -> None:
    drawn = [name for row in layers() for name in row]
    assert len(drawn) == len(set(drawn)), drawn
    present = {unit(m) for m in MODULES if m not in DAGSTER_LAYER and m != "amber_pipeline"}
    assert set(drawn) == present


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m not in DAGSTER_LAYER and m != "amber_pipeline"))
def test_no_module_imports_a_higher_layer_or_a_peer(module: str) -> None:
    level = {name: i for i, row in enumerate(layers()) for name in row}
    mine = unit(module)
    for target in library_imports(module):
        theirs = unit(target)
        if target in DAGSTER_LAYER:
            pytest.fail(f"{module} imports the Dagster layer ({target})")
        if theirs == mine:
            continue
        assert level[theirs] > level[mine], (
            f"{module} (layer {mine}) imports {target} (layer {theirs}), which is not below it")


def test_no_modules_import_each_other_in_a_loop() -> None:
    graph = {m: library_imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            pytest.fail("import loop: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        for n in sorted(graph.get(m, ())):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_only_the_definitions_import_dagster() -> None:
    offenders = [m for m, p in MODULES.items() if m not in DAGSTER_LAYER
                 and any(i == "dagster" or i.startswith("dagster.") for i in imports(p))]
    assert offenders == []


def test_the_picture_is_held_to_something() -> None:
    """The walk finds the imports it checks: the top layer reaches the bottom one."""
    top, bottom = layers()[0], layers()[-1]
    reached = {unit(t) for m in MODULES if unit(m) in top for t in library_imports(m)}
    assert reached & set(bottom) and len(reached) >= 5


INTERNALS_PACKAGE = "launcher"  # the run launcher, the run coordinator, and what they need of Dagster's internals
PRIVATE = re.compile(r"dagster(_shared)?[.]_|dagster_shared\b")
PROJECT_PACKAGES = ("amber_pipeline", "assets", "sensors", "launcher", "server", "web", "bench", "scripts", "tests")


def test_only_the_launcher_package_imports_dagsters_internals() -> None:
    """Dagster's private modules (underscored, and `dagster_shared`) change in any release: one package takes them,
    so a Dagster upgrade breaks that package alone. Deferred imports count, and so does `importlib` by name."""
    offenders = []
    for package in PROJECT_PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            names = imports(path) | set(re.findall(r"""import_module\(\s*["']([\w.]+)""", path.read_text()))
            private = sorted(n for n in names if PRIVATE.match(n))
            if private and path.relative_to(PROJECT_ROOT).parts[0] != INTERNALS_PACKAGE:
                offenders.append(f"{path.relative_to(PROJECT_ROOT)}: {', '.join(private)}")
    assert offenders == []
    assert any(PRIVATE.match(n) for p in (PROJECT_ROOT / INTERNALS_PACKAGE).rglob("*.py") for n in imports(p))


# A file name that two modules share names one concept seen from two layers (the CLI's face of an operation, an
# adapter and its checks, a Dagster asset and its sensor), never two things. A new pair must be added here, with
# the concept it names, or be renamed.
SHARED_NAMES = {
    "account.py": "a user's account: its operations and their commands",
    "audit.py": "the audit log: its records, its operation, its command",
    "benchmarks.py": "Benchmarks: their operations, their commands and their web page",
    "jobs.py": "Jobs: their operations, their commands and their web page",
    "results.py": "a Job's results: their operation and how the CLI prints them",
    "models.py": "Model Configurations: their operations and their commands",
    "money.py": "Workspaces' money: its operations and their commands",
    "sql.py": "`amber sql`: the confined engine, its operation, its command",
    "report.py": "the round report: computed, and its command",
    "compare.py": "paired comparisons: computed, their command and their web page",
    "plots.py": "a report's plots: PNG files, and SVG in the web pages",
    "wallet.py": "the Wallet: its ledger, and its web page",
    "launches.py": "the Dagster UI's launch ids: issued and claimed, and stamped on the UI's requests",
    "benchmark_versions.py": "Benchmark Versions in Dagster: their asset and the sensor that adds them",
    "humaneval.py": "the HumanEval adapter and its checks",
    "longmemeval.py": "the LongMemEval adapter and its checks",
    "mrcr.py": "the MRCR adapter and its checks",
}


def test_a_shared_file_name_is_one_concept() -> None:
    places: dict[str, list[str]] = {}
    for package in ("amber_pipeline", "assets", "sensors", "launcher", "server", "web"):
        for path in (PROJECT_ROOT / package).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py"):
                places.setdefault(path.name, []).append(str(path.relative_to(PROJECT_ROOT)))
    shared = {name: sorted(paths) for name, paths in places.items() if len(paths) > 1}
    assert {name: paths for name, paths in shared.items() if name not in SHARED_NAMES} == {}
    assert set(SHARED_NAMES) <= set(shared), "a name listed as shared is no longer: take it off the list"


FACES_BELOW_THE_SERVER = ("web",)  # the web app: the server mounts it, and it reads only through the operations


def test_the_web_app_reads_through_the_operations_alone() -> None:
    """The web app is a face like the CLI: it imports the core library and never the Dagster layer, the server that
    mounts it, or Dagster itself, so a page sees what the API would and can be served without Dagster loaded."""
    offenders = []
    for package in FACES_BELOW_THE_SERVER:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            for name in imports(path):
                top = name.split(".")[0]
                if top in ("server", "launcher", "assets", "sensors") or top.startswith("dagster"):
                    offenders.append(f"{path.relative_to(PROJECT_ROOT)}: {name}")
    assert offenders == []
