"""A PySpark daemon that records, per fetch, whether an executor read through the local read path.

Why: the multi-host deployment run (``spark_standalone.py``) must show that an executor reads its
own host's broker from the segment files and every other broker over the network. The consumer
keeps only a per-process count (``Consumer.local_fetches``) inside Python workers nobody can ask,
so the run sets ``spark.python.daemon.module`` to this module: before it becomes PySpark's own
daemon it wraps ``Consumer._fetch_once`` (one fetch of one partition from its leader), and every
Python worker it forks then appends one JSON line per fetch to ``$ADS_READ_PROBE_DIR/<host
name>-<pid>.jsonl``: the reader's host name, the leader it read from, the topic and partition, the
record count, and ``local`` when the consumer's local-read count went up during the fetch, else
``remote``. Test instrumentation only: nothing else starts this daemon, and without
``ADS_READ_PROBE_DIR`` it records nothing.
"""

from __future__ import annotations

import json
import os
import socket
import threading

PROBE_DIR_ENV = "ADS_READ_PROBE_DIR"
LOCAL, REMOTE = "local", "remote"


def install(directory: str) -> None:
    """Wrap ``Consumer._fetch_once`` in this process (and the workers it forks) to record each fetch."""
    from ads_spark.client.consumer import Consumer

    original = Consumer._fetch_once
    if getattr(original, "_ads_read_probe", False):
        return
    lock = threading.Lock()

    def recorded(self, tp, start, max_bytes, max_wait_ms, prefer_rack=True, typed=None):
        try:  # the leader the fetch is about to ask (it looks it up the same way, first thing)
            leader_host = self._connections.leader_of(tp.topic, tp.partition)[1].host
        except Exception:  # the fetch itself fails the same way and says why
            leader_host = "unknown"
        before = self.local_fetches
        chunk = original(self, tp, start, max_bytes, max_wait_ms, prefer_rack, typed)
        line = {"reader": socket.gethostname(), "leader": leader_host, "topic": tp.topic,
                "partition": tp.partition, "records": chunk.table.num_rows,
                "kind": LOCAL if self.local_fetches > before else REMOTE}
        path = os.path.join(directory, f"{socket.gethostname()}-{os.getpid()}.jsonl")
        with lock, open(path, "a") as out:
            out.write(json.dumps(line) + "\n")
        return chunk

    recorded._ads_read_probe = True
    Consumer._fetch_once = recorded


def read_records(directory: str) -> list[dict]:
    """Every fetch recorded under ``directory`` (a line cut short by a killed worker is skipped)."""
    records = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name)) as handle:
            for line in handle:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    return records


def main() -> None:
    directory = os.environ.get(PROBE_DIR_ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
        install(directory)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
