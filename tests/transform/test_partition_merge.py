"""MergeCompilerRegions: maximal regions, never a cycle through another target.

The two hand-annotated graphs and their expected results are the cases of TVM's
``test_pass_merge_compiler_regions.py`` (the diamond and the RFC example), rebuilt here.
"""

from __future__ import annotations

import numpy as np
from _pass_helpers import assert_same_values, module

import kiln as tvm
from kiln import relay
from kiln.ir import assert_structural_equal, structural_hash
from kiln.relay.op.contrib import register_op_attr
from kiln.transform import AnnotateTarget, InferType, MergeCompilerRegions, PartitionGraph
from kiln.transform.annotated_regions import region_set
from kiln.transform.annotation import compiler_begin as cb
from kiln.transform.annotation import compiler_end as ce

register_op_attr("abs", "target.tm_cycle", True)
register_op_attr("add", "target.tm_cycle", True)


def typed(body: relay.Expr, params: list[relay.Var]) -> tvm.IRModule:
    return InferType()(tvm.IRModule.from_expr(relay.Function(params, body)))


def test_diamond_is_not_merged_through_the_unsupported_branch():
    # abs -> relu (test) and abs -> tanh (default) meet in add (test): abs and relu merge, add
    # cannot join them since it consumes tanh, which consumes abs.
    data = relay.var("data", shape=(10, 10))
    o1 = relay.abs(cb(data, "test"))
    e1, e2 = ce(o1, "test"), ce(o1, "test")
    o2 = relay.nn.relu(cb(e1, "test"))
    e3 = ce(o2, "test")
    x = relay.tanh(cb(e2, "default"))
    e4 = ce(x, "default")
    o3 = relay.add(cb(e3, "test"), cb(e4, "test"))
    before = typed(ce(o3, "test"), [data])

    d = relay.var("data", shape=(10, 10))
    a = relay.abs(cb(d, "test"))
    r = relay.nn.relu(a)
    t = ce(relay.tanh(cb(ce(a, "test"), "default")), "default")
    out = ce(relay.add(cb(ce(r, "test"), "test"), cb(t, "test")), "test")
    expected = typed(out, [d])

    got = MergeCompilerRegions()(before)
    assert_structural_equal(got, expected, map_free_vars=True)


def test_rfc_example_graph():
    ins = [relay.var(f"in_{i}", shape=(10, 10)) for i in range(1, 11)]
    i1, i2, i3, i4, i5, i6, i7, i8, i9, i10 = ins
    n0 = relay.add(cb(i1, "test"), cb(i2, "test"))
    n1 = relay.add(cb(i3, "test"), cb(i4, "test"))
    n2 = relay.add(cb(ce(n0, "test"), "test"), cb(ce(n1, "test"), "test"))
    n3 = relay.subtract(cb(i5, "default"), cb(i6, "default"))
    n4 = relay.subtract(cb(i7, "default"), cb(ce(n3, "default"), "default"))
    n5 = relay.add(cb(ce(n2, "test"), "test"), cb(ce(n4, "default"), "test"))
    end3, end4 = ce(n5, "test"), ce(n5, "test")
    n6 = relay.subtract(cb(i8, "default"), cb(end3, "default"))
    n7 = relay.add(cb(i9, "test"), cb(end4, "test"))
    n8 = relay.add(cb(ce(n6, "default"), "test"), cb(ce(n7, "test"), "test"))
    n9 = relay.add(cb(i10, "test"), cb(ce(n8, "test"), "test"))
    before = typed(ce(n9, "test"), ins)

    e = [relay.var(f"in_{i}", shape=(10, 10)) for i in range(1, 11)]
    m2 = relay.add(relay.add(cb(e[0], "test"), cb(e[1], "test")),
                   relay.add(cb(e[2], "test"), cb(e[3], "test")))
    m4 = relay.subtract(cb(e[6], "default"), relay.subtract(cb(e[4], "default"), cb(e[5], "default")))
    m5 = relay.add(m2, cb(ce(m4, "default"), "test"))
    m6 = relay.subtract(cb(e[7], "default"), cb(ce(m5, "test"), "default"))
    m7 = relay.add(cb(e[8], "test"), m5)
    m8 = relay.add(cb(ce(m6, "default"), "test"), cb(ce(m7, "test"), "test"))
    m9 = relay.add(cb(e[9], "test"), m8)
    expected = typed(ce(m9, "test"), e)

    got = MergeCompilerRegions()(before)
    assert_structural_equal(got, expected, map_free_vars=True)


def test_cycle_through_unsupported_op_splits_the_region():
    # a = abs(x); b = tanh(a); c = add(a, b): abs and add are supported, tanh is not. One region
    # {abs, add} would both feed tanh and consume it, so abs and add stay in separate regions.
    x = relay.var("x", shape=(4, 4))
    a = relay.abs(x)
    before = module(relay.add(a, relay.tanh(a)), [x])
    merged = MergeCompilerRegions()(AnnotateTarget(["tm_cycle"])(before))
    targets = sorted(r.target for r in region_set(merged["main"]))
    assert targets == ["default", "tm_cycle", "tm_cycle"]
    parted = PartitionGraph()(merged)
    names = sorted(g.name_hint for g in parted.get_global_vars())
    assert names == ["main", "tvmgen_default_tm_cycle_main_0", "tvmgen_default_tm_cycle_main_1"]
    rng = np.random.default_rng(0)
    assert_same_values(before, parted, {"x": rng.normal(size=(4, 4)).astype("float32")})


def test_chain_of_supported_ops_becomes_one_region():
    x = relay.var("x", shape=(4, 4))
    y = relay.var("y", shape=(4, 4))
    before = module(relay.add(relay.abs(relay.add(x, y)), y), [x, y])
    merged = MergeCompilerRegions()(AnnotateTarget(["tm_cycle"])(before))
    regions = list(region_set(merged["main"]))
    assert [r.target for r in regions] == ["tm_cycle"]
    assert len(regions[0].ins) == 3 and len(regions[0].outs) == 1
    text = merged.astext()
    assert text.count("compiler_begin") == 3 and text.count("compiler_end") == 1


def test_input_module_is_not_modified():
    x = relay.var("x", shape=(4, 4))
    a = relay.abs(x)
    mod = AnnotateTarget(["tm_cycle"])(module(relay.add(a, relay.tanh(a)), [x]))
    before, text = structural_hash(mod), mod.astext()
    MergeCompilerRegions()(mod)
    assert structural_hash(mod) == before and mod.astext() == text
