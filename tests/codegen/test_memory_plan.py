"""The storage plan: no two live tensors share a buffer, checked by an independent liveness walk."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.codegen.graph_codegen import graph_codegen
from kiln.codegen.memory_plan import plan_memory
from kiln.relay import testing
from kiln.runtime.graph_json import GraphJSON, parse_graph_json
from kiln.transform import FuseOps, InferType, PassContext


def check_liveness(g: GraphJSON) -> None:
    """Fail if two tensors alive at the same time share a storage id.

    An entry lives from the step of the node that writes it to the last step that reads it
    (inputs from the start, outputs to the end); a ``__nop`` output is the same buffer as its
    input, so the two form one value whose life is the union of theirs.
    """
    n_steps = len(g.nodes)
    entries = g.num_entries
    parent = list(range(entries))

    def find(e: int) -> int:
        while parent[e] != e:
            e = parent[e]
        return e

    start = [0] * entries
    end = [0] * entries
    for nid, node in enumerate(g.nodes):
        outs = [g.entry_id(nid, i) for i in range(node.num_outputs)]
        for e in outs:
            start[e] = -1 if node.is_input else nid
            end[e] = n_steps if node.is_input else nid
        for inp in node.inputs:
            e = g.entry_id(inp)
            end[e] = max(end[e], nid)
        if node.func_name == "__nop":
            parent[find(outs[0])] = find(g.entry_id(node.inputs[0]))
    for e in g.output_entries:
        end[e] = n_steps
    life: dict[int, list[int]] = {}
    for e in range(entries):
        r = find(e)
        lo, hi = life.get(r, [start[e], end[e]])
        life[r] = [min(lo, start[e]), max(hi, end[e])]
    by_storage: dict[int, list[int]] = {}
    for r in life:
        by_storage.setdefault(g.storage_ids[r], []).append(r)
    for sid, roots in by_storage.items():
        for i, a in enumerate(roots):
            for b in roots[i + 1:]:
                (a0, a1), (b0, b1) = life[a], life[b]
                assert a1 < b0 or b1 < a0, (f"storage {sid} holds entries {a} (live {a0}..{a1}) and "
                                            f"{b} (live {b0}..{b1}) at the same time")


def fused_main(body, params, opt_level: int = 2):
    mod = tvm.IRModule.from_expr(relay.Function(params, body))
    with PassContext(opt_level=opt_level):
        return InferType()(FuseOps()(InferType()(mod)))["main"]


def test_checker_accepts_tvms_own_plans(fixtures_dir):
    for name in ("small_o0_unbound", "small_o3", "multi_o0", "multi_o3"):
        check_liveness(parse_graph_json((fixtures_dir / f"{name}.graph.json").read_text()))


def test_checker_rejects_an_overlap(fixtures_dir):
    raw = json.loads((fixtures_dir / "multi_o3.graph.json").read_text())
    raw["attrs"]["storage_id"][1][2] = raw["attrs"]["storage_id"][1][1]  # two split outputs
    with pytest.raises(AssertionError, match="at the same time"):
        check_liveness(parse_graph_json(json.dumps(raw)))


def test_chain_reuses_two_buffers():
    x = relay.var("x", shape=(16,))
    body = x
    for _ in range(4):
        body = relay.exp(body)
    lowered = graph_codegen(fused_main(body, [x], opt_level=0))
    assert list(lowered.graph.storage_ids) == [0, 1, 2, 1, 2]
    check_liveness(lowered.graph)
    report = lowered.memory_plan.report()
    assert report.planned_bytes == 3 * 64 and report.unplanned_bytes == 5 * 64
    assert report.ratio == pytest.approx(0.6)
    assert (report.intermediate_planned_bytes, report.intermediate_unplanned_bytes) == (128, 256)


def test_inputs_and_params_are_never_shared():
    x = relay.var("x", shape=(8,))
    body = relay.exp(relay.add(relay.exp(x), relay.const(np.ones(8, "float32"))))
    lowered = graph_codegen(fused_main(body, [x], opt_level=0))
    g = lowered.graph
    fixed = [g.storage_ids[g.entry_id(n)] for n in g.arg_nodes]
    others = [s for e, s in enumerate(g.storage_ids) if e not in {g.entry_id(n) for n in g.arg_nodes}]
    assert not set(fixed) & set(others)


def test_buffers_only_reused_within_the_match_range():
    x = relay.var("x", shape=(4,))
    small = relay.exp(x)  # 16 bytes, dead after the next op
    big = relay.broadcast_to(relay.exp(small), (64, 4))  # 1 KiB: more than 16x larger
    body = relay.sum(big, axis=0)
    main = fused_main(body, [x], opt_level=0)
    plan = plan_memory(main)
    g = graph_codegen(main).graph
    sizes = {}
    for e, sid in enumerate(g.storage_ids):
        sizes.setdefault(sid, []).append(int(np.prod(g.shapes[e])) * 4)
    for sid, entry_sizes in sizes.items():
        assert max(entry_sizes) <= 16 * max(min(entry_sizes), 1) or len(entry_sizes) == 1
        assert plan.storage_bytes[sid] == max(entry_sizes)
    check_liveness(g)


def test_nop_reshapes_alias_their_input():
    x = relay.var("x", shape=(2, 3))
    body = relay.exp(relay.reshape(relay.exp(x), (3, 2)))
    g = graph_codegen(fused_main(body, [x], opt_level=0)).graph
    nop = next(i for i, n in enumerate(g.nodes) if n.func_name == "__nop")
    assert g.storage_ids[g.entry_id(nop)] == g.storage_ids[g.entry_id(g.nodes[nop].inputs[0])]
    check_liveness(g)


# --- property: random DAGs with shared values, reshapes and tuple outputs ----------------------

_KINDS = ["unary", "binary", "reshape", "reduce", "split"]


def _random_graph(choices: list[tuple[str, int, int]]):
    x = relay.var("x", shape=(4, 6))
    values = [x]
    for kind, i, j in choices:
        a, b = values[i % len(values)], values[j % len(values)]
        if kind == "unary":
            values.append(relay.exp(relay.tanh(a)))
        elif kind == "binary":
            values.append(relay.add(a, b))
        elif kind == "reshape":
            values.append(relay.reshape(relay.reshape(a, (24,)), (4, 6)))
        elif kind == "reduce":
            values.append(relay.add(a, relay.sum(b, axis=1, keepdims=True)))
        else:
            parts = relay.split(a, 2, axis=1)
            values.append(relay.concatenate([parts[1], parts[0]], axis=1))
    outputs = values[-1:] if len(values) < 4 else [values[-1], values[len(values) // 2]]
    return relay.Tuple(outputs) if len(outputs) > 1 else outputs[0], x


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(0, 30), st.integers(0, 30)),
                min_size=1, max_size=14), st.integers(0, 3))
def test_random_graphs_never_share_live_buffers(choices, opt_level):
    body, x = _random_graph(choices)
    lowered = graph_codegen(fused_main(body, [x], opt_level))
    check_liveness(lowered.graph)
    report = lowered.memory_plan.report()
    assert report.planned_bytes <= report.unplanned_bytes


@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_workload_plans_are_valid_and_report_savings(name, capsys):
    mod, params = getattr(testing, name).get_workload(batch_size=1)
    with PassContext(opt_level=3):
        optimized, _ = relay.optimize(mod, target="numpy", params=params)
    lowered = graph_codegen(optimized["main"])
    check_liveness(lowered.graph)
    report = lowered.memory_plan.report()
    with capsys.disabled():
        print(f"\n{name}: {report}")
    assert report.intermediate_planned_bytes < report.intermediate_unplanned_bytes / 2
    weights = sum(a.nbytes for a in lowered.params.values())
    assert report.planned_bytes - report.intermediate_planned_bytes >= weights
