"""Shared pytest set-up: each fixture family lives in its own module under tests/fixtures."""

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.spark",
]
