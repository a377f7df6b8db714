"""The attack suite's fixture: each module gets its own secured cluster (tests/fixtures/secure_cluster.py)."""

from tests.fixtures.secure_cluster import attack_cluster

__all__ = ["attack_cluster"]
