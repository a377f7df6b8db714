"""Process and port helpers shared by the peer clusters: spawn in a new session, wait, stop the group.

Every process a peer cluster starts goes through ``spawn`` and is stopped by
``stop_group`` on its own process group, so teardown never touches anything
it did not start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ads_spark.cluster import free_port, pid_alive

__all__ = ["free_port", "pid_alive", "spawn", "stop_group", "wait_for_port", "missing_binaries", "PeerUnavailable"]


class PeerUnavailable(RuntimeError):
    """A peer cannot be installed or started here; the message says why."""


def missing_binaries(names: list[str]) -> list[str]:
    return [name for name in names if shutil.which(name) is None and not Path(name).exists()]


def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    log_file = open(log_path, "ab")
    try:
        return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    finally:
        log_file.close()


def wait_for_port(port: int, timeout_s: float, process: subprocess.Popen | None = None,
                  what: str = "server") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise PeerUnavailable(f"{what} exited with code {process.returncode} at start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise PeerUnavailable(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s}s")


def stop_group(pid: int, timeout_s: float = 15.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it if it overruns."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(pid) and not _group_alive(pid):
                return
            time.sleep(0.1)


def stop_all(processes: list[subprocess.Popen], directory: Path | None, timeout_s: float = 15.0) -> None:
    """Stop and reap every process (by group), then remove ``directory``: a peer's whole teardown."""
    for process in processes:
        stop_group(process.pid, timeout_s=timeout_s)
        process.wait(timeout=5)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def check_or_hold(cluster, command: str, hold_s: float, check) -> None:
    """``check``: run the async ``check(cluster)``; ``up``: keep the cluster up ``hold_s``; always tear down."""
    import asyncio

    try:
        if command == "check":
            asyncio.run(check(cluster))
        else:
            time.sleep(hold_s)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.down()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
