"""``relay.frontend.common``: the helpers TVM's importers share (type and shape inference of a
partly built graph, constant evaluation, fresh variables), for scripts and tests that call them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir import Expr, Function, IRModule, TensorType, TupleType, Var, var
from kiln.ir.analysis import free_vars
from kiln.runtime import ndarray as _nd
from kiln.transform.fold_constant import fold_constant as _fold_constant
from kiln.transform.infer_type import infer_type as _infer_module

__all__ = [
    "fold_constant",
    "get_relay_op",
    "infer_channels",
    "infer_shape",
    "infer_type",
    "infer_value",
    "infer_value_simulated",
    "new_var",
    "shape_of",
    "try_infer_value",
]


def infer_type(node: Expr, mod: IRModule | None = None) -> Expr:
    """``node`` with its type inferred (TVM's ``relay.frontend.common.infer_type``).

    Parameters
    ----------
    node : Expr
        An expression or a function; free variables become ``main``'s parameters.
    mod : IRModule, optional
        A module whose functions ``node`` may call.

    Returns
    -------
    Expr
        The typed function when ``node`` is a function, else the typed body (read
        ``.checked_type``).
    """
    new_mod = IRModule.from_expr(node)
    if mod is not None:
        for gv in mod.get_global_vars():
            if gv.name_hint != "main":
                new_mod[gv] = mod[gv]
    typed = _infer_module(new_mod)["main"]
    return typed if isinstance(node, Function) else typed.body


def _shape_of_type(ty: Any) -> Any:
    if isinstance(ty, TensorType):
        return [int(d) if isinstance(d, (int, np.integer)) else d for d in ty.shape]
    if isinstance(ty, TupleType):
        return [_shape_of_type(f) for f in ty.fields]
    raise KilnError(f"infer_shape: {type(ty).__name__} has no shape")


def infer_shape(inputs: Expr, mod: IRModule | None = None) -> Any:
    """The static shape of ``inputs`` as a list of ints (a list of shapes for a tuple)."""
    out = infer_type(inputs, mod)
    ty = out.ret_type if isinstance(out, Function) else out.checked_type
    return _shape_of_type(ty)


def infer_channels(inputs: Expr, transpose: bool = False) -> int:
    """The channel count of a weight: ``shape[1]`` when ``transpose`` else ``shape[0]``."""
    shape = infer_shape(inputs)
    return int(shape[1] if transpose else shape[0])


def infer_value(input_val: Expr, params: Mapping[str, Any] | None = None,
                mod: IRModule | None = None) -> Any:
    """Evaluate ``input_val``, whose free variables must all be in ``params``; returns an NDArray."""
    from kiln.interpreter import evaluate

    params = dict(params or {})
    missing = [v.name_hint for v in free_vars(input_val) if v.name_hint not in params]
    if missing:
        raise KilnError(f"infer_value: no value for the free variable(s) {', '.join(missing)}")
    fn = Function(free_vars(input_val), input_val)
    new_mod = IRModule.from_expr(fn)
    if mod is not None:
        for gv in mod.get_global_vars():
            if gv.name_hint != "main":
                new_mod[gv] = mod[gv]
    inputs = {k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for k, v in params.items()
              if any(p.name_hint == k for p in fn.params)}
    out = evaluate(new_mod, inputs)
    if isinstance(out, (tuple, list)):
        return [_nd.array(np.asarray(o)) for o in out]
    return _nd.array(np.asarray(out))


def infer_value_simulated(input_val: Expr, params: Mapping[str, Any] | None = None) -> Any:
    """:func:`infer_value`, with random values for the free variables not in ``params``."""
    params = dict(params or {})
    typed = infer_type(Function(free_vars(input_val), input_val))
    assert isinstance(typed, Function)
    rng = np.random.default_rng(0)
    for p in typed.params:
        if p.name_hint not in params:
            ty = p.checked_type
            if not isinstance(ty, TensorType):
                raise KilnError(f"infer_value_simulated: {p.name_hint} is not a tensor")
            params[p.name_hint] = rng.uniform(size=[int(d) for d in ty.shape]).astype(ty.dtype)
    return infer_value(input_val, params)


def try_infer_value(val: Expr, on_success: Any = None, on_failure: Any = None,
                    parameters: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
    """``(value, True)`` when ``val`` evaluates, else ``(val, False)``; the callbacks map the result."""
    try:
        ret = infer_value(val, parameters or {}).numpy()
    except KilnError:
        return (on_failure() if on_failure else val), False
    return (on_success(ret) if on_success else ret), True


def fold_constant(node: Expr, mod: IRModule | None = None) -> Expr:
    """``node`` with its constant subgraphs folded."""
    return _fold_constant(node, mod)


def new_var(name_hint: str, type_annotation: Any = None, shape: Sequence[int] | None = None,
            dtype: str = "float32") -> Var:
    """A fresh variable: ``relay.var(name_hint, type_annotation, shape, dtype)``."""
    return var(name_hint, type_annotation, shape, dtype)


def shape_of(x: Expr, dtype: str = "int64", start: int | None = None, end: int | None = None) -> Expr:
    """The shape of ``x`` as a constant when it is static, else ``shape_of(x)`` (sliced to
    ``[start:end]``)."""
    from kiln.op import transform as _tf

    ty = infer_type(x).checked_type
    if isinstance(ty, TensorType) and all(isinstance(d, (int, np.integer)) for d in ty.shape):
        from kiln.ir import const

        return const(np.array([int(d) for d in ty.shape][start:end], dtype=dtype))
    out = _tf.shape_of(x, dtype)
    if start is not None or end is not None:
        rank = len(ty.shape) if isinstance(ty, TensorType) else 0
        out = _tf.strided_slice(out, [start or 0], [end if end is not None else rank])
    return out


def get_relay_op(op_name: str) -> Any:
    """The ``relay`` operator function called ``op_name`` (``"nn.conv2d"``, ``"add"``...)."""
    import kiln.op as _op

    obj: Any = _op
    for part in op_name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise KilnError(f"unable to map op_name {op_name!r} to a relay operator")
    return obj
