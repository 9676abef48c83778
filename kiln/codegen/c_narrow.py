"""Narrow dtypes in C: bfloat16, the float8s, float4_e2m1fn and int4/uint4/int2/uint2.

C has no arithmetic type for these, so before a kernel is written its loop IR is legalized
(TVM's BF16/FP8 storage legalization): buffers of a narrow dtype become buffers of its storage
dtype (:func:`kiln.runtime.dtype.storage_dtype`: uint16 for bfloat16, uint8 for the others,
one element per byte), a load decodes the stored bits to float32 (int32 for the integers), a
store encodes them back (buffers local to the kernel, a reduction's accumulator say, hold
float32 / int32 values instead), and arithmetic computes in float32 (TVM's BF16ComputeLegalize: a
float result rounds to the narrow dtype where it is stored or cast, not after every operation
inside a fused kernel as NumPy does on ``ml_dtypes`` arrays) or int32 (integers wrap after every
operation, as NumPy's). Conversions round to nearest even; overflow gives infinity where the
dtype has one, NaN where it has only NaN, the largest finite value for float4_e2m1fn
(``ml_dtypes``' rules; ONNX's saturating casts clamp before converting, see the ONNX frontend).

Legalized kernels are scalar code: their vectorized loops become serial loops (the vector
emitters know nothing of the conversion calls), so no vector path ever sees a narrow dtype.
The conversion functions are :data:`kiln.codegen.c_prelude.NARROW_PRELUDE`.
"""

from __future__ import annotations

import math

import ml_dtypes  # noqa: F401  (registers the narrow NumPy dtypes used below)
import numpy as np

from kiln.errors import CompileError
from kiln.runtime.dtype import (
    NARROW_FLOATS,
    compute_dtype,
    is_narrow,
    np_dtype,
    storage_dtype,
)
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
    own_exprs,
    walk_stmts,
)
from kiln.te.visit import children, post_order, rebuild

__all__ = ["NARROW_CALLS", "legalize_narrow", "uses_narrow"]

_SHORT = {"bfloat16": "bf16", "float8_e4m3fn": "e4m3fn", "float8_e4m3fnuz": "e4m3fnuz",
          "float8_e5m2": "e5m2", "float8_e5m2fnuz": "e5m2fnuz", "float4_e2m1fn": "e2m1fn",
          "int4": "i4", "uint4": "u4", "int2": "i2", "uint2": "u2"}
# The prelude's conversion functions: kiln_<short>_decode (storage -> float / int32),
# kiln_<short>_encode (float, or int32 -> storage) and kiln_<short>_round (float -> float,
# int32 -> int32: the nearest value of the dtype).
NARROW_CALLS = frozenset(
    f"kiln_{short}_{what}" for short in _SHORT.values() for what in ("decode", "encode", "round"))


def _dtypes_of(func: PrimFunc) -> set[str]:
    seen = {b.dtype for b in func.params}
    for s in walk_stmts(func.body):
        if isinstance(s, (Store, Allocate)):
            seen.add(s.buffer.dtype)
        if isinstance(s, LetStmt):
            seen.add(s.var.dtype)
        for e in own_exprs(s):
            seen.update(n.dtype for n in post_order(e))
    return seen


def uses_narrow(func: PrimFunc) -> bool:
    """Whether a kernel touches a narrow dtype (and so needs :func:`legalize_narrow`)."""
    return any(is_narrow(d) for d in _dtypes_of(func))


def _call(kind: str, dtype: str, arg: PrimExpr, out: str) -> PrimExpr:
    return E.Call(f"kiln_{_SHORT[dtype]}_{kind}", (arg,), out)


def _round_to(x: PrimExpr, dtype: str) -> PrimExpr:
    """``x`` (a legalized value of any dtype) converted to narrow ``dtype``'s value set, in the
    dtype's compute type."""
    src = x.dtype
    if dtype in NARROW_FLOATS:
        if src == "bool":
            return E.Cast("float32", x)
        # through float32 like ml_dtypes (a float64 rounds twice: to float32, then to dtype)
        wide = x if src == "float32" else E.Cast("float32", x)
        return _call("round", dtype, wide, "float32")
    # a narrow integer: convert to int64 like NumPy (floats truncate) and wrap
    if src != "int32":  # the low bits, as NumPy's conversion through int64 keeps them
        x = E.Cast("int64", x) if src != "int64" else x
        x = E.Cast("int32", E.Binary("floormod", x, E.IntImm(256, "int64"), "int64"))
    return _call("round", dtype, x, "int32")


class _Legalizer:
    def __init__(self) -> None:
        self.buffers: dict[int, Buffer] = {}
        self.vars: dict[int, Var] = {}
        self.wide: set[int] = set()  # kernel-local buffers, held in the compute dtype

    def buffer(self, b: Buffer) -> Buffer:
        if not is_narrow(b.dtype):
            return b
        new = self.buffers.get(id(b))
        if new is None:
            data = None
            if b.data is not None:
                data = np.ascontiguousarray(np.asarray(b.data).astype(np_dtype(b.dtype)))
                data = data.view(np_dtype(storage_dtype(b.dtype)))
            new = Buffer(b.name, storage_dtype(b.dtype), b.shape, b.strides, b.kind, b.scope, data)
            self.buffers[id(b)] = new
        return new

    def expr(self, root: PrimExpr) -> PrimExpr:
        done: dict[int, PrimExpr] = {}
        for node in post_order(root):
            kids = tuple(done[id(k)] for k in children(node))
            done[id(node)] = self.node(node, kids)
        return done[id(root)]

    def node(self, e: PrimExpr, kids: tuple[PrimExpr, ...]) -> PrimExpr:
        dt = e.dtype
        if isinstance(e, BufferLoad):
            new = self.buffer(e.buffer)
            load = BufferLoad(new, kids[0], new.dtype)
            if is_narrow(e.buffer.dtype) and id(e.buffer) not in self.wide:
                return _call("decode", e.buffer.dtype, load, compute_dtype(e.buffer.dtype))
            return load
        if isinstance(e, Var):
            if not is_narrow(dt):
                return e
            if id(e) not in self.vars:
                self.vars[id(e)] = Var(e.name, compute_dtype(dt))
            return self.vars[id(e)]
        if isinstance(e, E.FloatImm) and is_narrow(dt):
            value = e.value
            if math.isfinite(value):  # infinities stay (a max reduction's identity, say)
                value = float(np.asarray(value, np.float64).astype(np_dtype(dt)).astype(np.float64))
            return E.FloatImm(value, "float32")
        if isinstance(e, E.IntImm) and is_narrow(dt):
            if dt in NARROW_FLOATS:
                return _round_to(E.FloatImm(float(e.value), "float32"), dt)
            return E.IntImm(int(np.asarray(e.value).astype(np_dtype(dt)).astype(np.int64)),
                            "int32")
        if isinstance(e, E.Cast):
            if dt == "bool" or not is_narrow(dt):
                return E.Cast(dt, kids[0]) if kids[0].dtype != dt else kids[0]
            return _round_to(kids[0], dt)
        if isinstance(e, E.Call) and e.name == "reinterpret":
            return self.reinterpret(e, kids[0])
        if not is_narrow(dt):
            return rebuild(e, kids)
        wide = compute_dtype(dt)
        out: PrimExpr
        if isinstance(e, E.Binary):
            out = E.Binary(e.kind, kids[0], kids[1], wide)
        elif isinstance(e, E.Select):
            return E.Select(kids[0], kids[1], kids[2], wide)
        elif isinstance(e, E.Call):
            out = E.Call(e.name, kids, wide, e.arg_max)
        else:
            raise CompileError(f"cannot generate C for {type(e).__name__} of dtype {dt}")
        return out if dt in NARROW_FLOATS else _round_to(out, dt)

    def reinterpret(self, e: E.Call, x: PrimExpr) -> PrimExpr:
        src, dst = e.args[0].dtype, e.dtype
        bits = _call("encode", src, x, storage_dtype(src)) if is_narrow(src) else x
        target = storage_dtype(dst)
        if bits.dtype != target:
            bits = E.Call("reinterpret", (bits,), target)
        return _call("decode", dst, bits, compute_dtype(dst)) if is_narrow(dst) else bits

    def store_value(self, buffer: Buffer, value: PrimExpr) -> PrimExpr:
        v = self.expr(value)
        if not is_narrow(buffer.dtype):
            return v
        if value.dtype != buffer.dtype:  # a store that converts
            v = _round_to(v, buffer.dtype)
        if id(buffer) in self.wide:
            return v
        return _call("encode", buffer.dtype, v, storage_dtype(buffer.dtype))

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            return Seq(tuple(self.stmt(x) for x in s.stmts))
        if isinstance(s, For):
            kind = "serial" if s.kind == "vectorized" else s.kind
            return For(s.var, s.extent, kind, self.stmt(s.body), s.pragmas)
        if isinstance(s, Store):
            return Store(self.buffer(s.buffer), self.expr(s.index),
                         self.store_value(s.buffer, s.value))
        if isinstance(s, LetStmt):
            var = self.expr(s.var)
            assert isinstance(var, Var)
            return LetStmt(var, self.expr(s.value), self.stmt(s.body))
        if isinstance(s, IfThenElse):
            other = self.stmt(s.else_case) if s.else_case is not None else None
            return IfThenElse(self.expr(s.condition), self.stmt(s.then_case), other)
        if isinstance(s, Allocate):
            b = s.buffer
            if is_narrow(b.dtype) and b.data is None:
                self.wide.add(id(b))
                self.buffers[id(b)] = Buffer(b.name, compute_dtype(b.dtype), b.shape, b.strides,
                                             b.kind, b.scope)
            return Allocate(self.buffer(b), self.stmt(s.body))
        if isinstance(s, Evaluate):
            return Evaluate(self.expr(s.value))
        raise CompileError(f"cannot legalize statement {type(s).__name__} for narrow dtypes")


def legalize_narrow(func: PrimFunc) -> PrimFunc:
    """``func`` with its narrow-dtype buffers in their storage dtypes and its narrow arithmetic
    in float32 / int32 with explicit conversions (``func`` itself when it has none)."""
    if not uses_narrow(func):
        return func
    lg = _Legalizer()
    body = lg.stmt(func.body)
    params = [lg.buffer(b) for b in func.params]
    return PrimFunc(func.name, params, body, dict(func.attrs))
