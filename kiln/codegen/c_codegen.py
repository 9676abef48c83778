"""Loop IR to readable C99: one function per kernel with Kiln's fixed kernel ABI.

Each kernel is ``int32_t <func_name>(void** args)``: ``args[i]`` is the data pointer of the i-th
tensor, the fused function's inputs first, then its outputs (dense, row-major); it returns 0
(-1 when a heap allocation fails). A header comment lists the fused relay ops and the source-model
node names they came from. Parameters are unpacked into typed ``restrict`` pointers.

Loops: a parallel loop (with the parallel loops perfectly nested in it) is outlined into a
chunk function run by the library's thread pool (see :mod:`kiln.codegen.c_parallel` and
:mod:`kiln.codegen.c_runtime`; no OpenMP runtime is involved); vectorized loops become GCC
vector-extension code (see :mod:`kiln.codegen.c_vector`) when their extent is a power of two,
else ``#pragma omp simd`` loops (compiled with ``-fopenmp-simd``, which needs no runtime);
unrolled loops get ``#pragma GCC unroll``. Expressions keep NumPy's semantics (see
:mod:`kiln.codegen.c_prelude`): integer arithmetic on tensor data wraps, float16 rounds after
every operation, libm computes scalar math.

Buffers: an intermediate buffer whose accesses form a register tile (indexed by unrolled loops
and a vectorized lane loop; see :mod:`kiln.codegen.c_registers`) becomes vector-typed local
variables, and the unrolled loops touching it are written out one copy per iteration; other
buffers up to 64 KiB (256 KiB inside a loop, where a heap buffer would be allocated at every
iteration) are stack arrays, larger ones are allocated on the heap once per call.

Output is deterministic: the same loop IR always gives the same text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from kiln.codegen.c_masked import INTRINSICS_INCLUDE, masked_helpers
from kiln.codegen.c_narrow import NARROW_CALLS, legalize_narrow
from kiln.codegen.c_parallel import emit_parallel_loop
from kiln.codegen.c_prefetch import emit_next_tile_prefetch, prefetch_rows
from kiln.codegen.c_prelude import (
    NARROW_PRELUDE,
    SCALAR_PRELUDE,
    VECTOR_IDIOMS,
    VECTOR_MATH_TABLES,
    int_helper_names,
    vector_math_source,
)
from kiln.codegen.c_reduce import emit_horizontal_reduction
from kiln.codegen.c_registers import register_element, register_indices, register_lanes
from kiln.codegen.c_runtime import RUNTIME_DECLS
from kiln.codegen.c_transpose import emit_register_transpose, transpose_helper
from kiln.codegen.c_types import (
    C_TYPES,
    MASK_INT,
    UNSIGNED_OF,
    bits,
    c_literal,
    c_type,
    np_name,
    vector_type_name,
)
from kiln.codegen.c_vector import emit_vector_loop
from kiln.errors import CompileError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_ir import (
    THREAD_KINDS,
    Allocate,
    Buffer,
    BufferLoad,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    map_stmt_exprs,
    own_exprs,
    walk_stmts,
)
from kiln.te.simplify import Simplifier
from kiln.te.visit import children, fold_up, post_order, rebuild

__all__ = [
    "C_TYPES",
    "CCodegen",
    "FunctionState",
    "c_literal",
    "c_type",
    "float_to_int_helper",
    "vector_type_name",
]

# Scalar libm names for float32 (float64 drops the ``f``); float16 computes in float32.
_LIBM = {
    "exp": "expf", "exp2": "exp2f", "expm1": "expm1f", "log": "logf", "log2": "log2f",
    "log10": "log10f", "log1p": "log1pf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff",
    "sin": "sinf", "cos": "cosf", "tan": "tanf", "asin": "asinf", "acos": "acosf",
    "atan": "atanf", "sinh": "sinhf", "cosh": "coshf", "asinh": "asinhf", "acosh": "acoshf",
    "atanh": "atanhf", "fabs": "fabsf", "floor": "floorf", "ceil": "ceilf", "trunc": "truncf",
    "round": "nearbyintf", "nearbyint": "nearbyintf", "pow": "powf", "atan2": "atan2f",
    "fmod": "fmodf",
}

# Allocations larger than this many bytes go to the heap (at the top level: once per call) ...
_STACK_LIMIT_TOP = 1 << 16
# ... and inside loops, where a heap buffer would be allocated at every iteration: a buffer
# computed at a loop of its consumer (padded rows, a tile) stays on the stack up to this size
# (the pool's worker threads have 8 MiB stacks).
_STACK_LIMIT_LOOP = 1 << 18
# Unrolled loops around register-tile accesses are written out up to this extent even when
# their variable does not index the tile (a kernel window, say).
_EXPAND_SHORT = 16
_BINOP = {"add": "+", "sub": "-", "mul": "*"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


_NO_VARS: frozenset[Var] = frozenset()
_NO_BUFFERS: frozenset[int] = frozenset()


class ExprFacts:
    """The variables under each expression node and the buffers it loads (by id), computed bottom-up
    once per node: the emitters ask them of every node of a value, and walking each node's
    subtree again made code generation quadratic in the depth of fused expressions. The nodes
    are kept alive with their facts, so their ids are not reused."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[PrimExpr, tuple[frozenset[Var], frozenset[int]]]] = {}

    @staticmethod
    def _combine(node: PrimExpr, below: list[tuple[frozenset[Var], frozenset[int]]]
                 ) -> tuple[frozenset[Var], frozenset[int]]:
        names = frozenset({node}) if isinstance(node, Var) else (
            below[0][0] if len(below) == 1 else _NO_VARS.union(*(f[0] for f in below)))
        buffers = _NO_BUFFERS.union(*(f[1] for f in below))
        if isinstance(node, BufferLoad):
            buffers = buffers | {id(node.buffer)}
        return names, buffers

    def _facts(self, e: PrimExpr) -> tuple[frozenset[Var], frozenset[int]]:
        return fold_up(e, self._memo, self._combine)

    def vars(self, e: PrimExpr) -> frozenset[Var]:
        """The variables occurring in ``e``."""
        return self._facts(e)[0]

    def substitute(self, e: PrimExpr, var: Var, value: PrimExpr) -> PrimExpr:
        """``e`` with ``var`` replaced by ``value``, rebuilding only the nodes above an
        occurrence of ``var`` (:func:`~kiln.te.visit.substitute` walks the whole tree); the
        other subtrees are kept as they are, as there."""
        if var not in self.vars(e):
            return e
        done: dict[int, PrimExpr] = {id(var): value}
        stack: list[tuple[PrimExpr, bool]] = [(e, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            kids = children(node)
            if expanded:
                done[id(node)] = rebuild(node, tuple(done.get(id(k), k) for k in kids))
            else:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if var in self.vars(k))
        return done[id(e)]

    def buffers(self, e: PrimExpr) -> frozenset[int]:
        """The ids of the buffers ``e`` loads from (its :class:`BufferLoad` nodes')."""
        return self._facts(e)[1]


@dataclass
class FunctionState:
    """What the emitter knows about the function being written; shared with the statement
    emitters of the other ``c_*`` modules."""

    func_name: str = ""
    lines: list[str] = field(default_factory=list)
    indent: int = 1
    in_parallel: bool = False
    loop_depth: int = 0
    var_names: dict[int, str] = field(default_factory=dict)
    # the variables named so far, kept alive: var_names is keyed by id(), and a temporary Var
    # (a reduction's fold) freed and another allocated at its address would inherit its name
    named: list[Var] = field(default_factory=list)
    used_names: set[str] = field(default_factory=set)
    # the next suffix to try per temporary base name (a kernel has tens of thousands of ``v``s)
    next_suffix: dict[str, int] = field(default_factory=dict)
    # id(buffer) -> (lanes, name prefix) of buffers held in vector variables
    registers: dict[int, tuple[int, str]] = field(default_factory=dict)
    # C types of what is in scope, for capturing it into a parallel loop's context:
    # id(var) -> scalar type, id(buffer) -> pointer type
    var_types: dict[int, str] = field(default_factory=dict)
    buffer_types: dict[int, str] = field(default_factory=dict)
    # chunk functions of the parallel loops (emitted before the kernel)
    outlined: list[str] = field(default_factory=list)
    n_parallel: int = 0
    # (variable, extent) of the loops around the statement being written, outermost first
    loops: list[tuple[Var, int]] = field(default_factory=list)


class CCodegen:
    """Renders :class:`~kiln.te.loop_ir.PrimFunc` s as C.

    Parameters
    ----------
    vector_bytes : int
        Bytes of the target's vector registers (32 for AVX2, 64 for AVX-512); schedules pick
        vector loop extents from it, the generator accepts any power-of-two extent.
    """

    def __init__(self, vector_bytes: int = 32):
        self.vector_bytes = vector_bytes
        self.vector_types: set[tuple[str, int]] = set()  # (dtype, lanes)
        self.vector_math: set[int] = set()  # float32 lane counts needing vector math
        self.masked_types: set[tuple[str, int]] = set()  # (dtype, lanes) with masked moves
        self.transposes: set[tuple[str, int]] = set()  # (dtype, lanes) transposed in registers
        self.constants: list[str] = []
        self.state: FunctionState = FunctionState()
        self.simp = Simplifier()
        self.facts = ExprFacts()
        self.index_type = "int32_t"
        self.narrow = False  # whether a kernel used a narrow dtype (bfloat16, float8, int4, ...)

    # --- modules ------------------------------------------------------------------------------
    def module(self, funcs: Sequence[PrimFunc]) -> str:
        """One translation unit: prelude, vector types and math, constants, then the kernels.

        The unit declares the runtime (thread pool, ``kiln_set_num_threads``, ``kiln_run_plan``);
        its definition is compiled once per compiler and flags and linked into every library
        (:func:`kiln.codegen.c_runtime.runtime_unit`).
        """
        return self.unit([self.function(f) for f in funcs])

    def unit(self, bodies: Sequence[str]) -> str:
        """The translation unit of kernel texts made by :meth:`function` of this generator (or
        of the generators it :meth:`absorb`-ed)."""
        parts = [SCALAR_PRELUDE, NARROW_PRELUDE if self.narrow else "", RUNTIME_DECLS,
                 self._vector_decls()]
        parts += self.constants
        parts += bodies
        return "\n".join(p.rstrip("\n") + "\n" for p in parts if p)

    def absorb(self, other: CCodegen) -> None:
        """Take the declarations the kernels ``other`` generated need (vector types and math,
        constants), so :meth:`unit` can hold them next to this generator's."""
        self.vector_types |= other.vector_types
        self.vector_math |= other.vector_math
        self.masked_types |= other.masked_types
        self.transposes |= other.transposes
        self.constants += other.constants
        self.narrow |= other.narrow

    def _vector_decls(self) -> str:
        types = set(self.vector_types)
        for lanes in self.vector_math:
            types.update({("float32", lanes), ("int32", lanes)})
        for dtype, lanes in self.masked_types:
            types.update({(dtype, lanes), (MASK_INT[bits(dtype)], lanes)})
        lines = []
        for dtype, lanes in sorted(types, key=lambda t: (t[1], t[0])):
            ct = c_type(dtype)
            size = np.dtype(np_name(dtype)).itemsize
            name = vector_type_name(dtype, lanes)
            lines.append(f"typedef {ct} {name} __attribute__((vector_size({size * lanes})));")
            lines.append(f"typedef {ct} {name}u __attribute__((vector_size({size * lanes}), "
                         f"aligned({size}), may_alias));")
        text = "\n".join(lines) + ("\n" if lines else "")
        if lines:
            text += VECTOR_IDIOMS
        if self.masked_types or self.vector_math:
            text += INTRINSICS_INCLUDE
        for dtype, lanes in sorted(self.masked_types, key=lambda t: (t[1], t[0])):
            width = bits(dtype)
            vt = vector_type_name(dtype, lanes)
            text += masked_helpers(vt, vector_type_name(MASK_INT[width], lanes), c_type(dtype),
                                   vt[len("kiln_"):], width, lanes, E.is_float_dtype(dtype))
        for dtype, lanes in sorted(self.transposes, key=lambda t: (t[1], t[0])):
            text += transpose_helper(dtype, lanes)
        if self.vector_math:
            text += VECTOR_MATH_TABLES
        for lanes in sorted(self.vector_math):
            text += vector_math_source(lanes)
        return text

    # --- functions ----------------------------------------------------------------------------
    def function(self, func: PrimFunc) -> str:
        """The C text of one kernel (its constants are added to :attr:`constants`)."""
        legal = legalize_narrow(func)
        self.narrow |= legal is not func
        func = legal
        self.state = FunctionState(func_name=func.name)
        self.simp = Simplifier(_loop_ranges(func.body))
        biggest = max([b.size for b in func.params] + [_max_alloc(func.body), 0])
        self.index_type = "int64_t" if biggest >= (1 << 31) - 1 else "int32_t"
        for name in (*(b.name for b in func.params), "kiln_ctx", "kiln_c", "kiln_begin",
                     "kiln_end", "kiln_i"):
            self._reserve(name)
        head = [f"/* Kiln kernel {func.name}"]
        ops = func.attrs.get("fused_ops")
        if ops:
            head.append(f" * fused ops: {', '.join(ops)}")
        names = func.attrs.get("source_names")
        if names:
            head.append(f" * source nodes: {', '.join(names)}")
        for i, b in enumerate(func.params):
            shape = "x".join(str(d) for d in b.shape) or "scalar"
            head.append(f" * args[{i}] {b.kind:6s} {b.name}: {b.dtype}[{shape}]")
        head.append(" */")
        f = self.state
        f.lines = [f"int32_t {func.name}(void** args) {{"]
        for i, b in enumerate(func.params):
            ct = c_type(b.dtype)
            const = "const " if b.kind == "input" else ""
            f.lines.append(f"  {const}{ct}* restrict {b.name} = ({const}{ct}*)args[{i}];")
            f.buffer_types[id(b)] = f"{const}{ct}*"
        self._const_buffers(func)
        self.stmt(func.body)
        f.lines.append("  return 0;")
        f.lines.append("}")
        # the header, the chunk functions of the parallel loops, then the kernel itself
        return "\n".join([*head, *f.outlined, *f.lines]) + "\n"

    def c_type_of(self, buf: Buffer) -> str:
        """The C element type of a buffer."""
        return c_type(buf.dtype)

    def _const_buffers(self, func: PrimFunc) -> None:
        seen: set[int] = set()
        for s in walk_stmts(func.body):
            for e in own_exprs(s):
                for n in post_order(e):
                    if isinstance(n, BufferLoad) and n.buffer.kind == "const" \
                            and id(n.buffer) not in seen:
                        seen.add(id(n.buffer))
                        self._emit_const(func.name, n.buffer)

    #: How a constant buffer is declared, and the pointer qualifier (CUDA: __device__, __restrict__)
    CONST_STORAGE = "static const"
    RESTRICT = "restrict"

    def _emit_const(self, func_name: str, buf: Buffer) -> None:
        assert buf.data is not None
        flat = np.asarray(buf.data).reshape(-1)
        global_name = f"{func_name}_{buf.name}"
        values = ", ".join(c_literal(v.item(), buf.dtype) for v in flat) or "0"
        self.constants.append(f"{self.CONST_STORAGE} {c_type(buf.dtype)} {global_name}"
                              f"[{max(flat.size, 1)}] = {{{values}}};\n")
        self.state.lines.append(f"  const {c_type(buf.dtype)}* {self.RESTRICT} {buf.name} = "
                                f"{global_name};")
        self._reserve(buf.name)

    # --- names --------------------------------------------------------------------------------
    def _reserve(self, name: str) -> None:
        self.state.used_names.add(name)

    def var_name(self, v: Var) -> str:
        """The C name of a variable (unique in the function)."""
        f = self.state
        name = f.var_names.get(id(v))
        if name is None:
            base = v.name or "v"
            name, n = base, 1
            while name in f.used_names:
                name = f"{base}_{n}"
                n += 1
            f.used_names.add(name)
            f.var_names[id(v)] = name
            f.named.append(v)
        return name

    def temp_name(self, base: str) -> str:
        """A fresh local name."""
        f = self.state
        n = f.next_suffix.get(base, 0)
        name = f"{base}{n}" if n else base
        while name in f.used_names:
            n += 1
            name = f"{base}{n}"
        f.next_suffix[base] = n + 1
        f.used_names.add(name)
        return name

    def emit(self, line: str) -> None:
        """Append one line at the current indentation."""
        self.state.lines.append("  " * self.state.indent + line)

    @contextlib.contextmanager
    def block(self, opening: str | None = None, closing: str | None = "}",
              collapse: bool = False) -> Iterator[None]:
        """Lines emitted inside are indented one level more, between ``opening`` and ``closing``
        (each emitted when given). ``collapse``: a block that holds one plain statement (no
        helper call, no ``if``) is written as that statement alone."""
        state = self.state
        start = len(state.lines)
        if opening is not None:
            self.emit(opening)
        state.indent += 1
        try:
            yield
        finally:
            state.indent -= 1
        if closing is not None:
            self.emit(closing)
        lines = state.lines
        if (collapse and opening is not None and closing is not None and len(lines) == start + 3
                and not lines[start + 1].lstrip().startswith(("kiln_", "if"))):
            lines[start:] = [lines[start + 1][2:]]

    @property
    def registers(self) -> dict[int, tuple[int, str]]:
        """Buffers of the current function held in vector variables: ``id -> (lanes, name)``."""
        return self.state.registers

    # --- statements ---------------------------------------------------------------------------
    def branch(self, s: IfThenElse, body: Callable[[Stmt], None]) -> None:
        """``if``/``else`` around ``body`` of each case; a constant condition emits only the case
        it chooses (decided already, e.g. in a copy of an unrolled loop)."""
        if isinstance(s.condition, E.IntImm):
            chosen = s.then_case if s.condition.value else s.else_case
            if chosen is not None:
                body(chosen)
            return
        with self.block(f"if ({self.cond(s.condition)}) {{", closing=None):
            body(s.then_case)
        if s.else_case is not None:
            with self.block("} else {", closing=None):
                body(s.else_case)
        self.emit("}")

    def stmt(self, s: Stmt) -> None:
        """Emit a statement."""
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, Store):
            if id(s.buffer) in self.state.registers:
                target = register_element(self, s.buffer, s.index)
            else:
                target = f"{s.buffer.name}[{self.expr(s.index)}]"
            self.emit(f"{target} = {self._stored(s)};")
        elif isinstance(s, LetStmt):
            with self.block("{"):
                self.state.var_types[id(s.var)] = c_type(s.var.dtype)
                self.emit(f"const {c_type(s.var.dtype)} {self.var_name(s.var)} = "
                          f"{self.expr(s.value)};")
                self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            self.branch(s, self.stmt)
        elif isinstance(s, Allocate):
            self._allocate(s)
        elif isinstance(s, Evaluate):
            self.emit(f"(void)({self.expr(s.value)});")
        else:
            raise CompileError(f"cannot generate C for statement {type(s).__name__}")

    def _stored(self, s: Store) -> str:
        value = self.expr(s.value)
        if s.value.dtype != s.buffer.dtype:
            return f"({c_type(s.buffer.dtype)})({value})"
        return value

    def _allocate(self, s: Allocate) -> None:
        b = s.buffer
        ct = c_type(b.dtype)
        nbytes = b.size * np.dtype(np_name(b.dtype)).itemsize
        limit = _STACK_LIMIT_LOOP if self.state.loop_depth else _STACK_LIMIT_TOP
        self._reserve(b.name)
        self.state.buffer_types[id(b)] = f"{ct}*"
        with self.block("{"):
            self._allocated(s, ct, nbytes, limit)

    def _allocated(self, s: Allocate, ct: str, nbytes: int, limit: int) -> None:
        """The body of an allocation's block: the buffer's declaration, its statement, its free."""
        b = s.buffer
        lanes = register_lanes(s, self)
        if lanes:
            vt = vector_type_name(b.dtype, lanes)
            self.vector_types.add((b.dtype, lanes))
            count = b.size // lanes
            for k in range(count):
                self._reserve(f"{b.name}_{k}")
            self.emit(f"/* {b.scope} buffer {b.name} in {count} vector variables */")
            for first in range(0, count, 8):
                names = ", ".join(f"{b.name}_{k}" for k in range(first, min(first + 8, count)))
                self.emit(f"{vt} {names};")
            self.state.registers[id(b)] = (lanes, b.name)
            self.stmt(s.body)
            del self.state.registers[id(b)]
        elif nbytes <= limit:
            self.emit(f"{ct} {b.name}[{max(b.size, 1)}] __attribute__((aligned(64)));"
                      f"  /* {b.scope} buffer, {nbytes} bytes */")
            self.stmt(s.body)
        else:
            self.emit(f"{ct}* restrict {b.name} = ({ct}*)malloc({b.size}u * sizeof({ct}));"
                      f"  /* {b.scope} buffer, {nbytes} bytes */")
            fail = "abort();" if self.state.loop_depth else "return -1;"
            self.emit(f"if ({b.name} == NULL) {fail}")
            self.stmt(s.body)
            self.emit(f"free({b.name});")

    def _for(self, s: For) -> None:
        if s.kind in THREAD_KINDS or s.kind == "vthread":
            raise CompileError(f"kernel {self.state.func_name}: loop {s.var.name} is bound to "
                               f"{s.kind}, a GPU thread index; build it for the cuda target")
        if s.kind == "vectorized" and emit_vector_loop(self, s):
            return
        if s.kind in ("serial", "unrolled") and emit_horizontal_reduction(self, s):
            return
        if s.kind in ("serial", "unrolled") and emit_register_transpose(self, s):
            return
        if s.kind == "unrolled" and ((self.state.registers and self._expands(s))
                                     or self._picks_by(s)):
            self._expand(s)
            return
        f = self.state
        kind = s.kind
        if kind == "parallel" and not f.in_parallel and emit_parallel_loop(self, s):
            return
        self.plain_for(s)

    def plain_for(self, s: For) -> None:
        """``s`` as a C ``for`` loop around its body (no vector, parallel or unrolled form)."""
        f = self.state
        kind = s.kind
        it = self.index_type
        var = self.var_name(s.var)
        f.var_types[id(s.var)] = it
        if kind == "unrolled":
            self.emit(f"#pragma GCC unroll {min(s.extent, 64)}")
        elif kind == "vectorized" and _simd_safe(s):
            self.emit("#pragma omp simd")
        with self.block(f"for ({it} {var} = 0; {var} < {s.extent}; ++{var}) {{"):
            f.loop_depth += 1
            rows = prefetch_rows(s)
            if rows is not None:
                emit_next_tile_prefetch(self, s, rows)
            f.loops.append((s.var, s.extent))
            self.stmt(s.body)
            f.loops.pop()
            f.loop_depth -= 1

    def _expands(self, s: For) -> bool:
        """Whether an unrolled loop is written out copy by copy: when its variable indexes a
        buffer held in vector variables (the indices must become constants), or when it is a
        short loop around such accesses (straight-line code lets the compiler share loads)."""
        indices = register_indices(s.body, self.state.registers)
        if indices is None:
            return False
        return s.extent <= _EXPAND_SHORT or any(s.var in self.facts.vars(i) for i in indices)

    def _picks_by(self, s: For) -> bool:
        """Whether a short unrolled loop's variable is compared for equality by a select in its
        body (Winograd's transforms pick a tile position's coefficients so): each copy written
        out keeps one branch."""
        if s.extent > _EXPAND_SHORT:
            return False
        for x in walk_stmts(s.body):
            for e in own_exprs(x):
                for n in post_order(e):
                    cond = n.condition if isinstance(n, E.Select) else \
                        n.args[0] if isinstance(n, E.Call) and n.name == "if_then_else" else None
                    if isinstance(cond, E.Compare) and cond.kind == "eq" \
                            and s.var in self.facts.vars(cond):
                        return True
        return False

    def _expand(self, s: For) -> None:
        """Emit an unrolled loop as one copy of its body per iteration (constant indices)."""
        for k in range(s.extent):
            def bind(e: PrimExpr, k: int = k) -> PrimExpr:
                return self.simp.simplify(self.facts.substitute(e, s.var, const(k, s.var.dtype)))

            self.stmt(map_stmt_exprs(s.body, bind))

    # --- expressions --------------------------------------------------------------------------
    def cond(self, e: PrimExpr) -> str:
        """A condition without redundant outer parentheses."""
        text = self.expr(e)
        if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
            return text[1:-1]
        return text

    def expr(self, e: PrimExpr) -> str:
        """C text of a scalar expression."""
        if isinstance(e, Var):
            return self.var_name(e)
        if isinstance(e, (E.IntImm, E.FloatImm)):
            return c_literal(e.value, e.dtype)
        if isinstance(e, BufferLoad):
            if id(e.buffer) in self.state.registers:
                return register_element(self, e.buffer, e.index)
            return f"{e.buffer.name}[{self.expr(e.index)}]"
        if isinstance(e, E.Binary):
            return self._binary(e)
        if isinstance(e, E.Compare):
            return f"({self.expr(e.a)} {_CMP[e.kind]} {self.expr(e.b)})"
        if isinstance(e, E.And):
            return f"({self.expr(e.a)} && {self.expr(e.b)})"
        if isinstance(e, E.Or):
            return f"({self.expr(e.a)} || {self.expr(e.b)})"
        if isinstance(e, E.Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, E.Select):
            return (f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : "
                    f"{self.expr(e.false_value)})")
        if isinstance(e, E.Cast):
            return self._cast(e)
        if isinstance(e, E.Call):
            return self._call(e)
        raise CompileError(f"cannot generate C for expression {e}")

    def _binary(self, e: E.Binary) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if E.is_float_dtype(dt):
            return self.float_binary(e.kind, a, b, dt)
        ct = c_type(dt)
        index = not (self.facts.buffers(e.a) or self.facts.buffers(e.b))
        if e.kind in _BINOP:
            op = _BINOP[e.kind]
            if index and dt in ("int32", "int64"):
                return f"({a} {op} {b})"
            if dt in UNSIGNED_OF and E.dtype_bits(dt) >= 32:
                u = UNSIGNED_OF[dt]
                return f"({ct})(({u}){a} {op} ({u}){b})"
            return f"({ct})({a} {op} {b})"
        if e.kind in ("min", "max"):
            op = "<" if e.kind == "min" else ">"
            if index:
                return f"({a} {op} {b} ? {a} : {b})"
            return f"({ct})({a} {op} {b} ? {a} : {b})"
        if e.kind in ("div", "mod", "floordiv", "floormod"):
            if self._nonneg(e.a) and self._positive(e.b):
                return f"({a} {'/' if 'div' in e.kind else '%'} {b})"
            return f"kiln_{e.kind}_{int_helper_names(dt)}({a}, {b})"
        raise CompileError(f"cannot generate C for {e.kind} of {dt}")

    def float_binary(self, kind: str, a: str, b: str, dt: str) -> str:
        ct = c_type(dt)
        if dt == "float16":
            inner = self.float_binary(kind, f"(float){a}", f"(float){b}", "float32")
            return f"(({ct}){inner})"
        suffix = "f" if dt == "float32" else "d"
        if kind in _BINOP:
            return f"({a} {_BINOP[kind]} {b})"
        if kind == "div":
            return f"({a} / {b})"
        if kind == "mod":
            return f"{'fmodf' if dt == 'float32' else 'fmod'}({a}, {b})"
        if kind in ("floordiv", "floormod", "min", "max"):
            return f"kiln_{kind}{suffix}({a}, {b})"
        raise CompileError(f"cannot generate C for {kind} of {dt}")

    def _nonneg(self, e: PrimExpr) -> bool:
        lo, _ = self.simp.bound(e)
        return lo is not None and lo >= 0

    def _positive(self, e: PrimExpr) -> bool:
        lo, _ = self.simp.bound(e)
        return lo is not None and lo > 0

    def _cast(self, e: E.Cast) -> str:
        src, dst = e.value.dtype, e.dtype
        x = self.expr(e.value)
        if dst == "bool":
            return f"({x} != 0)"
        if E.is_float_dtype(src) and not E.is_float_dtype(dst):
            return f"{float_to_int_helper(dst)}((double){x})"
        return f"({c_type(dst)}){x}"

    def _call(self, e: E.Call) -> str:
        name, dt = e.name, e.dtype
        args = [self.expr(a) for a in e.args]
        if name == "if_then_else":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name in ("isnan", "isinf", "isfinite"):
            arg = f"(float){args[0]}" if e.args[0].dtype == "float16" else args[0]
            return f"({name}({arg}) != 0)"
        if name.startswith(("bitwise_", "shift_")):
            return self._int_call(name, args, dt)
        if name in NARROW_CALLS:  # a narrow dtype's conversion (kiln.codegen.c_narrow)
            return f"{name}({args[0]})"
        if name == "reinterpret":  # the same bits as another type: a union compound literal
            src = c_type(e.args[0].dtype)
            return f"((union {{ {src} s; {c_type(dt)} d; }}){{ .s = {args[0]} }}).d"
        if not E.is_float_dtype(dt):
            raise CompileError(f"intrinsic {name} is not defined for {dt}")
        if dt == "float16":
            inner = E.Call(name, tuple(E.Cast("float32", a) for a in e.args), "float32")
            return f"((_Float16){self._call(inner)})"
        double = dt == "float64"
        if name == "sigmoid":
            return f"kiln_sigmoid{'d' if double else 'f'}({args[0]})"
        if name == "rsqrt":
            one = "1.0" if double else "1.0f"
            return f"({one} / {'sqrt' if double else 'sqrtf'}({args[0]}))"
        if name == "exp10":
            return f"{'pow' if double else 'powf'}({'10.0' if double else '10.0f'}, {args[0]})"
        fn = _LIBM.get(name)
        if fn is None:
            raise CompileError(f"no C implementation of intrinsic {name}")
        if double:
            fn = fn[:-1]
        return f"{fn}({', '.join(args)})"

    def _int_call(self, name: str, args: list[str], dt: str) -> str:
        ct = c_type(dt)
        if name == "bitwise_not":
            return f"({ct})(~{args[0]})"
        if name.startswith("bitwise_"):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[name]
            return f"({ct})({args[0]} {op} {args[1]})"
        helper = "shl" if name == "shift_left" else "shr"
        return f"kiln_{helper}_{int_helper_names(dt)}({args[0]}, {args[1]})"


def float_to_int_helper(dst: str) -> str:
    """The prelude call converting a double to integer ``dst`` (see ``kiln_f2i32``)."""
    if dst == "uint64":
        return "kiln_f2u64"
    if dst in ("int64", "uint32"):
        return "kiln_f2i64" if dst == "int64" else "(uint32_t)kiln_f2i64"
    if dst == "int32":
        return "kiln_f2i32"
    return f"({c_type(dst)})kiln_f2i32"


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _loop_ranges(s: Stmt) -> dict[Var, tuple[int, int]]:
    return {n.var: (0, max(n.extent - 1, 0)) for n in walk_stmts(s) if isinstance(n, For)}


def _max_alloc(s: Stmt) -> int:
    return max([n.buffer.size for n in walk_stmts(s) if isinstance(n, Allocate)] + [0])


def _simd_safe(loop: For) -> bool:
    """``omp simd`` needs iterations without loop-carried dependences: every store must move."""
    for s in walk_stmts(loop.body):
        if isinstance(s, For):
            return False
        if isinstance(s, Store) and loop.var not in _vars(s.index):
            return False
    return True


def _vars(e: PrimExpr) -> set[Var]:
    return {n for n in post_order(e) if isinstance(n, Var)}

