"""Regions of an annotated graph (TVM's ``AnnotatedRegionSet``).

A region is the set of nodes between ``compiler_begin`` annotations (its inputs) and
``compiler_end`` annotations (its outputs) of one target. :func:`region_set` finds them the way
TVM does, so region ids, input order and output order (which name the partitioned functions and
their parameters) come out as TVM's: the graph is walked children first; every
``compiler_begin`` opens a new region with the next id; every other node joins the regions of its
arguments, merging them into the first one; a ``compiler_end`` closes its argument's region.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kiln.errors import PassError
from kiln.ir.expr import Call, Expr, If, Let, Op, Tuple, TupleGetItem
from kiln.ir.visitor import post_order
from kiln.transform.annotation import (
    CompilerAttrs,
    annotation_target,
    is_compiler_begin,
    is_compiler_end,
)

__all__ = ["AnnotatedRegion", "AnnotatedRegionSet", "region_set"]


@dataclass(eq=False)
class AnnotatedRegion:
    """One region: its id, target, the function it lies in, and its boundary annotations.

    Attributes
    ----------
    id : int
        Its number (ids are not contiguous once regions merge).
    target : str
        The compiler name.
    func_name : str
        Name of the global function holding it.
    ins : list of Call
        Its ``compiler_begin`` annotations, in discovery order.
    outs : list of Call
        Its ``compiler_end`` annotations, in discovery order.
    nodes : list of Expr
        Every node in it, boundary annotations included.
    """

    id: int
    target: str
    func_name: str = "main"
    ins: list[Call] = field(default_factory=list)
    outs: list[Call] = field(default_factory=list)
    nodes: list[Expr] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``<target>_<func_name>_<id>``, the base of its partitioned function's name."""
        return f"{self.target}_{self.func_name}_{self.id}"


class AnnotatedRegionSet:
    """The regions of one expression, with lookup of the region of any node."""

    def __init__(self, func_name: str = "main") -> None:
        self.func_name = func_name
        self.regions: list[AnnotatedRegion] = []
        self._of: dict[int, AnnotatedRegion] = {}
        self._next_id = 0

    def __iter__(self) -> Iterator[AnnotatedRegion]:
        return iter(list(self.regions))

    def get(self, expr: Expr) -> AnnotatedRegion | None:
        """The region holding ``expr``, or None."""
        return self._of.get(id(expr))

    def make_region(self, target: str) -> AnnotatedRegion:
        """A new, empty region with the next id."""
        region = AnnotatedRegion(self._next_id, target, self.func_name)
        self._next_id += 1
        self.regions.append(region)
        return region

    def add_node(self, region: AnnotatedRegion, expr: Expr) -> None:
        """Put ``expr`` into ``region``."""
        region.nodes.append(expr)
        self._of[id(expr)] = region

    def merge(self, src: AnnotatedRegion, dest: AnnotatedRegion) -> None:
        """Merge ``src`` into ``dest`` (which keeps its id); ``src`` disappears.

        Boundaries between the two become internal: a ``compiler_begin`` of the merged region
        whose argument is an output of ``src`` is no longer an input, and that output no longer
        an output.
        """
        if src is dest:
            return
        for node in src.nodes:
            self.add_node(dest, node)
        dest.ins.extend(src.ins)
        dest.outs.extend(src.outs)
        src_nodes = {id(n) for n in src.nodes}
        internal = [b for b in dest.ins if id(b.args[0]) in src_nodes]
        for begin in internal:
            inner = begin.args[0]
            dest.outs = [o for o in dest.outs if o is not inner]
        internal_ids = {id(b) for b in internal}
        dest.ins = [b for b in dest.ins if id(b) not in internal_ids]
        self.regions = [r for r in self.regions if r is not src]

    def add_to_region(self, dest: AnnotatedRegion, expr: Expr) -> None:
        """Put ``expr`` into ``dest``, merging its region into ``dest`` if it has one."""
        src = self.get(expr)
        if src is not None:
            self.merge(src, dest)
        else:
            self.add_node(dest, expr)

    def add_to_arg_region(self, expr: Expr, args: tuple[Expr, ...]) -> None:
        """Join ``expr`` to the regions of its (not yet closed) arguments, merging them."""
        open_args = [a for a in args if not is_compiler_end(a)]
        region = next((r for r in map(self.get, open_args) if r is not None), None)
        for arg in open_args:
            arg_region = self.get(arg)
            if (arg_region is None) != (region is None):
                raise PassError(f"inconsistent compiler annotations at {expr._short()}: some of "
                                "its arguments are inside an annotated region and some are not "
                                "(every input edge of a region needs a compiler_begin)")
            if region is not None and arg_region is not region:
                assert arg_region is not None
                self.merge(arg_region, region)
        if region is not None:
            self.add_to_region(region, expr)


def _is_annotation(call: Call) -> bool:
    return isinstance(call.op, Op) and isinstance(call.attrs, CompilerAttrs)


def region_set(expr: Expr, func_name: str = "main") -> AnnotatedRegionSet:
    """The annotated regions of ``expr`` (a function or an expression).

    Parameters
    ----------
    expr : Expr
        The annotated graph.
    func_name : str
        Name of the global function it is (part of each region's name).

    Returns
    -------
    AnnotatedRegionSet
        The regions.

    Raises
    ------
    PassError
        The annotations do not delimit regions (an end without a region, a region whose end
        names another target, inputs partly annotated).
    """
    regions = AnnotatedRegionSet(func_name)
    for node in post_order(expr):
        if isinstance(node, Call):
            if not _is_annotation(node):
                regions.add_to_arg_region(node, node.args)
            elif is_compiler_begin(node):
                region = regions.make_region(annotation_target(node))
                regions.add_node(region, node)
                region.ins.append(node)
            else:
                assert is_compiler_end(node)
                closed = regions.get(node.args[0])
                if closed is None:
                    raise PassError(f"compiler_end(compiler={annotation_target(node)!r}) on "
                                    f"{node.args[0]._short()} in @{func_name} closes no region: "
                                    "there is no compiler_begin before it")
                if closed.target != annotation_target(node):
                    raise PassError(f"a region of target {closed.target!r} in @{func_name} is "
                                    f"closed by compiler_end(compiler="
                                    f"{annotation_target(node)!r})")
                regions.add_node(closed, node)
                closed.outs.append(node)
        elif isinstance(node, Tuple):
            regions.add_to_arg_region(node, node.fields)
        elif isinstance(node, TupleGetItem):
            regions.add_to_arg_region(node, (node.tuple_value,))
        elif isinstance(node, Let):
            regions.add_to_arg_region(node, (node.var, node.value, node.body))
        elif isinstance(node, If):
            regions.add_to_arg_region(node, (node.cond, node.then_branch, node.else_branch))
    return regions
