"""The build backend of this project: setuptools', plus a path entry in editable installs.

Spark finds Python data sources by listing the top-level modules on ``sys.path`` with
``pkgutil.iter_modules()`` and importing those named ``pyspark_*``; ``format("ads")`` resolves
through ``pyspark_ads``. A wheel (``pip install .``) puts ``pyspark_ads`` in site-packages, where
that listing sees it. An editable install (``pip install -e .``, the README's ``make install``)
does not: setuptools maps a flat-layout project's packages with an import hook, which imports
them but lists nothing, so Spark started from any directory but the project's root reports
DATA_SOURCE_NOT_FOUND. This backend adds a ``.pth`` path entry for the project's root to the
editable wheel, so the listing sees ``pyspark_ads`` there as it would in site-packages (and new
modules keep being picked up without reinstalling, as with setuptools' own hook).

Everything else is ``setuptools.build_meta`` unchanged. Frontends put ``backend-path`` (the
folder of this module) on ``sys.path`` only while building; nothing here is installed.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # re-exported: the PEP 517 / 660 hooks used as they are
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel", "prepare_metadata_for_build_editable",
           "prepare_metadata_for_build_wheel"]

PATH_ENTRY_FILE = "ads_spark_project_root.pth"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_file_to_wheel(Path(wheel_directory, name), PATH_ENTRY_FILE, f"{PROJECT_ROOT}\n".encode())
    return name


def add_file_to_wheel(wheel: Path, name: str, content: bytes) -> None:
    """Rewrite ``wheel`` with one more top-level file, listed in its RECORD (PEP 376 / 427)."""
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    record = next(info.filename for info, _ in entries if info.filename.endswith(".dist-info/RECORD"))
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    line = f"{name},sha256={digest},{len(content)}\n".encode()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as target:
        target.writestr(name, content)
        for info, data in entries:
            target.writestr(info, line + data if info.filename == record else data)
