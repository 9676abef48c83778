"""Reference kernels on narrow dtypes (bfloat16, float8, float4_e2m1fn, int4/uint4/int2/uint2).

The operators' NumPy reference kernels are written for NumPy's own dtypes (they branch on
``dtype.kind``, call ``np.iinfo``/``np.finfo``, ...), which ``ml_dtypes``' types do not satisfy.
:func:`run_reference` runs a kernel on narrow values the way NumPy computes on ``ml_dtypes``
arrays: inputs widen exactly (narrow floats to float32, narrow integers to int32), the kernel runs
on the wide values and each narrow output rounds (or wraps) back once. ``reinterpret`` works on
the bits and runs as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.types import TensorType, TupleType, Type
from kiln.op.registry import OpDef
from kiln.runtime.dtype import as_dtype, compute_dtype, is_narrow, np_dtype

__all__ = ["run_reference"]

_BITWISE = ("reinterpret",)


def _narrow_array(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        try:
            return is_narrow(as_dtype(v.dtype))
        except ValueError:
            return False
    if isinstance(v, (tuple, list)):
        return any(_narrow_array(x) for x in v)
    return False


def _narrow_type(t: Type) -> bool:
    if isinstance(t, TensorType):
        return is_narrow(t.dtype)
    if isinstance(t, TupleType):
        return any(_narrow_type(f) for f in t.fields)
    return False


def _widen(v: Any) -> Any:
    if isinstance(v, np.ndarray) and _narrow_array(v):
        return v.astype(np_dtype(compute_dtype(as_dtype(v.dtype))))
    if isinstance(v, (tuple, list)):
        return type(v)(_widen(x) for x in v)
    return v


def _widen_type(t: Type) -> Type:
    if isinstance(t, TensorType):
        return TensorType(t.shape, compute_dtype(t.dtype)) if is_narrow(t.dtype) else t
    if isinstance(t, TupleType):
        return TupleType(tuple(_widen_type(f) for f in t.fields))
    return t


def _narrow(v: Any, t: Type) -> Any:
    if isinstance(t, TensorType):
        if not is_narrow(t.dtype):
            return v
        with np.errstate(all="ignore"):
            return np.asarray(v).astype(np_dtype(t.dtype))
    if isinstance(t, TupleType) and isinstance(v, (tuple, list)):
        return type(v)(_narrow(x, f) for x, f in zip(v, t.fields))
    return v


def run_reference(op_def: OpDef, args: list[Any], attrs: Any, out_type: Type) -> Any:
    """``op_def.reference(args, attrs, out_type)``, computing narrow dtypes in float32 / int32
    and rounding narrow results back (see the module docstring)."""
    if op_def.name in _BITWISE or not (_narrow_type(out_type) or _narrow_array(args)):
        return op_def.reference(args, attrs, out_type)
    out = op_def.reference([_widen(a) for a in args], attrs, _widen_type(out_type))
    return _narrow(out, out_type)
