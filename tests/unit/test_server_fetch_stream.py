"""How a fetch answer is cut into Flight messages (broker/rpc/server.py ``_fetch_stream``): one chunk per batch, then
one empty batch listing every partition with nothing to send, and in a fetch session the last chunk's metadata
ends the answer (protocol/fetch_session.py reads up to it); ``wire.split_fetch_answer`` reads every shape back."""

from __future__ import annotations

import json

import pyarrow as pa

from ads_spark.broker.rpc.server import _EMPTY_BATCH, SESSION_FULL_ANSWER_INTERVAL_S, _fetch_stream, _SentPartitions
from ads_spark.protocol import wire
from ads_spark.protocol.records import BatchHeader


def _metas(chunks) -> list[dict]:
    return [json.loads(metadata.to_pybytes()) for _, metadata in chunks]


def _batch(rows: int) -> pa.RecordBatch:
    return _EMPTY_BATCH if not rows else pa.RecordBatch.from_pylist(
        [{"offset": i, "timestamp": 0, "value": b"v"} for i in range(rows)], schema=_EMPTY_BATCH.schema)


def test_partitions_without_batches_share_one_chunk_that_ends_the_answer():
    b0, b1 = _batch(3), _batch(4)
    responses = [({"topic": "t", "partition": 0, "error_code": 0, "high_watermark": 7},
                  [(b0, BatchHeader(0, 3, 1, 0)), (b1, BatchHeader(3, 4, 1, 0))]),
                 ({"topic": "t", "partition": 1, "error_code": 6}, []),
                 ({"topic": "t", "partition": 2, "error_code": 0, "high_watermark": 9}, [])]
    chunks = list(_fetch_stream(responses, end_marked=True))
    metas = _metas(chunks)
    assert [batch for batch, _ in chunks] == [b0, b1, _EMPTY_BATCH]
    assert [meta.get("end", False) for meta in metas] == [False, False, True]
    assert metas[0]["high_watermark"] == 7 and metas[1]["header"]["base_offset"] == 3
    assert metas[2] == {"partitions": [{"topic": "t", "partition": 1, "error_code": 6},
                                       {"topic": "t", "partition": 2, "error_code": 0, "high_watermark": 9}],
                        "end": True}
    infos, stored = wire.split_fetch_answer(zip(metas, [batch for batch, _ in chunks]))
    assert {key: info.get("high_watermark") for key, info in infos.items()} == {
        ("t", 0): 7, ("t", 1): None, ("t", 2): 9}
    assert infos[("t", 1)]["error_code"] == 6
    assert [batch.num_rows for batch, _ in stored[("t", 0)]] == [3, 4] and set(stored) == {("t", 0)}


def test_when_every_partition_has_batches_the_last_batch_ends_the_answer():
    responses = [({"topic": "t", "partition": 0, "error_code": 0}, [(_batch(1), BatchHeader(0, 1, 1, 0))])]
    metas = _metas(_fetch_stream(responses, end_marked=True))
    assert len(metas) == 1 and metas[0]["end"] is True and metas[0]["topic"] == "t"


def test_without_end_marking_or_chunks_nothing_says_end():
    responses = [({"topic": "t", "partition": 0}, [(_batch(1), BatchHeader(0, 1, 1, 0))]),
                 ({"topic": "t", "partition": 1}, [])]
    assert not any("end" in meta for meta in _metas(_fetch_stream(responses)))  # DoGet: the stream ends it
    assert list(_fetch_stream([], end_marked=True)) == []  # the session sends a metadata-only end instead


# ---- replica sessions leave out partitions with nothing new (broker/rpc/server.py ``_SentPartitions``) ----------

def _request(*partitions):
    return {"partitions": [{"topic": "t", "partition": p, "fetch_offset": offset, "current_leader_epoch": epoch}
                           for p, offset, epoch in partitions]}


def _quiet(partition, high_watermark=5, **extra):
    return ({"topic": "t", "partition": partition, "error_code": 0, "high_watermark": high_watermark,
             "log_start_offset": 0, "log_end_offset": 5, "leader_epoch": 1, **extra}, [])


def _named(sent, request, responses, now_s=0.0):
    return [meta["partition"] for meta, _ in sent.changed_only(request, responses, now_s)]


def test_a_replica_session_names_a_partition_again_only_when_something_changed():
    sent = _SentPartitions(now_s=0.0)
    request = _request((0, 5, 1), (1, 5, 1))
    assert _named(sent, request, [_quiet(0), _quiet(1)]) == [0, 1]  # first answer: everything
    assert _named(sent, request, [_quiet(0), _quiet(1)]) == []
    assert _named(sent, request, [_quiet(0, high_watermark=6), _quiet(1)]) == [0]  # the HW moved
    assert _named(sent, request, [_quiet(0, high_watermark=6), _quiet(1, error_code=6)]) == [1]  # errors always
    assert _named(sent, request, [_quiet(0, high_watermark=6), _quiet(1)]) == [1]  # and once after one
    assert _named(sent, request, [_quiet(0, high_watermark=6), ({**_quiet(1)[0]}, ["batch"])]) == [1]
    assert _named(sent, request, [_quiet(0, high_watermark=6), _quiet(1)]) == [1]  # once after data too
    assert _named(sent, request, [_quiet(0, high_watermark=6), _quiet(1, diverging_epoch={"epoch": 0})]) == [1]


def test_a_follower_that_asks_differently_is_answered_even_if_the_partition_did_not_change():
    """A follower that dropped an answer (it truncated, or has not heard of the epoch yet) asks with another
    offset or epoch, and must hear the partition's state again."""
    sent = _SentPartitions(now_s=0.0)
    assert _named(sent, _request((0, 5, 1)), [_quiet(0)]) == [0]
    assert _named(sent, _request((0, 3, 1)), [_quiet(0)]) == [0]
    assert _named(sent, _request((0, 3, 2)), [_quiet(0)]) == [0]
    assert _named(sent, _request((0, 3, 2)), [_quiet(0)]) == []


def test_a_replica_session_names_everything_again_after_the_full_answer_interval():
    sent = _SentPartitions(now_s=0.0)
    request = _request((0, 5, 1))
    assert _named(sent, request, [_quiet(0)], now_s=0.0) == [0]
    assert _named(sent, request, [_quiet(0)], now_s=SESSION_FULL_ANSWER_INTERVAL_S - 0.1) == []
    assert _named(sent, request, [_quiet(0)], now_s=SESSION_FULL_ANSWER_INTERVAL_S) == [0]
