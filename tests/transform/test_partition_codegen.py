"""The ``kiln_c`` external codegen: partitioned regions compiled to their own C library.

Each region kernel is run directly on random inputs and compared with the reference interpreter
evaluating the same region function (the NumPy kernels of the op registry), or with a NumPy
formula. The end-to-end tests build partitioned MobileNets with ``relay.build`` and compare them
with the unpartitioned build.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _pass_helpers import module

import kiln as tvm
from kiln import relay
from kiln.codegen.external import (
    EXTERNAL_C_FLAGS,
    build_external,
    c_source,
    external_functions,
    registered_codegens,
)
from kiln.contrib import graph_executor
from kiln.errors import CompileError
from kiln.interpreter import Interpreter
from kiln.ir.types import TupleType, Type
from kiln.runtime.module import KernelError
from kiln.transform import AnnotateTarget, MergeCompilerRegions, PartitionGraph

pytestmark = pytest.mark.requires_cc


def partition(mod: tvm.IRModule, target: str = "kiln_c") -> tvm.IRModule:
    return PartitionGraph()(MergeCompilerRegions()(AnnotateTarget([target])(mod)))


def random_value(ty: Type, rng: np.random.Generator, low: float, high: float) -> Any:
    """A random float32 value of a tensor or tuple type."""
    if isinstance(ty, TupleType):
        return tuple(random_value(f, rng, low, high) for f in ty.fields)
    return rng.uniform(low, high, ty.shape).astype("float32")


def flat(value: Any) -> list[np.ndarray]:
    return [a for v in value for a in flat(v)] if isinstance(value, tuple) else [value]


def check_regions(mod: tvm.IRModule, rng: np.random.Generator, rtol: float = 1e-5,
                  atol: float = 1e-6, low: float = -2.0, high: float = 2.0) -> int:
    """Compile every region of ``mod`` and compare each kernel with the interpreter."""
    parted = partition(mod)
    functions = external_functions(parted).get("kiln_c", {})
    lib = build_external(functions, "kiln_c")
    interp = Interpreter(parted)
    for symbol, fn in functions.items():
        args = [random_value(p.checked_type, rng, low, high) for p in fn.params]
        expected = flat(interp.call_function(fn, args, symbol))
        outs = [np.empty_like(e) for e in expected]
        lib.kernel(symbol)(*flat(tuple(args)), *outs)
        for got, want in zip(outs, expected):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return len(functions)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((2, 1, 4), (3, 1)), ((1,), (5, 2))])
def test_binary_broadcast(op, shapes, rng):
    a = relay.var("a", shape=shapes[0])
    b = relay.var("b", shape=shapes[1])
    assert check_regions(module(getattr(relay, op)(a, b), [a, b]), rng, low=0.5) == 1


@pytest.mark.parametrize("make", [relay.nn.relu, relay.negative, relay.abs, relay.exp, relay.tanh,
                                  relay.sigmoid, lambda x: relay.clip(x, -0.5, 0.75),
                                  lambda x: relay.sqrt(relay.abs(x)), lambda x: relay.log(relay.abs(x)),
                                  lambda x: relay.reshape(x, (4, 6)), relay.nn.batch_flatten,
                                  lambda x: relay.expand_dims(x, 1)])
def test_unary_and_copies(make, rng):
    x = relay.var("x", shape=(2, 3, 4))
    assert check_regions(module(make(x), [x]), rng) == 1


@pytest.mark.parametrize("groups,strides,padding,dilation", [(1, (1, 1), (1, 1), (1, 1)),
                                                             (2, (2, 2), (0, 1, 2, 1), (1, 1)),
                                                             (4, (1, 2), (2, 2), (2, 1))])
def test_conv2d_against_a_numpy_formula(groups, strides, padding, dilation, rng):
    x = rng.normal(size=(2, 4, 7, 8)).astype("float32")
    w = rng.normal(size=(8, 4 // groups, 3, 3)).astype("float32")
    xv, wv = relay.var("x", shape=x.shape), relay.var("w", shape=w.shape)
    conv = relay.nn.conv2d(xv, wv, kernel_size=(3, 3), channels=8, groups=groups, strides=strides,
                           padding=padding, dilation=dilation)
    parted = partition(module(conv, [xv, wv]))
    (symbol, fn), = external_functions(parted)["kiln_c"].items()
    out = np.empty(fn.body.checked_type.shape, "float32")
    build_external({symbol: fn}, "kiln_c").kernel(symbol)(x, w, out)

    pads = padding if len(padding) == 4 else (*padding, *padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    want = np.zeros(out.shape)
    cg, og = 4 // groups, 8 // groups
    for o in range(8):
        g = o // og
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                hs, ws = i * strides[0], j * strides[1]
                win = xp[:, g * cg:(g + 1) * cg, hs:hs + 2 * dilation[0] + 1:dilation[0],
                         ws:ws + 2 * dilation[1] + 1:dilation[1]]
                want[:, o, i, j] = (win * w[o]).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_dense_bias_batch_norm_softmax(rng):
    x = relay.var("x", shape=(3, 5))
    w = relay.var("w", shape=(6, 5))
    b = relay.var("b", shape=(6,))
    stats = [relay.var(n, shape=(6,)) for n in ("gamma", "beta", "mean", "var")]
    y = relay.nn.bias_add(relay.nn.dense(x, w), b)
    y = relay.nn.batch_norm(y, *stats, epsilon=1e-3)[0]
    mod = module(relay.nn.softmax(y), [x, w, b, *stats])
    assert check_regions(mod, rng, low=0.25) == 1


@pytest.mark.parametrize("op,kw", [("max_pool2d", {}), ("avg_pool2d", {}),
                                   ("avg_pool2d", {"count_include_pad": True})])
def test_pooling(op, kw, rng):
    x = relay.var("x", shape=(1, 3, 9, 8))
    pool = getattr(relay.nn, op)(x, pool_size=(3, 2), strides=(2, 2), padding=(1, 1), **kw)
    glob = relay.nn.global_avg_pool2d(x)
    gmax = relay.nn.global_max_pool2d(x)
    # three independent regions: the output tuple is split before partitioning, as in TVM
    assert check_regions(module(relay.Tuple([pool, glob, gmax]), [x]), rng) == 3


def test_concatenate_and_tuple_outputs(rng):
    a = relay.var("a", shape=(2, 3, 4))
    b = relay.var("b", shape=(2, 1, 4))
    c = relay.concatenate([relay.abs(a), b], axis=1)
    out = relay.concatenate([c, relay.exp(b)], axis=1)
    mod = module(relay.Tuple([relay.nn.relu(out), relay.tanh(out)]), [a, b])
    # (abs(a), b) mixes a region output with an input, so it stays outside: the second region
    # takes a tuple parameter (flattened into two kernel inputs) and has two outputs
    assert check_regions(mod, rng) == 2


def test_bound_constants_are_passed_by_the_library(rng):
    x = relay.var("x", shape=(1, 2, 5, 5))
    w = relay.const(rng.normal(size=(3, 2, 3, 3)).astype("float32"))
    bias = relay.const(rng.normal(size=(3,)).astype("float32"))
    mod = module(relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), bias)), [x])
    parted = partition(mod)
    (symbol, fn), = external_functions(parted)["kiln_c"].items()
    assert [p.name_hint for p in fn.params] == ["kiln_c_0_i0"]
    source, kernels = c_source({symbol: fn})
    assert f"int32_t {symbol}(void** args)" in source and len(kernels[symbol][1]) == 2
    assert check_regions(mod, rng) == 1


def test_kernels_check_their_arguments(rng):
    x = relay.var("x", shape=(2, 3))
    parted = partition(module(relay.nn.relu(x), [x]))
    (symbol, fn), = external_functions(parted)["kiln_c"].items()
    kernel = build_external({symbol: fn}, "kiln_c").kernel(symbol)
    with pytest.raises(KernelError, match=r"must be \(2, 3\) float32"):
        kernel(np.zeros((3, 2), "float32"), np.zeros((2, 3), "float32"))


def test_region_library_is_separate_and_built_with_its_own_flags(rng):
    x = relay.var("x", shape=(2, 3))
    parted = partition(module(relay.exp(x), [x]))
    functions = external_functions(parted)["kiln_c"]
    lib = build_external(functions, "kiln_c")
    assert "kiln_c_regions" in lib.native.path.name
    source = lib.native.path.with_suffix(".c").read_text()
    assert "Generated by Kiln's external C codegen" in source
    assert EXTERNAL_C_FLAGS == ("-O2", "-ffp-contract=off")


def test_unavailable_and_unknown_codegens():
    x = relay.var("x", shape=(2,))
    fn = relay.Function([x], relay.abs(x))
    with pytest.raises(CompileError, match="'dnnl' is not available in Kiln"):
        build_external({"f": fn}, "dnnl")
    with pytest.raises(CompileError, match="no external codegen is registered for Compiler='nope'"):
        build_external({"f": fn}, "nope")
    assert {"kiln_c", "ccompiler"} <= set(registered_codegens())


def _random_params(params: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, value in params.items():
        shape = value.shape
        if name.endswith(("_var", "_gamma")):
            out[name] = rng.uniform(0.5, 1.5, shape).astype("float32")
        else:
            out[name] = rng.normal(0, 0.3, shape).astype("float32")
    return out


def _run(mod: tvm.IRModule, params: dict, data: np.ndarray) -> np.ndarray:
    lib = relay.build(mod, target="numpy", params=params)
    gmod = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    gmod.set_input("data", data)
    gmod.run()
    return gmod.get_output(0).numpy()


@pytest.mark.parametrize("annotate", ["kiln_c", "conv_only"])
def test_partitioned_mobilenet_builds_and_matches_the_unpartitioned_build(annotate, rng):
    mod, params = relay.testing.mobilenet.get_workload(batch_size=1, image_shape=(3, 32, 32))
    params = _random_params(params, rng)
    if annotate == "conv_only":  # many regions: every convolution alone, the rest in main
        from kiln.relay.op.contrib import register_op_attr

        register_op_attr("nn.conv2d", "target.ccompiler", True)
        parted = partition(mod, "ccompiler")
    else:
        parted = partition(mod)
    n_regions = len(parted.functions) - 1
    assert n_regions == (1 if annotate == "kiln_c" else 27)
    data = rng.uniform(0, 1, (1, 3, 32, 32)).astype("float32")
    ref = _run(mod, params, data)
    got = _run(parted, params, data)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert np.abs(ref).max() > 0.05  # the comparison is not of near-zero outputs


@pytest.mark.requires_cc
def test_partitioned_c_build_exports_to_one_file(tmp_path, rng):
    """Region constants become params, so regions and main kernels link into one artifact."""
    mod, params = relay.testing.mobilenet.get_workload(batch_size=1, image_shape=(3, 32, 32))
    params = _random_params(params, rng)
    data = rng.uniform(0, 1, (1, 3, 32, 32)).astype("float32")
    lib = relay.build(partition(mod), target="c", params=params)
    assert any(n.func_name.startswith("tvmgen_default_kiln_c_") for n in lib.graph.nodes)
    lib.export_library(tmp_path / "parted.so")

    def run(factory: Any) -> np.ndarray:
        gmod = graph_executor.GraphModule(factory["default"](tvm.cpu()))
        gmod.set_input("data", data)
        gmod.run()
        return gmod.get_output(0).numpy()

    built = run(lib)
    np.testing.assert_array_equal(run(tvm.runtime.load_module(tmp_path / "parted.so")), built)
    np.testing.assert_allclose(built, _run(mod, params, data), rtol=1e-5, atol=1e-5)
