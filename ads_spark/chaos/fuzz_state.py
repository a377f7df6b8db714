"""What a refused input must not change, and how each broker process is doing.

A snapshot is three maps of text, compared before and after each category of the fuzz run:

* ``znodes``: every znode under the cluster's chroot with its data (and, for an ephemeral one, its
  session), so a topic created, a broker re-registered after losing its session, a controller
  failover or a config written by a refused request shows up;
* ``files``: every file and directory under the cluster's state dir and under ``<dir>/../x`` (where
  ``../../../x/victim`` lands from a broker's log dir, and where the fuzzer plants a file that must
  survive), with sizes, and for the offset checkpoints the partitions they name (a phantom partition
  poisons them, issue #20 finding 3);
* ``views``: what each broker says in a metadata answer (controller id and epoch, brokers, topics), so
  a broker that adopted a forged controller epoch or a phantom topic shows up.

Left out, because they change legitimately: the keep topic's and the probe topics' partition files
and checkpoint entries, ISR change notifications, process logs and pid files, temporary files. The
partition states of keep and of the produce sink are compared but reported apart: leadership and ISR
move when a broker restarts, and an ISR shrink is a symptom, not a refused input's write. So is keep
growing to the partition count the run grew it to itself (``fuzz_grow``), and only to that count.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.broker.log.manager import (HIGH_WATERMARK_CHECKPOINT, LOG_START_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                                          parse_partition_dir_name)
from ads_spark.broker.log.checkpoints import _parse_checkpoint, _parse_offset_entry
from ads_spark.broker.log.checkpoints import _read_lines as _read_checkpoint_lines
from ads_spark.chaos.fuzz_inputs import KEEP_TOPIC, SINK_TOPIC
from ads_spark.chaos.fuzz_report import code_name, typed_detail
from ads_spark.chaos.fuzz_typed import TYPED_TOPIC
from ads_spark.broker.zk.model import ISR_CHANGE_PATH, TOPICS_PATH
from ads_spark.broker.zk.session import DEFAULT_CHROOT
from ads_spark.config import BrokerConfig, read_properties
from ads_spark.errors import StorageError

PROBE_PREFIX = "fuzzprobe-"
CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, LOG_START_CHECKPOINT)
ZNODES_MAX = 20_000  # a refused create_topics that went through could add many; the walk stays bounded
FILES_MAX = 50_000
VIEW_TIMEOUT_S = 3.0
ZK_TIMEOUT_S = 10.0
PLANTED_TEXT = "a file outside every log.dirs; no broker may write or delete here\n"


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    port: int
    log_dir: Path


@dataclass(frozen=True)
class Layout:
    """Where a LocalCluster keeps everything the fuzzer looks at."""

    dir: Path
    zookeeper: str  # host:port
    chroot: str  # e.g. "/ads"
    brokers: dict[int, BrokerEndpoint]

    @property
    def victim_dir(self) -> Path:
        return self.dir.parent / "x"


def layout_of(cluster) -> Layout:
    """The layout of a ``LocalCluster`` (its brokers' log.dirs and chroot from their broker.properties)."""
    brokers, chroot = {}, DEFAULT_CHROOT
    for entry in cluster.state["brokers"]:
        config = BrokerConfig(read_properties(cluster.broker_config_path(entry["id"])))
        brokers[entry["id"]] = BrokerEndpoint(entry["id"], entry["port"], Path(config["log.dirs"]))
        chroot = config.zookeeper_hosts_and_chroot[1]  # the broker's own reading, its default included
    return Layout(cluster.dir, cluster.zookeeper_connect, chroot.rstrip("/") or "/", brokers)


def ignored_topic(topic: str) -> bool:
    return topic == KEEP_TOPIC or topic.startswith(PROBE_PREFIX)


# ---- processes ------------------------------------------------------------------------


def proc_status(pid: int | None) -> dict[str, int] | None:
    """VmRSS (KiB) and thread count from /proc/<pid>/status, or None for a process that is gone."""
    if not pid:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "Threads"):
            values["rss_kib" if key == "VmRSS" else "threads"] = int(rest.split()[0])
    return values


# ---- snapshots ---------------------------------------------------------------------------


def zk_tree(zk, root: str) -> dict[str, str]:
    """path (relative to ``root``) -> data, for every znode under ``root``, bounded by ZNODES_MAX."""
    found: dict[str, str] = {}
    stack = [root]
    while stack and len(found) < ZNODES_MAX:
        path = stack.pop()
        try:
            data, stat = zk.get(path)
            children = zk.get_children(path)
        except Exception:  # deleted while walking (a notification consumed): not there
            continue
        relative = path[len(root):] if root != "/" else path
        if _ignored_znode(relative or "/"):
            continue
        text = (data or b"").decode("utf-8", "replace")[:2000]
        found[relative or "/"] = text + (f" [ephemeral {stat.ephemeralOwner:x}]" if stat.ephemeralOwner else "")
        stack.extend(f"{path.rstrip('/')}/{child}" for child in sorted(children, reverse=True))
    return found


def _ignored_znode(path: str) -> bool:
    parts = path.strip("/").split("/")
    if path.startswith(ISR_CHANGE_PATH + "/"):
        return True
    return any(part.startswith(PROBE_PREFIX) for part in parts)


def file_tree(layout: Layout) -> dict[str, str]:
    """relative path -> "dir" / "size N" / the partitions a checkpoint names, bounded by FILES_MAX."""
    found: dict[str, str] = {}
    for base, prefix in ((layout.dir, ""), (layout.victim_dir, "../x/")):
        if base.exists():
            _walk(base, base, prefix, found)
    return found


def _walk(base: Path, directory: Path, prefix: str, found: dict[str, str]) -> None:
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        found[prefix + str(directory.relative_to(base))] = f"unreadable: {exc.strerror}"
        return
    for path in entries:
        if len(found) >= FILES_MAX:
            return
        name, relative = path.name, prefix + str(path.relative_to(base))
        if directory == base and prefix == "" and (name == "zookeeper" or name.endswith((".log", ".pid"))):
            continue
        if name.endswith(".tmp") or name.startswith(".clean-shutdown"):
            continue
        if path.is_dir() and not path.is_symlink():
            topic = (parse_partition_dir_name(name) or ("",))[0]
            if topic.startswith(PROBE_PREFIX):
                continue  # created by the run's own probes
            found[relative] = "dir"  # a keep partition's directory may not go, only its files change
            if not ignored_topic(topic):
                _walk(base, path, prefix, found)
        elif name in CHECKPOINTS:
            found[relative] = checkpoint_keys(path)
        else:
            try:
                found[relative] = f"size {path.stat().st_size}"
            except OSError:
                continue


def checkpoint_keys(path: Path) -> str:
    """The partitions an offset checkpoint names (offsets left out: they move), or why it cannot be read.

    Parsed by the broker's own reader (broker/log/checkpoints.py): a file it would read with problems is
    malformed here."""
    try:
        lines = _read_checkpoint_lines(path) or []
    except StorageError as exc:
        return f"unreadable: {exc}"
    entries, problems = _parse_checkpoint(path, lines, _parse_offset_entry)
    if problems:
        return "malformed: " + "; ".join(problems)
    return "partitions " + ", ".join(sorted(f"{topic} {partition}" for _, (topic, partition, _offset) in entries
                                            if not ignored_topic(topic)))


def broker_view(port: int, timeout_s: float = VIEW_TIMEOUT_S) -> str:
    """A broker's metadata answer reduced to what no refused input may change, as JSON text."""
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
    try:
        results = list(client.do_action(flight.Action("metadata", pa.py_buffer(b'{"topics": null}')),
                                        flight.FlightCallOptions(timeout=timeout_s)))
        answer = json.loads(results[0].body.to_pybytes())
        view = {"controller_id": answer.get("controller_id"), "controller_epoch": answer.get("controller_epoch"),
                "brokers": sorted(str((b.get("id"), b.get("host"), b.get("port"))) for b in answer.get("brokers", [])),
                "topics": sorted(str(t.get("topic")) for t in answer.get("topics", [])
                                 if not ignored_topic(str(t.get("topic"))))}
        return json.dumps(view, sort_keys=True)
    except flight.FlightTimedOutError:
        return "no answer (timed out)"
    except Exception as exc:  # noqa: BLE001 - any failure is the view
        detail = typed_detail(getattr(exc, "extra_info", None))
        return f"error {code_name(detail['error_code'])}" if detail else f"error {type(exc).__name__}"
    finally:
        client.close()


def snapshot(layout: Layout, zk) -> dict[str, dict[str, str]]:
    znodes = zk_tree(zk, layout.chroot)
    views = {str(b): broker_view(e.port) for b, e in sorted(layout.brokers.items())}
    return {"znodes": znodes, "files": file_tree(layout), "views": views}


def partition_state_path(path: str) -> bool:
    """A partition state of the keep topic, the produce sink or the typed topic: leadership and ISR move with
    restarts."""
    return any(path.startswith(f"/brokers/topics/{topic}/partitions/") for topic in (KEEP_TOPIC, SINK_TOPIC,
                                                                                       TYPED_TOPIC))


def grown(section: str, key: str, old: str | None, new: str | None, counts: dict[str, int]) -> bool:
    """Whether a change is a topic of ``counts`` (topic -> the partition count the run itself grew it to,
    ``fuzz_grow``) growing to exactly that count: its assignment gaining the new partitions with the rest
    unchanged, or a new partition's directory. Any other growth, or a shrink, is not."""
    if section == "znodes" and key.startswith(TOPICS_PATH + "/") and old is not None and new is not None:
        topic = key[len(TOPICS_PATH) + 1:]
        if topic not in counts:
            return False
        try:
            was, now = json.loads(old), json.loads(new)
            was_parts, now_parts = was.pop("partitions"), now.pop("partitions")
            was_observers, now_observers = was.pop("observers", {}), now.pop("observers", {})
        except (ValueError, KeyError, AttributeError):  # cut at 2,000 characters, or not an assignment
            return False
        if not all(isinstance(v, dict) for v in (was_parts, now_parts, was_observers, now_observers)):
            return False
        return (was == now and set(now_parts) == {str(p) for p in range(counts[topic])}
                and all(now_parts.get(p) == r for p, r in was_parts.items())
                and all(now_observers.get(p) == r for p, r in was_observers.items()))
    if section == "files" and old is None and new == "dir":
        parsed = parse_partition_dir_name(key.rsplit("/", 1)[-1])
        return parsed is not None and parsed[0] in counts and parsed[1] < counts[parsed[0]]
    return False


def diff(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]],
         grown_to: dict[str, int] | None = None) -> tuple[list[str], list[str]]:
    """(changes, partition states of keep and the sink that moved), each as readable lines. A topic of
    ``grown_to`` growing to its count there (``grown``) is among the second, as moved, not changed."""
    changes, moved = [], []
    for section in ("znodes", "files", "views"):
        old, new = before.get(section, {}), after.get(section, {})
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key):
                continue
            if key not in old:
                line = f"{section} {key}: added ({_cut(new[key])})"
            elif key not in new:
                line = f"{section} {key}: removed (was {_cut(old[key])})"
            else:
                line = f"{section} {key}: {_cut(old[key])} -> {_cut(new[key])}"
            explained = (section == "znodes" and partition_state_path(key)) or grown(
                section, key, old.get(key), new.get(key), grown_to or {})
            (moved if explained else changes).append(line)
    return changes, moved


def _cut(text: str, chars: int = 160) -> str:
    return text if len(text) <= chars else text[:chars] + "..."


def connect_zookeeper(layout: Layout):
    """A kazoo client on the cluster's ZooKeeper (127.0.0.1 only); raises if it does not answer, since every
    ZooKeeper check of the run (sessions kept, znodes unchanged) would otherwise pass without looking."""
    from kazoo.client import KazooClient

    host = layout.zookeeper.rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"the fuzzer only talks to 127.0.0.1, not ZooKeeper at {layout.zookeeper}")
    zk = KazooClient(hosts=layout.zookeeper, timeout=ZK_TIMEOUT_S)
    try:
        zk.start(timeout=ZK_TIMEOUT_S)
    except Exception as exc:
        zk.stop()
        raise RuntimeError(f"the fuzzer cannot reach ZooKeeper at {layout.zookeeper}: {exc}") from exc
    return zk


def plant_victim(layout: Layout) -> tuple[Path, list[Path]]:
    """A directory where ``../../../x/victim`` partition 0 would land, with a file that must survive the run;
    returns the file and the directories this call created (the only ones ``remove_victim`` may delete)."""
    victim = layout.victim_dir / "victim-0"
    created = [d for d in (layout.victim_dir, victim) if not d.exists()]
    victim.mkdir(parents=True, exist_ok=True)
    planted = victim / "planted-by-fuzzer.txt"
    planted.write_text(PLANTED_TEXT)
    return planted, created


def remove_victim(planted: Path, created: list[Path]) -> None:
    """Undo ``plant_victim``: the planted file, and the directories it created with whatever a broker put there."""
    planted.unlink(missing_ok=True)
    for directory in reversed(created):
        shutil.rmtree(directory, ignore_errors=True)
