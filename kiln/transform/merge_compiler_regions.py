"""MergeCompilerRegions: grow annotated regions as far as possible without creating cycles.

After ``AnnotateTarget`` every node is its own region. This pass (TVM's ``MergeCompilerRegions``)
visits the regions children first and merges each region with its parent regions of the same
target, except where that would make the merged region both feed and consume another region: a
region that depends on a parent through a region of a different target remembers that parent as
a *restriction* and never merges with it (nor do the regions below it). Then the
``compiler_end`` / ``compiler_begin`` pairs that now lie inside one region are removed, leaving
annotations only on the regions' boundaries.

Example: ``a = abs(x); b = tanh(a); c = add(a, b)`` with ``abs`` and ``add`` supported but ``tanh``
not: merging ``abs`` and ``add`` would make that region both produce ``tanh``'s input and consume its
output, so the two stay separate regions.
"""

from __future__ import annotations

from kiln.ir.expr import Call, Expr, Function
from kiln.ir.visitor import post_order, rewrite
from kiln.transform.annotated_regions import AnnotatedRegion, AnnotatedRegionSet, region_set
from kiln.transform.annotation import is_compiler_begin, is_compiler_end
from kiln.transform.infer_type import InferType
from kiln.transform.pass_infra import FunctionPass, PassInfo, Sequential

__all__ = ["MergeCompilerRegions", "merge_compiler_regions"]


class _RegionMerger:
    """TVM's ``RegionMerger``: merges regions in children-first order, honouring restrictions."""

    def __init__(self, regions: AnnotatedRegionSet) -> None:
        self.regions = regions
        self.visited: set[int] = set()
        self.merged: set[int] = set()  # ids of regions already processed
        self.restrictions: dict[int, set[int]] = {}  # region id -> ids it must not merge with

    def visit(self, expr: Expr) -> None:
        for node in post_order(expr):
            if id(node) in self.visited:
                continue
            self.visited.add(id(node))
            if is_compiler_end(node):
                self.process(node)

    def parent_region(self, begin: Call) -> AnnotatedRegion | None:
        """The region producing the value a ``compiler_begin`` brings in."""
        return self.regions.get(begin.args[0])

    def process(self, end: Call) -> None:
        region = self.regions.get(end)
        assert region is not None
        if region.id in self.merged:
            return
        # the parents may sit on paths not visited yet (another output of this region)
        for begin in list(region.ins):
            parent = self.parent_region(begin)
            if parent is not None and parent.id not in self.merged:
                self.visit(begin.args[0])
        parents: list[AnnotatedRegion] = []
        for begin in list(region.ins):
            parent = self.parent_region(begin)
            if parent is not None and all(parent is not p for p in parents):
                parents.append(parent)
        own = self.restrictions.setdefault(region.id, set())
        for parent in parents:
            own |= self.restrictions.get(parent.id, set())
        for parent in parents:
            if parent.target != region.target:
                own.add(parent.id)  # regions below must not merge across this one
                continue
            if parent.id in own:
                continue
            self.regions.merge(parent, region)
            for others in self.restrictions.values():
                if parent.id in others:
                    others.discard(parent.id)
                    others.add(region.id)
        self.merged.add(region.id)


def merge_compiler_regions(fn: Function) -> Function:
    """Merge the annotated regions of ``fn`` (not modified) and drop their internal annotations.

    Parameters
    ----------
    fn : Function
        A function annotated by ``AnnotateTarget`` (or by hand).

    Returns
    -------
    Function
        The function with annotations only on the merged regions' boundaries.
    """
    regions = region_set(fn)
    _RegionMerger(regions).visit(fn)

    def drop_internal(new: Expr, old: Expr) -> Expr | None:
        # begin(end(x)) inside one region -> x
        if is_compiler_begin(old) and is_compiler_end(old.args[0]):
            region = regions.get(old)
            if region is not None and region is regions.get(old.args[0]):
                assert isinstance(new, Call) and is_compiler_end(new.args[0])
                return new.args[0].args[0]
        return None

    out = rewrite(fn, drop_internal)
    assert isinstance(out, Function)
    return out


def MergeCompilerRegions() -> Sequential:
    """The pass merging annotated regions of every function (then InferType).

    Returns
    -------
    Sequential
        ``MergeCompilerRegions`` followed by ``InferType``; functions already handed to an
        external compiler are left alone.

    Examples
    --------
    >>> mod = MergeCompilerRegions()(AnnotateTarget(["kiln_c"])(mod))  # doctest: +SKIP
    """
    merge = FunctionPass(lambda fn, mod, ctx: merge_compiler_regions(fn),
                         PassInfo(0, "MergeCompilerRegions"))
    return Sequential([merge, InferType()], name="MergeCompilerRegions")
