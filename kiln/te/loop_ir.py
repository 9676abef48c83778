"""Loop IR: the lowered form of a schedule, printed as C by :mod:`kiln.codegen.c_codegen`.

A :class:`PrimFunc` takes flat :class:`Buffer` parameters (the kernel's inputs then outputs) and
runs a statement tree of :class:`For` loops (serial, parallel, vectorized, unrolled, or bound to a
GPU grid or block index (:data:`THREAD_KINDS`); every loop starts at 0), :class:`Allocate` (an
intermediate or cache buffer), :class:`Store`, :class:`LetStmt`, :class:`IfThenElse`, :class:`Seq`
and :class:`Evaluate`. Expressions are :mod:`kiln.te.expr` nodes plus :class:`BufferLoad` (an
element of a buffer at a flat index).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var

__all__ = [
    "FOR_KINDS",
    "PREFETCH_NEXT_TILE",
    "THREAD_KINDS",
    "UNSWITCH_TILE_GUARDS",
    "Allocate",
    "Buffer",
    "BufferLoad",
    "Evaluate",
    "For",
    "IfThenElse",
    "LetStmt",
    "PrimFunc",
    "Seq",
    "Stmt",
    "Store",
    "map_child_stmts",
    "map_stmt_exprs",
    "own_exprs",
    "walk_stmts",
]

# GPU thread bindings: a loop of one of these kinds is the grid or block index of a CUDA kernel
THREAD_KINDS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
                "threadIdx.z")
# a virtual thread (Ansor's vthread): a loop each GPU thread runs in full, whose iterations a
# shared-memory stage computed inside it serves all at once (like a thread loop's)
FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "vthread", *THREAD_KINDS)


@dataclass(eq=False)
class Buffer:
    """A flat array: a kernel parameter (``"input"``/``"output"``), a ``"temp"`` or a ``"const"``.

    ``strides`` are in elements; the allocation holds :attr:`size` elements. A constant buffer
    carries its values in ``data``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...] = ()
    kind: str = "temp"
    scope: str = "global"
    data: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.strides:
            strides, acc = [], 1
            for d in reversed(self.shape):
                strides.append(acc)
                acc *= d
            self.strides = tuple(reversed(strides))

    @property
    def size(self) -> int:
        """Elements to allocate: one past the largest offset, and whole padded rows when
        ``storage_align`` padded a stride (TVM allocates ``extent * stride`` too)."""
        if any(d == 0 for d in self.shape):
            return 0
        last = 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))
        return max([last, *(d * s for d, s in zip(self.shape, self.strides))])

    def flat_index(self, indices: tuple[PrimExpr, ...], mins: tuple[PrimExpr, ...]) -> PrimExpr:
        """The flat offset of element ``indices`` of a region starting at ``mins``."""
        offset: PrimExpr = E.const(0)
        for idx, lo, stride in zip(indices, mins, self.strides):
            offset = offset + (idx - lo) * stride
        return offset

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.dtype}, {list(self.shape)}, {self.kind})"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class BufferLoad(PrimExpr):
    """``buffer[index]`` with a flat index."""

    buffer: Buffer
    index: PrimExpr
    dtype: str

    def legacy_text(self) -> str:
        """Printed form."""
        return f"{self.buffer.name}[{E.legacy_repr(self.index)}]"

    def expr_children(self) -> tuple[PrimExpr, ...]:
        """Sub-expressions."""
        return (self.index,)

    def with_children(self, kids: tuple[PrimExpr, ...]) -> BufferLoad:
        """A copy with a new index."""
        return BufferLoad(self.buffer, kids[0], self.dtype)

    def struct_token(self) -> int:
        """Structural identity: the buffer."""
        return id(self.buffer)


class Stmt:
    """Base class of statements."""

    __slots__ = ()

    def __str__(self) -> str:
        lines: list[str] = []
        _print_stmt(self, 0, lines)
        return "\n".join(lines)


# Pragma of a reduction loop inside a parallel loop over (channel tile, row) chunks, with the
# number of row chunks a tile has: each iteration also prefetches its chunk's share of what the
# same iteration reads, from the buffers that index the tile, one tile ahead (C target only).
PREFETCH_NEXT_TILE = "prefetch_next_tile"
# Pragma of a register tile's loop whose bound checks (the rows or columns of a last, partial
# tile) are unswitched: whole tiles run a copy of the body without them (see kiln.te.lower).
UNSWITCH_TILE_GUARDS = "unswitch_tile_guards"


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for var in range(extent)``, run as ``kind``; ``pragmas`` carry unroll and prefetch
    hints."""

    var: Var
    extent: int
    kind: str
    body: Stmt
    pragmas: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    """``buffer[index] = value``."""

    buffer: Buffer
    index: PrimExpr
    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    """Bind ``var = value`` for ``body``."""

    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    """Run ``then_case`` if ``condition`` else ``else_case``."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Seq(Stmt):
    """Statements in order."""

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """``buffer`` exists (uninitialised) during ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluate an expression for its effect."""

    value: PrimExpr


@dataclass(eq=False)
class PrimFunc:
    """A kernel: parameters (inputs then outputs) and a body.

    ``attrs`` may hold ``"fused_ops"`` and ``"source_names"`` for the C header comment.
    """

    name: str
    params: list[Buffer]
    body: Stmt
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in self.params)
        return f"primfn {self.name}({params}) {{\n{_indent(str(self.body))}\n}}"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))


def _print_stmt(s: Stmt, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else f" {s.kind}"
        out.append(f"{pad}for{kind} ({s.var.name}, 0, {s.extent}) {{")
        _print_stmt(s.body, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, Store):
        out.append(f"{pad}{s.buffer.name}[{s.index}] = {s.value}")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}let {s.var.name} = {s.value}")
        _print_stmt(s.body, depth, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if ({s.condition}) {{")
        _print_stmt(s.then_case, depth + 1, out)
        if s.else_case is not None:
            out.append(pad + "} else {")
            _print_stmt(s.else_case, depth + 1, out)
        out.append(pad + "}")
    elif isinstance(s, Seq):
        for x in s.stmts:
            _print_stmt(x, depth, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{pad}allocate {b.name}[{b.dtype} * {b.size}]")
        _print_stmt(s.body, depth, out)
    elif isinstance(s, Evaluate):
        out.append(f"{pad}{s.value}")


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Every statement under ``s`` (pre-order)."""
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (For, LetStmt, Allocate)):
            stack.append(node.body)
        elif isinstance(node, IfThenElse):
            if node.else_case is not None:
                stack.append(node.else_case)
            stack.append(node.then_case)
        elif isinstance(node, Seq):
            stack.extend(reversed(node.stmts))


def own_exprs(s: Stmt) -> list[PrimExpr]:
    """Expressions of ``s`` itself (not of the statements it contains)."""
    if isinstance(s, Store):
        return [s.index, s.value]
    if isinstance(s, (LetStmt, Evaluate)):
        return [s.value]
    if isinstance(s, IfThenElse):
        return [s.condition]
    return []


def map_child_stmts(s: Stmt, fn: Callable[[Stmt], Stmt]) -> Stmt:
    """``s`` with every statement it directly contains (a body, a branch, a sequence's items)
    replaced by ``fn(child)``; a statement without children is returned as it is."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, fn(s.body), s.pragmas)
    if isinstance(s, Seq):
        return Seq(tuple(fn(x) for x in s.stmts))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.condition, fn(s.then_case),
                          fn(s.else_case) if s.else_case is not None else None)
    if isinstance(s, LetStmt):
        return LetStmt(s.var, s.value, fn(s.body))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, fn(s.body))
    return s


def map_stmt_exprs(s: Stmt, fn: Callable[[PrimExpr], PrimExpr]) -> Stmt:
    """``s`` with every expression (indices, values, conditions) replaced by ``fn(expr)``."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, map_stmt_exprs(s.body, fn), s.pragmas)
    if isinstance(s, Store):
        return Store(s.buffer, fn(s.index), fn(s.value))
    if isinstance(s, LetStmt):
        return LetStmt(s.var, fn(s.value), map_stmt_exprs(s.body, fn))
    if isinstance(s, IfThenElse):
        other = map_stmt_exprs(s.else_case, fn) if s.else_case is not None else None
        return IfThenElse(fn(s.condition), map_stmt_exprs(s.then_case, fn), other)
    if isinstance(s, Seq):
        return Seq(tuple(map_stmt_exprs(x, fn) for x in s.stmts))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, map_stmt_exprs(s.body, fn))
    if isinstance(s, Evaluate):
        return Evaluate(fn(s.value))
    raise TypeError(f"unknown statement {type(s).__name__}")
