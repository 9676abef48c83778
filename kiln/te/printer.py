"""TVM's legacy text form of expressions (``AsLegacyRepr``), the form Ansor's DAG print uses.

``(A[i, k]*B[k, j])``, ``(a + b)``, ``max(x, 0f)``, ``floordiv(i, 4)``, ``select(c, a, b)``,
``float32(x)``, ``tir.exp(x)``; int32 constants print bare, others as ``(int64)5``; float32
constants get an ``f`` suffix, float16 an ``h``, and use C++ ``ostream`` formatting (``%g``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kiln.te.expr import (
    And,
    Binary,
    Call,
    Cast,
    Compare,
    FloatImm,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Reduce,
    Select,
    TensorLoad,
    Var,
    dtype_bits,
)

__all__ = ["format_float", "legacy_repr"]

_INFIX = {"add": " + ", "sub": " - ", "mul": "*", "div": "/", "mod": " % "}
_CMP = {"eq": " == ", "ne": " != ", "lt": " < ", "le": " <= ", "gt": " > ", "ge": " >= "}


def format_float(value: float) -> str:
    """A double printed by a C++ ``ostream`` with default settings (``%g``, 6 digits)."""
    if math.isnan(value):
        return "nan" if math.copysign(1.0, value) > 0 else "-nan"
    return f"{value:g}"


def legacy_repr(e: PrimExpr) -> str:
    """``e`` in TVM's legacy text form (what ``AsLegacyRepr`` prints)."""
    parts: list[str] = []
    _emit(e, parts)
    return "".join(parts)


def _emit(e: PrimExpr, out: list[str]) -> None:
    if isinstance(e, Var):
        out.append(e.name)
    elif isinstance(e, IntImm):
        out.append(str(e.value) if e.dtype == "int32" else f"({e.dtype}){e.value}")
    elif isinstance(e, FloatImm):
        if e.dtype in ("float64", "float32", "float16"):
            suffix = {64: "", 32: "f", 16: "h"}[dtype_bits(e.dtype)]
            out.append(format_float(e.value) + suffix)
        else:  # bfloat16, float8, float4: a cast, as TVM prints them
            out.append(f"({e.dtype}){format_float(e.value)}")
    elif isinstance(e, Binary):
        if e.kind in _INFIX:
            out.append("(")
            _emit(e.a, out)
            out.append(_INFIX[e.kind])
            _emit(e.b, out)
            out.append(")")
        else:
            out.append(e.kind + "(")
            _emit(e.a, out)
            out.append(", ")
            _emit(e.b, out)
            out.append(")")
    elif isinstance(e, Compare):
        out.append("(")
        _emit(e.a, out)
        out.append(_CMP[e.kind])
        _emit(e.b, out)
        out.append(")")
    elif isinstance(e, (And, Or)):
        out.append("(")
        _emit(e.a, out)
        out.append(" && " if isinstance(e, And) else " || ")
        _emit(e.b, out)
        out.append(")")
    elif isinstance(e, Not):
        out.append("!")
        _emit(e.a, out)
    elif isinstance(e, Select):
        out.append("select(")
        _emit(e.condition, out)
        out.append(", ")
        _emit(e.true_value, out)
        out.append(", ")
        _emit(e.false_value, out)
        out.append(")")
    elif isinstance(e, Cast):
        out.append(e.dtype + "(")
        _emit(e.value, out)
        out.append(")")
    elif isinstance(e, Call):
        out.append(f"tir.{e.name}(")
        for i, arg in enumerate(e.args):
            if i:
                out.append(", ")
            _emit(arg, out)
        out.append(")")
    elif isinstance(e, TensorLoad):
        out.append(e.tensor.name + "[")
        for i, idx in enumerate(e.indices):
            if i:
                out.append(", ")
            _emit(idx, out)
        out.append("]")
    elif isinstance(e, Reduce):
        out.append(_reduce_repr(e))
    else:
        out.append(_other_repr(e))


def _array_repr(items: Sequence[Any]) -> str:
    return "[" + ", ".join(legacy_repr(x) if isinstance(x, PrimExpr) else str(x) for x in items) + "]"


def _reduce_repr(e: Reduce) -> str:
    axes = ", ".join(str(iv) for iv in e.axis)
    return (f"reduce(combiner={e.combiner}, source={_array_repr(e.source)}, "
            f"init={_array_repr(e.init)}, axis=[{axes}], where={legacy_repr(e.condition)}, "
            f"value_index={e.value_index})")


def _other_repr(e: PrimExpr) -> str:
    # Expression kinds defined by later layers (loop IR buffer loads) print themselves through
    # a ``legacy_text()`` method.
    text = getattr(e, "legacy_text", None)
    if callable(text):
        return str(text())
    return type(e).__name__
