"""Type inference: fill every node's ``checked_type`` and every function's ``ret_type``.

Types flow bottom-up from variable annotations and constants through each operator's type
relation. A node's type depends only on its structure, so it is cached on the node the first time
it is computed; functions without a declared return type are rebuilt with the inferred one (as TVM
does), which is the only structural change this pass makes. Errors name the operator, its source
nodes, the function, and every argument type.
"""

from __future__ import annotations

from kiln.errors import KilnTypeError
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
from kiln.ir.types import FuncType, TensorType, TupleType, Type
from kiln.ir.visitor import children, post_order, rewrite
from kiln.op.registry import get_op_def
from kiln.transform.pass_infra import ModulePass, PassInfo

__all__ = ["InferType", "check_types", "infer_expr_type", "infer_node_type", "infer_type"]


def _describe(call: Call) -> str:
    if isinstance(call.op, Op):
        name = call.op.name
    elif isinstance(call.op, GlobalVar):
        name = f"@{call.op.name_hint}"
    else:
        name = "a function literal"
    if call.source_names:
        name += f" (source node {', '.join(repr(s) for s in call.source_names)})"
    return name


def _arg_list(types: list[Type]) -> str:
    return "(" + ", ".join(format_type(t) for t in types) + ")"


class _Inferencer:
    def __init__(self, mod: IRModule | None, dry: bool = False):
        self.mod = mod
        # dry run (the verifier): types go to a side table, nodes' caches are left untouched
        self.scratch: dict[int, Type] | None = {} if dry else None
        self.keep: list[Expr] = []
        self.func_types: dict[str, FuncType] = {}
        self.in_progress: set[str] = set()
        self.where = "expression"

    # --- global functions ------------------------------------------------------------------
    def global_type(self, gv: GlobalVar) -> FuncType:
        name = gv.name_hint
        if name in self.func_types:
            return self.func_types[name]
        if self.mod is None or name not in self.mod:
            raise KilnTypeError(f"call to @{name}, which is not defined in the module")
        if name in self.in_progress:
            raise KilnTypeError(f"@{name} calls itself; recursive functions are not supported")
        self.in_progress.add(name)
        saved = self.where
        self.where = f"@{name}"
        fn = self.mod[name]
        self.infer(fn)
        self.where = saved
        self.in_progress.discard(name)
        ty = self.ty(fn)
        assert isinstance(ty, FuncType)
        self.func_types[name] = ty
        return ty

    # --- expressions -----------------------------------------------------------------------
    def ty(self, node: Expr) -> Type:
        """The type of an already visited node."""
        if node._checked_type is not None:
            return node._checked_type
        if self.scratch is not None and id(node) in self.scratch:
            return self.scratch[id(node)]
        return node.checked_type  # raises the "not known yet" error

    def _known(self, node: Expr) -> bool:
        return (node._checked_type is not None or isinstance(node, (Op, GlobalVar))
                or (self.scratch is not None and id(node) in self.scratch))

    def _untyped_post_order(self, expr: Expr) -> list[Expr]:
        """Nodes without a known type, children first; typed subgraphs are not entered."""
        order: list[Expr] = []
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
            elif id(node) not in seen and not self._known(node):
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(children(node)))
        return order

    def infer(self, expr: Expr) -> Type | None:
        for node in self._untyped_post_order(expr):
            if self.scratch is None:
                node._set_checked_type(self.node_type(node))
            elif id(node) not in self.scratch:
                self.scratch[id(node)] = self.node_type(node)
                self.keep.append(node)
        return self.ty(expr)

    def node_type(self, node: Expr) -> Type:
        if isinstance(node, Var):
            if node.type_annotation is None:
                raise KilnTypeError(f"variable %{node.name_hint} in {self.where} has no type "
                                    "annotation; give relay.var a shape and dtype")
            return node.type_annotation
        if isinstance(node, Constant):
            return node.tensor_type
        if isinstance(node, Tuple):
            return TupleType(tuple(self.ty(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            ty = self.ty(node.tuple_value)
            if not isinstance(ty, TupleType):
                raise KilnTypeError(f"{self.where}: projection .{node.index} of a non-tuple of type "
                                    f"{format_type(ty)}")
            if not 0 <= node.index < len(ty.fields):
                raise KilnTypeError(f"{self.where}: projection .{node.index} out of range for "
                                    f"{format_type(ty)}")
            return ty.fields[node.index]
        if isinstance(node, Call):
            return self.call_type(node)
        if isinstance(node, Function):
            body = self.ty(node.body)
            if node.ret_type is not None and node.ret_type != body:
                raise KilnTypeError(f"{self.where}: function declares return type "
                                    f"{format_type(node.ret_type)} but its body has type "
                                    f"{format_type(body)}")
            return FuncType(tuple(self.ty(p) for p in node.params), body)
        if isinstance(node, If):
            cond = self.ty(node.cond)
            if not (isinstance(cond, TensorType) and cond.dtype == "bool" and cond.size == 1):
                raise KilnTypeError(f"{self.where}: if-condition must be a bool scalar, got "
                                    f"{format_type(cond)}")
            a, b = self.ty(node.then_branch), self.ty(node.else_branch)
            if a != b:
                raise KilnTypeError(f"{self.where}: if-branches have different types "
                                    f"{format_type(a)} and {format_type(b)}")
            return a
        if isinstance(node, Let):
            value = self.ty(node.value)
            if node.var.type_annotation is not None and node.var.type_annotation != value:
                raise KilnTypeError(f"{self.where}: let %{node.var.name_hint} is annotated "
                                    f"{format_type(node.var.type_annotation)} but bound to "
                                    f"{format_type(value)}")
            return self.ty(node.body)
        raise KilnTypeError(f"cannot infer the type of {type(node).__name__}")

    def call_type(self, call: Call) -> Type:
        arg_types = [self.ty(a) for a in call.args]
        if isinstance(call.op, Op):
            op_def = get_op_def(call.op.name)
            if op_def.num_inputs >= 0 and len(arg_types) != op_def.num_inputs:
                raise KilnTypeError(f"{_describe(call)} in {self.where} takes {op_def.num_inputs} "
                                    f"argument(s), got {len(arg_types)}")
            try:
                return op_def.type_rel(arg_types, call.attrs)
            except KilnTypeError as e:
                raise KilnTypeError(f"{_describe(call)} in {self.where}: {e}; argument types: "
                                    f"{_arg_list(arg_types)}") from None
            except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
                raise KilnTypeError(f"{_describe(call)} in {self.where}: invalid arguments or "
                                    f"attributes ({type(e).__name__}: {e}); argument types: "
                                    f"{_arg_list(arg_types)}; attrs: {call.attrs}") from None
        if isinstance(call.op, GlobalVar):
            fty = self.global_type(call.op)
        else:
            fty = self.ty(call.op)  # type: ignore[assignment]
        if not isinstance(fty, FuncType):
            raise KilnTypeError(f"{_describe(call)} in {self.where}: callee is not a function")
        if len(fty.arg_types) != len(arg_types):
            raise KilnTypeError(f"{_describe(call)} in {self.where} takes {len(fty.arg_types)} "
                                f"argument(s), got {len(arg_types)}")
        for i, (want, got) in enumerate(zip(fty.arg_types, arg_types)):
            if want != got:
                raise KilnTypeError(f"{_describe(call)} in {self.where}: argument {i} has type "
                                    f"{format_type(got)} but the parameter expects "
                                    f"{format_type(want)}")
        return fty.ret_type


def _fill_ret_types(fn: Function) -> Function:
    """Rebuild functions (the root and nested ones) whose return type is not declared."""
    if all(f.ret_type is not None for f in post_order(fn) if isinstance(f, Function)):
        return fn

    def fill(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Function) and new.ret_type is None:
            new = Function(new.params, new.body, new.body.checked_type, attrs=new.attrs)
        if new is not old and not new.has_type and old.has_type:
            new._set_checked_type(old.checked_type)
        return new

    out = rewrite(fn, fill)
    assert isinstance(out, Function)
    return out


def infer_type(mod: IRModule) -> IRModule:
    """A copy of ``mod`` with every node typed and every function's return type filled in."""
    inf = _Inferencer(mod)
    out = mod.copy()
    for gv in mod.get_global_vars():
        inf.global_type(gv)
        out[gv] = _fill_ret_types(mod[gv])
    return out


def check_types(mod: IRModule) -> None:
    """Type-check ``mod`` without caching types on its nodes (raises KilnTypeError)."""
    inf = _Inferencer(mod, dry=True)
    for gv in mod.get_global_vars():
        inf.global_type(gv)


def infer_expr_type(expr: Expr, mod: IRModule | None = None) -> Type:
    """Infer and return the type of a standalone expression (``mod`` resolves global calls)."""
    ty = _Inferencer(mod).infer(expr)
    if ty is None:
        raise KilnTypeError(f"{type(expr).__name__} has no type")
    return ty


def infer_node_type(node: Expr, mod: IRModule | None = None) -> Type:
    """Type ``node`` whose children are already typed (O(1), for rewrites); returns its type."""
    if not node.has_type:
        node._set_checked_type(_Inferencer(mod).node_type(node))
    return node.checked_type


def InferType() -> ModulePass:
    """The type-inference pass (``relay.transform.InferType()``)."""
    return ModulePass(lambda mod, ctx: infer_type(mod), PassInfo(0, "InferType"))

