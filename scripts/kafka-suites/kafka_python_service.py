"""Stand-in for kafka-python's ``test/service.py``, which its PyPI source archive (3.0.12) does not ship.

kafka-python's integration fixtures import ``ExternalService`` and ``SpawnedService`` from ``test.service``.
kafka_python_suite.sh copies this file there. Pointed at an external broker (``KAFKA_URI``), the fixtures
only construct an ``ExternalService`` and never call it; ``SpawnedService`` runs a Java Kafka or ZooKeeper
of the suite's own, which this machine cannot run (no Kafka distribution), so it refuses with a reason
instead of failing later with an obscure error. Written for ADS; no code of kafka-python's is copied.
"""


class ExternalService:
    """A broker someone else runs: nothing to start, watch or stop."""

    def __init__(self, host, port):
        self.host = host
        self.port = port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    """A process the fixtures would spawn (a Java Kafka or ZooKeeper): not possible here."""

    def __init__(self, args=None, env=None):
        raise RuntimeError("kafka-python's suite tried to spawn its own Kafka/ZooKeeper process; against ADS only "
                           "tests on the external broker (KAFKA_URI) can run: add this test to "
                           "scripts/kafka-suites/kafka-python-allowlist.txt with its reason")
