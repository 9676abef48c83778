"""What every importer shares, whatever the framework: :class:`ImportState`.

An importer walks the framework's graph node by node. For each node it builds relay expressions
with the operator builders of :mod:`kiln.op`, then calls :meth:`ImportState.finish`, which

* stamps the node's name on every new call (``Call.source_names``: provenance, carried into fused
  function headers, the graph JSON and the debugger),
* folds every new subexpression built from constants only into a :class:`Constant` (so shape
  arithmetic disappears at import),
* types the outputs, so a type error is attributed to the node that caused it.

Weights become constants (``freeze_params=True``) or named params (:meth:`ImportState.constant`);
:meth:`ImportState.module` makes the ``main`` function and the params dict. Unsupported operators
are reported all at once with :class:`~kiln.errors.UnsupportedOpError` (:func:`unsupported_error`);
a framework that is not installed is reported by :func:`require` with the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from kiln.errors import FrontendError, InputShapeError, KilnTypeError, UnsupportedOpError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.printer import format_type
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import children, rebuild
from kiln.op.registry import get_op_def

__all__ = ["ImportState", "check_input_shape", "require", "unsupported_error"]


def require(module: str, extra: str, frontend: str) -> ModuleType:
    """Import ``module`` for ``frontend``, or raise a :class:`FrontendError` naming the extra
    to install (``extra=""``: the package itself).

    >>> require("numpy", "dev", "from_numpy").__name__
    'numpy'
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.split(".")[0]
        how = f"pip install 'kiln[{extra}]'" if extra else f"pip install {package}"
        raise FrontendError(f"{frontend} needs the {package} package, which is not installed "
                            f"({e}); install it with: {how}") from None


def unsupported_error(problems: Mapping[str, Iterable[str]] | Iterable[tuple[str, Iterable[str], str]],
                      framework: str) -> UnsupportedOpError:
    """One error listing every unsupported op kind with its node names.

    ``problems`` maps op kind to node names, or is a list of ``(op kind, node names, detail)``.
    """
    items = (((op, names, "") for op, names in problems.items()) if isinstance(problems, Mapping)
             else problems)
    return UnsupportedOpError([(op, list(names), detail) for op, names, detail in items],
                              framework=framework)


def check_input_shape(name: str, declared: Sequence[int | str | None] | None,
                      given: Sequence[int]) -> tuple[int, ...]:
    """``given`` as the static shape of input ``name`` if it keeps the declared rank and static
    dims (``None`` or a string is a free dim), else :class:`InputShapeError`."""
    shape = tuple(int(d) for d in given)
    if any(d < 0 for d in shape):
        raise FrontendError(f"the shape given for input {name!r}, {list(shape)}, has a negative dim")
    if declared is not None:
        declared = tuple(declared)
        if len(declared) != len(shape):
            raise InputShapeError(name, None, declared, shape)
        for i, (d, g) in enumerate(zip(declared, shape)):
            if isinstance(d, int) and d >= 0 and d != g:
                raise InputShapeError(name, i, declared, shape)
    return shape


class ImportState:
    """The state of one import shared by every node conversion.

    Parameters
    ----------
    freeze_params : bool
        True: weights are embedded as constants and the params dict is empty. False: they become
        parameters of ``main`` named after them, returned in the params dict.
    """

    def __init__(self, freeze_params: bool = True):
        self.freeze_params = freeze_params
        self.inputs: list[Var] = []
        self.param_vars: list[Var] = []
        self.param_values: dict[str, np.ndarray] = {}
        self.used_names: set[str] = set()
        self.known: dict[int, Expr] = {}  # nodes already stamped; also keeps them alive
        self.values: dict[int, tuple[Expr, np.ndarray | None]] = {}
        self.var_values: dict[int, np.ndarray] = {}

    # --- names, inputs, weights ----------------------------------------------------------------
    def unique_name(self, name: str) -> str:
        """``name`` if unused, else ``name_1``, ``name_2``, ... (stable for a given model)."""
        base = name or "const"
        out, n = base, 0
        while out in self.used_names:
            n += 1
            out = f"{base}_{n}"
        self.used_names.add(out)
        return out

    def register(self, expr: Expr) -> Expr:
        """Mark ``expr`` as converted: :meth:`finish` does not stamp or fold it again."""
        self.known[id(expr)] = expr
        return expr

    def add_input(self, name: str, shape: Sequence[int], dtype: str) -> Var:
        """A graph input of ``main`` (in the order of the calls)."""
        if name in self.used_names:
            raise FrontendError(f"two graph inputs are named {name!r}")
        self.used_names.add(name)
        v = Var(name, TensorType(tuple(int(d) for d in shape), dtype))
        self.inputs.append(v)
        self.register(v)
        return v

    def constant(self, name: str, value: Any) -> Expr:
        """A weight: embedded, or (``freeze_params=False``) a param named after ``name``."""
        value = np.asarray(value)
        if self.freeze_params:
            return self.register(Constant(value))
        pname = self.unique_name(name)
        v = Var(pname, TensorType(value.shape, str(value.dtype) if value.dtype != np.bool_ else "bool"))
        self.param_vars.append(v)
        self.param_values[pname] = value
        self.var_values[id(v)] = value
        return self.register(v)

    def module(self, outputs: Sequence[Expr], output_names: Sequence[str] | None = None
               ) -> tuple[IRModule, dict[str, Any]]:
        """``main`` over the inputs (then the params it uses) returning ``outputs`` (a tuple when
        several), and the params dict; ``output_names`` go to ``mod.attrs["output_names"]``."""
        body: Expr = outputs[0] if len(outputs) == 1 else Tuple(list(outputs))
        used = {id(v) for v in free_vars(body)}
        params = [v for v in self.param_vars if id(v) in used]
        stray = [v.name_hint for v in free_vars(body)
                 if id(v) not in {id(p) for p in (*self.inputs, *self.param_vars)}]
        if stray:
            raise FrontendError(f"the graph's outputs depend on unbound values {stray}")
        fn = Function([*self.inputs, *params], body)
        attrs = {} if output_names is None else {"output_names": tuple(output_names)}
        mod = IRModule({"main": fn}, attrs=attrs)
        # Params are runtime arrays, as TVM returns them (the IR's Constant.data does the same).
        from kiln.runtime.ndarray import NDArray

        return mod, {v.name_hint: NDArray(self.param_values[v.name_hint]) for v in params}

    # --- after each node: provenance and folding ----------------------------------------------
    def finish(self, outs: Sequence[Expr | None], source: str) -> list[Expr | None]:
        """Stamp new calls with ``source`` and fold every new subexpression of constants only."""
        roots = [o for o in outs if o is not None]
        order: list[Expr] = []
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(roots)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen or id(node) in self.known:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for c in reversed(children(node)):
                if id(c) not in seen and id(c) not in self.known:
                    stack.append((c, False))
        memo: dict[int, Expr] = {}
        constant: dict[int, bool] = {}  # built only from constants (id of the rebuilt node)
        for node in order:
            kids = tuple(memo.get(id(c), c) for c in children(node))
            new = rebuild(node, kids)
            if isinstance(new, Call) and not new.source_names:
                new = Call(new.op, new.args, new.attrs, source_names=(source,))
            is_const = isinstance(new, Constant) or (
                bool(kids) and not isinstance(new, (Var, Function))
                and all(constant.get(id(k), isinstance(k, Constant)) for k in kids))
            if is_const and not isinstance(new, Constant):
                new = self.fold(new)  # the largest constant subexpressions become Constants
            constant[id(new)] = is_const
            memo[id(node)] = new
        result: list[Expr | None] = []
        for o in outs:
            if o is None:
                result.append(None)
                continue
            new = memo.get(id(o), o)
            self.type_of(new)  # type errors surface here, attributed to this node
            result.append(self.register(new))
        for new in memo.values():
            self.register(new)
        return result

    def fold(self, expr: Expr) -> Expr:
        """Evaluate a constant-only expression into a Constant."""
        from kiln.interpreter import evaluate

        if not isinstance(self.type_of(expr), TensorType):
            return expr
        value = evaluate(expr)
        return Constant(np.array(value, order="C"))

    # --- types and values for converters ------------------------------------------------------
    def type_of(self, expr: Expr) -> Type:
        """The type of ``expr``, inferring only the nodes not typed yet.

        Type inference over the whole graph below ``expr`` at every node would make a
        node-by-node import quadratic; this walk stops at typed nodes.
        """
        if expr.has_type:
            return expr.checked_type
        order: list[Expr] = []
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
            elif id(node) not in seen and not node.has_type:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((c, False) for c in children(node) if not c.has_type)
        for node in order:
            node._set_checked_type(_node_type(node))
        return expr.checked_type

    def shape_of(self, expr: Expr) -> tuple[int, ...]:
        """The static shape of tensor ``expr``."""
        ty = self.type_of(expr)
        if not isinstance(ty, TensorType):
            raise KilnTypeError(f"expected a tensor, got {format_type(ty)}")
        return tuple(int(d) for d in ty.shape)

    def dtype_of(self, expr: Expr) -> str:
        """The dtype of tensor ``expr``."""
        ty = self.type_of(expr)
        if not isinstance(ty, TensorType):
            raise KilnTypeError(f"expected a tensor, got {format_type(ty)}")
        return str(ty.dtype)

    def inputs_of(self, expr: Expr) -> list[str]:
        """Names of the graph inputs ``expr`` depends on."""
        inputs = {id(v) for v in self.inputs}
        return [v.name_hint for v in free_vars(expr) if id(v) in inputs]

    def value_of(self, expr: Expr) -> np.ndarray | None:
        """The value of ``expr`` when it is known at import (constants, params, folded)."""
        if isinstance(expr, Constant):
            return expr.value
        if isinstance(expr, Var):
            return self.var_values.get(id(expr))
        if not self.var_values:
            return None  # constant-only subexpressions are already folded into Constants
        cached = self.values.get(id(expr))
        if cached is not None and cached[0] is expr:
            return cached[1]
        fvs = free_vars(expr)
        value: np.ndarray | None = None
        if all(id(v) in self.var_values for v in fvs) and isinstance(self.type_of(expr), TensorType):
            from kiln.interpreter import evaluate

            value = np.asarray(evaluate(Function(fvs, expr), [self.var_values[id(v)] for v in fvs]))
        self.values[id(expr)] = (expr, value)
        return value


def _node_type(node: Expr) -> Type:
    """The type of a node whose children are typed (the node kinds converters build)."""
    if isinstance(node, Constant):
        return node.tensor_type
    if isinstance(node, Var):
        if node.type_annotation is None:
            raise KilnTypeError(f"variable %{node.name_hint} has no type")
        return node.type_annotation
    if isinstance(node, Tuple):
        return TupleType(tuple(f.checked_type for f in node.fields))
    if isinstance(node, TupleGetItem):
        ty = node.tuple_value.checked_type
        if not isinstance(ty, TupleType) or not 0 <= node.index < len(ty.fields):
            raise KilnTypeError(f"projection .{node.index} of {format_type(ty)}")
        return ty.fields[node.index]
    if isinstance(node, Call) and isinstance(node.op, Op):
        op_def = get_op_def(node.op.name)
        arg_types = [a.checked_type for a in node.args]
        try:
            return op_def.type_rel(arg_types, node.attrs)
        except KilnTypeError as e:
            shown = ", ".join(format_type(t) for t in arg_types)
            raise KilnTypeError(f"{e}; argument types ({shown})") from None
    raise KilnTypeError(f"cannot type {type(node).__name__} nodes during import")
