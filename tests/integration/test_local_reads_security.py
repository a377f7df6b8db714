"""The local read path under security (issue #23 item 6): file permissions decide who maps the segments.

A secured 1-broker cluster (``ads cluster up``'s: mutual TLS, the ACL authorizer); its state and broker
directories are opened to other users by the test so that the only barrier left is what the broker
itself sets with security on: log directories 0700, segment files 0600.

* A consumer with local reads on, running as another Unix user (``nobody``, through ``setpriv``) with the
  admin's certificate (Read on every topic): it cannot open the segment files, so it reads everything over
  Flight -- ``local_fetches == 0``, every record -- and asks ``locate`` once, not on every fetch (it says
  so once in its log).
* The same consumer as root (who can open any file, like the broker's own user): it maps the segments
  (``local_fetches > 0``), the documented limit -- ``locate`` needs Read on the topic, but a process running
  as the broker's user or root can read every segment whatever its ACLs.
* The log directory's modes opened up: the other user maps the segments too -- the file modes, not the
  ACLs, are what stopped it.

Needs root (to run a process as another user) and ``setpriv``; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OTHER_USER, OTHER_GROUP = "nobody", "nogroup"
RECORDS = 2000
BATCHES = 10
FETCH_BYTES = 16_384  # several fetches: one stored batch or so each
CHILD_TIMEOUT_S = 120
REPO = Path(__file__).resolve().parents[2]
SETPRIV = shutil.which("setpriv")

# Run as the other user: read the whole partition with local reads on; count the locate calls.
CHILD = """
import json, logging, sys
from ads_spark.client import Consumer, TopicPartition
config, topic, records = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
said = []
class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logger = logging.getLogger("ads.client.consumer")
logger.setLevel(logging.INFO)
logger.addHandler(Said())
consumer = Consumer(config)
locates = []
call_action = consumer._connections.call_action
def counting(host, port, action, *args, **kwargs):
    if action == "locate":
        locates.append(port)
    return call_action(host, port, action, *args, **kwargs)
consumer._connections.call_action = counting
try:
    table = consumer.fetch_arrow(TopicPartition(topic, 0), 0, records)
    print(json.dumps({"local_fetches": consumer.local_fetches, "offsets": table.column("offset").to_pylist(),
                      "values": [v.decode() for v in table.column("value").to_pylist()],
                      "locates": len(locates), "unreadable_said": sum("not readable" in s for s in said)}))
finally:
    consumer.close()
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None,
                                reason="running a consumer as another Unix user needs root and setpriv")


@pytest.fixture(scope="module")
def secured():
    """The cluster, a topic of RECORDS records in BATCHES stored batches, and the admin's client config. Its
    state dir is made under /tmp itself: pytest's own temp dirs are 0700, which would stop the other user
    before the log directory's modes do."""
    state_dir = Path(tempfile.mkdtemp(prefix="ads-local-reads-security-"))
    cluster = LocalCluster(state_dir)
    try:
        cluster.up(brokers=1, security="tls")
        config = cluster.client_config()
        topic = f"local-{uuid.uuid4().hex[:8]}"
        admin = Admin(config)
        try:
            admin.create_topic(topic, partitions=1, replication_factor=1)
        finally:
            admin.close()
        with Producer({**config, "acks": "all"}) as producer:
            for i in range(RECORDS):
                producer.produce(topic, value=b"value-%d" % i, partition=0)
                if i % (RECORDS // BATCHES) == RECORDS // BATCHES - 1:
                    producer.flush(60)
        yield cluster, topic, config
    finally:
        cluster.down()
        shutil.rmtree(state_dir, ignore_errors=True)


def _open_path_to_log_dir(cluster: LocalCluster) -> Path:
    """Let other users walk down to the log directory (the state dir is 0700 by itself), which stays as the
    broker made it; returns the log directory."""
    log_dir = cluster.dir / "broker-1" / "data"
    for directory in (cluster.dir, cluster.dir / "broker-1"):
        os.chmod(directory, os.stat(directory).st_mode | 0o005)
    return log_dir


def _config_for_other_user(config: dict, directory: Path) -> dict:
    """``config`` with its truststore and keystore copied where the other user may read them (its own 0600)."""
    user = pwd.getpwnam(OTHER_USER)
    copied = dict(config)
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        target = directory / Path(config[key]).name
        shutil.copyfile(config[key], target)
        os.chmod(target, 0o600)
        os.chown(target, user.pw_uid, user.pw_gid)
        copied[key] = str(target)
    return copied


def _read_as_other_user(config: dict, topic: str) -> dict:
    child = subprocess.run(
        [SETPRIV, f"--reuid={OTHER_USER}", f"--regid={OTHER_GROUP}", "--clear-groups",
         sys.executable, "-c", CHILD, json.dumps(config), topic, str(RECORDS)],
        cwd="/", env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@needs_root
def test_another_unix_user_falls_back_to_flight_and_the_brokers_user_reads_locally(secured):
    cluster, topic, config = secured
    log_dir = _open_path_to_log_dir(cluster)
    segments = sorted(log_dir.glob(f"{topic}-0/*"))
    assert segments and stat.S_IMODE(os.stat(log_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(log_dir / f"{topic}-0").st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(path).st_mode) == 0o600 for path in segments if path.is_file())
    local_config = {**config, "max.partition.fetch.bytes": FETCH_BYTES, "local.reads": "true"}
    expected_values = ["value-%d" % i for i in range(RECORDS)]
    scratch = Path(tempfile.mkdtemp(prefix="ads-other-user-"))  # not under pytest's 0700 tmp dirs
    try:
        os.chown(scratch, pwd.getpwnam(OTHER_USER).pw_uid, pwd.getpwnam(OTHER_USER).pw_gid)
        other_config = _config_for_other_user(local_config, scratch)
        other = _read_as_other_user(other_config, topic)
        assert other["local_fetches"] == 0
        assert other["offsets"] == list(range(RECORDS)) and other["values"] == expected_values
        # It found out once: one locate for the one broker, one log line, then only fetches.
        assert other["locates"] == 1 and other["unreadable_said"] == 1
        # Root, as the broker's own user would, maps every segment: file modes do not stop it, ACLs neither.
        consumer = Consumer(local_config)
        try:
            table = consumer.fetch_arrow(TopicPartition(topic, 0), 0, RECORDS)
            assert consumer.local_fetches > 1
            assert table.column("offset").to_pylist() == list(range(RECORDS))
        finally:
            consumer.close()
        # With the modes opened, the other user maps them as well: the modes were what stopped it.
        for path in [log_dir, log_dir / f"{topic}-0", *segments]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        opened = _read_as_other_user(other_config, topic)
        assert opened["local_fetches"] > 1 and opened["values"] == expected_values
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
