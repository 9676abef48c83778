"""What the package ships: type information, the bundled data, the license, the extras.

The fast checks read the source tree and ``pyproject.toml``. The slow ones (about 20 s: pip fetches
the build backend into an isolated environment, as ``pip install .`` does) build the wheel from a
copy of the tree, check its contents and metadata, and run the demo from the unpacked wheel.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    tomllib: Any = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kiln"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _source_files(pattern: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob(pattern)
            if "__pycache__" not in p.parts}


def test_py_typed_marker_is_in_the_package() -> None:
    assert (PACKAGE / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["kiln"]


def test_bundled_data_is_declared() -> None:
    data = _source_files("data/*")
    assert {"kiln/data/digits_cnn.onnx", "kiln/data/digits_test.npz"} <= data
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["kiln"]
    assert "data/*" in patterns


def test_license_file_matches_the_declared_license() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub
    assert len(text) > 10_000


def test_extras() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(req.startswith("onnxruntime") for req in extras["ort"])
    assert any(req.startswith("pytest-xdist") for req in extras["dev"])
    assert PYPROJECT["project"]["scripts"]["kiln"] == "kiln.cli.main:main"


def test_every_package_folder_is_a_package() -> None:
    """``packages.find`` skips folders without ``__init__.py``: their modules would be left out."""
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"folders with modules but no __init__.py: {missing}"


def _copy_tree(dest: Path) -> Path:
    skip = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache",
            ".hypothesis", ".mypy_cache"}

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in skip or n.endswith(".egg-info")}

    return Path(shutil.copytree(ROOT, dest / "src", ignore=ignore, symlinks=True))


def _build_wheel(tmp: Path) -> Path:
    """The wheel ``pip`` builds from a copy of the tree (the tree itself is left untouched)."""
    src = _copy_tree(tmp)
    out = tmp / "dist"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q",
                           "-w", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    wheels = list(out.glob("kiln-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _metadata(names: list[str], z: zipfile.ZipFile) -> email.message.Message:
    name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    return email.message_from_bytes(z.read(name))


@pytest.mark.slow
def test_wheel_contents_metadata_and_demo(tmp_path: Path) -> None:
    """Build the wheel; it holds py.typed, the data, every module and the license; the bundled
    model and data load from the unpacked wheel (numpy target: no compiler needed)."""
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = _metadata(names, z)
        license_text = next((z.read(n) for n in names if ".dist-info/" in n
                             and n.rsplit("/", 1)[-1] == "LICENSE"), None)
        z.extractall(tmp_path / "site")
    assert "kiln/py.typed" in names
    assert _source_files("data/*") <= set(names), "every bundled data file is in the wheel"
    assert _source_files("*.py") <= set(names), "every module is in the wheel"
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert meta["License-Expression"] == "Apache-2.0"
    assert "ort" in meta.get_all("Provides-Extra", [])
    assert any(r.startswith("onnxruntime") and 'extra == "ort"' in r
               for r in meta.get_all("Requires-Dist", []))
    assert not any(n.startswith(("tests/", "bench/", "scripts/")) for n in names)

    site = tmp_path / "site"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import kiln, kiln.cli.main as m; "
            "assert kiln.__file__.startswith(sys.argv[1]), kiln.__file__; "
            "sys.exit(m.main(['demo', '--target', 'numpy', '--repeat', '1']))")
    proc = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "accuracy" in proc.stdout
