"""Argument-type inference shared by operator families (``OpDef.infer_args``).

Type relations compute a call's result from its argument types. Some of TVM's relations also
*assign* an argument type when it is not known, which is how ``relay.var("weight")`` without a
shape gets its type from ``nn.conv2d(x, weight, channels=16, kernel_size=(3, 3))``. Each such
operator declares the fact next to its relation as ``infer_args``; this module holds the shapes
of those rules that several operators share. Every rule returns one entry per argument, ``None``
where it cannot tell (InferType then reports the variable it could not type).
"""

from __future__ import annotations

from typing import Any

from kiln.ir.types import TensorType, Type
from kiln.op.registry import ArgRel

__all__ = ["axis_vectors", "same_as_result"]


def same_as_result(types: list[Type | None], attrs: Any, out: Type | None) -> list[Type | None]:
    """An element-wise op whose result has its one argument's type (TVM's ``IdentityRel``).

    Parameters
    ----------
    types : list of Type or None
        The argument types (``None``: unknown).
    attrs : Attrs
        The call's attributes (unused).
    out : Type or None
        The result type, when known.

    Returns
    -------
    list of Type or None
        ``[out]``: the argument has the result's type.
    """
    return [out] + [None] * (len(types) - 1)


def axis_vectors(*args: int) -> ArgRel:
    """Arguments ``args`` are vectors along ``attrs.axis`` of argument 0, in its dtype.

    TVM's ``BiasAddRel``, ``BatchNormRel``, ``LayerNormRel``, ``InstanceNormRel``, ``GroupNormRel``
    and ``PReluRel`` assign ``Tensor[(data.shape[axis],), data.dtype]`` to them.

    Parameters
    ----------
    *args : int
        Positions of the vector arguments.

    Returns
    -------
    callable
        The ``infer_args`` rule.
    """

    def infer(types: list[Type | None], attrs: Any, out: Type | None) -> list[Type | None]:
        implied: list[Type | None] = [None] * len(types)
        data = types[0] if types else None
        if not isinstance(data, TensorType) or not -data.ndim <= int(attrs.axis) < data.ndim:
            return implied
        vec = TensorType((data.shape[int(attrs.axis) % data.ndim],), data.dtype)
        for i in args:
            if i < len(types):
                implied[i] = vec
        return implied

    return infer
