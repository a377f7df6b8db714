"""Only a forwarding name: the storage-engine test helpers live in ``tests/fixtures/logs.py``.

Kept while ``tests/unit/test_broker_partition.py`` (maintained with the broker's replica code) still
imports them from here; delete this module once it imports ``tests.fixtures.logs`` instead.
"""

from tests.fixtures.logs import open_log, produce_batch, stored_values, values_for

__all__ = ["open_log", "produce_batch", "stored_values", "values_for"]
