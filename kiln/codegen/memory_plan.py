"""Static memory planning for the graph executor (TVM's ``GraphPlanMemory``).

Every tensor the graph produces (an *entry*: one output of a node) gets a storage id; entries whose
lifetimes do not overlap share one, and a storage's size is the largest entry it ever holds. The
plan walks the fused ``main`` in execution order (post-order, arguments left to right), exactly as
TVM's planner does, so Kiln reproduces TVM's storage ids:

- graph inputs and constants (the params) get their own storage, never released;
- a kernel's outputs request a free storage: first the smallest free one at least as large, then
  the largest smaller one, within a factor of 16 of the size (``match_range``), else a new id;
- after a kernel runs, each argument whose last reader it was is released (outputs nobody reads
  are released at once); graph outputs are never released;
- a reshape-only fused function (a graph ``__nop``) aliases its input's storage and extends its
  lifetime.

Outputs may take over a buffer an intermediate no longer needs, as in TVM; no two tensors that are
alive at the same time share a storage (aliases of one buffer excepted).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order

__all__ = ["MATCH_RANGE", "MemoryPlan", "MemoryReport", "flat_tensor_types", "plan_memory"]

# TVM's TokenAllocator match range: a request reuses a free block within this factor of its size.
MATCH_RANGE = 16


def flat_tensor_types(ty: Type) -> list[TensorType]:
    """The tensors of a (possibly nested tuple) type, in order."""
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in flat_tensor_types(f)]
    if isinstance(ty, TensorType):
        return [ty]
    raise KilnError(f"the graph executor cannot hold a value of type {ty}")


@dataclass(eq=False)
class _Token:
    """One tensor to store, then (after allocation) the storage it lives in."""

    ttype: TensorType
    ref_counter: int = 0
    storage_id: int = -1
    max_bytes: int = 0

    @property
    def nbytes(self) -> int:
        return self.ttype.nbytes


@dataclass(frozen=True)
class MemoryReport:
    """How much memory the plan saves.

    Attributes
    ----------
    planned_bytes : int
        Sum of the storages' sizes (what the executor allocates).
    unplanned_bytes : int
        Sum of all entries' sizes (one buffer per tensor).
    num_storage : int
        Number of storage ids.
    num_entries : int
        Number of tensors (entries).
    intermediate_planned_bytes : int
        The part of ``planned_bytes`` for tensors computed by kernels (not inputs or params).
    intermediate_unplanned_bytes : int
        The part of ``unplanned_bytes`` for tensors computed by kernels.
    """

    planned_bytes: int
    unplanned_bytes: int
    num_storage: int
    num_entries: int
    intermediate_planned_bytes: int = 0
    intermediate_unplanned_bytes: int = 0

    @property
    def ratio(self) -> float:
        """``planned / unplanned`` (1.0 means no sharing)."""
        return self.planned_bytes / self.unplanned_bytes if self.unplanned_bytes else 1.0

    @property
    def intermediate_ratio(self) -> float:
        """``planned / unplanned`` for the tensors kernels compute."""
        if not self.intermediate_unplanned_bytes:
            return 1.0
        return self.intermediate_planned_bytes / self.intermediate_unplanned_bytes

    def __str__(self) -> str:
        return (f"memory plan: {self.num_entries} tensors in {self.num_storage} buffers, "
                f"{self.planned_bytes} bytes planned vs {self.unplanned_bytes} unplanned "
                f"({self.ratio:.1%}); computed tensors: {self.intermediate_planned_bytes} vs "
                f"{self.intermediate_unplanned_bytes} bytes ({self.intermediate_ratio:.1%})")


@dataclass
class MemoryPlan:
    """Storage ids of every expression of a function, and the size of every storage.

    Attributes
    ----------
    storage_ids : dict
        ``id(expr) -> tuple of storage ids`` (one per tensor of the expression's type).
    storage_bytes : list of int
        Size of each storage id.
    entry_bytes : list of int
        Size of every planned tensor, in planning order (for the report).
    fixed_storage : set of int
        Storage ids of inputs and params (never shared).
    fixed_entry_bytes : int
        Total size of the inputs and params.
    """

    storage_ids: dict[int, tuple[int, ...]] = field(default_factory=dict)
    storage_bytes: list[int] = field(default_factory=list)
    entry_bytes: list[int] = field(default_factory=list)
    fixed_storage: set[int] = field(default_factory=set)
    fixed_entry_bytes: int = 0

    def of(self, expr: Expr) -> tuple[int, ...]:
        """The storage ids of ``expr``'s tensors."""
        return self.storage_ids[id(expr)]

    def report(self) -> MemoryReport:
        """Planned versus unplanned bytes."""
        planned, unplanned = sum(self.storage_bytes), sum(self.entry_bytes)
        fixed = sum(self.storage_bytes[s] for s in self.fixed_storage)
        return MemoryReport(planned, unplanned, len(self.storage_bytes), len(self.entry_bytes),
                            planned - fixed, unplanned - self.fixed_entry_bytes)


class _Allocator:
    """Free storages sorted by size (equal sizes in release order), as TVM's multimap."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int, _Token]] = []  # (max_bytes, release seq, token)
        self.seq = 0
        self.data: list[_Token] = []

    def alloc(self, proto: _Token) -> _Token:
        proto.max_bytes = proto.nbytes
        proto.storage_id = len(self.data)
        self.data.append(proto)
        return proto

    def request(self, proto: _Token) -> _Token:
        size = proto.nbytes
        keys = [(b, s) for b, s, _ in self.free]
        mid = bisect.bisect_left(keys, (size, -1))
        end = bisect.bisect_right(keys, (size * MATCH_RANGE, self.seq + 1))
        begin = bisect.bisect_left(keys, (size // MATCH_RANGE, -1))
        pick = mid if mid < end else (mid - 1 if mid > begin else None)
        if pick is None:
            return self.alloc(proto)
        _, _, tok = self.free.pop(pick)
        tok.max_bytes = max(tok.max_bytes, size)
        tok.ref_counter = proto.ref_counter
        return tok

    def release_if_dead(self, tok: _Token) -> None:
        if tok.ref_counter == 0:
            bisect.insort(self.free, (tok.max_bytes, self.seq, tok), key=lambda t: (t[0], t[1]))
            self.seq += 1


def _is_reshape_only(call: Call) -> bool:
    return isinstance(call.op, Function) and bool(call.op.attrs.get("relay.reshape_only"))


class _Planner:
    def __init__(self, fn: Function, is_alias: Callable[[Call], bool]):
        self.fn = fn
        self.is_alias = is_alias
        self.order = [n for n in post_order(fn.body, into_functions=False)
                      if not isinstance(n, (Op, GlobalVar, Function))]
        self.proto: dict[int, list[_Token]] = {}
        self.tokens: dict[int, list[_Token]] = {}
        self.alloc = _Allocator()
        self.entry_bytes: list[int] = []
        self.fixed_ids: set[int] = set()
        self.fixed_bytes = 0

    def arg_tokens(self, table: dict[int, list[_Token]], call: Call) -> list[_Token]:
        return [t for a in call.args for t in table[id(a)]]

    def prototypes(self) -> None:
        """Count the readers of every tensor (graph outputs get one extra, never released)."""
        for node in (*self.fn.params, *self.order):
            if isinstance(node, (Var, Constant, Call)):
                if id(node) not in self.proto:
                    self.proto[id(node)] = [_Token(t) for t in flat_tensor_types(node.checked_type)]
                    self.entry_bytes.extend(t.nbytes for t in self.proto[id(node)])
                if isinstance(node, Call):
                    for tok in self.arg_tokens(self.proto, node):
                        tok.ref_counter += 1
            elif isinstance(node, Tuple):
                self.proto[id(node)] = [t for f in node.fields for t in self.proto[id(f)]]
            elif isinstance(node, TupleGetItem):
                self.proto[id(node)] = self._field(self.proto, node)
            else:
                raise KilnError(f"the graph executor does not support {type(node).__name__} nodes")
        for tok in self.proto[id(self.fn.body)]:
            tok.ref_counter += 1

    @staticmethod
    def _field(table: dict[int, list[_Token]], node: TupleGetItem) -> list[_Token]:
        ty = node.tuple_value.checked_type
        assert isinstance(ty, TupleType)
        sizes = [len(flat_tensor_types(f)) for f in ty.fields]
        start = sum(sizes[:node.index])
        return table[id(node.tuple_value)][start:start + sizes[node.index]]

    def fixed(self, node: Expr) -> list[_Token]:
        toks = [self.alloc.alloc(t) for t in self.proto[id(node)]]
        for t in toks:
            t.ref_counter += 1
            self.fixed_ids.add(t.storage_id)
            self.fixed_bytes += t.nbytes
        return toks

    def run(self) -> MemoryPlan:
        self.prototypes()
        for p in self.fn.params:
            self.tokens[id(p)] = self.fixed(p)
        for node in self.order:
            if id(node) in self.tokens:
                continue
            if isinstance(node, Constant):
                self.tokens[id(node)] = self.fixed(node)
            elif isinstance(node, Tuple):
                self.tokens[id(node)] = [t for f in node.fields for t in self.tokens[id(f)]]
            elif isinstance(node, TupleGetItem):
                self.tokens[id(node)] = self._field(self.tokens, node)
            elif isinstance(node, Call):
                self.plan_call(node)
        return self.result()

    def plan_call(self, call: Call) -> None:
        args = self.arg_tokens(self.tokens, call)
        if self.is_alias(call):
            (proto,) = self.proto[id(call)]
            args[0].ref_counter += proto.ref_counter
            out = [args[0]]
        else:
            out = [self.alloc.request(t) for t in self.proto[id(call)]]
        self.tokens[id(call)] = out
        for tok in out:
            self.alloc.release_if_dead(tok)
        for tok in args:
            tok.ref_counter -= 1
            self.alloc.release_if_dead(tok)

    def result(self) -> MemoryPlan:
        plan = MemoryPlan(entry_bytes=self.entry_bytes, fixed_storage=self.fixed_ids,
                          fixed_entry_bytes=self.fixed_bytes)
        plan.storage_bytes = [t.max_bytes for t in self.alloc.data]
        for key, toks in self.tokens.items():
            plan.storage_ids[key] = tuple(t.storage_id for t in toks)
        return plan


def plan_memory(fn: Function, is_alias: Callable[[Call], bool] = _is_reshape_only) -> MemoryPlan:
    """Plan the storage of every tensor of a fused, typed ``main``.

    Parameters
    ----------
    fn : Function
        The function: calls of fused primitive functions, tuples, projections, constants.
    is_alias : callable
        ``is_alias(call)``: whether the call's output aliases its (single) input's storage;
        by default the reshape-only fused functions.

    Returns
    -------
    MemoryPlan
        Storage ids by expression, and storage sizes.
    """
    return _Planner(fn, is_alias).run()
