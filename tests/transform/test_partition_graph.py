"""PartitionGraph: regions lifted into ``Compiler`` functions, named and shaped as TVM does.

Expected modules follow the cases of TVM's ``test_pass_partition_graph.py`` (names such as
``tvmgen_default_<target>_main_<region id>``, parameters ``%<target>_<id>_i<k>``, attributes
``Inline=1, Compiler, global_symbol, Primitive=1``); the value checks use the reference
interpreter on the module before partitioning.
"""

from __future__ import annotations

import numpy as np
from _pass_helpers import assert_same_values, module
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.ir import assert_structural_equal, structural_hash
from kiln.ir.expr import Call, Expr, Op
from kiln.ir.visitor import ExprMutator, post_order
from kiln.relay.op.contrib import register_op_attr
from kiln.transform import (
    AnnotateTarget,
    InferType,
    MergeCompilerRegions,
    PartitionGraph,
    bind_params_by_name,
)
from kiln.transform.annotation import compiler_begin as cb
from kiln.transform.annotation import compiler_end as ce

register_op_attr("abs", "target.tp_dup", True)


class AllowedList(ExprMutator):
    """Wraps each call of the listed ops in its own region (TVM's AllowedListAnnotator)."""

    def __init__(self, ops: list[str], compiler: str):
        self.ops = ops
        self.compiler = compiler

    def visit_call(self, call: Call) -> Expr:
        if isinstance(call.op, Op) and call.op.name in self.ops:
            args = [cb(a, self.compiler) for a in call.args]
            return ce(Call(call.op, args, call.attrs), self.compiler)
        return call


def annotate(mod: tvm.IRModule, ops: list[str], compiler: str) -> tvm.IRModule:
    out = tvm.IRModule()
    for gv, fn in mod.items():
        out[gv] = AllowedList(ops, compiler).visit(fn)
    return InferType()(out)


def external(params: list[relay.Var], body: relay.Expr, compiler: str,
             symbol: str) -> relay.Function:
    attrs = {"Inline": 1, "Compiler": compiler, "global_symbol": symbol, "Primitive": 1}
    return relay.Function(params, body, attrs=attrs)


def test_multiple_outputs_of_one_region():
    shapes = {"data": (1, 3, 8, 8), "weight": (4, 3, 3, 3), "bn_gamma": (4,), "bn_beta": (4,),
              "bn_mean": (4,), "bn_var": (4,)}
    v = {k: relay.var(k, shape=s) for k, s in shapes.items()}
    begins = [cb(v[k], "tp_t") for k in shapes]
    conv = relay.nn.conv2d(begins[0], begins[1], kernel_size=(3, 3), channels=4, padding=(1, 1))
    bn = relay.nn.batch_norm(conv, *begins[2:])
    out = relay.Tuple([ce(relay.nn.relu(bn[0]), "tp_t"), relay.abs(ce(bn[1], "tp_t")),
                       relay.abs(ce(bn[2], "tp_t"))])
    before = module(out, list(v.values()))

    p = [relay.var(f"tp_t_0_i{i}", shape=s) for i, s in enumerate(shapes.values())]
    econv = relay.nn.conv2d(p[0], p[1], kernel_size=(3, 3), channels=4, padding=(1, 1))
    ebn = relay.nn.batch_norm(econv, *p[2:])
    gv = relay.GlobalVar("tvmgen_default_tp_t_main_0")
    expected = tvm.IRModule()
    expected[gv] = external(p, relay.Tuple([relay.nn.relu(ebn[0]), ebn[1], ebn[2]]), "tp_t", gv.name_hint)
    m = {k: relay.var(k, shape=s) for k, s in shapes.items()}
    call = relay.Call(gv, list(m.values()))
    expected["main"] = relay.Function(list(m.values()), relay.Tuple(
        [relay.TupleGetItem(call, 0), relay.abs(relay.TupleGetItem(call, 1)),
         relay.abs(relay.TupleGetItem(call, 2))]))
    expected = InferType()(expected)

    got = PartitionGraph()(before)
    assert_structural_equal(got, expected, map_free_vars=True)
    assert "%tp_t_0_i5: Tensor[(4), float32]" in got.astext()


def test_mixed_single_and_multiple_outputs():
    data = relay.var("data", shape=(10, 10))
    o1 = relay.abs(cb(data, "tp_t"))
    o2 = relay.nn.relu(o1)
    x = relay.tanh(ce(o1, "tp_t"))
    o3 = relay.add(cb(ce(o2, "tp_t"), "tp_t"), cb(x, "tp_t"))
    before = module(ce(o3, "tp_t"), [data])

    i0 = relay.var("tp_t_0_i0", shape=(10, 10))
    a = relay.abs(i0)
    g0 = relay.GlobalVar("tvmgen_default_tp_t_main_0")
    j0, j1 = relay.var("tp_t_1_i0", shape=(10, 10)), relay.var("tp_t_1_i1", shape=(10, 10))
    g1 = relay.GlobalVar("tvmgen_default_tp_t_main_1")
    expected = tvm.IRModule()
    expected[g0] = external([i0], relay.Tuple([relay.nn.relu(a), a]), "tp_t", g0.name_hint)
    expected[g1] = external([j0, j1], relay.add(j0, j1), "tp_t", g1.name_hint)
    d = relay.var("data", shape=(10, 10))
    first = relay.Call(g0, [d])
    expected["main"] = relay.Function([d], relay.Call(g1, [relay.TupleGetItem(first, 0),
                                                           relay.tanh(relay.TupleGetItem(first, 1))]))
    expected = InferType()(expected)

    got = PartitionGraph()(before)
    assert_structural_equal(got, expected, map_free_vars=True)


def test_duplicate_outputs_become_one():
    data = relay.var("data", shape=(10, 10))
    x = relay.abs(data)
    before = module(relay.Tuple([relay.nn.relu(x), relay.tanh(x), relay.log(x)]), [data])
    got = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget("tp_dup")(before)))

    i0 = relay.var("tp_dup_0_i0", shape=(10, 10))
    gv = relay.GlobalVar("tvmgen_default_tp_dup_main_0")
    expected = tvm.IRModule()
    expected[gv] = external([i0], relay.abs(i0), "tp_dup", gv.name_hint)
    d = relay.var("data", shape=(10, 10))
    out = relay.Call(gv, [d])
    expected["main"] = relay.Function([d], relay.Tuple([relay.nn.relu(out), relay.tanh(out),
                                                         relay.log(out)]))
    assert_structural_equal(got, InferType()(expected), map_free_vars=True)


def test_printed_like_tvm():
    data = relay.var("data", shape=(10, 10))
    before = module(relay.nn.relu(relay.abs(data)), [data])
    text = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget("tp_dup")(before))).astext()
    assert ('def @tvmgen_default_tp_dup_main_0(%tp_dup_0_i0: Tensor[(10, 10), float32] '
            '/* ty=Tensor[(10, 10), float32] */, Inline=1, Compiler="tp_dup", '
            'global_symbol="tvmgen_default_tp_dup_main_0", Primitive=1) '
            '-> Tensor[(10, 10), float32] {\n  abs(%tp_dup_0_i0) /* ty=Tensor[(10, 10), float32] */\n}'
            ) in text
    assert "  %0 = @tvmgen_default_tp_dup_main_0(%data) /* ty=Tensor[(10, 10), float32] */;" in text


def test_constants_are_bound_into_the_region():
    ones = np.ones((8, 8), dtype="float32")
    x = relay.var("x", shape=(8, 8))
    y = relay.var("y", shape=(8, 8))
    f = bind_params_by_name(relay.Function([x, y], relay.log(x + y)), {"x": ones})
    mod = annotate(InferType()(tvm.IRModule.from_expr(f)), ["add"], "ccompiler")
    got = PartitionGraph()(mod)

    y0 = relay.var("y0", shape=(8, 8))
    gv = relay.GlobalVar("tvmgen_default_ccompiler_main_0")
    expected = tvm.IRModule()
    expected[gv] = external([y0], relay.const(ones) + y0, "ccompiler", gv.name_hint)
    ym = relay.var("y", shape=(8, 8))
    expected["main"] = relay.Function([ym], relay.log(relay.Call(gv, [ym])))
    assert_structural_equal(got, InferType()(expected), map_free_vars=True)

    unbound = PartitionGraph(bind_constants=False)(mod)
    assert len(unbound[gv.name_hint].params) == 2


def test_region_ids_follow_tvm_and_functions_are_named_per_function():
    shapes = {"data": (1, 3, 8, 8), "weight": (4, 3, 3, 3), "bn_gamma": (4,), "bn_beta": (4,),
              "bn_mean": (4,), "bn_var": (4,)}
    v = {k: relay.var(k, shape=s) for k, s in shapes.items()}
    conv = relay.nn.conv2d(v["data"], v["weight"], kernel_size=(3, 3), channels=4, padding=(1, 1))
    bn = relay.nn.batch_norm(conv, v["bn_gamma"], v["bn_beta"], v["bn_mean"], v["bn_var"])
    main = relay.Function(list(v.values()), bn.astuple())
    a = relay.var("a", shape=(16, 16))
    b = relay.var("b", shape=(16, 16))
    mod = tvm.IRModule()
    mod["main"] = main
    mod["subfunction"] = relay.Function([a, b], relay.exp(a + b))
    mod = annotate(InferType()(mod), ["nn.batch_norm", "nn.conv2d", "add"], "test_compiler")
    got = PartitionGraph()(mod)
    # conv's two inputs open regions 0 and 1 (merged into 0); batch_norm's five open 2..6
    assert sorted(g.name_hint for g in got.get_global_vars()) == [
        "main", "subfunction", "tvmgen_default_test_compiler_main_0",
        "tvmgen_default_test_compiler_main_2", "tvmgen_default_test_compiler_subfunction_0"]
    bn_fn = got["tvmgen_default_test_compiler_main_2"]
    assert [p.name_hint for p in bn_fn.params] == [f"test_compiler_2_i{i}" for i in range(5)]
    assert dict(bn_fn.attrs) == {"Inline": 1, "Compiler": "test_compiler",
                                 "global_symbol": "tvmgen_default_test_compiler_main_2",
                                 "Primitive": 1}


def test_names_are_sanitized_and_use_the_module_name():
    x = relay.var("x", shape=(8, 8))
    y = relay.var("y", shape=(8, 8))
    mod = annotate(module(relay.log(x + y), [x, y]), ["add"], "unsanitary-name++")
    got = PartitionGraph()(mod)
    assert "tvmgen_default_unsanitary_name___main_0" in got
    assert got["tvmgen_default_unsanitary_name___main_0"].attrs["Compiler"] == "unsanitary-name++"
    named = PartitionGraph(mod_name="mymod")(mod)
    assert "tvmgen_mymod_unsanitary_name___main_0" in named


def test_multiple_use_of_an_output():
    def get_mod() -> tvm.IRModule:
        x, y, z = (relay.var(n, shape=(8, 8)) for n in "xyz")
        add = x + y
        return module(relay.log(add) * (add - z), [x, y, z])

    same = PartitionGraph()(MergeCompilerRegions()(
        annotate(get_mod(), ["subtract", "log", "multiply"], "ccompiler")))
    x0, y0 = relay.var("x0", shape=(8, 8)), relay.var("y0", shape=(8, 8))
    gv = relay.GlobalVar("tvmgen_default_ccompiler_main_0")
    expected = tvm.IRModule()
    expected[gv] = external([x0, y0], relay.log(x0) * (x0 - y0), "ccompiler", gv.name_hint)
    x, y, z = (relay.var(n, shape=(8, 8)) for n in "xyz")
    expected["main"] = relay.Function([x, y, z], relay.Call(gv, [x + y, z]))
    assert_structural_equal(same, InferType()(expected), map_free_vars=True)

    different = PartitionGraph()(MergeCompilerRegions()(
        annotate(get_mod(), ["subtract", "log"], "ccompiler")))
    assert sorted(g.name_hint for g in different.get_global_vars()) == [
        "main", "tvmgen_default_ccompiler_main_0", "tvmgen_default_ccompiler_main_1"]
    rng = np.random.default_rng(1)
    inputs = {n: rng.uniform(1, 2, (8, 8)).astype("float32") for n in "xyz"}
    assert_same_values(get_mod(), different, inputs)
    assert_same_values(get_mod(), same, inputs)


def test_input_module_is_not_modified():
    data = relay.var("data", shape=(10, 10))
    mod = MergeCompilerRegions()(AnnotateTarget("tp_dup")(
        module(relay.nn.relu(relay.abs(data)), [data])))
    before, text = structural_hash(mod), mod.astext()
    PartitionGraph()(mod)
    assert structural_hash(mod) == before and mod.astext() == text


def test_module_without_annotations_is_unchanged():
    x = relay.var("x", shape=(3,))
    mod = module(relay.exp(x), [x])
    assert_structural_equal(PartitionGraph()(mod), mod)


_UNARY = ["abs", "exp", "tanh", "negative"]
_BINARY = ["add", "multiply", "subtract"]
_prop_supported: set[str] = set()  # which of them target tp_prop takes, set per example
for _name in _UNARY + _BINARY:
    register_op_attr(_name, "target.tp_prop", lambda call: call.op.name in _prop_supported)


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[list[tuple[str, tuple[int, ...]]], set[str]]:
    """A random DAG as (op, operand indices) steps, and which ops the target takes."""
    steps = []
    for i in range(draw(st.integers(2, 9))):
        available = i + 2  # two inputs, then every earlier step
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(_UNARY)), (draw(st.integers(0, available - 1)),)))
        else:
            steps.append((draw(st.sampled_from(_BINARY)),
                          (draw(st.integers(0, available - 1)), draw(st.integers(0, available - 1)))))
    supported = set(draw(st.lists(st.sampled_from(_UNARY + _BINARY), max_size=5)))
    return steps, supported


@settings(max_examples=40, deadline=None)
@given(random_graphs())
def test_partitioning_random_graphs_keeps_their_meaning(case):
    steps, supported = case
    _prop_supported.clear()
    _prop_supported.update(supported)
    values: list[relay.Expr] = [relay.var("a", shape=(3, 2)), relay.var("b", shape=(3, 2))]
    for op, operands in steps:
        values.append(getattr(relay, op)(*(values[k] for k in operands)))
    used = {id(v) for op, operands in steps for v in (values[k] for k in operands)}
    outputs = [v for v in values[2:] if id(v) not in used]
    before = module(relay.Tuple(outputs), values[:2])
    # every pass is verified (well-formed, type-checks: no cycles) by the test configuration
    after = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget("tp_prop")(before)))
    for gv, fn in after.items():
        if gv.name_hint != "main":
            assert fn.attrs["Compiler"] == "tp_prop"
            assert all(n.op.name in supported for n in _calls(fn))
    rng = np.random.default_rng(0)
    inputs = {n: rng.uniform(0.5, 1.0, (3, 2)).astype("float32") for n in "ab"}
    assert_same_values(before, after, inputs)


def _calls(fn: relay.Function) -> list[Call]:
    return [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def test_registered_external_optimize_runs_on_each_partition():
    # TVM's test_extern_opt: relay.ext.<compiler>.optimize folds the bound constants
    from kiln.runtime.func_registry import remove_func
    from kiln.transform import FoldConstant, InferType, PartitionGraph, bind_params_by_name

    seen = []

    def optimize(mod):
        seen.append(mod)
        return FoldConstant()(mod)

    tvm.register_func("relay.ext.kiln_test_opt.optimize", optimize)
    try:
        x, y0, y1 = (relay.var(n, shape=(2, 2)) for n in ("x", "y0", "y1"))
        end = ce(relay.add(cb(y0, "kiln_test_opt"), cb(y1, "kiln_test_opt")), "kiln_test_opt")
        c = np.ones((2, 2), "float32")
        f = bind_params_by_name(relay.Function([x, y0, y1], end * x), {"y0": c, "y1": c})
        mod = PartitionGraph()(InferType()(tvm.IRModule.from_expr(f)))
    finally:
        remove_func("relay.ext.kiln_test_opt.optimize")
    fn = mod["tvmgen_default_kiln_test_opt_main_0"]
    assert len(seen) == 1 and isinstance(fn.body, relay.Constant)
    np.testing.assert_array_equal(fn.body.value, np.full((2, 2), 2.0, "float32"))
    assert fn.attrs["Compiler"] == "kiln_test_opt"
    assert tvm.get_global_func("relay.ext.kiln_test_opt.optimize", allow_missing=True) is None
