"""The consumer's fetched chunks: an empty answer builds its table without importing pandas."""

from __future__ import annotations

import subprocess
import sys

from ads_spark.client.consumer import _chunk
from ads_spark.records import RECORD_SCHEMA


def test_an_empty_answer_is_an_empty_chunk_at_the_asked_offset():
    chunk = _chunk([], 7, 7, 0)
    assert chunk.table.num_rows == 0 and chunk.table.schema == RECORD_SCHEMA
    assert (chunk.next_offset, chunk.high_watermark) == (7, 7)


def test_an_empty_answer_does_not_import_pandas():
    """``Schema.empty_table()`` imports pandas: a consumer's first poll before any data arrived took 150-300 ms
    more, and the latency benchmark's first records waited ~200 ms behind it."""
    script = ("import sys\nfrom ads_spark.client.consumer import _chunk\n"
              "_chunk([], 0, 0, 0)\nprint('pandas' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stdout + result.stderr
