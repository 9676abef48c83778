"""get_calibration_data and its helpers against TVM's own output (fixtures/tvm/calibration*).

``test_seed_003_verbatim`` is seed 003's code as written, with ``import kiln as tvm``; the other
tests compare with the texts, output map and arrays TVM wrote, or with the reference interpreter.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln as tvm
import kiln.relay.testing
from kiln import relay
from kiln.analysis import CalibrationError, get_calibrate_module, get_calibrate_output_map
from kiln.interpreter import Interpreter
from kiln.ir import structural_hash
from kiln.relay import transform
from kiln.relay.analysis import get_calibration_data
from kiln.runtime.graph_executor import GraphExecutor


def check_data_size(mod, data):
    assert len(data) == len(mod.functions) - 1
    for key, value in mod.functions.items():
        if key.name_hint != "main":
            assert len(data[key]["inputs"]) == len(value.params)
            if isinstance(value.body, relay.Tuple):
                assert len(data[key]["outputs"]) == len(value.body.fields)
            else:
                assert len(data[key]["outputs"]) == 1


def seed_module():
    """Seed 003's two-function module, verbatim."""
    # A module with two subgraphs
    mod = tvm.IRModule()

    x0 = relay.var("x0", shape=(8, 8))
    y0 = relay.var("y0", shape=(8, 8))
    z0 = x0 + y0
    z1 = x0 - y0
    z2 = relay.Tuple((z0, z1))
    f0 = relay.Function([x0, y0], z2)
    f0 = f0.with_attr("Compiler", "test_graph")
    g0 = relay.GlobalVar("g0")
    mod[g0] = f0
    mod = relay.transform.InferType()(mod)

    x1 = relay.var("x1", shape=(8, 8))
    y1 = relay.var("y1", shape=(8, 8))
    z1 = x1 - y1
    f1 = relay.Function([x1, y1], z1)
    f1 = f1.with_attr("Compiler", "test_graph")
    g1 = relay.GlobalVar("g1")
    mod[g1] = f1
    mod = relay.transform.InferType()(mod)

    x = relay.var("x", shape=(8, 8))
    y = relay.var("y", shape=(8, 8))
    z = relay.var("z", shape=(8, 8))
    c0 = relay.Call(g0, [x, y])
    c1 = relay.Call(g1, [relay.TupleGetItem(c0, 0), z])
    fm = relay.Function([x, y, z], c1)
    mod["main"] = fm
    mod = relay.transform.InferType()(mod)
    return mod, g0, g1


def fixture_json(fixtures_dir):
    return json.loads((fixtures_dir / "calibration.json").read_text())


def test_seed_003_verbatim(fixtures_dir, capsys):
    mod, g0, g1 = seed_module()
    x_data = np.random.rand(8, 8).astype("float32")
    y_data = np.random.rand(8, 8).astype("float32")
    z_data = np.random.rand(8, 8).astype("float32")
    mod.show()
    data = get_calibration_data(mod, {"x": x_data, "y": y_data, "z": z_data})
    assert repr(data.keys()) == 'dict_keys([I.GlobalVar("g0"), I.GlobalVar("g1")])'
    # Check the number and orders
    check_data_size(mod, data)
    tvm.testing.assert_allclose(data[g0]["inputs"][0].numpy(), x_data)
    tvm.testing.assert_allclose(data[g0]["inputs"][1].numpy(), y_data)
    tvm.testing.assert_allclose(data[g0]["outputs"][0].numpy(), x_data + y_data)
    tvm.testing.assert_allclose(data[g0]["outputs"][1].numpy(), x_data - y_data)
    tvm.testing.assert_allclose(data[g1]["inputs"][0].numpy(), x_data + y_data)
    tvm.testing.assert_allclose(data[g1]["inputs"][1].numpy(), z_data)
    tvm.testing.assert_allclose(data[g1]["outputs"][0].numpy(), x_data + y_data - z_data)
    from kiln.relay.analysis import _ffi_api

    output_map = _ffi_api.get_calibrate_output_map(mod)
    run_mod = _ffi_api.get_calibrate_module(mod)
    assert repr(output_map) == '{I.GlobalVar("g0"): [0, 2, 2], I.GlobalVar("g1"): [4, 2, 1]}'
    run_mod.show()
    mod.show()

    texts = fixture_json(fixtures_dir)
    printed = capsys.readouterr().out
    assert printed == texts["mod_show"] + "\n" + texts["calibrate_module"] + "\n" + \
        texts["mod_show"] + "\n"


def test_mobilenet_dnnl_from_the_seed_skips(capsys):
    def test_mobilenet_dnnl():
        if not tvm.get_global_func("relay.ext.dnnl", True):
            print("skip because DNNL codegen is not available")
            return

    test_mobilenet_dnnl()
    assert capsys.readouterr().out == "skip because DNNL codegen is not available\n"


def test_seed_003_mobilenet_flow_with_kiln_c():
    dtype = "float32"
    ishape = (1, 3, 224, 224)
    mod, params = relay.testing.mobilenet.get_workload(batch_size=1, dtype="float32")

    mod = transform.AnnotateTarget(["kiln_c"])(mod)
    mod = transform.MergeCompilerRegions()(mod)
    mod = transform.PartitionGraph()(mod)

    i_data = np.random.uniform(0, 1, ishape).astype(dtype)
    data = get_calibration_data(mod, {"data": i_data, **params})

    # Check the number and orders
    check_data_size(mod, data)
    (gv, values), = data.items()
    assert gv.name_hint == "tvmgen_default_kiln_c_main_0"
    np.testing.assert_array_equal(values["inputs"][0].numpy(), i_data)
    assert values["outputs"][0].shape == (1, 1000)


def test_output_map_and_calibrate_module_equal_tvm(fixtures_dir):
    mod, g0, g1 = seed_module()
    texts = fixture_json(fixtures_dir)
    output_map = get_calibrate_output_map(mod)
    assert {gv.name_hint: v for gv, v in output_map.items()} == texts["output_map"]
    assert list(output_map) == [g0, g1]
    assert get_calibrate_module(mod).astext() == texts["calibrate_module"]


def test_every_array_equals_tvm(fixtures_dir):
    mod, _, _ = seed_module()
    inputs = np.load(fixtures_dir / "calibration_inputs.npz")
    expected = np.load(fixtures_dir / "calibration_data.npz")
    data = get_calibration_data(mod, {k: inputs[k] for k in inputs.files})
    got = {f"{gv.name_hint}_{kind}_{i}": a.numpy()
           for gv, v in data.items() for kind in ("inputs", "outputs") for i, a in enumerate(v[kind])}
    assert sorted(got) == sorted(expected.files)
    meta = fixture_json(fixtures_dir)["calib_data"]
    for name in expected.files:
        assert got[name].dtype == expected[name].dtype and got[name].shape == expected[name].shape
        np.testing.assert_array_equal(got[name], expected[name])
        fn, kind, i = name.split("_")
        assert meta[fn][kind][int(i)] == {"shape": list(got[name].shape), "dtype": "float32"}


def test_input_module_is_not_modified(fixtures_dir):
    mod, _, _ = seed_module()
    before, text = structural_hash(mod), mod.astext()
    inputs = np.load(fixtures_dir / "calibration_inputs.npz")
    get_calibrate_output_map(mod)
    get_calibrate_module(mod)
    get_calibration_data(mod, {k: inputs[k] for k in inputs.files})
    assert structural_hash(mod) == before
    assert mod.astext() == text == fixture_json(fixtures_dir)["mod_show"]


def test_collecting_costs_one_execution(monkeypatch, fixtures_dir):
    runs: list[int] = []
    original = GraphExecutor.run

    def counted(self, **inputs):
        runs.append(1)
        return original(self, **inputs)

    monkeypatch.setattr(GraphExecutor, "run", counted)
    evaluations: list[int] = []
    original_run = Interpreter.run
    monkeypatch.setattr(Interpreter, "run",
                        lambda self, *a, **k: evaluations.append(1) or original_run(self, *a, **k))
    mod, _, _ = seed_module()
    inputs = np.load(fixtures_dir / "calibration_inputs.npz")
    get_calibration_data(mod, {k: inputs[k] for k in inputs.files})
    assert len(runs) == 1
    assert evaluations == []  # no second, interpreted evaluation of the network


def test_partitioned_regions_match_an_interpreter_run(rng):
    from kiln.relay.op.contrib import register_op_attr

    register_op_attr("nn.conv2d", "target.tcal_conv", True)
    register_op_attr("nn.relu", "target.tcal_conv", True)
    mod, params = relay.testing.mobilenet.get_workload(batch_size=1, image_shape=(3, 16, 16))
    mod = transform.PartitionGraph()(transform.MergeCompilerRegions()(
        transform.AnnotateTarget(["tcal_conv"])(mod)))
    inputs = {"data": rng.uniform(0, 1, (1, 3, 16, 16)).astype("float32"),
              **{k: v.numpy() for k, v in params.items()}}
    data = get_calibration_data(mod, inputs)
    assert len(data) == len(mod.functions) - 1 > 10
    check_data_size(mod, data)

    seen: dict[str, tuple[list, list]] = {}

    class Recording(Interpreter):
        def call_function(self, fn, args, name="function"):
            out = super().call_function(fn, args, name)
            if name.startswith("@tvmgen"):
                seen[name[1:]] = (list(args), list(out) if isinstance(out, tuple) else [out])
            return out

    Recording(mod).run(inputs)
    for gv, values in data.items():
        args, outs = seen[gv.name_hint]
        for got, want in zip(values["inputs"], args):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        for got, want in zip(values["outputs"], outs):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def _module(main: relay.Function, **functions: relay.Function) -> tvm.IRModule:
    mod = tvm.IRModule()
    for name, fn in functions.items():
        mod[name] = fn
    mod["main"] = main
    return relay.transform.InferType()(mod)


def _external(name: str = "f", compiler: str = "test_graph") -> relay.Function:
    a = relay.var(f"{name}_a", shape=(4,))
    return relay.Function([a], relay.abs(a)).with_attr("Compiler", compiler)


def test_limit_control_flow():
    x = relay.var("x", shape=(4,))
    c = relay.var("c", shape=(), dtype="bool")
    f = relay.GlobalVar("f")
    main = relay.Function([x, c], relay.If(c, relay.Call(f, [x]), x))
    with pytest.raises(CalibrationError, match=r"limit 1 \(no control flow\).*@main contains an If"):
        get_calibration_data(_module(main, f=_external()), {"x": np.ones(4, "float32"), "c": True})


def test_limit_tuple_inputs():
    t = relay.var("t", relay.TupleType([relay.TensorType((4,), "float32")] * 2))
    g = relay.Function([t], relay.TupleGetItem(t, 0) + relay.TupleGetItem(t, 1))
    g = g.with_attr("Compiler", "test_graph")
    x = relay.var("x", shape=(4,))
    main = relay.Function([x], relay.Call(relay.GlobalVar("g"), [relay.Tuple([x, x])]))
    with pytest.raises(CalibrationError, match=r"limit 2 \(function inputs cannot be tuples\).*"
                                               r"parameter %t of @g"):
        get_calibrate_output_map(_module(main, g=g))


def test_limit_nested_function_literal():
    x = relay.var("x", shape=(4,))
    main = relay.Function([x], relay.Call(_external("lit"), [x]))
    with pytest.raises(CalibrationError, match=r"limit 3 \(top-level functions only\).*"
                                               r"function literal with Compiler='test_graph'"):
        get_calibrate_module(_module(main))


def test_limit_called_from_another_function():
    a = relay.var("a", shape=(4,))
    helper = relay.Function([a], relay.Call(relay.GlobalVar("f"), [a]))
    x = relay.var("x", shape=(4,))
    main = relay.Function([x], relay.Call(relay.GlobalVar("helper"), [x]))
    with pytest.raises(CalibrationError, match=r"limit 3 \(top-level functions only\).*@f "
                                               r"\(Compiler='test_graph'\) is called from @helper"):
        get_calibrate_output_map(_module(main, f=_external(), helper=helper))


def test_limit_called_twice():
    x = relay.var("x", shape=(4,))
    f = relay.GlobalVar("f")
    main = relay.Function([x], relay.Call(f, [relay.Call(f, [x])]))
    with pytest.raises(CalibrationError, match=r"limit 4 \(each function is called once\).*@f"):
        get_calibration_data(_module(main, f=_external()), {"x": np.ones(4, "float32")})


def test_missing_and_unknown_inputs_are_named():
    mod, _, _ = seed_module()
    ones = np.ones((8, 8), "float32")
    with pytest.raises(CalibrationError, match="missing input.*z; unknown input.*w"):
        get_calibration_data(mod, {"x": ones, "y": ones, "w": ones})


def test_tuple_typed_call_outputs_are_counted_by_type():
    # a function returning batch_norm's tuple directly: three outputs, flattened in the module
    shape = (1, 2, 3, 3)
    d = relay.var("d", shape=shape)
    stats = [relay.var(n, shape=(2,)) for n in ("g", "b", "m", "v")]
    bn = relay.Function([d, *stats], relay.nn.batch_norm(d, *stats).astuple())
    bn = bn.with_attr("Compiler", "test_graph")
    x = relay.var("x", shape=shape)
    ps = [relay.var(n, shape=(2,)) for n in ("g", "b", "m", "v")]
    call = relay.Call(relay.GlobalVar("bn"), [x, *ps])
    main = relay.Function([x, *ps], relay.TupleGetItem(call, 0))
    mod = _module(main, bn=bn)
    assert list(get_calibrate_output_map(mod).values()) == [[0, 5, 3]]
    values = {"x": np.ones(shape, "float32"), **{n: np.ones(2, "float32") for n in "gbmv"}}
    (outputs,) = [v["outputs"] for v in get_calibration_data(mod, values).values()]
    assert [o.shape for o in outputs] == [shape, (2,), (2,)]


def test_module_without_external_functions_gives_nothing():
    x = relay.var("x", shape=(4,))
    mod = _module(relay.Function([x], relay.abs(x)))
    assert get_calibration_data(mod, {"x": np.ones(4, "float32")}) == {}



def test_inlined_calibrate_module_prints_as_tvm(fixtures_dir):
    from kiln.analysis.calibration import get_calibrate_module
    from kiln.transform import Inline

    mod, _, _ = seed_module()
    expected = json.loads((fixtures_dir / "calibration.json").read_text())["calibrate_module_inlined"]
    assert Inline()(get_calibrate_module(mod)).astext() == expected
