"""``ComputeDAG``: the operations of a tensor computation in topological order (Ansor's task IR).

A DAG is built from its input and output tensors. It prints itself exactly as TVM's
``ComputeDAG::PrintDAG`` does (the print's MD5 is the workload key of tasks extracted from
models), counts FLOPs like Ansor's ``FlopEstimator``, and is the starting point of schedules:
:attr:`ComputeDAG.init_state` is the loop state before any step, and :meth:`apply_steps`
replays a step list onto a fresh :class:`~kiln.te.schedule.Schedule`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kiln.errors import KilnTypeError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, legacy_repr
from kiln.te.schedule import Schedule, create_schedule, post_dfs_order
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

if TYPE_CHECKING:
    from kiln.te.loop_state import State
    from kiln.te.steps import Step

__all__ = ["ComputeDAG", "topo_sort_ops"]


def topo_sort_ops(tensors: Sequence[Tensor]) -> list[Operation]:
    """Operations reachable from ``tensors`` in Ansor's topological order (``TopoSortOps``)."""
    degree: dict[int, int] = {}
    consumers: dict[int, list[Operation]] = {}
    priority: dict[int, int] = {}
    by_id: dict[int, Operation] = {}
    stack = [t.op for t in tensors]
    count = 0
    while stack:
        op = stack.pop()
        if id(op) in by_id:
            continue
        by_id[id(op)] = op
        priority[id(op)] = count
        count += 1
        inputs = op.input_tensors()
        degree[id(op)] = len(inputs)
        for t in inputs:
            consumers.setdefault(id(t.op), []).append(op)
            stack.append(t.op)
    # the queue pops the highest priority first
    queue = [(-priority[k], k) for k, d in degree.items() if d == 0]
    heapq.heapify(queue)
    order: list[Operation] = []
    while queue:
        _, key = heapq.heappop(queue)
        op = by_id[key]
        order.append(op)
        for dst in consumers.get(key, []):
            degree[id(dst)] -= 1
            if degree[id(dst)] == 0:
                heapq.heappush(queue, (-priority[id(dst)], id(dst)))
    return order


class ComputeDAG:
    """The computation defined by ``tensors`` (inputs and outputs), with Ansor's views of it.

    Parameters
    ----------
    tensors : list of Tensor
        The input placeholders and the output tensors, in the order kernels take them.
    """

    def __init__(self, tensors: Sequence[Tensor]):
        self.tensors = list(tensors)
        if not self.tensors:
            raise KilnTypeError("ComputeDAG needs at least one tensor")
        topo = topo_sort_ops(self.tensors)
        read: set[int] = set()
        for op in topo:
            read.update(id(t.op) for t in op.input_tensors())
        out_ops = [op for op in topo if id(op) not in read]
        self._schedule_outputs = out_ops
        self.ops: list[Operation] = post_dfs_order(out_ops)
        _check_names(self.ops)

    @staticmethod
    def from_schedule(sch: Schedule) -> ComputeDAG:
        """The DAG of a rewritten schedule (after cache_read / cache_write / rfactor)."""
        tensors: list[Tensor] = []
        for stage in sch.stages:
            if isinstance(stage.op, PlaceholderOp) or stage.is_output:
                tensors += [stage.op.output(i) for i in range(stage.op.num_outputs)]
        dag = ComputeDAG.__new__(ComputeDAG)
        dag.tensors = tensors
        dag._schedule_outputs = list(sch.outputs)
        dag.ops = [s.op for s in sch.stages]
        return dag

    # --- printing ----------------------------------------------------------------------------
    def print_dag(self, simple_mode: bool = False) -> str:
        """TVM's ``PrintDAG``: one line per placeholder and per compute output.

        ``simple_mode`` omits placeholder shapes and prints only the intrinsic of a body that is
        a bare call; the workload key hashes that form.
        """
        lines: list[str] = []
        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                shape = "" if simple_mode else "[" + ", ".join(str(d) for d in op.shape) + "]"
                lines.append(f"{op.name} = PLACEHOLDER {shape}")
                continue
            assert isinstance(op, ComputeOp)
            axes = ", ".join(iv.var.name for iv in op.axis)
            for k, body in enumerate(op.body):
                head = f"{op.name}({axes})" + (f".v{k}" if len(op.body) > 1 else "")
                lines.append(head + _body_text(body, k, simple_mode))
        return "".join(line + "\n" for line in lines)

    def __str__(self) -> str:
        width = 256
        out = []
        for line in self.print_dag().split("\n"):
            if len(line) > width:
                line = line[:width // 2] + " ..(OMITTED).. " + line[-width // 2:]
            out.append(line)
        return "\n".join(out)

    def hash_key(self) -> str:
        """MD5 of the simple-mode print."""
        return hashlib.md5(self.print_dag(simple_mode=True).encode("utf-8")).hexdigest()

    def workload_key(self) -> str:
        """``'["<md5 of the print>", [shape], ...]'`` as TVM writes it for extracted tasks."""
        shapes: list[Any] = [list(t.shape) for t in self.tensors]
        return json.dumps([self.hash_key(), *shapes])

    # --- analysis ----------------------------------------------------------------------------
    @property
    def flop_ct(self) -> float:
        """Estimated floating-point operations (Ansor's ``FlopEstimator``); -1 if unknown."""
        return estimate_flop(self.ops)

    @property
    def init_state(self) -> State:
        """The loop state before any transformation step."""
        from kiln.te.loop_state import State

        return State.from_ops(self.ops, self)

    # --- schedules ---------------------------------------------------------------------------
    def apply_steps(self, steps: Sequence[Step]) -> Schedule:
        """A fresh schedule of this DAG with ``steps`` replayed on it."""
        sch = create_schedule(self._schedule_outputs)
        for step in steps:
            step.apply_to_schedule(sch, steps)
        return sch

    def replay_and_get_dag(self, steps: Sequence[Step]) -> ComputeDAG:
        """The DAG after the stage-adding ``steps`` (TVM's ``ReplayAndGetDAG``)."""
        return ComputeDAG.from_schedule(self.apply_steps(steps))

    def apply_steps_from_state(self, state: State) -> tuple[Schedule, list[Tensor]]:
        """The schedule a state's steps describe, and the kernel's tensors (TVM's API)."""
        return self.apply_steps(state.transform_steps), list(self.tensors)

    def infer_bound(self, state: State) -> State:
        """A copy of ``state`` whose iterator ranges are filled in by bound inference."""
        from kiln.te.bound import infer_bound_state

        return infer_bound_state(self, state)


def _check_names(ops: Sequence[Operation]) -> None:
    for op in ops:
        if isinstance(op, ComputeOp):
            names = [iv.var.name for iv in (*op.axis, *op.reduce_axis)]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise KilnTypeError(f"compute {op.name}: duplicated iterator names {sorted(dup)}; "
                                    "use different names for different iterators")


def _body_text(body: PrimExpr, k: int, simple_mode: bool) -> str:
    if isinstance(body, E.Reduce):
        combiner = body.combiner.result[k]
        if isinstance(combiner, E.Binary) and combiner.kind in ("add", "max", "min"):
            op = {"add": "+=", "max": "max=", "min": "min="}[combiner.kind]
            return f" {op} {legacy_repr(body.source[0])}"
        if isinstance(combiner, E.Select):
            return (f" select({legacy_repr(combiner.condition)}, "
                    f"{legacy_repr(combiner.true_value)}, {legacy_repr(combiner.false_value)})= "
                    f"({legacy_repr(body.source[0])},{legacy_repr(body.source[1])})")
        return f"reduce{legacy_repr(combiner)}"
    if simple_mode and isinstance(body, E.Call):
        return f" = Op(tir.{body.name})"
    return f" = {legacy_repr(body)}"


# --- FLOP estimate -------------------------------------------------------------------------------

def _type_code(dtype: str) -> int:
    if E.is_float_dtype(dtype):
        return 2
    if E.is_int_dtype(dtype):
        return 0
    return 1  # unsigned and bool


class _FlopCounter:
    def __init__(self, code: int):
        self.code = code
        self.failed = False

    def count(self, e: PrimExpr) -> float:
        if isinstance(e, (E.IntImm, E.FloatImm, E.TensorLoad, E.Var)):
            return 0.0
        if isinstance(e, E.Cast):
            return self.count(e.value)
        if isinstance(e, E.Select):
            return self.count(e.condition) + max(self.count(e.true_value),
                                                 self.count(e.false_value))
        if isinstance(e, (E.Binary, E.Compare, E.And, E.Or)):
            base = 0.0 if (_type_code(e.a.dtype) != self.code
                           and _type_code(e.b.dtype) != self.code) else 1.0
            return base + self.count(e.a) + self.count(e.b)
        if isinstance(e, E.Not):
            return (1.0 if _type_code(e.dtype) == self.code else 0.0) + self.count(e.a)
        if isinstance(e, E.Call):
            return float(sum(self.count(a) for a in e.args))
        if isinstance(e, E.Reduce):
            n_iter = 1
            for iv in e.axis:
                if iv.dom is None or not isinstance(iv.dom.extent, E.IntImm):
                    self.failed = True
                    return -1.0
                n_iter *= iv.dom.extent.value
            body = sum(self.count(r) + self.count(s)
                       for r, s in zip(e.combiner.result, e.source))
            return n_iter * body
        self.failed = True
        return -1.0


def estimate_flop(ops: Sequence[Operation]) -> float:
    """Ansor's FLOP estimate of a list of operations (a ``"FLOP"`` attr overrides an op's)."""
    total = 0.0
    for op in ops:
        if not isinstance(op, ComputeOp):
            continue
        if "FLOP" in op.attrs:
            total += int(op.attrs["FLOP"])
            continue
        n_elem = 1
        for d in op.shape:
            n_elem *= d
        counter = _FlopCounter(_type_code(op.output_dtype(0)))
        per_elem = sum(counter.count(b) for b in op.body)
        if counter.failed:
            return -1.0
        total += n_elem * per_elem
    return total
