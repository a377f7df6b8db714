"""Batch statistics and skipping on a real 3-broker cluster (issue #26): a typed topic keeping min/max of
``order_id`` per batch, reads whose filters let the brokers leave out the batches that cannot match, every
matching row still there, next offsets that reach the end of what was read (offsets are never filtered),
the brokers' skip counter, and the refusals of ``schema.statistics.columns``."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.client.typed import typed_read
from ads_spark.errors import InvalidConfigError
from ads_spark.schemas.statistics import Predicate, predicate_to_wire
from tests.fixtures.cluster import metric_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SCHEMA = "order_id BIGINT NOT NULL, region STRING"
BATCHES, ROWS_PER_BATCH = 20, 50
END = BATCHES * ROWS_PER_BATCH


def skipped_total(cluster) -> float:
    return sum(metric_values(cluster, "ads_fetch_batches_skipped_total").values())


@pytest.fixture(scope="module")
def clients(cluster):
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    admin, producer = Admin(config), Producer({**config, "acks": "all"})
    # Over Flight: the brokers' fetch is what skips batches (a local read maps the segments itself).
    consumer = Consumer({**config, "group.id": "statistics-readers", "local.reads": "false"})
    yield admin, producer, consumer
    producer.close()
    consumer.close()
    admin.close()


def test_filters_skip_batches_by_statistics_and_offsets_stay_whole(cluster, clients):
    admin, producer, consumer = clients
    topic = f"stats-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 1, 3, config={"schema.statistics.columns": "order_id"}, schema=SCHEMA)
    for i in range(BATCHES):  # one stored batch each, order_id increasing
        ids = list(range(i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH))
        rows = pa.table({"order_id": pa.array(ids, pa.int64()), "region": [f"r{n % 3}" for n in ids]})
        assert producer.produce_arrow(topic, rows, partition=0).result(30) == i * ROWS_PER_BATCH
    tp = TopicPartition(topic, 0)
    everything = consumer.fetch_range(tp, 0, END, typed=typed_read(topic, 1)).table
    assert everything.num_rows == END

    def read(*predicates: Predicate):
        return consumer.fetch_range(tp, 0, END, typed={"topic": topic, "version": 1, "filters": [
            predicate_to_wire(p) for p in predicates]})

    before = skipped_total(cluster)
    last_tenth = END - END // 10
    chunk = read(Predicate(">=", "order_id", last_tenth))
    sent_batches = chunk.table.num_rows / ROWS_PER_BATCH
    assert sent_batches <= 0.2 * BATCHES, chunk.table.num_rows  # >= 80% of the batches skipped
    matching = everything.filter(pc.greater_equal(everything.column("order_id"), last_tenth))
    found = chunk.table.filter(pc.greater_equal(chunk.table.column("order_id"), last_tenth))
    assert found.column("offset").to_pylist() == matching.column("offset").to_pylist()  # every matching row
    assert found.column("order_id").to_pylist() == list(range(last_tenth, END))
    assert chunk.next_offset == END
    assert skipped_total(cluster) - before >= 0.8 * BATCHES

    # Batches skipped after the last one sent, and a read that sends nothing: the next offset still reaches
    # the end of what was read, so a reader moves on (and a replay reads the same rows).
    first = read(Predicate("<", "order_id", 10))
    assert first.table.column("offset").to_pylist() == list(range(ROWS_PER_BATCH)) and first.next_offset == END
    none = read(Predicate(">", "order_id", 10 ** 9), Predicate("is_not_null", "region"))
    assert none.table.num_rows == 0 and none.next_offset == END
    assert read(Predicate("=", "region", "r1")).table.num_rows == END  # no statistics of region: nothing skipped


def test_statistics_columns_are_refused_where_they_cannot_apply(clients):
    admin, _, _ = clients
    typed_topic, kafka_topic = f"stats-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidConfigError, match=r"schema.statistics.columns.*names column\(s\) \['nope'\]"):
        admin.create_topic(typed_topic, 1, 1, config={"schema.statistics.columns": "order_id,nope"}, schema=SCHEMA)
    assert typed_topic not in admin.list_topics()
    with pytest.raises(InvalidConfigError, match="'schema.statistics.columns' applies to typed topics only"):
        admin.create_topic(kafka_topic, 1, 1, config={"schema.statistics.columns": "value"})
    admin.create_topic(typed_topic, 1, 1, schema=SCHEMA)
    admin.create_topic(kafka_topic, 1, 1)
    with pytest.raises(InvalidConfigError, match=r"names column\(s\) \['amount'\]"):
        admin.alter_configs(typed_topic, {"schema.statistics.columns": "amount"})
    with pytest.raises(InvalidConfigError, match="applies to typed topics only"):
        admin.alter_configs(kafka_topic, {"schema.statistics.columns": "value"})
    admin.alter_configs(typed_topic, {"schema.statistics.columns": "region,order_id"})
    assert admin.describe_configs(typed_topic)["overrides"]["schema.statistics.columns"] == "region,order_id"
