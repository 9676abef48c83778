"""FuseOps: group operators into primitive functions (TVM's ``FuseOps``), and DefuseOps.

The grouping is TVM's (see :mod:`kiln.transform.graph_partitioner`); this module turns the groups
into code the way TVM's ``FuseMutator`` does. Every group becomes a ``Function`` literal with
attribute ``Primitive=1`` whose parameters ``p0, p1, ...`` are the group's inputs in the order the
group's nodes first use them, called from the graph with those inputs. Scalar constants fused into
a group stay inline in its body; other constants and all variables become parameters. A group whose
calls only reshape (``reshape``, ``expand_dims``, ``squeeze``, ``batch_flatten``) is also marked
``relay.reshape_only=1``: the graph executor runs it as a no-op alias of its input.

How much is fused depends on ``fuse_opt_level`` (default: the PassContext's ``opt_level``): at
0 every operator becomes its own primitive function, as TVM's build does at ``opt_level=0``.
``PassContext(config={"relay.FuseOps.max_depth": n})`` caps the operators per group (default 256);
``"relay.FuseOps.link_params": True`` keeps every constant inside the groups that use it instead
of passing it as a parameter (TVM's linked parameters).

Kiln's one extension of TVM's grouping (:class:`KilnGraphPartitioner`): a softmax over the last
axis (``nn.softmax``, ``nn.fast_softmax``, ``nn.log_softmax``) also absorbs the element-wise and
broadcasting producers that it post-dominates (the attention scale ``x * c`` and an additive mask
``+ bias``), when they are not already the epilogue of an anchor (conv2d, dense, batch_matmul:
TVM's rule gives those to the anchor first, which is better still). The row-reduction template
(:mod:`kiln.te.templates.reduction`) inlines them into the kernel's reads, so the scaled and
masked scores never go through memory. TVM leaves them in a kernel of their own, because a
softmax edge is ``OUT_ELEMWISE_FUSABLE``. Layer norms get no such rule: in exported encoders
their input also feeds a residual add (pre-norm) or is a ``dense`` epilogue (post-norm), and
where a producer chain could join (the embeddings' adds) it would leave its injective ``take``
behind and be recomputed by each of the norm's three passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, Type
from kiln.ir.visitor import children, post_order, rebuild, rewrite
from kiln.op.registry import OpPattern
from kiln.transform.graph_partitioner import (
    DomNode,
    GNode,
    GraphPartitioner,
    Group,
    build_forward_graph,
)
from kiln.transform.inline import bind_function
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import call_attrs, ensure_types, op_name
from kiln.transform.simplify_expr import RESHAPE_OPS

__all__ = [
    "MAX_FUSE_DEPTH",
    "ROW_SOFTMAX_OPS",
    "DefuseOps",
    "FuseOps",
    "KilnGraphPartitioner",
    "defuse_ops",
    "fuse_ops",
    "is_primitive",
]

# TVM's kMaxFusedOps: default of PassContext config "relay.FuseOps.max_depth".
MAX_FUSE_DEPTH = 256

# Softmax-family operators that absorb their element-wise producers (over the last axis).
ROW_SOFTMAX_OPS = frozenset({"nn.softmax", "nn.fast_softmax", "nn.log_softmax"})


def is_primitive(expr: Expr) -> bool:
    """Whether ``expr`` is a fused function literal (``Primitive=1``)."""
    return isinstance(expr, Function) and bool(expr.attrs.get("Primitive"))


@dataclass
class _GroupInfo:
    """Parameters of the function a group becomes, and the arguments they stand for."""

    params: list[Var] = field(default_factory=list)
    arguments: list[Expr] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def param_for(self, arg: Expr, ty: Type) -> Var:
        for p, a in zip(self.params, self.arguments):
            if a is arg:
                return p
        var = Var(f"p{len(self.params)}", ty)
        self.params.append(var)
        self.arguments.append(arg)
        return var

    def add_names(self, call: Call) -> None:
        self.names.extend(n for n in call.source_names if n not in self.names)


def _reshape_only(body: Expr) -> tuple[bool, bool]:
    """``(has_call, only_reshapes)`` for a fused body (TVM's ``CheckReshapeOnly``)."""
    has_call, only = False, True
    for node in post_order(body):
        if isinstance(node, Call):
            has_call = True
            if not (isinstance(node.op, Op) and node.op.name in RESHAPE_OPS):
                only = False
        elif isinstance(node, Var) and not isinstance(node.type_annotation, TensorType):
            only = False
    return has_call, only


def _is_row_softmax(expr: Expr) -> bool:
    """Whether ``expr`` is a softmax-family call over the last axis of its input."""
    if not (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name in ROW_SOFTMAX_OPS):
        return False
    ty = expr.checked_type
    return isinstance(ty, TensorType) and ty.ndim > 0 and int(call_attrs(expr).axis) % ty.ndim == ty.ndim - 1


def _elementwise_path(kind: OpPattern, is_sink: bool) -> bool:
    return is_sink or kind <= OpPattern.BROADCAST


class KilnGraphPartitioner(GraphPartitioner):
    """TVM's partitioner plus Kiln's rule: last-axis softmaxes absorb element-wise producers.

    In phase 0, an element-wise or broadcasting node whose group holds no anchor and whose
    immediate post-dominator is a softmax over the last axis joins the softmax's group, with
    every node on the paths between them (all element-wise or broadcasting). TVM's rules are
    asked first and are unchanged; the extra merge happens only where they would not fuse.
    """

    def may_fuse(self, phase: int, gnode: GNode, dom: DomNode, group: Group) -> bool:
        """TVM's rule, else the softmax rule."""
        if super().may_fuse(phase, gnode, dom, group):
            return True
        assert dom.parent is not None
        sink = dom.parent.gnode
        return phase == 0 and group.pattern <= OpPattern.BROADCAST \
            and group.find_root().anchor_ref is None and _is_row_softmax(sink.ref) \
            and self.check_path(gnode, sink, _elementwise_path)


class _FuseMutator:
    def __init__(self, fn: Function, opt_level: int, max_depth: int, link_params: bool = False):
        self.fn = fn
        self.link_params = link_params
        graph = build_forward_graph(fn)
        groups = KilnGraphPartitioner(opt_level, max_depth).partition(graph)
        self.gmap: dict[int, Group] = {id(g.ref): groups[g.index] for g in graph.post_dfs_order}
        self.ginfo: dict[int, _GroupInfo] = {}
        self.new: dict[int, Expr] = {}

    def group_of(self, expr: Expr) -> Group:
        return self.gmap[id(expr)].find_root()

    def info(self, group: Group) -> _GroupInfo:
        return self.ginfo.setdefault(id(group), _GroupInfo())

    def run(self) -> Function:
        for node in post_order(self.fn, into_functions=False):
            if isinstance(node, (Op, GlobalVar)):
                continue
            self.new[id(node)] = self.visit(node)
        out = self.new[id(self.fn)]
        assert isinstance(out, Function)
        if out.ret_type is None and self.fn.ret_type is not None:  # fusing keeps the type (TVM)
            out = Function(out.params, out.body, self.fn.ret_type, attrs=out.attrs)
        return out

    def visit(self, node: Expr) -> Expr:
        if isinstance(node, (Var, Constant)) or (isinstance(node, Function) and node is not self.fn):
            return node
        if isinstance(node, Call) and isinstance(node.op, Op):
            return self.visit_call(node)
        if isinstance(node, Tuple) and self.group_of(node).root_ref is not node:
            return Tuple(self.new_arguments(node.fields, self.group_of(node)))
        if isinstance(node, TupleGetItem):
            return self.visit_getitem(node)
        return rebuild(node, tuple(self.new.get(id(c), c) for c in children(node)))

    def new_arguments(self, args: tuple[Expr, ...], group: Group) -> list[Expr]:
        """Arguments inside ``group``: the new node, or a parameter when it comes from outside."""
        out: list[Expr] = []
        for arg in args:
            new_arg = self.new[id(arg)]
            if self.group_of(arg) is not group and not (self.link_params
                                                        and isinstance(new_arg, Constant)):
                out.append(self.info(group).param_for(new_arg, arg.checked_type))
            else:
                out.append(new_arg)
        return out

    def visit_call(self, call: Call) -> Expr:
        if op_name(call) == "annotation.stop_fusion":  # an opaque fence: gone once grouped (TVM)
            return self.new[id(call.args[0])]
        group = self.group_of(call)
        new_call = Call(call.op, self.new_arguments(call.args, group), call.attrs,
                        source_names=call.source_names)
        self.info(group).add_names(call)
        if group.root_ref is call:
            return self.make_function(group, call.checked_type, new_call)
        return new_call

    def visit_getitem(self, node: TupleGetItem) -> Expr:
        group = self.group_of(node)
        if group.root_ref is node and self.group_of(node.tuple_value) is not group:
            # a projection of an opaque multi-output call: stays in the graph
            return TupleGetItem(self.new[id(node.tuple_value)], node.index)
        (new_tuple,) = self.new_arguments((node.tuple_value,), group)
        new_node = TupleGetItem(new_tuple, node.index)
        if group.root_ref is node:
            return self.make_function(group, node.checked_type, new_node)
        return new_node

    def make_function(self, group: Group, ret_type: Type, body: Expr) -> Call:
        info = self.info(group)
        has_call, reshape_only = _reshape_only(body)
        attrs: dict[str, int] = {"Primitive": int(has_call)}
        if has_call and reshape_only and len(info.params) == 1:  # an alias needs one input
            attrs["relay.reshape_only"] = 1
        func = Function(info.params, body, ret_type, attrs=attrs)
        return Call(func, info.arguments, source_names=info.names)


def fuse_ops(fn: Function, opt_level: int = 2, max_depth: int = MAX_FUSE_DEPTH,
             mod: IRModule | None = None, link_params: bool = False) -> Function:
    """Group the operators of ``fn`` (not modified) into primitive functions.

    Parameters
    ----------
    fn : Function
        The function.
    opt_level : int
        Fusion level: 0 gives one primitive function per operator.
    max_depth : int
        Maximum number of operators in one fused function.
    mod : IRModule, optional
        The module, to type calls of global functions.
    link_params : bool
        Keep constants inside the groups instead of passing them as parameters.

    Returns
    -------
    Function
        ``fn`` calling fused function literals.
    """
    if is_primitive(fn):
        return fn
    ensure_types(fn, mod)
    return _FuseMutator(fn, opt_level, max_depth, link_params).run()


def defuse_ops(fn: Function) -> Function:
    """Inline every fused function literal called in ``fn`` (not modified): FuseOps undone."""

    def unfuse(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call) and is_primitive(new.op):
            assert isinstance(new.op, Function)
            return bind_function(new.op, new.args)
        return None

    out = rewrite(fn, unfuse, into_functions=False)
    assert isinstance(out, Function)
    return out


def FuseOps(fuse_opt_level: int = -1) -> FunctionPass:
    """The operator-fusion pass.

    Parameters
    ----------
    fuse_opt_level : int
        Fusion level; -1 (default) takes the PassContext's ``opt_level``.

    Returns
    -------
    FunctionPass
        The pass (opt level 0: it always runs; the level only decides how much it fuses).
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        level = ctx.opt_level if fuse_opt_level == -1 else fuse_opt_level
        depth = int(ctx.config.get("relay.FuseOps.max_depth", MAX_FUSE_DEPTH))
        link = bool(ctx.config.get("relay.FuseOps.link_params", False))
        return fuse_ops(fn, level, depth, mod, link)

    return FunctionPass(run, PassInfo(0, "FuseOps", ("InferType",)))


def DefuseOps() -> FunctionPass:
    """The pass inlining fused functions back into the graph (opt level 3)."""
    return FunctionPass(lambda fn, mod, ctx: defuse_ops(fn), PassInfo(3, "DefuseOps", ("InferType",)))
