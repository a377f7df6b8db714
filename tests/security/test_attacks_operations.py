"""Attacks on a secured cluster's operation: restarts, local reads, files, logs (../shared/SECURITY.md).

The module's cluster (``attack_cluster``: 2 brokers, mutual TLS, the ACL authorizer, a SASL_PLAINTEXT
listener each). Each attack is refused with the right error, changes nothing, and the brokers serve
a legitimate call afterwards.

Attack -> test (node ids; what another module already covers is listed, not repeated):

* a restarting broker hammered with requests its ACLs forbid: none succeeds, before or after its ACL
  cache loads -> ``test_attack_a_restarting_broker_hammered_with_forbidden_requests_grants_none``
* a forbidden ``locate`` (the local-read path) reveals no segment paths
  -> ``test_attack_a_forbidden_locate_reveals_no_paths``
* with security on, log dirs 0700 and segments 0600 (every file under every broker's log dir)
  -> ``test_attack_other_local_users_cannot_read_the_log_dirs``
  (in-process with a loose umask: tests/unit/test_log_file_modes.py)
* no password or token in broker logs, state files or CLI output
  -> ``test_attack_no_password_or_token_lands_in_logs_state_files_or_cli_output``
  (the CLI alone: tests/integration/test_acls_users_cli.py::test_users_add_list_delete_never_print_the_password,
  tests/integration/test_secure_cluster_up.py::test_status_names_the_security_mode_and_prints_no_secret)
* ZooKeeper: anonymous/plaintext clients, another certificate of the CA, a walk finding nothing open
  -> tests/integration/test_zookeeper_security.py (every test there)
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client import Admin, Producer
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.security.authorizer import AclBinding
from tests.fixtures.secure_cluster import action, basic, bearer, wait_for_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC_REFUSED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_REFUSED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
RECORDS = 30
HAMMER_AFTER_LOAD_S = 1.0
HAMMER_ANSWERS = (TOPIC_REFUSED, CLUSTER_REFUSED, int(ErrorCode.NETWORK_EXCEPTION), int(ErrorCode.REQUEST_TIMED_OUT),
                  int(ErrorCode.BROKER_NOT_AVAILABLE), "no connection")


def _topic_with_data(target, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    target.admin.create_topic(topic, partitions=1, replication_factor=2)
    wait_for_leaders(target, topic)
    producer = Producer({**target.admin_config, "acks": "all"})
    try:
        for i in range(RECORDS):
            producer.produce(topic, value=b"v-%d" % i, partition=0)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    return topic


def _forbidden_calls(client, topic: str) -> dict[str, int]:
    """Each forbidden request once: its error code (0 = it succeeded)."""
    codes = {}
    for name, body in {"metadata": {"topics": [topic]}, "delete_topics": {"topics": [topic]},
                       "create_partitions": {"topic": topic, "partitions": 3},
                       "alter_configs": {"topic": topic, "set": {"retention.ms": "1"}},
                       "describe_acls": {"filter": None},
                       "locate": {"topic": topic, "partition": 0, "fetch_offset": 0}}.items():
        answer = action(client, name, body, timeout_s=2)
        if name == "metadata" and "topics" in answer:
            answer = answer["topics"][0]
        codes[name] = int(answer.get("error_code", 0))
    try:
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE})),
                                            flight.FlightCallOptions(timeout=2))
        writer.begin(PRODUCE_SCHEMA)
        batch = pa.RecordBatch.from_pylist([{"timestamp": 1_700_000_000_000, "value": b"hammer"}],
                                           schema=PRODUCE_SCHEMA)
        writer.write_with_metadata(batch,
                                   pa.py_buffer(wire.dumps({"topic": topic, "partition": 0, "correlation_id": 1,
                                                            "acks": 1})))
        codes["produce"] = int(wire.loads(reader.read_chunk().app_metadata, "answer").get("error_code", 0))
        writer.close()
    except flight.FlightError as exc:
        codes["produce"] = int(wire.to_ads_error(exc).code)
    return codes


def _acl_version(target, broker_id: int) -> int:
    client = target.raw(target.admin_config, target.ssl_address(broker_id))
    try:
        return int(action(client, wire.ACTION_DESCRIBE_ACLS, {"filter": {"resource_type": "Cluster"}},
                          timeout_s=2).get("cache_version", -1))
    finally:
        client.close()


def test_attack_a_restarting_broker_hammered_with_forbidden_requests_grants_none(attack_cluster):
    target = attack_cluster
    topic = _topic_with_data(target, "guarded")
    # Everybody may do anything to the topic and describe the cluster, except the hammer (DENY wins): a broker
    # that answered before loading its ACLs as if it had none, or from an "allow all" default, would let it in.
    target.admin.create_acls([
        AclBinding("Topic", topic, "LITERAL", "User:*", "*", "All", "Allow"),
        AclBinding("Cluster", "kafka-cluster", "LITERAL", "User:*", "*", "Describe", "Allow"),
        AclBinding("Topic", topic, "LITERAL", "User:hammer", "*", "All", "Deny"),
        AclBinding("Cluster", "kafka-cluster", "LITERAL", "User:hammer", "*", "Describe", "Deny")])
    restarted = target.cluster.broker_ids()[-1]
    before = (sorted(target.admin.list_topics()), target.acls(), target.admin.describe_configs(topic)["overrides"],
              len(target.admin.describe_topics([topic])[0].partitions))
    config, address = target.mtls_config("hammer"), target.ssl_address(restarted)
    seen: Counter = Counter()
    succeeded: list[tuple[str, float]] = []
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                client = target.raw(config, address)
            except Exception:
                seen["no connection"] += 1
                time.sleep(0.01)
                continue
            try:
                for name, code in _forbidden_calls(client, topic).items():
                    seen[code] += 1
                    if code == 0:
                        succeeded.append((name, time.monotonic()))
            finally:
                client.close()

    target.cluster.stop_broker(restarted)
    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        started = time.monotonic()
        target.cluster.start_broker(restarted, wait=False)
        target.cluster.wait_for_brokers([restarted], timeout_s=60)
        deadline = time.monotonic() + 30
        while _acl_version(target, restarted) < 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        loaded_s = time.monotonic() - started
        time.sleep(HAMMER_AFTER_LOAD_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    print(f"broker {restarted} registered with its ACLs loaded {loaded_s:.1f}s after start; answers: {dict(seen)}")
    assert not succeeded, succeeded
    # Anything but a refusal or "not reachable / not ready" would mean a request got past authorization.
    assert set(seen) <= set(HAMMER_ANSWERS), seen
    assert seen[TOPIC_REFUSED] > 0 and seen[CLUSTER_REFUSED] > 0, seen  # the hammer did reach the broker
    after = (sorted(target.admin.list_topics()), target.acls(), target.admin.describe_configs(topic)["overrides"],
             len(target.admin.describe_topics([topic])[0].partitions))
    assert after == before
    target.assert_serving()


def test_attack_a_forbidden_locate_reveals_no_paths(attack_cluster):
    target = attack_cluster
    topic = _topic_with_data(target, "located")
    # "describer" may see the topic (so it is no existence question) but not Read it
    target.admin.create_acls([AclBinding("Topic", topic, "LITERAL", "User:describer", "*", "Describe", "Allow")])
    leader = target.admin.describe_topics([topic])[0].partitions[0].leader
    body = {"topic": topic, "partition": 0, "fetch_offset": 0}
    data_dir = str(target.cluster.dir)
    client = target.raw(target.admin_config, target.ssl_address(leader))
    try:
        allowed = action(client, wire.ACTION_LOCATE, body)
    finally:
        client.close()
    assert data_dir in wire.dumps(allowed).decode()  # the control: locate does reveal paths to a reader
    for principal in ("describer", "nobody-at-all"):
        client = target.raw(target.mtls_config(principal), target.ssl_address(leader))
        try:
            refused = action(client, wire.ACTION_LOCATE, body)
        finally:
            client.close()
        assert refused["error_code"] == TOPIC_REFUSED, (principal, refused)
        text = repr(refused)
        assert data_dir not in text and "/" not in refused["message"] and ".arrow" not in text, refused
    target.assert_serving()


def test_attack_other_local_users_cannot_read_the_log_dirs(attack_cluster):
    target = attack_cluster
    _topic_with_data(target, "modes")
    loose = []
    checked = 0
    for broker_id in target.cluster.broker_ids():
        root = target.cluster.dir / f"broker-{broker_id}" / "data"
        for directory, subdirs, files in os.walk(root):
            entries = [(directory, 0o700)] + [(os.path.join(directory, f), 0o600) for f in files]
            for path, wanted in entries:
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                checked += 1
                if mode != wanted:
                    loose.append((path, oct(mode)))
    assert checked > 10 and not loose, loose[:10]
    target.assert_serving()


def _ads(*argv: str, cwd=None, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout_s, cwd=cwd)


def test_attack_no_password_or_token_lands_in_logs_state_files_or_cli_output(attack_cluster, tmp_path):
    target = attack_cluster
    password = f"pw-{uuid.uuid4().hex}"
    wrong = f"wrong-{uuid.uuid4().hex}"
    cli = ["--bootstrap-server", target.cluster.bootstrap_servers, "--command-config",
           str(target.cluster.client_properties_path)]
    password_file = tmp_path / "password"
    password_file.write_text(password + "\n")
    outputs = [_ads("users", "add", *cli, "--name", "leaky", "--password-file", str(password_file)),
               _ads("users", "list", *cli), _ads("acls", "list", *cli),
               _ads("cluster", "status", "--dir", str(target.cluster.dir))]
    assert all(out.returncode == 0 for out in outputs), [(o.args, o.stderr[-500:]) for o in outputs]
    topic = f"leak-{uuid.uuid4().hex[:6]}"
    target.admin.create_topic(topic, partitions=1, replication_factor=2)
    target.admin.create_acls([AclBinding("Topic", topic, "LITERAL", "User:leaky", "*", "All", "Allow")])
    token = target.token("leaky", password)
    # the secrets travel: a client with the password, refused tokens and passwords, a malformed header
    admin = Admin(target.sasl_config("leaky", password))
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    broker_id = target.cluster.broker_ids()[0]
    client = target.raw(None, target.sasl_address(broker_id))
    try:
        action(client, wire.ACTION_AUTHENTICATE, {}, basic("leaky", wrong))
        action(client, wire.ACTION_METADATA, {"topics": [topic]}, bearer(token))
        action(client, wire.ACTION_METADATA, {"topics": [topic]}, bearer(token[:-6] + "AAAAAA"))
        action(client, wire.ACTION_METADATA, {}, [(b"authorization", b"Basic " + password.encode())])
    finally:
        client.close()
    outputs.append(_ads("users", "delete", *cli, "--name", "leaky"))
    secrets = {"password": password, "wrong password": wrong, "token": token, "token signature": token.rsplit(".")[-1],
               "basic header": base64.b64encode(f"leaky:{password}".encode()).decode()}
    leaks = []
    for out in outputs:
        for what, secret in secrets.items():
            if secret in out.stdout or secret in out.stderr:
                leaks.append((what, "output of " + " ".join(out.args[3:5])))
    files = [p for p in target.cluster.dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    for path in files:
        data = path.read_bytes()
        for what, secret in secrets.items():
            if secret.encode() in data:
                leaks.append((what, str(path.relative_to(target.cluster.dir))))
    assert not leaks, leaks
    target.assert_serving()
