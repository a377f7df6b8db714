"""Who else on the machine may read the logs: nobody, once the broker's security is on.

With ``config.security_enabled`` (a TLS/SASL listener or the authorizer) the broker makes each log
directory private (``make_private``: the directory and everything in it 0700 / 0600, whatever was
there before), so that ACLs cannot be bypassed by another Unix user reading segment files (the
local-read path memory-maps them). Without it nothing changes: local reads by other users keep
working as before.

New directories and files take the class of the directory they are made in (``new_directory``,
``new_file``): under a private directory they are chmod-ed right after creation, so the umask
never decides (a umask can clear bits, not add them, but a loose one would leave 0644). The check
is one ``stat`` of the parent per file created (segment rolls, checkpoint writes), never per append.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_GROUP_OTHER_BITS = 0o077


def is_private(directory: Path) -> bool:
    """True when neither group nor others have any permission on ``directory``."""
    return stat.S_IMODE(os.stat(directory).st_mode) & _GROUP_OTHER_BITS == 0


def make_private(root: Path) -> None:
    """``root`` and everything below it owner-only (directories 0700, files 0600); symlinks untouched."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, PRIVATE_DIR_MODE)
    for current, directories, files in os.walk(root):
        for name in directories:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, PRIVATE_DIR_MODE)
        for name in files:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, PRIVATE_FILE_MODE)


def new_directory(path: Path) -> None:
    """``path`` made (parents too) and, under a private parent, private itself."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if is_private(path.parent):
        os.chmod(path, PRIVATE_DIR_MODE)


def new_file(path: Path) -> None:
    """A file just created in a private directory becomes 0600 (call before writing anything to it)."""
    if is_private(Path(path).parent):
        os.chmod(path, PRIVATE_FILE_MODE)
