"""Kiln's layers import downward only.

Every module under ``kiln/`` is parsed with :mod:`ast`; its imports (module level and inside
functions, and ``importlib.import_module("kiln...")`` with a literal name) are mapped to layers,
bottom first, as ``docs/internals.md`` lists them. An import of a higher layer fails the test:
there are no exceptions.

The same file checks that ``import kiln`` stays light while its subpackages resolve as attributes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kiln"

# Bottom first; a module belongs to the layer of its longest listed prefix. Imports within a layer
# and downward are free.
LAYERS: list[tuple[str, ...]] = [
    ("kiln.config", "kiln.errors", "kiln.progress", "kiln.tir", "kiln._version"),  # used by every layer
    ("kiln.runtime", "kiln.rpc"),  # what a deployed model needs: NDArray, params, graph JSON, executors
    ("kiln.ir", "kiln.target"),  # graph IR; target descriptions need only IR dtypes
    ("kiln.te",),  # tensor expressions, schedules, loop IR (imports only errors)
    ("kiln.op",),  # operator registry
    ("kiln.transform", "kiln.interpreter"),  # passes IRModule -> IRModule; the reference interpreter
    ("kiln.codegen",),  # loop IR to C, compiler driver, graph codegen
    ("kiln.build_module", "kiln.build_cache", "kiln.driver", "kiln.auto_scheduler"),  # build, tuning
    ("kiln.frontend", "kiln.debug", "kiln.analysis", "kiln.testing", "kiln.topi"),  # tools
    ("kiln", "kiln.relay", "kiln.contrib", "kiln.cli", "kiln.nd", "kiln.__main__"),  # facades, CLI
]

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def _resolve(name: str) -> str:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    while len(parts) > 1 and not _is_module(".".join(parts)):
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str | None = None) -> set[str]:
    """Kiln modules imported anywhere in the file at ``path`` (the module ``module``)."""
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:  # `from kiln import te` imports the module kiln.te
                child = f"{source}.{alias.name}"
                found.add(child if _is_module(child) else source)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.func, ast.Attribute | ast.Name)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                found.add(str(arg.values[0].value).rstrip("."))  # f"kiln.{name}": its fixed prefix
    return {_resolve(name) for name in found if name == "kiln" or name.startswith("kiln.")}


def layer_of(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    if level < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return level


def upward_imports() -> set[str]:
    """Every ``importer -> imported`` edge that goes to a higher layer."""
    edges = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for imported in imports_of(path):
            if layer_of(imported) > layer_of(importer):
                edges.add(f"{importer} -> {imported}")
    return edges


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer_of(_module_name(path))


def test_no_upward_import() -> None:
    upward = sorted(upward_imports())
    assert not upward, ("upward imports (a layer importing one above it, see docs/internals.md): "
                        + "; ".join(upward))


def test_checker_sees_function_level_and_string_imports(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("import importlib\n"
                      "from . import types\n"
                      "from kiln import te\n"
                      "def f():\n    from ..relay import op\n"
                      "def g():\n    return importlib.import_module('kiln.contrib.debugger')\n")
    found = imports_of(source, module="kiln.ir.probe")  # read as if it lived in kiln/ir
    assert found == {"kiln.ir.types", "kiln.te", "kiln.relay.op", "kiln.contrib.debugger"}
    assert layer_of("kiln.relay.op") > layer_of("kiln.ir.probe") > layer_of("kiln.runtime.ndarray")


def test_import_kiln_stays_light_and_subpackages_resolve_lazily() -> None:
    code = ("import sys, kiln\n"
            "lazy = ('kiln.debug', 'kiln.auto_scheduler', 'kiln.frontend', 'kiln.cli')\n"
            "print(sorted(m for m in lazy if m in sys.modules))\n"
            "print(kiln.debug.compare.__module__, kiln.frontend.__name__, kiln.analysis.__name__)\n"
            "print('debug' in dir(kiln))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    loaded, names, listed = proc.stdout.splitlines()
    assert loaded == "[]"
    assert names.split()[0].startswith("kiln.debug")
    assert names.split()[1:] == ["kiln.frontend", "kiln.analysis"]
    assert listed == "True"


def test_unknown_attribute_still_fails() -> None:
    import kiln

    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = kiln.no_such_thing  # type: ignore[attr-defined]


def test_importers_and_the_tuner_import_no_framework() -> None:
    """Every frontend module, the relay facade and the auto-scheduler import without loading a
    framework (each is an optional extra, loaded when an importer is called)."""
    frameworks = ("torch", "tensorflow", "keras", "coremltools", "tflite", "mxnet", "lightgbm", "ray",
                  "matplotlib")
    modules = sorted(p.stem for p in (PACKAGE / "frontend").glob("*.py") if p.stem != "__init__")
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module('kiln.frontend.' + m)\n"
            "import kiln.relay.frontend, kiln.auto_scheduler\n"
            "from kiln.auto_scheduler import SketchPolicy, TaskScheduler\n"
            f"print(sorted(f for f in {frameworks!r} if f in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
