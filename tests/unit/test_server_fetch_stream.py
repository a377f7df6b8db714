"""How a fetch answer is cut into Flight messages (broker/server.py ``_fetch_stream``): one chunk per batch, an
empty batch for a partition with nothing to send, and in a fetch session the last chunk's metadata ends the
answer (client/fetch_session.py reads up to it)."""

from __future__ import annotations

import json

from ads_spark.broker.server import _EMPTY_BATCH, _fetch_stream
from ads_spark.records import BatchHeader


def _metas(chunks) -> list[dict]:
    return [json.loads(metadata.to_pybytes()) for _, metadata in chunks]


def test_the_last_chunk_of_a_session_answer_says_end():
    responses = [({"topic": "t", "partition": 0, "high_watermark": 7}, [("b0", BatchHeader(0, 3, 1, 0)),
                                                                         ("b1", BatchHeader(3, 4, 1, 0))]),
                 ({"topic": "t", "partition": 1, "error_code": 6}, [])]
    chunks = list(_fetch_stream(responses, end_marked=True))
    metas = _metas(chunks)
    assert [batch for batch, _ in chunks] == ["b0", "b1", _EMPTY_BATCH]
    assert [meta.get("end", False) for meta in metas] == [False, False, True]
    assert metas[0]["high_watermark"] == 7 and metas[1]["header"]["base_offset"] == 3
    assert metas[2] == {"topic": "t", "partition": 1, "error_code": 6, "end": True}  # that partition's error


def test_without_end_marking_or_chunks_nothing_says_end():
    responses = [({"topic": "t", "partition": 0}, [("b0", BatchHeader(0, 1, 1, 0))])]
    assert "end" not in _metas(_fetch_stream(responses))[0]  # DoGet: the stream's end ends the answer
    assert list(_fetch_stream([], end_marked=True)) == []  # the session sends a metadata-only end instead
