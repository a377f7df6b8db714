"""The consumer's fetched chunks: an empty answer builds its table without importing pandas."""

from __future__ import annotations

from ads_spark.client.chunks import fetched_chunk
from ads_spark.protocol.records import RECORD_SCHEMA
from tests.fixtures.fresh_interpreter import assert_leaves_pandas_unimported


def test_an_empty_answer_is_an_empty_chunk_at_the_asked_offset():
    chunk = fetched_chunk([], 7, 7, 0)
    assert chunk.table.num_rows == 0 and chunk.table.schema == RECORD_SCHEMA
    assert (chunk.next_offset, chunk.high_watermark) == (7, 7)


def test_an_empty_answer_does_not_import_pandas():
    """``Schema.empty_table()`` imports pandas: a consumer's first poll before any data arrived took 150-300 ms
    more, and the latency benchmark's first records waited ~200 ms behind it."""
    assert_leaves_pandas_unimported("import ads_spark.client.consumer\n"
                                    "from ads_spark.client.chunks import fetched_chunk\nfetched_chunk([], 0, 0, 0)")
