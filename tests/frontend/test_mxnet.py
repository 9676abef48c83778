"""The MXNet importer against real MXNet 1.9.1 outputs.

MXNet does not install on current Pythons, so ``scripts/make_mxnet_fixtures.py`` ran it once (in a
side environment) and wrote ``tests/frontend/data/mxnet``: Gluon networks exported as
``NAME-symbol.json`` + ``NAME-0000.params`` with MXNet's own outputs (``NAME-io.npz``), and one
symbol per operator case with its inputs, weights and MXNet's outputs (``ops.json``/``ops.npz``).
Every test compiles the imported module (``relay.build`` + graph executor) and compares.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln import relay
from kiln.errors import FrontendError, UnsupportedOpError
from kiln.frontend import mxnet as mxf
from kiln.ir.visitor import children
from tests.frontend._compiled import run_compiled

DATA = Path(__file__).parent / "data" / "mxnet"
DOC = Path(__file__).parents[2] / "docs" / "frontends" / "mxnet.md"
CASES: dict[str, Any] = json.loads((DATA / "ops.json").read_text())
ARRAYS = np.load(DATA / "ops.npz")
RTOL = 1e-4


def _close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol_rel: float = 1e-5) -> float:
    """Assert ``got`` matches ``want`` (atol relative to ``want``'s magnitude); the max abs error."""
    assert got.shape == want.shape, (got.shape, want.shape)
    atol = atol_rel * max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return float(np.abs(got.astype(np.float64) - want).max(initial=0.0))


# --- models ----------------------------------------------------------------------------------

# The two slower builds (an unrolled bidirectional LSTM + GRU, MobileNetV2) run with --runslow; their
# operators are covered in the default run by the operator cases (RNN, clip, elemwise_add, ...).
MODELS = ["resnet_v1_small", "mobilenet0.125", "detector",
          pytest.param("mobilenetv2_0.125", marks=pytest.mark.slow),
          pytest.param("rnn", marks=pytest.mark.slow)]
MODEL_NAMES = ["resnet_v1_small", "mobilenet0.125", "mobilenetv2_0.125", "rnn", "detector"]


@pytest.mark.parametrize("name", MODELS)
def test_model(name: str) -> None:
    sym, arg, aux = mxf.load_checkpoint(DATA / name, 0)
    io = np.load(DATA / f"{name}-io.npz")
    mod, params = relay.frontend.from_mxnet(sym, shape={"data": io["input"].shape}, arg_params=arg,
                                            aux_params=aux)
    outs = run_compiled(mod, params, {"data": io["input"]})
    wants = [io[f"output{i}"] for i in range(len(io.files) - 1)]
    assert len(outs) == len(wants)
    for got, want in zip(outs, wants):
        _close(got, want, atol_rel=1e-4)


def test_model_frozen_params_and_provenance() -> None:
    sym, arg, aux = mxf.load_checkpoint(DATA / "detector", 0)
    io = np.load(DATA / "detector-io.npz")
    mod, params = mxf.from_mxnet(sym, shape={"data": io["input"].shape}, arg_params=arg, aux_params=aux,
                                 freeze_params=True)
    assert params == {}
    assert mod.attrs["output_names"] == ("detector0_softmax0_output", "detector0_reshape1_output")
    sources: set[str] = set()
    stack: list[Any] = [mod["main"].body]
    while stack:
        node = stack.pop()
        sources.update(getattr(node, "source_names", ()))
        stack.extend(children(node))
    assert {"detector0_conv0_fwd", "detector0_batchnorm0_fwd", "detector0_upsampling0",
            "detector0_bilinearresize2d0", "detector0_softmax0"} <= sources
    outs = run_compiled(mod, params, {"data": io["input"]})
    for i, got in enumerate(outs):
        _close(got, io[f"output{i}"], atol_rel=1e-4)


# --- one case per operator -------------------------------------------------------------------

def _case(name: str) -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    meta = CASES[name]
    inputs = {k: ARRAYS[f"{name}:in:{k}"] for k in meta["inputs"]}
    args = {k: ARRAYS[f"{name}:arg:{k}"] for k in meta["args"]}
    aux = {k: ARRAYS[f"{name}:aux:{k}"] for k in meta["aux"]}
    return meta["symbol"], inputs, args, aux


def _merged(cases: list[str]
            ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """The operator ``cases`` in one symbol (nodes renamed ``CASE__NAME``): one build for all."""
    nodes: list[dict[str, Any]] = []
    heads: list[list[int]] = []
    inputs: dict[str, np.ndarray] = {}
    weights: dict[str, np.ndarray] = {}
    labels: list[str] = []
    for case in cases:
        sym, ins, args, aux = _case(case)
        base = len(nodes)
        for node in sym["nodes"]:
            nodes.append({**node, "name": f"{case}__{node['name']}",
                          "inputs": [[e[0] + base, *e[1:]] for e in node["inputs"]]})
        heads += [[e[0] + base, *e[1:]] for e in sym["heads"]]
        labels += [f"{case}:out:{i}" for i in range(len(sym["heads"]))]
        inputs.update({f"{case}__{k}": v for k, v in ins.items()})
        weights.update({f"{case}__{k}": v for k, v in {**args, **aux}.items()})
    return {"nodes": nodes, "heads": heads, "arg_nodes": []}, inputs, weights, labels


@pytest.mark.parametrize("chunk", range(3))
def test_ops(chunk: int) -> None:
    """Every operator case against MXNet's outputs, a third of them per compiled module."""
    sym, inputs, weights, labels = _merged(sorted(CASES)[chunk::3])
    mod, params = mxf.from_mxnet(sym, shape={k: v.shape for k, v in inputs.items()}, arg_params=weights)
    outs = run_compiled(mod, params, inputs)
    assert len(outs) == len(labels)
    failed = []
    for label, got in zip(labels, outs):
        try:
            _close(got, ARRAYS[label])
        except AssertionError as e:
            failed.append(f"{label}: {str(e).strip().splitlines()[0]}")
    assert not failed, failed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name: str) -> None:
    """One operator case in its own module (to pinpoint a failure of :func:`test_ops`)."""
    sym, inputs, args, aux = _case(name)
    mod, params = mxf.from_mxnet(sym, shape={k: v.shape for k, v in inputs.items()}, arg_params=args,
                                 aux_params=aux)
    outs = run_compiled(mod, params, inputs)
    assert len(outs) == CASES[name]["outputs"]
    for i, got in enumerate(outs):
        _close(got, ARRAYS[f"{name}:out:{i}"])


def test_every_converter_is_exercised() -> None:
    used = {node["op"] for meta in CASES.values() for node in meta["symbol"]["nodes"]}
    for name in MODEL_NAMES:
        used |= {node["op"] for node in json.loads((DATA / f"{name}-symbol.json").read_text())["nodes"]}
    for op in ["Convolution", "Deconvolution", "BatchNorm", "Activation", "LeakyReLU", "Pooling",
               "FullyConnected", "Flatten", "Reshape", "transpose", "Concat", "SliceChannel",
               "elemwise_add", "broadcast_add", "_plus_scalar", "_mul_scalar", "softmax", "SoftmaxOutput",
               "SoftmaxActivation", "Dropout", "clip", "expand_dims", "squeeze", "slice", "slice_axis",
               "slice_like", "UpSampling", "_contrib_BilinearResize2D", "add_n", "mean", "sum", "max", "dot",
               "batch_dot", "LayerNorm", "Embedding", "zeros_like", "ones_like", "Cast", "RNN",
               "_rnn_param_concat", "_zeros", "SwapAxis", "take", "InstanceNorm", "L2Normalization", "Pad"]:
        assert op in used, op
        assert op in mxf.CONVERTERS, op


def test_mx_reshape_codes() -> None:
    assert mxf.mx_reshape((2, 3, 4), (4, 0, 2)) == (4, 3, 2)
    assert mxf.mx_reshape((2, 3, 4), (2, 0, 0, 1)) == (2, 3, 4, 1)
    assert mxf.mx_reshape((2, 3, 4), (-1,)) == (24,)
    assert mxf.mx_reshape((2, 3, 4), (-2, 1, 1)) == (2, 3, 4, 1, 1)
    assert mxf.mx_reshape((2, 3, 4, 5), (-3, -3)) == (6, 20)
    assert mxf.mx_reshape((2, 3, 4), (-4, 1, 2, -2)) == (1, 2, 3, 4)
    assert mxf.mx_reshape((2, 3, 4), (2, -4, -1, 3, -2)) == (2, 1, 3, 4)
    assert mxf.mx_reshape((10, 5, 4), (-1, 0), reverse=True) == (50, 4)
    with pytest.raises(ValueError):
        mxf.mx_reshape((2, 3), (4, -1, 5))


# --- the params format and malformed files ---------------------------------------------------

def test_params_roundtrip_and_dtypes(tmp_path: Path) -> None:
    values = {"arg:a": np.arange(6, dtype=np.float32).reshape(2, 3), "aux:b": np.array([1, -2], np.int64),
              "arg:c": np.ones((1, 1, 2), np.float16), "arg:d": np.array([3], np.uint8)}
    path = tmp_path / "m-0003.params"
    mxf.save_params(path, values)
    back = mxf.load_params(path)
    assert list(back) == list(values)
    for k, v in values.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


def test_params_real_mxnet_file_layout() -> None:
    # the fixture was written by MXNet itself: the reader agrees with mx.nd.save's layout
    raw = (DATA / "rnn-0000.params").read_bytes()
    assert struct.unpack_from("<QQ", raw) == (0x112, 0)
    assert struct.unpack_from("<I", raw, 24)[0] == mxf.V2_MAGIC
    params = mxf.load_params(raw)
    assert all(k.startswith("arg:") for k in params)
    assert params["arg:recurrent0_dense0_weight"].shape == (3, 6)


def test_legacy_v1_and_v0_arrays() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    v1 = struct.pack("<IIqq", mxf.V1_MAGIC, 2, 2, 3) + struct.pack("<iii", 1, 0, 0) + a.tobytes()
    v0 = struct.pack("<III", 2, 2, 3) + struct.pack("<iii", 1, 0, 0) + a.tobytes()
    for rec in (v1, v0):
        blob = struct.pack("<QQQ", 0x112, 0, 1) + rec + struct.pack("<QQ", 1, 1) + b"x"
        assert np.array_equal(mxf.load_params(blob)["x"], a)


def _blob(tmp_path: Path, data: bytes, name: str = "bad-0000.params") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_truncated_params(tmp_path: Path) -> None:
    good = mxf.save_params(None, {"arg:w": np.ones((4, 4), np.float32)})
    path = _blob(tmp_path, good[:-30])
    with pytest.raises(FrontendError, match=r"bad-0000\.params.*truncated while reading data of array #0"):
        mxf.load_params(path)


def test_wrong_list_magic(tmp_path: Path) -> None:
    path = _blob(tmp_path, struct.pack("<QQ", 0xF7E58D4F05049CB7, 0) + b"\0" * 16)
    with pytest.raises(FrontendError, match=r"bad-0000\.params.*bad header.*expected 0x112"):
        mxf.load_params(path)


def test_wrong_array_magic(tmp_path: Path) -> None:
    good = bytearray(mxf.save_params(None, {"arg:w": np.ones(3, np.float32)}))
    good[24:28] = struct.pack("<I", 0xDEADBEEF)
    with pytest.raises(FrontendError, match=r"bad magic 0xDEADBEEF for array #0 \(expected 0xF993FAC9"):
        mxf.load_params(_blob(tmp_path, bytes(good)))


def test_names_arrays_mismatch(tmp_path: Path) -> None:
    good = mxf.save_params(None, {"arg:a": np.ones(2, np.float32), "arg:b": np.ones(2, np.float32)})
    names_at = len(good) - (8 + 8 + 5 + 8 + 5)
    bad = good[:names_at] + struct.pack("<Q", 1) + struct.pack("<Q", 5) + b"arg:a"
    with pytest.raises(FrontendError, match=r"holds 2 arrays but 1 names"):
        mxf.load_params(_blob(tmp_path, bad))


def test_sparse_array_rejected(tmp_path: Path) -> None:
    rec = struct.pack("<Ii", mxf.V2_MAGIC, 2)
    blob = struct.pack("<QQQ", 0x112, 0, 1) + rec + b"\0" * 64
    with pytest.raises(FrontendError, match="csr storage"):
        mxf.load_params(_blob(tmp_path, blob))


def test_checkpoint_key_without_prefix(tmp_path: Path) -> None:
    (tmp_path / "m-symbol.json").write_text((DATA / "rnn-symbol.json").read_text())
    mxf.save_params(tmp_path / "m-0001.params", {"weight": np.ones(2, np.float32)})
    with pytest.raises(FrontendError, match=r"m-0001\.params.*'weight' is not of the form 'arg:NAME'"):
        mxf.load_checkpoint(tmp_path / "m", 1)


def test_missing_checkpoint_files(tmp_path: Path) -> None:
    with pytest.raises(FrontendError, match=r"cannot read MXNet symbol file .*nope-symbol\.json"):
        mxf.load_checkpoint(tmp_path / "nope", 0)


# --- malformed symbols -----------------------------------------------------------------------

def _fc_symbol(extra_nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "null", "name": "fc_weight", "inputs": [], "attrs": {"__shape__": "(4, 3)"}},
             {"op": "null", "name": "fc_bias", "inputs": []},
             {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "4"},
              "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}]
    nodes += extra_nodes or []
    return {"nodes": nodes, "arg_nodes": [0, 1, 2], "heads": [[len(nodes) - 1, 0, 0]]}


def test_symbol_refers_to_missing_param(tmp_path: Path) -> None:
    path = tmp_path / "m-symbol.json"
    path.write_text(json.dumps(_fc_symbol()))
    with pytest.raises(FrontendError, match=r"m-symbol\.json.*'fc_bias' \(used by 'fc'\)"):
        mxf.from_mxnet(str(path), shape={"data": (2, 3)}, arg_params={"fc_weight": np.ones((4, 3), "f4")})


def test_param_shape_disagrees_with_declared(tmp_path: Path) -> None:
    args = {"fc_weight": np.ones((4, 5), "f4"), "fc_bias": np.ones(4, "f4")}
    with pytest.raises(FrontendError,
                       match=r"'fc_weight' has shape \[4, 5\] but symbol .* declares \[4, 3\]"):
        mxf.from_mxnet(_fc_symbol(), shape={"data": (2, 3)}, arg_params=args)


def test_param_shape_disagrees_with_attrs() -> None:
    sym = _fc_symbol()
    del sym["nodes"][1]["attrs"]
    args = {"fc_weight": np.ones((4, 5), "f4"), "fc_bias": np.ones(4, "f4")}
    with pytest.raises(FrontendError, match=r"node 'fc' \(FullyConnected\).*weight 'fc_weight' has shape "
                                            r"\[4, 5\], but the node's attributes need \[4, 3\]"):
        mxf.from_mxnet(sym, shape={"data": (2, 3)}, arg_params=args)
    args = {"fc_weight": np.ones((4, 3), "f4"), "fc_bias": np.ones(5, "f4")}
    with pytest.raises(FrontendError, match=r"bias 'fc_bias' has shape \[5\], expected \[4\]"):
        mxf.from_mxnet(sym, shape={"data": (2, 3)}, arg_params=args)


def test_conv_weight_shape_disagrees() -> None:
    sym, inputs, args, _ = _case("conv2d")
    args = {**args, "w": np.ones((4, 3, 2, 2), "f4")}
    with pytest.raises(FrontendError, match=r"\(Convolution\).*\[4, 3, 2, 2\].*need \[4, 3, 3, 3\]"):
        mxf.from_mxnet(sym, shape={k: v.shape for k, v in inputs.items()}, arg_params=args)


def test_unsupported_ops_listed_at_once() -> None:
    extra = [{"op": "_contrib_MultiBoxPrior", "name": "prior0", "inputs": [[3, 0, 0]]},
             {"op": "_contrib_MultiBoxPrior", "name": "prior1", "inputs": [[4, 0, 0]]},
             {"op": "Pooling", "name": "lp", "attrs": {"pool_type": "lp", "kernel": "(2,)"},
              "inputs": [[5, 0, 0]]},
             {"op": "MyCustomOp", "name": "custom", "inputs": [[6, 0, 0]]}]
    with pytest.raises(UnsupportedOpError) as info:
        mxf.from_mxnet(_fc_symbol(extra), shape={"data": (2, 3)})  # before even looking for weights
    text = str(info.value)
    assert "3 unsupported operator kind(s) in the MXNet model" in text
    assert re.search(r"_contrib_MultiBoxPrior: nodes 'prior0', 'prior1'", text)
    assert "Pooling: nodes 'lp' (pool_type=lp)" in text and "MyCustomOp: nodes 'custom'" in text


def test_bad_json_and_unknown_shape_name(tmp_path: Path) -> None:
    path = tmp_path / "x-symbol.json"
    path.write_text("{not json")
    with pytest.raises(FrontendError, match=r"x-symbol\.json.*not valid JSON"):
        mxf.from_mxnet(str(path), shape={"data": (1,)})
    with pytest.raises(FrontendError, match=r"expected an object with 'nodes' and 'heads'"):
        mxf.from_mxnet({"nodes": []})
    args = {"fc_weight": np.ones((4, 3), "f4"), "fc_bias": np.ones(4, "f4")}
    with pytest.raises(FrontendError, match=r"shape names \['dat'\]"):
        mxf.from_mxnet(_fc_symbol(), shape={"data": (2, 3), "dat": (1,)}, arg_params=args)


def test_softmax_label_is_not_required() -> None:
    sym, inputs, _, _ = _case("softmax_output")
    names = {n["name"] for n in sym["nodes"]}
    assert "softmax_label" in names
    mod, _ = mxf.from_mxnet(sym, shape={"data": inputs["data"].shape})
    assert [p.name_hint for p in mod["main"].params] == ["data"]


# --- the documentation -----------------------------------------------------------------------

def test_doc_lists_exactly_the_converters() -> None:
    text = DOC.read_text()
    section = text.split("<!-- ops -->")[1].split("<!-- /ops -->")[0]
    documented = set(re.findall(r"`([^`]+)`", section))
    assert documented == set(mxf.CONVERTERS)
