"""Operator-fusion analysis: the dataflow graph, its post-dominator tree, and the partitioner.

This is TVM's fusion algorithm (``src/relay/analysis/graph_partitioner.cc``), redone without
recursion:

1. :func:`build_forward_graph` indexes the nodes of a function in post-DFS order and records, for
   every node, its users with the pattern of each use edge (a broadcast whose argument already has
   the output's shape is an elementwise edge).
2. :func:`post_dominator_tree` finds each node's immediate post-dominator: the nearest node that
   every path to the output goes through (least common ancestor of its users in the tree, built
   in reverse topological order), with the strongest edge pattern along the way.
3. :class:`GraphPartitioner` runs three phases over the nodes, merging each node's group into its
   post-dominator's when every node on the paths between them allows it:

   - phase 0: OUT_ELEMWISE_FUSABLE anchors (conv2d, dense, pools) absorb elementwise/broadcast
     consumers; ELEMWISE/BROADCAST nodes fuse forward into injective, reduction, or anchor groups;
   - phase 1: INJECTIVE nodes and tuples fuse into injective consumers (after the anchors finished);
   - phase 2: injective producers fuse into tuples that were already fused into injective consumers
     (concatenate inputs).

   A group never grows beyond ``max_fuse_depth`` nodes. Groups are a union-find forest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem
from kiln.ir.types import TensorType, TupleType
from kiln.ir.visitor import children
from kiln.op.registry import OpPattern, get_op_def

__all__ = [
    "DomNode",
    "ForwardGraph",
    "GNode",
    "GraphPartitioner",
    "Group",
    "build_forward_graph",
    "post_dominator_tree",
]

# Scalar constants of these dtypes may be fused into their user (code generators inline them).
_SIMPLE_CONST_DTYPES = ("int32", "int64", "float32", "float64", "bool")


@dataclass(eq=False)
class GNode:
    """A node of the forward dataflow graph."""

    ref: Expr
    index: int = -1
    extern_ref: bool = False  # used outside the graph (function output, non-fusable parent)
    pattern: OpPattern = OpPattern.OPAQUE
    outputs: list[tuple[GNode, OpPattern]] = field(default_factory=list)


@dataclass
class ForwardGraph:
    """The indexed dataflow graph of one function body."""

    node_map: dict[int, GNode]
    post_dfs_order: list[GNode]

    def node(self, expr: Expr) -> GNode:
        """The graph node of ``expr``."""
        return self.node_map[id(expr)]


class _GraphBuilder:
    def __init__(self) -> None:
        self.node_map: dict[int, GNode] = {}
        self.order: list[GNode] = []
        self.keep: list[Expr] = []

    def get(self, expr: Expr) -> GNode:
        node = self.node_map.get(id(expr))
        if node is None:
            node = GNode(expr)
            self.node_map[id(expr)] = node
            self.keep.append(expr)
        return node

    def update(self, expr: Expr, parent: GNode | None, pattern: OpPattern) -> None:
        node = self.get(expr)
        if parent is not None:
            node.outputs.append((parent, pattern))
        else:
            node.extern_ref = True

    def enter(self, expr: Expr) -> None:
        """Record the edges from ``expr``'s children (TVM does this before visiting them)."""
        if isinstance(expr, Function):
            for p in expr.params:
                self.update(p, None, OpPattern.OPAQUE)
            self.update(expr.body, None, OpPattern.OPAQUE)
        elif isinstance(expr, Call):
            self.enter_call(expr)
        elif isinstance(expr, Tuple):
            node = self.get(expr)
            node.pattern = OpPattern.TUPLE
            for f in expr.fields:
                if isinstance(f.checked_type, TensorType):
                    self.update(f, node, OpPattern.INJECTIVE)
                else:
                    self.update(f, None, OpPattern.OPAQUE)
        elif isinstance(expr, TupleGetItem):
            ty = expr.tuple_value.checked_type
            assert isinstance(ty, TupleType)
            if all(isinstance(f, TensorType) for f in ty.fields):
                node = self.get(expr)
                node.pattern = OpPattern.INJECTIVE
                self.update(expr.tuple_value, node, OpPattern.INJECTIVE)
            else:
                self.update(expr.tuple_value, None, OpPattern.OPAQUE)
        elif isinstance(expr, (If, Let)):
            for c in children(expr):
                self.update(c, None, OpPattern.OPAQUE)

    def enter_call(self, call: Call) -> None:
        node = self.get(call)
        pattern = get_op_def(call.op.name).pattern if isinstance(call.op, Op) else OpPattern.OPAQUE
        node.pattern = pattern
        out = call.checked_type
        for arg in call.args:
            edge = pattern
            arg_ty = arg.checked_type
            if (edge == OpPattern.BROADCAST and isinstance(out, TensorType) and
                    isinstance(arg_ty, TensorType) and arg_ty.shape == out.shape):
                edge = OpPattern.ELEMWISE
            self.update(arg, node, edge)

    def leave(self, expr: Expr) -> None:
        """Number ``expr`` once its children are numbered (post-DFS order)."""
        if isinstance(expr, Function):
            return
        node = self.get(expr)
        if isinstance(expr, Constant):
            simple = expr.value.ndim == 0 and expr.tensor_type.dtype in _SIMPLE_CONST_DTYPES
            node.pattern = OpPattern.ELEMWISE if simple else OpPattern.OPAQUE
        node.index = len(self.order)
        self.order.append(node)


def build_forward_graph(fn: Function) -> ForwardGraph:
    """Index the dataflow graph of ``fn`` (typed); nested function literals are opaque leaves."""
    b = _GraphBuilder()
    b.update(fn, None, OpPattern.OPAQUE)
    visited: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(fn, False)]
    while stack:
        expr, done = stack.pop()
        if done:
            b.leave(expr)
            continue
        if id(expr) in visited or isinstance(expr, Op):
            continue
        visited.add(id(expr))
        if isinstance(expr, Function) and expr is not fn:
            continue  # a fused function called from the graph: not part of this dataflow graph
        b.enter(expr)
        stack.append((expr, True))
        kids = [c for c in children(expr) if not isinstance(c, Op)]
        stack.extend((c, False) for c in reversed(kids) if id(c) not in visited)
    return ForwardGraph(b.node_map, b.order)


# --- post-dominator tree ------------------------------------------------------------------------

@dataclass(eq=False)
class DomNode:
    """A node of the post-dominator tree."""

    gnode: GNode
    parent: DomNode | None = None
    depth: int = 1
    pattern: OpPattern = OpPattern.OPAQUE  # strongest edge pattern on the way to the parent


def _lca(lhs: DomNode | None, rhs: DomNode | None,
         pattern: list[OpPattern]) -> DomNode | None:
    while lhs is not rhs:
        if lhs is None or rhs is None:
            return None
        if lhs.depth < rhs.depth:
            pattern[0] = max(pattern[0], rhs.pattern)
            rhs = rhs.parent
        elif rhs.depth < lhs.depth:
            pattern[0] = max(pattern[0], lhs.pattern)
            lhs = lhs.parent
        else:
            pattern[0] = max(pattern[0], lhs.pattern, rhs.pattern)
            lhs, rhs = lhs.parent, rhs.parent
    return lhs


def post_dominator_tree(graph: ForwardGraph) -> list[DomNode]:
    """The immediate post-dominator of every node, indexed like ``graph.post_dfs_order``."""
    tree: list[DomNode | None] = [None] * len(graph.post_dfs_order)
    for gnode in reversed(graph.post_dfs_order):
        tnode = DomNode(gnode)
        if not gnode.extern_ref and gnode.outputs:
            pattern = [OpPattern.ELEMWISE]
            first, first_pattern = gnode.outputs[0]
            parent = tree[first.index]
            pattern[0] = max(pattern[0], first_pattern)
            for out, edge in gnode.outputs[1:]:
                parent = _lca(parent, tree[out.index], pattern)
                pattern[0] = max(pattern[0], edge)
            tnode.parent = parent
            tnode.depth = parent.depth + 1 if parent is not None else 1
            tnode.pattern = pattern[0]
        tree[gnode.index] = tnode
    return [t for t in tree if t is not None]


# --- partitioner ---------------------------------------------------------------------------------

@dataclass(eq=False)
class Group:
    """A fusion group (union-find node)."""

    pattern: OpPattern
    root_ref: Expr
    anchor_ref: Expr | None = None
    parent: Group | None = None
    num_nodes: int = 1

    def find_root(self) -> Group:
        """The representative of this group, compressing the path to it."""
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node is not root:
            nxt = node.parent
            node.parent = root
            assert nxt is not None
            node = nxt
        return root


def _combine(lhs: OpPattern, rhs: OpPattern) -> OpPattern:
    assert not (lhs > OpPattern.BROADCAST and rhs > OpPattern.BROADCAST), \
        "cannot merge two complex groups"
    return max(lhs, rhs)


PathCheck = Callable[[OpPattern, bool], bool]


class GraphPartitioner:
    """Assigns every node of a :class:`ForwardGraph` to a fusion group.

    Parameters
    ----------
    opt_level : int
        0 puts every node in its own group; higher levels fuse.
    max_fuse_depth : int
        Maximum number of nodes in one group.
    """

    def __init__(self, opt_level: int, max_fuse_depth: int):
        self.opt_level = opt_level
        self.max_fuse_depth = max_fuse_depth
        self.groups: list[Group] = []

    def partition(self, graph: ForwardGraph) -> list[Group]:
        """The group of each node, indexed like ``graph.post_dfs_order``."""
        self.groups = []
        for gnode in graph.post_dfs_order:
            anchor = gnode.ref if gnode.pattern == OpPattern.OUT_ELEMWISE_FUSABLE else None
            self.groups.append(Group(gnode.pattern, gnode.ref, anchor))
        if self.opt_level == 0:
            return self.groups
        tree = post_dominator_tree(graph)
        for phase in range(3):
            self.run_fuse(graph, tree, phase)
        return self.groups

    # --- path checks and merging ------------------------------------------------------------
    def check_path(self, src: GNode, sink: GNode, fcond: PathCheck) -> bool:
        """Whether every node on every path from ``src`` (excluded) to ``sink`` passes ``fcond``."""
        visited: set[int] = set()
        stack = [out for out, _ in src.outputs]
        while stack:
            node = stack.pop()
            if node.index in visited:
                continue
            visited.add(node.index)
            group = self.groups[node.index].find_root()
            if not fcond(group.pattern, node is sink):
                return False
            if node is not sink:
                stack.extend(out for out, _ in node.outputs)
        return True

    def merge_from_to(self, child: Group, parent: Group) -> None:
        """Put ``child``'s group under ``parent``'s (the anchor, if any, moves up)."""
        child, parent = child.find_root(), parent.find_root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        child.parent = parent
        if child.anchor_ref is not None:
            assert parent.anchor_ref is None
            parent.anchor_ref = child.anchor_ref
            parent.pattern = _combine(child.pattern, parent.pattern)

    def commit_fuse(self, src: GNode, sink: GNode) -> None:
        """Merge every node on the paths from ``src`` to ``sink`` into ``sink``'s group."""
        target = self.groups[sink.index]
        visited: set[int] = set()
        stack = [src]
        while stack:
            node = stack.pop()
            if node is sink or node.index in visited:
                continue
            visited.add(node.index)
            self.merge_from_to(self.groups[node.index], target)
            stack.extend(out for out, _ in node.outputs)

    def count_fused_nodes(self, child: GNode, dom_parent: GNode, limit: int) -> int:
        """Size of ``dom_parent``'s group after fusing ``child`` and everything in between, or
        a number above ``limit`` as soon as the count passes it: the walk to a far
        post-dominator (the end of an unrolled LSTM) would otherwise cross the rest of the
        graph for every node, quadratic in the graph (conv1d_bilstm's 398 steps: 4 s)."""
        visited: set[int] = set()
        total = self.groups[dom_parent.index].find_root().num_nodes
        stack = [child]
        while stack and total <= limit:
            node = stack.pop()
            if node is dom_parent or node.index in visited:
                continue
            visited.add(node.index)
            total += self.groups[node.index].num_nodes
            stack.extend(out for out, _ in node.outputs)
        return total

    # --- the phases ----------------------------------------------------------------------------
    def run_fuse(self, graph: ForwardGraph, tree: list[DomNode], phase: int) -> None:
        """One phase of the fusion algorithm over all nodes in post-DFS order."""
        for nid, gnode in enumerate(graph.post_dfs_order):
            dom = tree[nid]
            group = self.groups[nid]
            if group.pattern == OpPattern.OPAQUE or dom.parent is None:
                continue
            dom_parent = dom.parent.gnode
            if self.count_fused_nodes(gnode, dom_parent, self.max_fuse_depth) > \
                    self.max_fuse_depth:
                continue
            parent_group = self.groups[dom_parent.index]
            if phase == 2:
                self.fuse_into_tuple(gnode, dom_parent, group, parent_group)
                continue
            if group.find_root() is parent_group.find_root():
                continue
            if parent_group.pattern == OpPattern.TUPLE:
                continue
            if self.may_fuse(phase, gnode, dom, group):
                self.commit_fuse(gnode, dom_parent)

    def may_fuse(self, phase: int, gnode: GNode, dom: DomNode, group: Group) -> bool:
        """Phases 0 and 1: whether ``gnode``'s group may join its post-dominator's."""
        assert dom.parent is not None
        sink = dom.parent.gnode
        if group.pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
            # an anchor absorbs consumers reached through elementwise edges only
            return phase == 0 and dom.pattern == OpPattern.ELEMWISE and \
                self.check_path(gnode, sink, _broadcast_only)
        if group.pattern <= OpPattern.BROADCAST:
            return (dom.pattern <= OpPattern.INJECTIVE or dom.pattern == OpPattern.COMM_REDUCE) \
                and self.check_path(gnode, sink, _into_anchor)
        if group.pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE):
            # injective fusion waits for phase 1, so anchors finish fusing first
            return phase == 1 and self.check_path(gnode, sink, _injective_only)
        return False  # a reduction's consumers are not fused into it

    def fuse_into_tuple(self, gnode: GNode, dom_parent: GNode, group: Group,
                        parent_group: Group) -> None:
        """Phase 2: fuse an injective node into a tuple already fused into its injective user."""
        if group.pattern > OpPattern.INJECTIVE:
            return
        root = parent_group.find_root()
        if root.pattern == OpPattern.TUPLE:
            return
        if parent_group.pattern == OpPattern.TUPLE and root.pattern <= OpPattern.INJECTIVE and \
                self.check_path(gnode, dom_parent, _injective_only):
            self.commit_fuse(gnode, dom_parent)


def _broadcast_only(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.BROADCAST


def _into_anchor(kind: OpPattern, is_sink: bool) -> bool:
    # Parallel branches may be injective; the sink may already hold a reduction or an anchor.
    if not is_sink:
        return kind <= OpPattern.INJECTIVE
    return kind <= OpPattern.INJECTIVE or kind in (OpPattern.COMM_REDUCE,
                                                   OpPattern.OUT_ELEMWISE_FUSABLE)


def _injective_only(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.INJECTIVE

