"""``kiln.relay.testing.tvm_test_env``: the stand-ins TVM's ONNX test file needs (onnx.mapping,
onnx's node test data on disk, TVM's tag_span helpers, a missing torchvision)."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.test_case import TestCase

from kiln.config import settings
from kiln.errors import KilnError
from kiln.relay.testing import tvm_test_env


def test_onnx_mapping_matches_the_historical_tables() -> None:
    mapping = tvm_test_env._onnx_mapping()
    assert mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype("float32")] == TensorProto.FLOAT
    assert mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype("int64")] == TensorProto.INT64
    assert mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype("float16")] == TensorProto.FLOAT16
    assert mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype("bool")] == TensorProto.BOOL
    assert mapping.TENSOR_TYPE_TO_NP_TYPE[TensorProto.UINT8] == np.dtype("uint8")
    assert mapping.TENSOR_TYPE_TO_NP_TYPE[TensorProto.BFLOAT16] == np.dtype("float32")


def test_missing_module_raises_module_not_found_on_use() -> None:
    mod = tvm_test_env._MissingModule("torchvision")
    with pytest.raises(ModuleNotFoundError, match="No module named 'torchvision'"):
        mod.models  # noqa: B018


def test_install_provides_tag_span_that_says_why_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("relay", "relay.utils", "relay.utils.tag_span"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(tvm_test_env, "_importable", lambda name: name != "relay" and name != "torchvision")
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    tvm_test_env.install(onnx_data=False)
    from relay.utils.tag_span import _create_span  # type: ignore[import-not-found]

    with pytest.raises(KilnError, match="spans"):
        _create_span("conv")
    import torchvision  # type: ignore[import-not-found]

    assert isinstance(torchvision, tvm_test_env._MissingModule)
    monkeypatch.delitem(sys.modules, "torchvision")
    for name in ("relay", "relay.utils", "relay.utils.tag_span"):
        monkeypatch.delitem(sys.modules, name)


def _relu_case() -> TestCase:
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", 1, [2])],
                                   [onnx.helper.make_tensor_value_info("y", 1, [2])])
    x = np.array([-1, 2], np.float32)
    return TestCase(name="test_relu_tiny", model_name="test_relu_tiny", url=None, model_dir=None,
                    model=onnx.helper.make_model(graph), data_sets=[([x], [np.maximum(x, 0)])],
                    kind="node", rtol=1e-3, atol=1e-7)


def test_node_data_is_written_in_the_on_disk_layout(tmp_path: os.PathLike,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx.backend.test.loader as loader

    monkeypatch.setattr(loader, "load_model_tests", lambda kind=None: [_relu_case()])
    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    monkeypatch.setattr(onnx, "__file__", str(tmp_path / "nowhere" / "__init__.py"))
    tvm_test_env._provide_onnx_node_data()
    node_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    case = os.path.join(node_dir, "test_relu_tiny")
    assert os.listdir(node_dir) == ["test_relu_tiny"]
    assert onnx.load(os.path.join(case, "model.onnx")).graph.node[0].op_type == "Relu"
    out = onnx.TensorProto()
    with open(os.path.join(case, "test_data_set_0", "output_0.pb"), "rb") as f:
        out.ParseFromString(f.read())
    np.testing.assert_array_equal(numpy_helper.to_array(out), [0, 2])


def test_pytest_collectstart_installs_onnx_stand_ins_only_for_onnx_files(
        tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(tvm_test_env, "install", lambda onnx_data=True: calls.append(onnx_data))
    plain = tmp_path / "test_plain.py"
    plain.write_text("import numpy\n")
    uses = tmp_path / "test_uses.py"
    uses.write_text("import onnx\n")
    tvm_test_env.pytest_collectstart(types.SimpleNamespace(path=plain))
    assert calls == []
    tvm_test_env.pytest_collectstart(types.SimpleNamespace(path=uses))
    assert calls == [True]
