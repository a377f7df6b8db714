"""format("ads") resolves from any directory however the package is installed: Spark lists the
top-level modules on sys.path (pkgutil.iter_modules) and imports those named pyspark_*.

The project (its build files and packages) is copied to a temporary folder and built offline with
the backend pyproject.toml names, as an editable wheel (the README's install) and as a plain wheel
(``pip install .`` builds the same one). Each is unpacked as a site-packages folder and a fresh
interpreter without the usual site-packages, started in another temporary folder, lists modules the
way Spark's discovery does.
"""

import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.fresh_interpreter import run_python

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 120

BUILD = """
import json, sys
sys.path[:0] = {backend_path!r}
backend = __import__({backend!r}, fromlist=["_"])
print(json.dumps([getattr(backend, hook)({out!r}) for hook in ("build_editable", "build_wheel")]))
"""

LIST_LIKE_SPARK = """
import importlib.util, json, pkgutil, site
site.addsitedir({site!r})
names = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_"))
print(json.dumps([names, importlib.util.find_spec("pyspark_ads").origin]))
"""


def copy_project(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, target / name)
    for folder in ("ads_spark", "pyspark_ads", "build_support"):
        if (PROJECT_ROOT / folder).is_dir():
            shutil.copytree(PROJECT_ROOT / folder, target / folder, ignore=ignore)


def test_pyspark_ads_is_listed_from_another_directory_for_editable_and_wheel_installs(tmp_path):
    pytest.importorskip("setuptools")
    project, wheels, elsewhere = tmp_path / "project", tmp_path / "wheels", tmp_path / "elsewhere"
    for folder in (project, wheels, elsewhere):
        folder.mkdir()
    copy_project(project)
    build_system = tomllib.loads((project / "pyproject.toml").read_text())["build-system"]
    backend_path = [str(project / p) for p in build_system.get("backend-path", [])]
    built = run_python(["-c", BUILD.format(backend_path=backend_path, backend=build_system["build-backend"],
                                           out=str(wheels))], cwd=str(project), timeout_s=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stderr[-3000:]
    editable, wheel = json.loads(built.stdout.strip().splitlines()[-1])
    for name, expected_root in ((editable, project), (wheel, tmp_path / f"site-{wheel}")):
        site_dir = tmp_path / f"site-{name}"
        with zipfile.ZipFile(wheels / name) as archive:
            archive.extractall(site_dir)
        # -S: no site-packages of this interpreter, only the unpacked wheel (its .pth files are processed)
        listed = run_python(["-S", "-c", LIST_LIKE_SPARK.format(site=str(site_dir))], cwd=str(elsewhere))
        assert listed.returncode == 0, listed.stderr
        names, origin = json.loads(listed.stdout.strip().splitlines()[-1])
        assert names == ["pyspark_ads"], f"{name}: Spark would not find format('ads') (listed {names})"
        assert Path(origin).resolve() == (expected_root / "pyspark_ads" / "__init__.py").resolve()
