"""Cross-cluster mirroring (jobs/mirror.py) between two real clusters on this machine.

Two clusters, ``east`` and ``west``, each with its own embedded ZooKeeper and 2 brokers
(RF 2, min ISR 1), started once for the module. The tests drive the mirror's library
(``ads_spark.mirror``), which the job script is a thin CLI over:

* under load, with a broker of each side SIGKILLed and restarted, the target ends with the
  source's records exactly: every partition the same values in the same order, none lost,
  none duplicated; the remote topic has the source's partitions and configs, and a topic of
  the target's own (``west.*`` on east) is not mirrored back;
* a reading job fails over from east to west with translated offsets: it skips nothing and
  re-reads no more per partition than the documented bound (one mirror micro-batch);
* two clusters mirroring each other with identity naming do not loop.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

import pytest

from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

BROKERS = 2
RECORDS_UNDER_LOAD = 12000
INTERRUPTIONS = 3
PRODUCE_RATE_PER_S = 600
KILL_DOWN_S = 4.0
CATCH_UP_S = 240


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    from ads_spark.cluster import LocalCluster

    started = []
    try:
        for name in ("east", "west"):
            cluster = LocalCluster(tmp_path_factory.mktemp(f"mirror-{name}"))
            started.append(cluster)
            cluster.up(brokers=BROKERS)
        yield started
    finally:
        for cluster in started:
            # SIGKILL first: no test here looks at a broker's shutdown, and four controlled shutdowns in a row
            # were ~6 s of teardown. down() then finds no broker and stops ZooKeeper.
            for broker_id in cluster.broker_ids():
                cluster.kill_broker(broker_id)
            cluster.down()


@pytest.fixture(scope="module")
def admins(clusters):
    from ads_spark.client import Admin

    made = [Admin({"bootstrap.servers": c.bootstrap_servers}) for c in clusters]
    yield made
    for admin in made:
        admin.close()


def _high_watermarks(admin, topic: str) -> list[int]:
    from ads_spark.client import TopicPartition

    partitions = [TopicPartition(topic, p.partition) for p in admin.describe_topics([topic])[0].partitions]
    ends = admin.list_offsets(partitions, "latest")
    return [ends[tp] for tp in sorted(partitions, key=lambda tp: tp.partition)]


def _produce_at_rate(bootstrap: str, topic: str, partitions: int, count: int, acked: list, errors: list) -> None:
    from ads_spark.client import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true"})
    try:
        started = time.monotonic()
        pending = []
        for i in range(count):
            value = f"r{i}".encode()
            pending.append((value, producer.produce(topic, value=value, partition=i % partitions)))
            if i % 100 == 99:
                time.sleep(max(0.0, started + (i + 1) / PRODUCE_RATE_PER_S - time.monotonic()))
        producer.flush(120)
        for value, future in pending:
            try:
                future.result(timeout=1)
                acked.append(value)
            except Exception as exc:  # counted: an unacknowledged record may or may not be in the source
                errors.append(exc)
    finally:
        producer.close()


def _mirror_thread(spark, config, stop: threading.Event, outcome: dict, batch) -> threading.Thread:
    from ads_spark.mirror.job import run_mirror

    def run() -> None:
        try:
            run_mirror(spark, config, should_stop=stop.is_set, restarts_max=10, poll_s=0.02, batch=batch)
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="mirror", daemon=True)
    thread.start()
    return thread


def _kill_and_restart(cluster, broker_id: int) -> None:
    cluster.signal_broker(broker_id, signal.SIGKILL)
    time.sleep(KILL_DOWN_S)
    cluster.start_broker(broker_id)


def _stop_mid_batch(west_admin, remote: str, stop: threading.Event, mirror: threading.Thread) -> None:
    """Stop the mirror the moment the target grows, i.e. while a micro-batch is being written and before
    Spark commits it: the next run re-executes that batch (what a driver crash does)."""
    before = sum(_high_watermarks(west_admin, remote))
    deadline = time.monotonic() + 60
    while sum(_high_watermarks(west_admin, remote)) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    mirror.join(120)


def test_mirror_under_load_with_a_broker_of_each_side_killed(spark, clusters, admins, tmp_path):
    from ads_spark.mirror.job import MirrorBatch, MirrorConfig
    from ads_spark.mirror.naming import MirrorPolicy
    from ads_spark.mirror.verify import compare_topic

    east, west = clusters
    east_admin, west_admin = admins
    suffix = uuid.uuid4().hex[:6]
    topic, loop_topic = f"orders-{suffix}", f"west.loop-{suffix}"
    east_admin.create_topic(topic, partitions=3, replication_factor=2, config={"retention.ms": "604800000"})
    east_admin.create_topic(loop_topic, partitions=1, replication_factor=2)
    policy = MirrorPolicy("east", "west", pattern=f".*-{suffix}")
    # Small produce requests (2 KiB) make each micro-batch's write take several round trips, so a stop
    # lands inside it.
    config = MirrorConfig(policy, east.bootstrap_servers, west.bootstrap_servers, str(tmp_path / "ckpt"),
                          max_offsets_per_trigger=1500, trigger_interval_ms=500, target_options={"batch.size": "2048"})
    batch, outcome = MirrorBatch(config), {}
    acked, errors = [], []
    producer = threading.Thread(target=_produce_at_rate, daemon=True,
                                args=(east.bootstrap_servers, topic, 3, RECORDS_UNDER_LOAD, acked, errors))
    stop = threading.Event()
    mirror = _mirror_thread(spark, config, stop, outcome, batch)
    remote = policy.remote_topic(topic)
    try:
        producer.start()
        wait_until(lambda: remote in west_admin.list_topics() and sum(_high_watermarks(west_admin, remote)) > 300,
                   120, what="the mirror to copy its first records")
        for _ in range(INTERRUPTIONS):
            _stop_mid_batch(west_admin, remote, stop, mirror)
            stop = threading.Event()
            mirror = _mirror_thread(spark, config, stop, outcome, batch)
        _kill_and_restart(east, 1)
        _kill_and_restart(west, 2)
        producer.join(180)
        assert not producer.is_alive(), "the producer did not finish"
        source_ends = _high_watermarks(east_admin, topic)
        wait_until(lambda: _high_watermarks(west_admin, remote) == source_ends or "error" in outcome, CATCH_UP_S,
                   what=f"the target to catch up with the source's {source_ends}")
    finally:
        stop.set()
        mirror.join(120)
    assert "error" not in outcome, outcome.get("error")
    comparison = compare_topic(east.bootstrap_servers, west.bootstrap_servers, policy, topic, 3)
    replayed = sorted({b for b in batch.started_batch_ids if batch.started_batch_ids.count(b) > 1})
    print(f"acked={len(acked)} unacked={len(errors)} batches={batch.batches} restarts after failures="
          f"{batch.restarts} micro-batches re-executed={replayed}; per partition (source, target, missing, "
          f"duplicated, same order): "
          f"{[(c.source_records, c.target_records, c.missing, c.duplicated, c.same_order) for c in comparison]}")
    assert all(c.exact for c in comparison), comparison
    assert replayed, "no micro-batch was re-executed: the test did not exercise a replay"
    assert sum(c.source_records for c in comparison) >= len(acked) >= RECORDS_UNDER_LOAD - len(errors)
    remote_description = west_admin.describe_topics([remote])[0]
    assert len(remote_description.partitions) == 3
    assert west_admin.describe_configs(remote)["overrides"].get("retention.ms") == "604800000"
    assert not [t for t in west_admin.list_topics() if "loop-" + suffix in t], "a west.* topic was mirrored back"
    assert policy.checkpoint_topic in west_admin.list_topics()


def _memory_read(spark, bootstrap: str, topic: str, starting: str, name: str, *, batches: int | None,
                 max_offsets: int):
    """Run a streaming read into a memory table; stop after ``batches`` micro-batches with data (None: run
    availableNow to the end). Returns (rows (partition, offset, value), the end offsets JSON it committed)."""
    query = (spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", starting).option("maxOffsetsPerTrigger", str(max_offsets)).load()
             .selectExpr("partition", "offset", "value").writeStream.format("memory").queryName(name))
    if batches is None:
        query = query.trigger(availableNow=True).start()
        query.awaitTermination(180)
    else:
        query = query.trigger(processingTime="200 milliseconds").start()
        wait_until(lambda: sum(1 for p in query.recentProgress if p["numInputRows"] > 0) >= batches, 120,
                   what=f"{batches} micro-batches of the reading job")
        query.stop()
    assert query.exception() is None, query.exception()
    done = [p for p in query.recentProgress if p["numInputRows"] > 0]
    end = done[-1]["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    committed = {int(p): o for p, o in (end["topics"][topic]["offsets"] if "topics" in end else end[topic]).items()}
    rows = [(r.partition, r.offset, bytes(r.value)) for r in spark.table(name).collect()]
    # A batch interrupted by stop() may have reached the memory table: keep what the job committed.
    return [r for r in rows if r[1] < committed.get(r[0], 0)], end


def test_reader_fails_over_to_the_target_with_translated_offsets(spark, clusters, admins, tmp_path):
    from ads_spark.mirror.job import MirrorConfig, run_mirror
    from ads_spark.mirror.naming import MirrorPolicy
    from ads_spark.mirror.topics import read_checkpoints, translate_starting_offsets
    from tests.fixtures.spark import produce

    east, west = clusters
    east_admin, _ = admins
    suffix = uuid.uuid4().hex[:6]
    topic = f"events-{suffix}"
    east_admin.create_topic(topic, partitions=3, replication_factor=2)
    # Every 10th record carries a path through west: it came from west, so the mirror drops it, and target
    # offsets fall behind source offsets (a translation that kept the source offsets would skip records).
    looped = [("ads.mirror.path", b"west")]
    produce(east.bootstrap_servers, topic,
            [(i % 3, None, f"e{i}".encode(), looped if i % 10 == 0 else None) for i in range(3000)])
    mirror_batch_max = 300
    policy = MirrorPolicy("east", "west", pattern=topic)
    run_mirror(spark, MirrorConfig(policy, east.bootstrap_servers, west.bootstrap_servers, str(tmp_path / "ckpt"),
                                   max_offsets_per_trigger=mirror_batch_max, available_now=True))
    before, position = _memory_read(spark, east.bootstrap_servers, topic, "earliest", f"before_{suffix}",
                                    batches=3, max_offsets=250)
    translated = translate_starting_offsets(position, west.bootstrap_servers, "east", "west")
    after, _ = _memory_read(spark, west.bootstrap_servers, policy.remote_topic(topic), translated,
                            f"after_{suffix}", batches=None, max_offsets=100_000)
    index = read_checkpoints(west.bootstrap_servers, policy)
    source_position = {int(p): o for p, o in position["topics"][topic]["offsets"].items()}
    target_position = {int(p): o for p, o in json.loads(translated)[policy.remote_topic(topic)].items()}
    assert all(target_position[p] < source_position[p] for p in range(3)), (source_position, target_position)
    for partition in range(3):
        everything = {f"e{i}".encode() for i in range(partition, 3000, 3) if i % 10}
        read_before = {v for p, _, v in before if p == partition}
        read_after = [v for p, _, v in after if p == partition]
        reread = read_before & set(read_after)
        ends = [0] + [s for s, _ in index._by_partition[(topic, partition)]]
        largest_batch = max(b - a for a, b in zip(ends, ends[1:]))
        print(f"partition {partition}: read {len(read_before)} on east, {len(read_after)} on west after failover, "
              f"re-read {len(reread)} (bound: one mirror batch of this partition, at most {largest_batch})")
        assert everything - read_before - set(read_after) == set(), "the failed-over reader skipped records"
        assert len(read_after) == len(set(read_after)), "the target reader read a record twice"
        assert len(reread) <= largest_batch <= mirror_batch_max


def test_two_clusters_mirroring_each_other_with_identity_names_do_not_loop(spark, clusters, admins, tmp_path):
    from ads_spark.mirror.job import MirrorConfig, run_mirror
    from ads_spark.mirror.naming import MirrorPolicy
    from ads_spark.mirror.verify import partition_values
    from tests.fixtures.spark import produce

    east, west = clusters
    suffix = uuid.uuid4().hex[:6]
    topic = f"shared-{suffix}"
    for admin in admins:
        admin.create_topic(topic, partitions=2, replication_factor=2)
    produce(east.bootstrap_servers, topic, [(i % 2, None, f"east{i}".encode(), None) for i in range(200)])
    produce(west.bootstrap_servers, topic, [(i % 2, None, f"west{i}".encode(), None) for i in range(100)])
    east_to_west = MirrorConfig(MirrorPolicy("east", "west", "identity", topic), east.bootstrap_servers,
                                west.bootstrap_servers, str(tmp_path / "e2w"), available_now=True)
    west_to_east = MirrorConfig(MirrorPolicy("west", "east", "identity", topic), west.bootstrap_servers,
                                east.bootstrap_servers, str(tmp_path / "w2e"), available_now=True)
    for config in (east_to_west, west_to_east, east_to_west, west_to_east):  # each flow sees the other's output
        run_mirror(spark, config)
    expected = sorted([f"east{i}".encode() for i in range(200)] + [f"west{i}".encode() for i in range(100)])
    for cluster in clusters:
        held = sorted(v for p in range(2) for v in partition_values(cluster.bootstrap_servers, topic, p))
        assert held == expected, f"{cluster.dir.name}: {len(held)} records, {len(set(held))} distinct"


def test_remote_topic_follows_source_partitions_and_configs_and_the_cli_translates(spark, clusters, admins,
                                                                                     tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from ads_spark.mirror.job import MirrorConfig, run_mirror
    from ads_spark.mirror.naming import MirrorPolicy
    from ads_spark.mirror.topics import translate_starting_offsets
    from ads_spark.mirror.verify import compare_topic
    from tests.fixtures.spark import produce

    east, west = clusters
    east_admin, west_admin = admins
    topic = f"grows-{uuid.uuid4().hex[:6]}"
    east_admin.create_topic(topic, partitions=1, replication_factor=2, config={"retention.ms": "3600000"})
    produce(east.bootstrap_servers, topic, [(0, None, f"a{i}".encode(), None) for i in range(100)])
    policy = MirrorPolicy("east", "west", pattern=topic)
    config = MirrorConfig(policy, east.bootstrap_servers, west.bootstrap_servers, str(tmp_path / "ckpt"),
                          available_now=True)
    run_mirror(spark, config)
    remote = policy.remote_topic(topic)
    assert len(west_admin.describe_topics([remote])[0].partitions) == 1
    east_admin.create_partitions(topic, 3)
    east_admin.alter_configs(topic, set_configs={"retention.ms": "7200000", "max.message.bytes": "2000000"})
    produce(east.bootstrap_servers, topic, [(i % 3, None, f"b{i}".encode(), None) for i in range(300)])
    run_mirror(spark, config)
    assert len(west_admin.describe_topics([remote])[0].partitions) == 3
    overrides = west_admin.describe_configs(remote)["overrides"]
    assert (overrides.get("retention.ms"), overrides.get("max.message.bytes")) == ("7200000", "2000000")
    comparison = compare_topic(east.bootstrap_servers, west.bootstrap_servers, policy, topic, 3)
    assert all(c.exact for c in comparison) and [c.target_records for c in comparison] == [200, 100, 100]
    offsets = json.dumps({topic: {"0": 150, "2": 100}})
    job = Path(__file__).resolve().parents[2] / "jobs" / "mirror.py"
    printed = subprocess.run([sys.executable, str(job), "translate", "--source-alias", "east", "--target-alias",
                              "west", "--target-bootstrap", west.bootstrap_servers, "--offsets", offsets],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    expected = translate_starting_offsets(offsets, west.bootstrap_servers, "east", "west")
    # Partition 0's checkpoints are at source offsets 100 and 200 (one per micro-batch): 150 translates to
    # the one below it, re-reading 50 records and skipping none; partition 2's 100 is a checkpoint itself.
    assert json.loads(printed.stdout) == json.loads(expected) == {remote: {"0": 100, "2": 100}}
