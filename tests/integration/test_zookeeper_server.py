"""The embedded ZooKeeper process: it answers, binds loopback only, and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ads_spark.broker.zk import embedded as zks
from tests.fixtures.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); /proc says what it is.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_start_answers_and_stop_leaves_no_process(tmp_path):
    server = zks.EmbeddedZooKeeper(tmp_path / "zk", port=0, force_sync=False)
    try:
        server.start(timeout_s=30)
        pid = server.pid
        assert server.connect_string.startswith("127.0.0.1:")
        assert zks.four_letter_word(server.port, "ruok") == "imok"
        assert "Mode: standalone" in zks.four_letter_word(server.port, "srvr")
        cfg = (tmp_path / "zk" / "zoo.cfg").read_text()
        assert "clientPortAddress=127.0.0.1" in cfg and "admin.enableServer=false" in cfg
        assert (tmp_path / "zk" / zks.LOG_FILE_NAME).exists()
        assert os.getpgid(pid) == pid  # its own process group
    finally:
        server.stop(timeout_s=10)
    assert _gone(pid)
    assert not zks.is_serving(server.port)
    server.stop()  # idempotent


def test_context_manager_stops_on_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with zks.EmbeddedZooKeeper(tmp_path / "zk") as server:
            pid = server.pid
            raise RuntimeError("boom")
    assert _gone(pid)


def test_cli_foreground_runs_zookeeper_in_the_callers_process_group(tmp_path):
    port = zks.free_port()
    log = open(tmp_path / "cli.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "ads_spark.cli.main", "zookeeper", "start",
                                "--data-dir", str(tmp_path / "zk"), "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        assert poll_until(lambda: zks.is_serving(port), 30), (tmp_path / "cli.log").read_text()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert not zks.is_serving(port)


def test_missing_java_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(zks.JavaNotFoundError, match="apt-get install -y openjdk-17-jre-headless"):
        zks.find_java()


def test_zoo_cfg_template_matches_what_is_rendered():
    from pathlib import Path

    template = Path(__file__).resolve().parents[2] / "conf" / "zoo.cfg.template"
    keys = {line.split("=")[0] for line in template.read_text().splitlines() if "=" in line and line[0] != "#"}
    rendered = zks.render_zoo_cfg(Path("/tmp/x"), 2181)
    assert keys == {line.split("=")[0] for line in rendered.splitlines() if "=" in line and line[0] != "#"}


def test_server_dies_with_a_killed_parent(tmp_path):
    script = (
        "import os, sys\n"
        "from ads_spark.broker.zk.embedded import EmbeddedZooKeeper\n"
        f"zk = EmbeddedZooKeeper({str(tmp_path / 'zk')!r}, die_with_parent=True).start(30)\n"
        "print(zk.pid, zk.port, flush=True)\n"
        "os._exit(0)\n"  # no stop(): as if the test run were killed
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=45)
    pid, port = (int(v) for v in out.stdout.split())
    assert poll_until(lambda: _gone(pid), 10)
    assert not zks.is_serving(port)
