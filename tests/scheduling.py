"""How the suite is scheduled: the order of its tests, and which of them pytest-xdist keeps on one worker.

A plugin of its own (`tests/conftest.py` takes its hook), so that `tests/test_suite_groups.py` runs a probe suite
under exactly this hook without importing the fixtures, servers and Amber that the conftest brings."""

from __future__ import annotations

import pytest

# Session fixtures each worker would make for itself, whose making costs more than running their tests on one worker:
# a second Docker engine (`engine2`), into which the 258 MB base image is copied from the machine's (8-16 s of both
# engines' CPU, once on each of the four workers the tests of four modules spread over).
SHARED_SESSION_FIXTURES = ("engine2",)
# What a `slow` mark stands for in the order when it gives no seconds. A test far longer than the others says how long
# it takes (`@pytest.mark.slow(120)`: seconds on 2 cores, under the suite's load), so that it starts first.
SLOW_SEC = 30


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the test ids it sends
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need no Docker engine run first: they are most of the suite and the quickest to fail. Within
    each part the longest go first (`_expected_seconds`), so that on pytest-xdist's workers no long test starts last
    and keeps one worker busy after the others are done. Order is kept otherwise.

    The tests of a module that share one of its module-scoped fixtures (an instance with its daemon, images
    built, a deployment) are one group, which `make test` (`--dist loadgroup`) gives to one worker: a fixture is
    made once per worker that runs a test of it, and a module's tests spread over three workers made it three
    times. So are the tests, of any module, that use one of the SHARED_SESSION_FIXTURES, named after it."""
    items.sort(key=lambda item: (item.get_closest_marker("docker") is not None, -_expected_seconds(item)))
    for item in items:
        shared = [name for name in SHARED_SESSION_FIXTURES if name in getattr(item, "fixturenames", ())]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
        elif _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _expected_seconds(item: pytest.Item) -> float:
    """How long the test takes, as far as the order needs to know: its `slow` mark's seconds, SLOW_SEC for a slow
    mark without them, and nothing for a test without one."""
    slow = item.get_closest_marker("slow")
    if slow is None:
        return 0
    return float(slow.args[0]) if slow.args else SLOW_SEC


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    module = item.nodeid.split("::")[0]
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope == "module" and d.baseid == module
                                    for defs in info.name2fixturedefs.values() for d in defs)
