"""The reference interpreter: evaluate any IRModule with the operators' NumPy kernels.

This is Kiln's oracle. Tests compare compiled code against it, the debugger compares node outputs
with it, and the ``numpy`` target runs fused functions through it. It evaluates graphs without
recursion (deep models are fine), frees intermediate values as soon as their last user ran, and
checks that every reference kernel returns exactly the shape and dtype type inference promised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.ir.module import IRModule
from kiln.ir.printer import format_type
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite
from kiln.ir.types import TensorType, TupleType, Type, np_dtype
from kiln.ir.visitor import children, post_order
from kiln.op.narrow_ref import run_reference
from kiln.op.registry import get_op_def

__all__ = ["Interpreter", "check_value", "evaluate"]

Value = Any  # np.ndarray or tuple of values


class InterpreterError(KilnError):
    """Evaluation failed: bad inputs, or a kernel misbehaved."""


def _as_array(x: Any) -> np.ndarray:
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()
    return np.asarray(x)


class RefValue:
    """A reference cell (the value of ``RefCreate``)."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    def __repr__(self) -> str:
        return f"RefValue({self.value!r})"


def check_value(value: Value, ty: Type, what: str) -> Value:
    """Check (and return) ``value`` against ``ty``; raises naming ``what`` on a mismatch."""
    if isinstance(ty, TupleType):
        if not isinstance(value, tuple) or len(value) != len(ty.fields):
            raise InterpreterError(f"{what}: expected a tuple of {len(ty.fields)}, got "
                                   f"{type(value).__name__}")
        return tuple(check_value(v, t, f"{what}.{i}") for i, (v, t) in enumerate(zip(value, ty.fields)))
    if isinstance(ty, RefType):
        if not isinstance(value, RefValue):
            raise InterpreterError(f"{what}: expected a reference, got {type(value).__name__}")
        return value
    assert isinstance(ty, TensorType)
    if not isinstance(value, np.ndarray):
        raise InterpreterError(f"{what}: expected an array, got {type(value).__name__}")
    if value.shape != ty.shape or value.dtype != np_dtype(ty.dtype):
        raise InterpreterError(f"{what}: produced shape {value.shape} dtype {value.dtype}, but its "
                               f"type is {format_type(ty)}")
    return value


class Interpreter:
    """Evaluates the functions of a module with reference kernels.

    Parameters
    ----------
    mod : IRModule
        The module (types are inferred if missing).
    on_value : callable, optional
        ``on_value(node, value)`` is called for every call node evaluated (debugging hook).
    """

    def __init__(self, mod: IRModule, on_value: Callable[[Expr, Value], None] | None = None):
        from kiln.transform.infer_type import infer_type

        needs_types = any(not fn.has_type for fn in mod.functions.values())
        self.mod = infer_type(mod) if needs_types else mod
        self.on_value = on_value
        self.calls_evaluated = 0

    def run(self, inputs: Mapping[str, Any] | Sequence[Any] = (), entry: str = "main",
            **kw_inputs: Any) -> Value:
        """Run function ``entry`` on inputs given by name (or positionally)."""
        fn = self.mod[entry]
        if isinstance(inputs, Mapping):
            named = {**inputs, **kw_inputs}
            missing = [p.name_hint for p in fn.params if p.name_hint not in named]
            if missing:
                raise InterpreterError(f"missing input(s) for @{entry}: {', '.join(missing)}")
            unknown = set(named) - {p.name_hint for p in fn.params}
            if unknown:
                raise InterpreterError(f"@{entry} has no parameter(s) {', '.join(sorted(unknown))}; "
                                       f"it takes {', '.join(p.name_hint for p in fn.params)}")
            args = [named[p.name_hint] for p in fn.params]
        else:
            args = list(inputs)
        return self.call_function(fn, args, f"@{entry}")

    def call_function(self, fn: Function, args: Sequence[Any], name: str = "function") -> Value:
        """Evaluate ``fn`` on argument values."""
        if len(args) != len(fn.params):
            raise InterpreterError(f"{name} takes {len(fn.params)} argument(s), got {len(args)}")
        env: dict[int, Value] = {}
        for p, a in zip(fn.params, args):
            value = tuple(_as_array(x) for x in a) if isinstance(a, (tuple, list)) else _as_array(a)
            ty = p.checked_type
            if isinstance(ty, TensorType) and isinstance(value, np.ndarray):
                if value.shape != ty.shape:
                    raise InterpreterError(f"{name}: input %{p.name_hint} has shape {value.shape}, "
                                           f"expected {ty.shape}")
                if value.dtype != np_dtype(ty.dtype):
                    raise InterpreterError(f"{name}: input %{p.name_hint} has dtype {value.dtype}, "
                                           f"expected {ty.dtype}")
            env[id(p)] = value
        return self.eval_body(fn.body, env)

    def eval_body(self, body: Expr, env: dict[int, Value]) -> Value:
        """Evaluate an expression with variables bound by ``env`` (``id(var) -> value``)."""
        order = post_order(body, into_functions=False)
        uses: dict[int, int] = {}
        let_values: dict[int, Var] = {}
        for node in order:
            if isinstance(node, Let):
                let_values[id(node.value)] = node.var
            if isinstance(node, Function) and node is not body:
                continue
            for c in children(node):
                uses[id(c)] = uses.get(id(c), 0) + 1
        values: dict[int, Value] = {}

        def get(node: Expr) -> Value:
            if isinstance(node, Var):
                if id(node) not in env:
                    raise InterpreterError(f"variable %{node.name_hint} is not bound")
                return env[id(node)]
            value = values[id(node)]
            if node is not body:
                uses[id(node)] -= 1
                if uses[id(node)] == 0:
                    del values[id(node)]
            return value

        for node in order:
            if isinstance(node, (Var, Op, GlobalVar)) or (isinstance(node, Function) and
                                                          node is not body):
                continue
            value = self._eval_node(node, get)
            if id(node) in let_values:
                env[id(let_values[id(node)])] = value
            values[id(node)] = value
        return get(body) if not isinstance(body, Var) else env[id(body)]

    def _eval_node(self, node: Expr, get: Callable[[Expr], Value]) -> Value:
        if isinstance(node, Constant):
            return node.value
        if isinstance(node, Tuple):
            return tuple(get(f) for f in node.fields)
        if isinstance(node, TupleGetItem):
            return get(node.tuple_value)[node.index]
        if isinstance(node, Call):
            args = [get(a) for a in node.args]
            return self._eval_call(node, args)
        if isinstance(node, If):
            cond, then_v, else_v = get(node.cond), get(node.then_branch), get(node.else_branch)
            return then_v if bool(np.asarray(cond).reshape(-1)[0]) else else_v
        if isinstance(node, Let):
            get(node.value)
            return get(node.body)
        if isinstance(node, Function):
            raise InterpreterError("a function literal can only be evaluated by calling it")
        if isinstance(node, RefCreate):
            return RefValue(get(node.value))
        if isinstance(node, RefRead):
            return get(node.ref).value
        if isinstance(node, RefWrite):
            ref, value = get(node.ref), get(node.value)
            ref.value = value
            return ()
        raise InterpreterError(f"cannot evaluate {type(node).__name__}")

    def _eval_call(self, call: Call, args: list[Value]) -> Value:
        self.calls_evaluated += 1
        if isinstance(call.op, Op):
            op_def = get_op_def(call.op.name)
            try:
                with np.errstate(all="ignore"):
                    out = run_reference(op_def, args, call.attrs, call.checked_type)
            except KilnError:
                raise
            except Exception as e:
                raise InterpreterError(f"reference kernel of {call._short()} failed: "
                                       f"{type(e).__name__}: {e}") from e
            if isinstance(out, list):
                out = tuple(out)
            out = check_value(out, call.checked_type, f"reference kernel of {call._short()}")
        elif isinstance(call.op, GlobalVar):
            out = self.call_function(self.mod[call.op], args, f"@{call.op.name_hint}")
        elif isinstance(call.op, Function):
            out = self.call_function(call.op, args, "fused function")
        else:
            raise InterpreterError(f"cannot call {type(call.op).__name__}")
        if self.on_value is not None:
            self.on_value(call, out)
        return out


def evaluate(
    mod: IRModule | Expr,
    inputs: Mapping[str, Any] | Sequence[Any] = (),
    params: Mapping[str, Any] | None = None,
    entry: str = "main",
) -> Value:
    """Evaluate a module (or a closed expression) with the reference kernels.

    Parameters
    ----------
    mod : IRModule or Expr
        What to run; an expression is wrapped in a function of its free variables.
    inputs : mapping of name to array, or sequence of arrays
        Inputs of ``entry``.
    params : mapping of name to array, optional
        More named inputs (weights), merged with ``inputs``.
    entry : str
        The function to run.

    Returns
    -------
    numpy.ndarray or tuple
        The result (a tuple for tuple-typed results).
    """
    if not isinstance(mod, IRModule):
        mod = IRModule.from_expr(mod)
    if params:
        if not isinstance(inputs, Mapping):
            fn = mod[entry]
            inputs = {p.name_hint: v for p, v in zip(fn.params, inputs)}
        inputs = {**params, **inputs}
    return Interpreter(mod).run(inputs, entry)
