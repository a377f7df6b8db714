"""Shared pytest set-up: each fixture family lives in its own module under tests/fixtures; the order and
the lanes of a parallel run.

``make test`` runs the suite on pytest-xdist workers (``-n 3``). A worker takes a whole module at a time
(its ``cluster`` fixture starts once), except that ``tests/chaos`` and ``tests/spark`` are each one lane:
every module of a lane runs on one worker, one after another, so the machine never holds two SparkSessions
or two fault schedules at once. The lanes are the longest stretches of the run, so they are handed out
first (the items are sorted so, and xdist's own reordering by test count is off).
``--dist loadgroup`` would do the grouping, but its marks do not reach the scheduler under pytest 9 (the
node-id suffix it relies on is lost), so the scheduler is made here (docs/perf/test-suite-time.md).
"""

import pytest

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.spark",
]

LANES = {"tests/chaos/": "lane:chaos", "tests/spark/": "lane:spark"}
# The order work is handed out in: the longest-running directories first.
DIRECTORY_ORDER = ("tests/chaos/", "tests/spark/", "tests/integration/", "tests/security/", "tests/sim/",
                   "tests/unit/")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _rank(nodeid: str) -> int:
    module = _module(nodeid)
    return next((i for i, directory in enumerate(DIRECTORY_ORDER) if module.startswith(directory)),
                len(DIRECTORY_ORDER))


def work_unit(nodeid: str) -> str:
    """What one worker runs in one go: the test's lane, or else its module."""
    module = _module(nodeid)
    return next((lane for directory, lane in LANES.items() if module.startswith(directory)), module)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _rank(item.nodeid))  # stable: a module keeps its own order


@pytest.hookimpl(optionalhook=True)  # called by pytest-xdist only
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # hand out work in collection order: the lanes first
    return LaneScheduling(config, log)
