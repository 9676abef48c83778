"""A reference evaluator of loop IR: runs a :class:`~kiln.te.loop_ir.PrimFunc` on NumPy arrays.

The function is translated to Python source (nested ``for`` loops over flat arrays) and executed.
It is slow and meant for small shapes: tests use it to check that lowering preserves the meaning
of a computation independently of the C compiler. Semantics match the C code generator's:
integers wrap to their width, floats keep their precision (NumPy scalars), ``max``/``min``
propagate NaN, integer division by zero gives 0, float-to-int casts truncate (NaN and infinities
give 0), reads are bounds-checked and temporary buffers start as NaN (or a sentinel) so reading
an element that was never computed is visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.errors import CompileError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var
from kiln.te.loop_ir import (
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
)
from kiln.te.visit import children

__all__ = ["run_prim_func"]

_NP = {"bool": np.bool_, "float16": np.float16, "float32": np.float32, "float64": np.float64}


def _np_type(dtype: str) -> Any:
    return _NP.get(dtype) or getattr(np, dtype)


def _wrap(value: int, dtype: str) -> int:
    if dtype == "bool":
        return int(value != 0)
    bits = E.dtype_bits(dtype)
    value &= (1 << bits) - 1
    if E.is_int_dtype(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _load(buf: np.ndarray, idx: int, name: str) -> Any:
    if not 0 <= idx < buf.shape[0]:
        raise IndexError(f"read of {name}[{idx}] outside its {buf.shape[0]} elements")
    v = buf[idx]
    return v if buf.dtype.kind == "f" else int(v)


def _store(buf: np.ndarray, idx: int, value: Any, name: str) -> None:
    if not 0 <= idx < buf.shape[0]:
        raise IndexError(f"write of {name}[{idx}] outside its {buf.shape[0]} elements")
    buf[idx] = value


def _to_int(x: Any, dtype: str) -> int:
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(x):
            return 0
        v = math.trunc(float(x))
        # out of range: the x86 conversion result, through int32 below 32 bits
        wide = 64 if dtype in ("int64", "uint64", "uint32") else 32
        if not -(1 << (wide - 1)) <= v < (1 << (wide - 1)) and not (dtype == "uint64"
                                                                    and 0 <= v < 1 << 64):
            v = -(1 << (wide - 1))
        return _wrap(v, dtype)
    return _wrap(int(x), dtype)


def _fmax(a: Any, b: Any) -> Any:
    return np.maximum(a, b)


def _fmin(a: Any, b: Any) -> Any:
    return np.minimum(a, b)


def _shift(a: int, b: int, dtype: str, left: bool) -> int:
    bits = E.dtype_bits(dtype)
    if b < 0 or b >= bits:
        return 0 if left or a >= 0 else -1
    return _wrap(a << b, dtype) if left else a >> b


_UNARY_FLOAT = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "fabs": np.fabs, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "nearbyint": np.rint, "trunc": np.trunc,
}


def _not_float(value: Any) -> Any:
    raise TypeError("float math on a value of a non-float dtype")


def _call(name: str, args: list[Any], dtype: str) -> Any:
    t = _np_type(dtype) if E.is_float_dtype(dtype) else _not_float
    with np.errstate(all="ignore"):
        if name in _UNARY_FLOAT:
            return t(_UNARY_FLOAT[name](np.float64(args[0])))
        if name == "exp10":
            return t(np.power(10.0, np.float64(args[0])))
        if name == "rsqrt":
            return t(1.0 / np.sqrt(np.float64(args[0])))
        if name == "sigmoid":
            x = np.float64(args[0])
            return t(1.0 / (1.0 + np.exp(-x)) if x >= 0 else np.exp(x) / (1.0 + np.exp(x)))
        if name == "erf":
            v = float(args[0])
            return t(math.erf(v) if not math.isnan(v) else math.nan)
        if name == "pow":
            return t(np.power(np.float64(args[0]), np.float64(args[1])))
        if name == "atan2":
            return t(np.arctan2(np.float64(args[0]), np.float64(args[1])))
        if name == "fmod":
            return t(np.fmod(np.float64(args[0]), np.float64(args[1])))
        if name in ("isnan", "isinf", "isfinite"):
            return int(getattr(np, name)(args[0]))
        if name == "bitwise_and":
            return _wrap(args[0] & args[1], dtype)
        if name == "bitwise_or":
            return _wrap(args[0] | args[1], dtype)
        if name == "bitwise_xor":
            return _wrap(args[0] ^ args[1], dtype)
        if name == "bitwise_not":
            return _wrap(~args[0], dtype)
        if name == "shift_left":
            return _shift(args[0], args[1], dtype, True)
        if name == "shift_right":
            return _shift(args[0], args[1], dtype, False)
    raise CompileError(f"the loop-IR evaluator does not know intrinsic {name!r}")


class _PyGen:
    """Translates loop IR to the source of one Python function."""

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.names: dict[int, str] = {}

    def name(self, obj: Any, base: str) -> str:
        if id(obj) not in self.names:
            self.names[id(obj)] = f"{base}_{len(self.names)}"
        return self.names[id(obj)]

    def const(self, value: Any) -> str:
        key = f"k{len(self.consts)}"
        self.consts[key] = value
        return key

    def expr(self, e: PrimExpr) -> str:
        if isinstance(e, Var):
            return self.name(e, "v")
        if isinstance(e, E.IntImm):
            return repr(int(e.value))
        if isinstance(e, E.FloatImm):
            return self.const(_np_type(e.dtype)(e.value))
        if isinstance(e, BufferLoad):
            buf = self.name(e.buffer, "b")
            return f"_load({buf}, {self.expr(e.index)}, {e.buffer.name!r})"
        args = [self.expr(c) for c in children(e)]
        dt = repr(e.dtype)
        if isinstance(e, E.Binary):
            a, b = args
            is_f = E.is_float_dtype(e.dtype)
            if e.kind in ("add", "sub", "mul"):
                op = {"add": "+", "sub": "-", "mul": "*"}[e.kind]
                return f"({a} {op} {b})" if is_f else f"_wrap(({a}) {op} ({b}), {dt})"
            if e.kind == "div":
                return f"_fdiv({a}, {b})" if is_f else f"_wrap(_trunc_div({a}, {b}), {dt})"
            if e.kind == "mod":
                return f"_fmod({a}, {b})" if is_f else \
                    f"_wrap(({a}) - _trunc_div({a}, {b}) * ({b}) if ({b}) else 0, {dt})"
            if e.kind == "floordiv":
                return f"_ffloordiv({a}, {b})" if is_f else \
                    f"_wrap(({a}) // ({b}) if ({b}) else 0, {dt})"
            if e.kind == "floormod":
                return f"_ffloormod({a}, {b})" if is_f else \
                    f"_wrap(({a}) % ({b}) if ({b}) else 0, {dt})"
            if e.kind in ("min", "max"):
                if is_f:
                    return f"_f{e.kind}({a}, {b})"
                return f"{e.kind}({a}, {b})"
        if isinstance(e, E.Compare):
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.kind]
            return f"int(({args[0]}) {op} ({args[1]}))"
        if isinstance(e, E.And):
            return f"int(bool({args[0]}) and bool({args[1]}))"
        if isinstance(e, E.Or):
            return f"int(bool({args[0]}) or bool({args[1]}))"
        if isinstance(e, E.Not):
            return f"int(not ({args[0]}))"
        if isinstance(e, E.Select):
            return f"_select({args[0]}, {args[1]}, {args[2]})"
        if isinstance(e, E.Call) and e.name == "if_then_else":
            return f"(({args[1]}) if ({args[0]}) else ({args[2]}))"
        if isinstance(e, E.Cast):
            src = e.value.dtype
            if e.dtype == "bool":
                return f"int(({args[0]}) != 0)"
            if E.is_float_dtype(e.dtype):
                return f"{self.const(_np_type(e.dtype))}({args[0]})"
            if E.is_float_dtype(src):
                return f"_to_int({args[0]}, {dt})"
            return f"_wrap(int({args[0]}), {dt})"
        if isinstance(e, E.Call):
            return f"_call({e.name!r}, [{', '.join(args)}], {dt})"
        raise CompileError(f"the loop-IR evaluator cannot run expression {e}")

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        if isinstance(s, For):
            out.append(f"{pad}for {self.name(s.var, 'v')} in range({s.extent}):")
            self.stmt(s.body, depth + 1, out)
        elif isinstance(s, Store):
            buf = self.name(s.buffer, "b")
            value = self.expr(s.value)
            if not E.is_float_dtype(s.buffer.dtype):
                value = f"_wrap(int({value}), {s.buffer.dtype!r})"
            out.append(f"{pad}_store({buf}, {self.expr(s.index)}, {value}, {s.buffer.name!r})")
        elif isinstance(s, LetStmt):
            out.append(f"{pad}{self.name(s.var, 'v')} = {self.expr(s.value)}")
            self.stmt(s.body, depth, out)
        elif isinstance(s, IfThenElse):
            out.append(f"{pad}if {self.expr(s.condition)}:")
            self.stmt(s.then_case, depth + 1, out)
            if s.else_case is not None:
                out.append(f"{pad}else:")
                self.stmt(s.else_case, depth + 1, out)
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, depth, out)
        elif isinstance(s, Allocate):
            b = s.buffer
            fill = self.const(_fill_value(b.dtype))
            dtype = self.const(np.dtype(_np_type(b.dtype)))
            out.append(f"{pad}{self.name(b, 'b')} = np.full({b.size}, {fill}, dtype={dtype})")
            self.stmt(s.body, depth, out)
        elif isinstance(s, Evaluate):
            out.append(f"{pad}{self.expr(s.value)}")
        out.append(f"{pad}pass")


def _fill_value(dtype: str) -> Any:
    if E.is_float_dtype(dtype):
        return np.nan
    if dtype == "bool":
        return True
    return np.iinfo(dtype).max // 3


def _select(c: Any, t: Any, f: Any) -> Any:
    return t if c else f


def _fdiv(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):
        return a / b


def _fmod(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def _ffloordiv(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):
        return np.floor_divide(a, b)


def _ffloormod(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):
        return np.mod(a, b)


_RUNTIME = {
    "np": np, "_load": _load, "_store": _store, "_wrap": _wrap, "_trunc_div": _trunc_div,
    "_to_int": _to_int, "_fmax": _fmax, "_fmin": _fmin, "_call": _call, "_select": _select,
    "_fdiv": _fdiv, "_fmod": _fmod, "_ffloordiv": _ffloordiv, "_ffloormod": _ffloormod,
}


def run_prim_func(func: PrimFunc, arrays: Sequence[np.ndarray]) -> None:
    """Run ``func`` on ``arrays`` (one per parameter, in order); outputs are written in place.

    Parameters
    ----------
    func : PrimFunc
        The kernel.
    arrays : list of numpy.ndarray
        C-contiguous arrays of the parameters' shapes and dtypes.
    """
    if len(arrays) != len(func.params):
        raise CompileError(f"{func.name} takes {len(func.params)} arrays, got {len(arrays)}")
    gen = _PyGen()
    lines = ["def _kernel(" + ", ".join(gen.name(b, "b") for b in func.params) + "):"]
    const_bufs: dict[str, np.ndarray] = {}
    for s in _const_buffers(func.body):
        const_bufs[gen.name(s, "b")] = np.ascontiguousarray(s.data).reshape(-1)
    gen.stmt(func.body, 1, lines)
    namespace: dict[str, Any] = dict(_RUNTIME)
    namespace.update(gen.consts)
    namespace.update(const_bufs)
    exec("\n".join(lines), namespace)
    flat = []
    for buf, arr in zip(func.params, arrays):
        if arr.shape != buf.shape or arr.dtype != np.dtype(_np_type(buf.dtype)):
            raise CompileError(f"{func.name}: parameter {buf.name} expects {buf.dtype}"
                               f"{list(buf.shape)}, got {arr.dtype}{list(arr.shape)}")
        if not arr.flags.c_contiguous:
            raise CompileError(f"{func.name}: parameter {buf.name} must be C-contiguous")
        flat.append(arr.reshape(-1))
    with np.errstate(all="ignore"):
        namespace["_kernel"](*flat)


def _const_buffers(s: Stmt) -> list[Buffer]:
    from kiln.te.loop_ir import walk_stmts
    from kiln.te.visit import post_order

    found: dict[int, Buffer] = {}
    exprs: list[PrimExpr] = []
    for node in walk_stmts(s):
        if isinstance(node, Store):
            exprs += [node.index, node.value]
        elif isinstance(node, (LetStmt, Evaluate)):
            exprs.append(node.value)
        elif isinstance(node, IfThenElse):
            exprs.append(node.condition)
    for e in exprs:
        for n in post_order(e):
            if isinstance(n, BufferLoad) and n.buffer.kind == "const":
                found[id(n.buffer)] = n.buffer
    return list(found.values())
