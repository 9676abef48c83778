"""Type inference: fill every node's ``checked_type`` and every function's ``ret_type``.

Types flow bottom-up from variable annotations and constants through each operator's type
relation. A variable without a type annotation (``relay.var("weight")``) starts with an unknown
type, as TVM's ``IncompleteType``, which unification fills in from its uses: an operator whose
relation implies the types of some of its arguments says so in ``OpDef.infer_args`` (the weight
of ``nn.conv2d`` given ``channels`` and ``kernel_size``, the bias of ``nn.bias_add``, the argument
of an element-wise op from its result, ...), a function's parameters meet its call's arguments, a
``let`` variable takes its value's type. Calls whose argument types are still unknown wait until a
later use fills them in; a variable that none of its uses can type is reported by name, with the
function and the operators that use it.

Types are cached on the nodes once every one of them is known (nothing is written when inference
fails); functions without a declared return type are rebuilt with the inferred one, and variables
without an annotation are replaced by annotated ones (as TVM does), which are the only structural
changes this pass makes. Errors name the operator, its source nodes, the function, and every
argument type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
from kiln.ir.incomplete import IncompleteType
from kiln.ir.module import IRModule
from kiln.ir.printer import format_type
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite
from kiln.ir.types import FuncType, TensorType, TupleType, Type
from kiln.ir.visitor import children, post_order, rewrite
from kiln.op.registry import OpDef, get_op_def
from kiln.transform.pass_infra import ModulePass, PassInfo

__all__ = ["InferType", "InferTypeLocal", "check_types", "infer_expr_type", "infer_node_type", "infer_type"]


def _describe(call: Call) -> str:
    if isinstance(call.op, Op):
        name = call.op.name
    elif isinstance(call.op, GlobalVar):
        name = f"@{call.op.name_hint}"
    elif isinstance(call.op, Var):
        name = f"%{call.op.name_hint}"
    else:
        name = "a function literal"
    if call.source_names:
        name += f" (source node {', '.join(repr(s) for s in call.source_names)})"
    return name


def _arg_list(types: list[Type]) -> str:
    return "(" + ", ".join(format_type(t) for t in types) + ")"


# --- unknown types and unification -----------------------------------------------------------

class _Hole(Type):
    """A type not known yet (TVM's ``IncompleteType``), local to one run of the inferencer.

    ``bound`` is the type unification gave it; ``var`` the untyped variable it stands for.
    """

    __slots__ = ("bound", "var")

    def __init__(self, var: Var | None = None):
        self.bound: Type | None = None
        self.var = var

    def __str__(self) -> str:
        return "?"


class _Mismatch(Exception):
    """Two types that unification cannot make equal."""


def _resolve(ty: Type) -> Type:
    """``ty`` with every bound hole replaced by its type (unbound holes stay)."""
    if isinstance(ty, _Hole):
        root: Type = ty
        while isinstance(root, _Hole) and root.bound is not None:
            root = root.bound
        if root is not ty.bound and ty.bound is not None:
            ty.bound = root  # path compression
        return root if isinstance(root, _Hole) else _resolve(root)
    if isinstance(ty, TupleType):
        fields = tuple(_resolve(f) for f in ty.fields)
        return ty if all(a is b for a, b in zip(fields, ty.fields)) else TupleType(fields)
    if isinstance(ty, FuncType):
        args = tuple(_resolve(a) for a in ty.arg_types)
        ret = _resolve(ty.ret_type)
        if ret is ty.ret_type and all(a is b for a, b in zip(args, ty.arg_types)):
            return ty
        return FuncType(args, ret)
    if isinstance(ty, RefType):
        value = _resolve(ty.value)
        return ty if value is ty.value else RefType(value)
    return ty


def _holes(ty: Type) -> list[_Hole]:
    """The unbound holes in a resolved type."""
    if isinstance(ty, _Hole):
        return [ty]
    if isinstance(ty, TupleType):
        return [h for f in ty.fields for h in _holes(f)]
    if isinstance(ty, FuncType):
        return [h for a in (*ty.arg_types, ty.ret_type) for h in _holes(a)]
    if isinstance(ty, RefType):
        return _holes(ty.value)
    return []


def _has_incomplete(ty: Type) -> bool:
    """Whether an annotation has an ``IncompleteType`` (a part to infer)."""
    if isinstance(ty, IncompleteType):
        return True
    if isinstance(ty, TupleType):
        return any(_has_incomplete(f) for f in ty.fields)
    if isinstance(ty, FuncType):
        return any(_has_incomplete(a) for a in (*ty.arg_types, ty.ret_type))
    if isinstance(ty, RefType):
        return _has_incomplete(ty.value)
    return False


def _complete(ty: Type) -> bool:
    """Whether a resolved type has no unknown part."""
    return not _holes(ty)


def _unify(a: Type, b: Type) -> Type:
    """Make ``a`` and ``b`` the same type by binding holes; raises :class:`_Mismatch`."""
    a, b = _resolve(a), _resolve(b)
    if a is b:
        return a
    if isinstance(b, _Hole) and not isinstance(a, _Hole):
        a, b = b, a
    if isinstance(a, _Hole):
        if any(h is a for h in _holes(b)):
            raise _Mismatch(f"{format_type(b)} would contain itself")
        a.bound = b
        return b
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(_unify(x, y) for x, y in zip(a.fields, b.fields)))
    if (isinstance(a, FuncType) and isinstance(b, FuncType)
            and len(a.arg_types) == len(b.arg_types)):
        args = tuple(_unify(x, y) for x, y in zip(a.arg_types, b.arg_types))
        return FuncType(args, _unify(a.ret_type, b.ret_type))
    if isinstance(a, RefType) and isinstance(b, RefType):
        return RefType(_unify(a.value, b.value))
    if a == b:
        return a
    raise _Mismatch(f"{format_type(a)} vs {format_type(b)}")


@dataclass
class _Pending:
    """A call (or projection) whose argument types are not all known yet."""

    node: Call | TupleGetItem
    out: _Hole
    where: str


class _Inferencer:
    def __init__(self, mod: IRModule | None, dry: bool = False):
        self.mod = mod
        # dry run (the verifier): types go to a side table, nodes' caches are left untouched
        self.scratch: dict[int, Type] | None = {} if dry else None
        self.keep: list[Expr] = []
        self.func_types: dict[str, FuncType] = {}
        self.in_progress: set[str] = set()
        self.where = "expression"
        # types of the nodes being inferred, which may hold holes until the end of `infer`
        self.prov: dict[int, Type] = {}
        self.let_values: dict[int, tuple[Var, Expr]] = {}
        self.pending: list[_Pending] = []
        self.var_holes: list[tuple[_Hole, str]] = []
        self.has_holes = False
        # recursion: the type a global function in progress is called with, met with its own
        self.recursive: dict[str, FuncType] = {}
        self.global_fns: dict[int, str] = {}

    # --- global functions ------------------------------------------------------------------
    def global_type(self, gv: GlobalVar) -> FuncType:
        name = gv.name_hint
        if name in self.func_types:
            return self.func_types[name]
        if self.mod is None or name not in self.mod:
            raise KilnTypeError(f"call to @{name}, which is not defined in the module")
        fn = self.mod[name]
        if name in self.in_progress:
            return self._recursive_type(name, fn)
        self.in_progress.add(name)
        self.global_fns[id(fn)] = name
        saved = self.where
        self.where = f"@{name}"
        self.infer(fn)
        self.where = saved
        self.in_progress.discard(name)
        ty = self.ty(fn)
        assert isinstance(ty, FuncType)
        self.func_types[name] = ty
        return ty

    def _recursive_type(self, name: str, fn: Function) -> FuncType:
        """The type of a call of ``@name`` from its own body: its parameters' types and its
        declared return type (or one that its body then gives)."""
        rec = self.recursive.get(name)
        if rec is None:
            if not all(self._typed(p) for p in fn.params):
                raise KilnTypeError(f"@{name} is called before its parameters are typed")
            rec = FuncType(tuple(self.ty(p) for p in fn.params), fn.ret_type or self._hole())
            self.recursive[name] = rec
        return rec

    # --- expressions -----------------------------------------------------------------------
    def ty(self, node: Expr) -> Type:
        """The type of an already visited node (with the holes known so far filled in)."""
        if node._checked_type is not None:
            return node._checked_type
        if self.scratch is not None and id(node) in self.scratch:
            return self.scratch[id(node)]
        ty = self.prov.get(id(node))
        if ty is not None:
            return _resolve(ty) if self.has_holes else ty
        return node.checked_type  # raises the "not known yet" error

    def _typed(self, node: Expr) -> bool:
        return (node._checked_type is not None or id(node) in self.prov
                or (self.scratch is not None and id(node) in self.scratch))

    def _known(self, node: Expr) -> bool:
        return (node._checked_type is not None or isinstance(node, (Op, GlobalVar))
                or id(node) in self.prov
                or (self.scratch is not None and id(node) in self.scratch))

    def _untyped_post_order(self, expr: Expr) -> list[Expr]:
        """Nodes without a known type, children first; typed subgraphs are not entered.

        A ``let`` is entered value first, so that its variable takes the value's type.
        """
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
                if isinstance(node, Let):
                    self.let_values[id(node.var)] = (node.var, node.value)
                    kids: tuple[Expr, ...] = (node.value, node.var, node.body)
                elif isinstance(node, Call) and not isinstance(node.op, (Op, GlobalVar, Function)):
                    kids = (node.op, *node.args)  # a variable (or other value) being called
                else:
                    kids = children(node)
                stack.extend((c, False) for c in reversed(kids))
        return order

    def infer(self, expr: Expr) -> Type | None:
        order = self._untyped_post_order(expr)
        for node in order:
            self.prov[id(node)] = self.node_type(node)
        if self.pending:
            self.solve()
        final = [self.ty(n) for n in order]
        if self.has_holes:
            for node, ty in zip(order, final):
                if not _complete(ty):
                    raise self._unknown_error(node)
        for node, ty in zip(order, final):
            del self.prov[id(node)]
            if self.scratch is None:
                node._set_checked_type(ty)
            else:
                self.scratch[id(node)] = ty
                self.keep.append(node)
        return self.ty(expr)

    def _open(self, ty: Type, var: Var) -> Type:
        """An annotation with its ``IncompleteType`` parts replaced by holes of ``var``."""
        if isinstance(ty, IncompleteType):
            return self._hole(var)
        if isinstance(ty, TupleType):
            return TupleType(tuple(self._open(f, var) for f in ty.fields))
        if isinstance(ty, FuncType):
            return FuncType(tuple(self._open(a, var) for a in ty.arg_types),
                            self._open(ty.ret_type, var))
        if isinstance(ty, RefType):
            return RefType(self._open(ty.value, var))
        return ty

    def _hole(self, var: Var | None = None) -> _Hole:
        self.has_holes = True
        hole = _Hole(var)
        if var is not None:
            self.var_holes.append((hole, self.where))
        return hole

    def _unify(self, a: Type, b: Type, error: Callable[[], str]) -> Type:
        try:
            return _unify(a, b)
        except _Mismatch:
            raise KilnTypeError(error()) from None

    def node_type(self, node: Expr) -> Type:
        if isinstance(node, Var):
            ann = node.type_annotation
            if ann is not None and not isinstance(ann, IncompleteType):
                return self._open(ann, node) if _has_incomplete(ann) else ann
            binding = self.let_values.get(id(node))
            if binding is not None and binding[0] is node and self._typed(binding[1]):
                return self.ty(binding[1])
            return self._hole(node)  # a parameter, or a let variable used in its own value
        if isinstance(node, Constant):
            return node.tensor_type
        if isinstance(node, Tuple):
            return TupleType(tuple(self.ty(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            return self._defer(node) if isinstance(self.ty(node.tuple_value), _Hole) \
                else self.projection_type(node)
        if isinstance(node, Call):
            return self.call_type(node)
        if isinstance(node, Function):
            body = self.ty(node.body)
            if node.ret_type is not None:
                ret = node.ret_type
                self._unify(ret, body, lambda: (
                    f"{self.where}: function declares return type {format_type(ret)} but its "
                    f"body has type {format_type(_resolve(body))}"))
            fty = FuncType(tuple(self.ty(p) for p in node.params), node.ret_type or body)
            rec = self.recursive.get(self.global_fns.get(id(node), ""))
            if rec is not None:
                self._unify(rec, fty, lambda: (
                    f"{self.where}: the function is called as {format_type(_resolve(rec))} in its "
                    f"own body but has type {format_type(_resolve(fty))}"))
            return fty
        if isinstance(node, If):
            cond = self.ty(node.cond)
            if isinstance(cond, _Hole):
                _unify(cond, TensorType((), "bool"))
            elif not (isinstance(cond, TensorType) and cond.dtype == "bool" and cond.size == 1):
                raise KilnTypeError(f"{self.where}: if-condition must be a bool scalar, got "
                                    f"{format_type(cond)}")
            a, b = self.ty(node.then_branch), self.ty(node.else_branch)
            return self._unify(a, b, lambda: (
                f"{self.where}: if-branches have different types {format_type(_resolve(a))} and "
                f"{format_type(_resolve(b))}"))
        if isinstance(node, Let):
            bound, var = self.ty(node.value), self.ty(node.var)
            self._unify(var, bound, lambda: (
                f"{self.where}: let %{node.var.name_hint} is annotated "
                f"{format_type(node.var.type_annotation)} but bound to "
                f"{format_type(_resolve(bound))}"))
            return self.ty(node.body)
        if isinstance(node, (RefCreate, RefRead, RefWrite)):
            return self._ref_type(node)
        raise KilnTypeError(f"cannot infer the type of {type(node).__name__}")

    def _ref_type(self, node: RefCreate | RefRead | RefWrite) -> Type:
        if isinstance(node, RefCreate):
            return RefType(self.ty(node.value))
        ref = _resolve(self.ty(node.ref))
        if not isinstance(ref, RefType):
            raise KilnTypeError(f"{self.where}: {type(node).__name__} of a non-reference of type "
                                f"{format_type(ref)}")
        if isinstance(node, RefRead):
            return ref.value
        value = self.ty(node.value)
        self._unify(ref.value, value, lambda: (
            f"{self.where}: writing {format_type(_resolve(value))} into a reference of "
            f"{format_type(ref)}"))
        return TupleType(())

    def projection_type(self, node: TupleGetItem) -> Type:
        ty = self.ty(node.tuple_value)
        if not isinstance(ty, TupleType):
            raise KilnTypeError(f"{self.where}: projection .{node.index} of a non-tuple of type "
                                f"{format_type(ty)}")
        if not 0 <= node.index < len(ty.fields):
            raise KilnTypeError(f"{self.where}: projection .{node.index} out of range for "
                                f"{format_type(ty)}")
        return ty.fields[node.index]

    # --- calls -----------------------------------------------------------------------------
    def call_type(self, call: Call) -> Type:
        arg_types = [self.ty(a) for a in call.args]
        if isinstance(call.op, Op):
            op_def = get_op_def(call.op.name)
            if op_def.num_inputs >= 0 and len(arg_types) != op_def.num_inputs:
                raise KilnTypeError(f"{_describe(call)} in {self.where} takes {op_def.num_inputs} "
                                    f"argument(s), got {len(arg_types)}")
            if not self.has_holes or all(_complete(t) for t in arg_types):
                return self.apply_rel(call, op_def, arg_types)
            return self._defer(call)
        if isinstance(call.op, GlobalVar):
            fty: Type = self.global_type(call.op)
        else:
            fty = self.ty(call.op)
        if isinstance(fty, _Hole):  # a variable being called: a function of these arguments
            callee = fty
            fty = self._unify(callee, FuncType(tuple(arg_types), self._hole()), lambda: (
                f"{_describe(call)} in {self.where}: the callee would have to take itself as an "
                f"argument ({format_type(_resolve(callee))})"))
        if not isinstance(fty, FuncType):
            raise KilnTypeError(f"{_describe(call)} in {self.where}: callee is not a function")
        if len(fty.arg_types) != len(arg_types):
            raise KilnTypeError(f"{_describe(call)} in {self.where} takes {len(fty.arg_types)} "
                                f"argument(s), got {len(arg_types)}")
        for i, (want, got) in enumerate(zip(fty.arg_types, arg_types)):
            try:
                _unify(want, got)
            except _Mismatch:
                raise KilnTypeError(f"{_describe(call)} in {self.where}: argument {i} has type "
                                    f"{format_type(_resolve(got))} but the parameter expects "
                                    f"{format_type(_resolve(want))}") from None
        return fty.ret_type

    def _guarded(self, call: Call, arg_types: list[Type], fn: Callable[[], Type]) -> Type:
        """Run an operator's relation, turning its errors into ones naming the call."""
        try:
            return fn()
        except KilnTypeError as e:
            raise KilnTypeError(f"{_describe(call)} in {self.where}: {e}; argument types: "
                                f"{_arg_list(arg_types)}") from None
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
            raise KilnTypeError(f"{_describe(call)} in {self.where}: invalid arguments or "
                                f"attributes ({type(e).__name__}: {e}); argument types: "
                                f"{_arg_list(arg_types)}; attrs: {call.attrs}") from None

    def apply_rel(self, call: Call, op_def: OpDef, arg_types: list[Type]) -> Type:
        return self._guarded(call, arg_types, lambda: op_def.type_rel(arg_types, call.attrs))

    def _defer(self, node: Call | TupleGetItem) -> Type:
        """The type of a node whose inputs are not all known: solved now or when they are."""
        item = _Pending(node, self._hole(), self.where)
        if not self._try(item):
            self.pending.append(item)
        return _resolve(item.out)

    def _try(self, item: _Pending) -> bool:
        """Solve one pending node if its inputs are (or its relation makes them) known."""
        saved, self.where = self.where, item.where
        try:
            node = item.node
            if isinstance(node, TupleGetItem):
                if isinstance(self.ty(node.tuple_value), _Hole):
                    return False
                result = self.projection_type(node)
            else:
                assert isinstance(node.op, Op)
                op_def = get_op_def(node.op.name)
                args = [self.ty(a) for a in node.args]
                if not all(_complete(t) for t in args):
                    if not self._infer_args(node, op_def, args, _resolve(item.out)):
                        return False
                    args = [self.ty(a) for a in node.args]
                result = self.apply_rel(node, op_def, args)
            what = f"{_describe(node)} in {self.where}" if isinstance(node, Call) else self.where
            self._unify(item.out, result, lambda: (
                f"{what}: its type {format_type(result)} differs from the type its users need, "
                f"{format_type(_resolve(item.out))}"))
            return True
        finally:
            self.where = saved

    def _infer_args(self, call: Call, op_def: OpDef, args: list[Type], out: Type) -> bool:
        """Fill unknown argument types from ``op_def.infer_args``; whether all are known now."""
        if op_def.infer_args is None:
            return False
        infer = op_def.infer_args
        known: list[Type | None] = [t if _complete(t) else None for t in args]
        result = out if _complete(out) else None
        implied: list[Type | None] = []

        def run() -> Type:
            implied.extend(infer(known, call.attrs, result))
            return TupleType(())

        self._guarded(call, args, run)
        for i, (got, want) in enumerate(zip(args, implied)):
            if known[i] is None and want is not None:
                try:
                    _unify(got, want)
                except _Mismatch:
                    raise KilnTypeError(
                        f"{_describe(call)} in {self.where}: argument {i} must have type "
                        f"{format_type(want)}, which its other uses contradict "
                        f"({format_type(_resolve(got))})") from None
        return all(_complete(self.ty(a)) for a in call.args)

    def solve(self) -> None:
        """Solve pending nodes until none makes progress."""
        progress = True
        while progress and self.pending:
            progress = False
            waiting = []
            for item in self.pending:
                if self._try(item):
                    progress = True
                else:
                    waiting.append(item)
            self.pending = waiting

    # --- errors ----------------------------------------------------------------------------
    def _uses(self, hole: _Hole) -> list[str]:
        uses = []
        for item in self.pending:
            node = item.node
            if isinstance(node, TupleGetItem):
                if any(h is hole for h in _holes(self.ty(node.tuple_value))):
                    uses.append(f"projection .{node.index}")
                continue
            for i, arg in enumerate(node.args):
                if any(h is hole for h in _holes(self.ty(arg))):
                    uses.append(f"argument {i} of {_describe(node)}")
        return uses

    def _unknown_error(self, node: Expr) -> KilnTypeError:
        for hole, where in self.var_holes:
            root = _resolve(hole)
            if isinstance(root, _Hole) and hole.var is not None:
                uses = self._uses(root)
                how = (f"its uses ({', '.join(uses)}) do not determine its type" if uses
                       else "nothing determines its type")
                return KilnTypeError(f"variable %{hole.var.name_hint} in {where} has no type "
                                     f"annotation and {how}; give relay.var a shape and dtype")
        return KilnTypeError(f"{self.where}: the type of {node._short()} cannot be inferred "
                             f"(known so far: {format_type(_resolve(self.prov[id(node)]))})")

    def complete_type(self, ty: Type, node: Expr) -> Type:
        """``ty`` once pending nodes are solved; an error naming the untyped variable if not."""
        if self.pending:
            self.solve()
        ty = _resolve(ty)
        if not _complete(ty):
            self.prov[id(node)] = ty
            raise self._unknown_error(node)
        return ty


def _finish_function(fn: Function) -> Function:
    """Rebuild functions (the root and nested ones) whose return type is not declared, and
    annotate the variables without a type annotation with their inferred types."""
    nodes = post_order(fn)
    untyped = [v for v in nodes if isinstance(v, Var)
               and (v.type_annotation is None or _has_incomplete(v.type_annotation))]
    if not untyped and all(f.ret_type is not None for f in nodes if isinstance(f, Function)):
        return fn
    memo: dict[int, Expr] = {}
    for v in untyped:
        typed = Var(v.name_hint, v.checked_type)
        typed._set_checked_type(v.checked_type)
        memo[id(v)] = typed

    def fill(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call) and id(new.op) in memo:  # a called variable is no child
            new = Call(memo[id(new.op)], new.args, new.attrs, source_names=new.source_names)
        if isinstance(new, Function) and new.ret_type is None:
            new = Function(new.params, new.body, new.body.checked_type, attrs=new.attrs)
        if new is not old and not new.has_type and old.has_type:
            new._set_checked_type(old.checked_type)
        return new

    out = rewrite(fn, fill, memo=memo)
    assert isinstance(out, Function)
    return out


def infer_type(mod: IRModule) -> IRModule:
    """A copy of ``mod`` with every node typed and every function's return type filled in.

    Variables without a type annotation get the type their uses imply (TVM's unification through
    the operators' type relations) and are replaced by annotated variables of the same name.
    """
    inf = _Inferencer(mod)
    out = mod.copy()
    for gv in mod.get_global_vars():
        inf.global_type(gv)
        out[gv] = _finish_function(mod[gv])
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
        inf = _Inferencer(mod)
        node._set_checked_type(inf.complete_type(inf.node_type(node), node))
    return node.checked_type


def InferTypeLocal(expr: Expr) -> Type:
    """Infer the type of ``expr`` in place and return it (TVM's ``relay.transform.InferTypeLocal``).

    Parameters
    ----------
    expr : Expr
        A standalone expression; its nodes get their ``checked_type``.

    Returns
    -------
    Type
        The type of ``expr``.
    """
    return infer_expr_type(expr)


def InferType() -> ModulePass:
    """The type-inference pass (``relay.transform.InferType()``)."""
    return ModulePass(lambda mod, ctx: infer_type(mod), PassInfo(0, "InferType"))
