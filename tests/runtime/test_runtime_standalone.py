"""The runtime is a bottom layer: a deployed model loads, runs, debugs and re-exports with only
``kiln.runtime`` and the utilities below it, in a process that never imports the compiler.

The child process registers a bare ``kiln`` package (its ``__init__``, which imports the relay
facade and the compiler, does not run) and imports the runtime's files directly; then it uses them
and lists every other Kiln module that got imported. ``tests/test_layering.py`` reads the imports
statically; this checks what actually runs, function-level imports included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.codegen.numpy_library import NumpyLibrary
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.native import NativeLibrary

ROOT = Path(kiln.__file__).resolve().parents[1]
BOTTOM = {"kiln.config", "kiln.errors", "kiln.progress", "kiln.tir", "kiln._version"}
W = np.array([[0.5, 0.5, 0.5], [-2.0, 0.0, 4.0]], dtype=np.float32)

CHILD = r'''
import json, sys, types
from pathlib import Path

root, work = Path(sys.argv[1]), Path(sys.argv[2])
package = types.ModuleType("kiln")
package.__path__ = [str(root / "kiln")]
sys.modules["kiln"] = package  # kiln/__init__ (the facade, the compiler) never runs
import importlib
for path in sorted((root / "kiln" / "runtime").glob("*.py")):
    name = "kiln.runtime" if path.stem == "__init__" else "kiln.runtime." + path.stem
    importlib.import_module(name)

import numpy as np
from kiln.errors import RuntimeFormatError
from kiln.runtime import cpu, load_module
from kiln.runtime.debug_executor import GraphModuleDebug
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.native import NativeLibrary

report = {"imported_at_start": sorted(m for m in sys.modules if m.startswith("kiln."))}
x = np.array([[-1.0, 0.25, 0.5], [1.0, 2.0, -3.0]], dtype=np.float32)

def run(lib):
    m = GraphModule(lib["default"](cpu()))
    m.run(x=x)
    return [m.get_output(i).numpy().astype(float).tolist() for i in range(m.get_num_outputs())]

lib = load_module(work / "net.so")  # exported by the compiler's process
report["loaded"] = run(lib)
debug = GraphModuleDebug(lib["debug_create"]("default", cpu()), cpu(), lib["get_graph_json"](),
                         dump_root=str(work / "dbg"))
debug.run(number=1, x=x)
report["debug_files"] = sorted(p.name for p in debug.dump_path.iterdir())
# re-link the kernels' objects with a new module blob: the runtime's toolchain, no compiler
fresh = GraphExecutorFactoryModule(
    (work / "graph.json").read_text(),
    NativeLibrary(work / "tiny.so", sources=[work / "tiny.c"]), {"p0": lib.get_params()["p0"]})
fresh.export_library(work / "relinked.so")
report["relinked"] = run(load_module(work / "relinked.so"))
try:
    load_module(work / "net.kiln")
except RuntimeFormatError as e:
    report["numpy_error"] = str(e)
report["imported"] = sorted(m for m in sys.modules if m.startswith("kiln."))
print(json.dumps(report))
'''


@pytest.mark.requires_cc
def test_a_deployed_model_needs_only_the_runtime(tmp_path: Path, tiny_graph: str,
                                                 tiny_functions: dict,
                                                 tiny_native_sources: tuple[Path, Path]) -> None:
    so, src = tiny_native_sources
    for path in (so, src):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "graph.json").write_text(tiny_graph)
    native = GraphExecutorFactoryModule(tiny_graph, NativeLibrary(so, sources=[src]), {"p0": W})
    native.export_library(tmp_path / "net.so")
    GraphExecutorFactoryModule(tiny_graph, NumpyLibrary(tiny_functions), {"p0": W}).export_library(
        tmp_path / "net.kiln")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    for when in ("imported_at_start", "imported"):
        outside = [m for m in report[when] if not m.startswith("kiln.runtime") and m not in BOTTOM]
        assert outside == [], f"the runtime imported {outside} ({when})"
    y = np.maximum(np.array([[-1.0, 0.25, 0.5], [1.0, 2.0, -3.0]]) + W, 0)
    for outputs in (report["loaded"], report["relinked"]):
        np.testing.assert_allclose(outputs[0], y, rtol=1e-6)
        np.testing.assert_array_equal(outputs[1], y > 0.5)
    assert {"_tvmdbg_graph_dump.json", "output_tensors.params",
            "_tvmdbg_execution_trace.json"} <= set(report["debug_files"])
    # the numpy kind belongs to the compiler: without it the runtime names what is missing
    assert "holds a library of kind 'numpy', but no such library kind is registered" in \
        report["numpy_error"]


def test_import_kiln_registers_the_numpy_kind(tmp_path: Path, tiny_graph: str,
                                              tiny_functions: dict) -> None:
    path = tmp_path / "net.kiln"
    GraphExecutorFactoryModule(tiny_graph, NumpyLibrary(tiny_functions), {"p0": W}).export_library(
        path)
    code = ("import sys, numpy as np, kiln\n"
            "from kiln.contrib import graph_executor\n"
            "lib = kiln.runtime.load_module(sys.argv[1])\n"
            "m = graph_executor.GraphModule(lib['default'](kiln.cpu()))\n"
            "m.run(x=np.ones((2, 3), 'float32'))\n"
            "print(type(lib.lib).__module__, m.get_output(0).numpy().tolist())\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    module, values = proc.stdout.strip().split(" ", 1)
    assert module == "kiln.codegen.numpy_library"
    np.testing.assert_allclose(json.loads(values), np.maximum(1 + W, 0))
