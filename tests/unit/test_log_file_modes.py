"""With security on, the broker's logs are owner-only (broker/log/file_modes.py): directories 0700,
files 0600, whatever the umask and whatever was on disk before; with it off, nothing changes."""

from __future__ import annotations

import os
import stat

import pytest

from ads_spark.broker.log import LogConfig
from ads_spark.broker.log.log_dirs import LogDirs
from tests.fixtures.logs import produce_batch, values_for

pytestmark = pytest.mark.timeout(30)


def modes(root):
    """{relative path: permission bits} of everything under ``root``, and of ``root`` itself as '.'."""
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for current, directories, files in os.walk(root):
        for name in directories + files:
            path = os.path.join(current, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


@pytest.fixture()
def loose_umask():
    previous = os.umask(0o000)  # the worst case: files would be created 0666, directories 0777
    try:
        yield
    finally:
        os.umask(previous)


def exercise(log_dir, private: bool) -> None:
    """Open the directory, create a partition, append, roll, checkpoint, close: every kind of file."""
    dirs = LogDirs.open([log_dir], LogConfig(), 0, private=private)
    log = dirs.get_or_create("payments", 0, LogConfig(), "topic-id-1", now_ms=0)
    log.append_as_leader(produce_batch(values_for(0, 3)), leader_epoch=0, now_ms=1)
    log.roll(2)
    log.append_as_leader(produce_batch(values_for(3, 3)), leader_epoch=0, now_ms=3)
    for manager in dirs.managers:
        manager.checkpoint_recovery_points()
    dirs.close()


def test_with_security_on_every_directory_is_0700_and_every_file_0600_whatever_the_umask(tmp_path, loose_umask):
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o755)
    (log_dir / "left-from-before.txt").write_text("x")  # data from an unsecured run gets locked down too
    exercise(log_dir, private=True)
    found = modes(log_dir)
    assert any(name.endswith(".arrows") for name in found) and len(found) > 5
    wrong = {name: oct(mode) for name, mode in found.items()
             if mode != (0o700 if os.path.isdir(log_dir / name) else 0o600)}
    assert wrong == {}


def test_with_security_off_nothing_changes(tmp_path, loose_umask):
    log_dir = tmp_path / "logs"
    exercise(log_dir, private=False)
    found = modes(log_dir)
    assert found["."] == 0o777 and any(mode == 0o666 for mode in found.values())
