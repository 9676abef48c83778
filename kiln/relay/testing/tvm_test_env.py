"""A pytest plugin (``-p kiln.relay.testing.tvm_test_env``) that gives TVM's test files the
environment they were written against, without editing them.

TVM's ``tests/python/frontend/onnx/test_forward.py`` imports, besides TVM itself:

- ``relay.utils.tag_span`` from TVM's own test tree (span helpers for the ``TestSetSpan`` units):
  provided here on Kiln's API (:func:`_create_span`, :func:`_set_span`,
  :func:`_verify_structural_equal_with_span`); Kiln keeps no source spans, so these raise
  :class:`~kiln.errors.KilnError` when called and the units that call them fail, saying so.
- ``onnx.mapping`` (removed from ``onnx`` in 1.16): rebuilt from ``onnx.helper``'s dtype tables
  when the installed ``onnx`` lacks it.
- ``onnx/backend/test/data/node/<case>/`` (``model.onnx`` and ``test_data_set_*/*.pb``), which
  onnx >= 1.16 no longer ships (its loader builds the node cases in memory): written once, in the
  format of onnx's own ``backend-test-tools generate-data``, under Kiln's cache folder
  (``KILN_CACHE_DIR``), and ``onnx.__file__`` is pointed at a folder beside it so that
  ``os.path.dirname(onnx.__file__)`` finds it (imports of onnx's modules go by ``onnx.__path__``
  and are unaffected).
- ``torchvision`` (for three model-zoo units): when it is not installed, a stand-in whose every
  attribute raises ``ModuleNotFoundError: No module named 'torchvision'``, so only the units
  that use it fail, with that message, instead of the whole file.

Each stand-in is installed only when the real module cannot be imported.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from kiln.errors import KilnError

__all__ = ["install"]


class _MissingModule(types.ModuleType):
    """A module whose attributes raise ``ModuleNotFoundError`` naming the real one."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ModuleNotFoundError(f"No module named {self.__name__!r} (needed for "
                                  f"{self.__name__}.{name}; not installed)", name=self.__name__)


def _spans_unsupported(*args: Any, **kwargs: Any) -> Any:
    raise KilnError("relay spans: Kiln keeps no source spans on relay expressions (relay.Span, "
                    "SequentialSpan, *WithFields), so TVM's tag_span helpers cannot build or "
                    "compare them")


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _onnx_mapping() -> types.ModuleType:
    """``onnx.mapping`` as onnx < 1.16 had it: dicts between TensorProto dtypes and NumPy's."""
    import numpy as np
    from onnx import TensorProto, helper

    to_np: dict[int, Any] = {}
    for code in TensorProto.DataType.values():
        if code == TensorProto.UNDEFINED:
            continue
        try:
            to_np[int(code)] = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            continue
    # the historical table: bfloat16 read as float32, the inverse without the aliases
    to_np[int(TensorProto.BFLOAT16)] = np.dtype("float32")
    aliases = {int(TensorProto.BFLOAT16)} | {int(c) for c in to_np
                                              if np.dtype(to_np[c]).kind == "V"}
    canonical = {np.dtype(n): int(getattr(TensorProto, p)) for n, p in (
        ("float32", "FLOAT"), ("float16", "FLOAT16"), ("float64", "DOUBLE"), ("bool", "BOOL"),
        ("int8", "INT8"), ("int16", "INT16"), ("int32", "INT32"), ("int64", "INT64"),
        ("uint8", "UINT8"), ("uint16", "UINT16"), ("uint32", "UINT32"), ("uint64", "UINT64"),
        ("complex64", "COMPLEX64"), ("complex128", "COMPLEX128"), ("object", "STRING"))}
    from_np = {dt: code for code, dt in to_np.items() if code not in aliases}
    from_np.update(canonical)
    return _module("onnx.mapping", TENSOR_TYPE_TO_NP_TYPE=to_np, NP_TYPE_TO_TENSOR_TYPE=from_np)


def _write_proto(path: str, value: Any, value_type: Any, name: str) -> None:
    from onnx import TensorProto, numpy_helper

    if value_type.HasField("map_type"):
        proto: Any = numpy_helper.from_dict(value, name)
    elif value_type.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif value_type.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    else:
        proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def _generate_node_data(dest: str) -> None:
    """Write onnx's node test cases under ``dest`` (``<case>/model.onnx``, ``test_data_set_*``)."""
    import os
    import warnings

    import numpy as np
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        case_dir = os.path.join(dest, case.name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(set_dir, exist_ok=True)
            for j, value in enumerate(inputs):
                _write_proto(os.path.join(set_dir, f"input_{j}.pb"), value, graph.input[j].type,
                             graph.input[j].name)
            for j, value in enumerate(outputs):
                _write_proto(os.path.join(set_dir, f"output_{j}.pb"), value, graph.output[j].type,
                             graph.output[j].name)


def _provide_onnx_node_data() -> None:
    """Point ``onnx.__file__`` at a folder whose ``backend/test/data/node`` holds the node cases
    when the installed onnx has none there."""
    import os
    import shutil
    import tempfile

    import onnx

    from kiln.config import settings

    if os.path.isdir(os.path.join(os.path.dirname(onnx.__file__ or ""), "backend", "test", "data",
                                  "node")):
        return
    root = os.path.join(settings.cache_dir, f"onnx-{onnx.__version__}-node-data", "onnx")
    node_dir = os.path.join(root, "backend", "test", "data", "node")
    if not os.path.isdir(node_dir):
        os.makedirs(os.path.dirname(node_dir), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="node.", dir=os.path.dirname(node_dir))
        try:
            _generate_node_data(tmp)
            os.rename(tmp, node_dir)  # atomic; another process may have won the race
        except OSError:
            if not os.path.isdir(node_dir):
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    onnx.__file__ = os.path.join(root, "__init__.py")


def install(onnx_data: bool = True) -> None:
    """Install every stand-in whose real module is missing (idempotent); ``onnx_data``: also the
    onnx stand-ins (``onnx.mapping``, the node test data)."""
    if "relay" not in sys.modules and not _importable("relay"):
        tag_span = _module("relay.utils.tag_span", _create_span=_spans_unsupported,
                           _set_span=_spans_unsupported,
                           _verify_structural_equal_with_span=_spans_unsupported,
                           _verify_span=_spans_unsupported, _collect_spans=_spans_unsupported)
        utils = _module("relay.utils", tag_span=tag_span, __path__=[])
        relay = _module("relay", utils=utils, __path__=[])
        sys.modules.update({"relay": relay, "relay.utils": utils, "relay.utils.tag_span": tag_span})
    if onnx_data and _importable("onnx"):
        import onnx

        if not hasattr(onnx, "mapping") and not _importable("onnx.mapping"):
            mapping = _onnx_mapping()
            sys.modules["onnx.mapping"] = mapping
            onnx.mapping = mapping  # type: ignore[attr-defined]
        _provide_onnx_node_data()
    if "torchvision" not in sys.modules and not _importable("torchvision"):
        sys.modules["torchvision"] = _MissingModule("torchvision")


def pytest_configure(config: Any) -> None:
    """Install the stand-ins that cost nothing before the test files are collected."""
    install(onnx_data=False)


def pytest_collectstart(collector: Any) -> None:
    """Before a test file that uses onnx is imported, install the onnx stand-ins too."""
    path = getattr(collector, "path", None)
    if path is None or not str(path).endswith(".py"):
        return
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return
    if "import onnx" in text or "from onnx" in text:
        install()
