"""AnnotateTarget: mark which external compiler runs each node (TVM's ``AnnotateTarget``).

Every operator call is given the first of the requested targets whose rule accepts it (see
:mod:`kiln.transform.external_target`), or ``"default"`` when none does; tuples and projections
follow their inputs. Then every edge gets a ``compiler_end`` for the producer's target and a
``compiler_begin`` for the consumer's, and each function's result a final ``compiler_end``. The
result has one region per node; ``MergeCompilerRegions`` grows them and ``PartitionGraph`` lifts
them into functions. Running the pass on an already annotated graph keeps the existing non-default
annotations, so several targets can be annotated one after the other.

Examples
--------
>>> mod = relay.transform.AnnotateTarget(["kiln_c"])(mod)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.ir.expr import Call, Expr, Function, If, Let, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.ref import RefCreate, RefRead, RefWrite
from kiln.ir.visitor import children, rewrite
from kiln.transform.annotation import (
    DEFAULT_TARGET,
    annotation_target,
    compiler_begin,
    compiler_end,
    is_compiler_begin,
    is_compiler_end,
)
from kiln.transform.external_target import (
    ExternalTargetError,
    ExternalTargetUnavailable,
    check_targets,
    op_supported,
)
from kiln.transform.infer_type import InferType, infer_type
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo, Sequential

__all__ = ["AnnotateTarget", "annotate_target"]


class _Annotator:
    """TVM's ``AnnotateTargetRewriter`` (all nodes) or ``CallOpsTargetRewriter`` (calls only)."""

    def __init__(self, targets: Sequence[str], include_non_call_ops: bool) -> None:
        self.targets = list(targets)
        self.include_non_call_ops = include_non_call_ops
        self.node_target: dict[int, str] = {}
        self.keep: list[Expr] = []  # nodes whose id is a key of node_target

    def set_target(self, expr: Expr, target: str) -> None:
        self.keep.append(expr)
        self.node_target[id(expr)] = target

    # --- helpers --------------------------------------------------------------------------
    def annotate_args(self, args: Sequence[Expr], target: str = "") -> tuple[str, list[Expr]]:
        """End each argument's region and begin the consumer's; returns (target, new args).

        Without a ``target`` the consumer takes its arguments' common target, or ``"default"``
        when they disagree.
        """
        ref_target = ""
        kept: list[Expr | None] = []  # an existing non-default begin is kept as it is
        ends: list[Expr] = []
        for arg in args:
            arg_target = DEFAULT_TARGET
            if is_compiler_begin(arg):
                assert isinstance(arg, Call)
                inner = arg.args[0]
                if annotation_target(arg) != DEFAULT_TARGET:
                    kept.append(arg)
                else:
                    kept.append(None)
                    ends.append(inner)
                if is_compiler_end(inner):
                    assert isinstance(inner, Call)
                    arg_target = annotation_target(inner)
            elif id(arg) in self.node_target:
                arg_target = self.node_target[id(arg)]
                kept.append(None)
                # a call without arguments (zeros, ones, ...) is an input, not a region output
                no_args = isinstance(arg, Call) and not arg.args
                ends.append(arg if no_args else compiler_end(arg, arg_target))
            else:
                kept.append(None)
                ends.append(arg)  # variables and constants
            if ref_target == "":
                ref_target = arg_target
            elif ref_target != arg_target:
                ref_target = DEFAULT_TARGET
        op_target = target or ref_target
        if ref_target == "":
            return op_target, list(args)
        pending = iter(ends)
        return op_target, [k if k is not None else compiler_begin(next(pending), op_target)
                           for k in kept]

    def end_and_propagate(self, expr: Expr) -> Expr:
        """``compiler_end`` on ``expr`` with its target (TVM's InsertCompilerEndAndPropogateTarget)."""
        if id(expr) in self.node_target:
            # calls without arguments and empty tuples are inputs, not region outputs
            if not ((isinstance(expr, Call) and not expr.args)
                    or (isinstance(expr, Tuple) and not expr.fields)):
                target = self.node_target[id(expr)]
                new = compiler_end(expr, target)
                self.set_target(new, target)
                return new
        elif is_compiler_end(expr):
            assert isinstance(expr, Call)
            if annotation_target(expr) == DEFAULT_TARGET:
                inner = expr.args[0]
                target = self.node_target.get(id(inner), DEFAULT_TARGET)
                new = compiler_end(inner, target)
                self.set_target(new, target)
                return new
        return expr

    # --- per node kind --------------------------------------------------------------------
    def __call__(self, new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call):
            assert isinstance(old, Call)
            return self.visit_call(old, new)
        if isinstance(new, Tuple):
            if not self.include_non_call_ops:
                return Tuple([self.end_and_propagate(f) for f in new.fields])
            target, fields = self.annotate_args(new.fields)
            out = Tuple(fields)
            self.set_target(out, target)
            return out
        if isinstance(new, TupleGetItem):
            if not self.include_non_call_ops:
                return TupleGetItem(self.end_and_propagate(new.tuple_value), new.index)
            target, (value,) = self.annotate_args([new.tuple_value])
            item = TupleGetItem(value, new.index)
            self.set_target(item, target)
            return item
        if isinstance(new, Function):
            assert isinstance(old, Function)
            if "Composite" in old.attrs:
                return old  # composite functions are taken whole, never entered
            return Function(new.params, self.end_and_propagate(new.body), new.ret_type,
                            attrs=new.attrs)
        if isinstance(new, Let):
            body = self.end_and_propagate(new.body)
            if isinstance(new.value, Function):  # function literals bound by let stay as they are
                return Let(new.var, new.value, body)
            _, (value,) = self.annotate_args([new.value])
            return Let(new.var, value, body)
        if isinstance(new, (RefCreate, RefRead, RefWrite)):
            kids = children(new)
            if not self.include_non_call_ops:
                return type(new)(*[self.end_and_propagate(k) for k in kids])
            target, args = self.annotate_args(kids)
            ref = type(new)(*args)
            self.set_target(ref, target)
            return ref
        if isinstance(new, If):
            return If(self.end_and_propagate(new.cond), self.end_and_propagate(new.then_branch),
                      self.end_and_propagate(new.else_branch))
        return None

    def candidate_targets(self, call: Call) -> list[str]:
        """Targets that take ``call``, in priority order, then ``"default"``."""
        found: list[str] = []
        if isinstance(call.op, Op):
            found = [t for t in self.targets if op_supported(call, t)]
        elif isinstance(call.op, Function):
            composite = call.op.attrs.get("Composite")
            if isinstance(composite, str) and "." in composite:
                prefix = composite.split(".", 1)[0]
                found = [prefix] if prefix in self.targets else []
        return [*found, DEFAULT_TARGET]

    def visit_call(self, pre: Call, post: Call) -> Expr:
        if is_compiler_begin(pre):
            return post  # handled by the consumer, which knows the target
        if is_compiler_end(pre):
            inner = post.args[0]
            if id(inner) not in self.node_target:
                self.set_target(inner, annotation_target(post))
            return post
        if pre.args and is_compiler_begin(pre.args[0]):
            first = pre.args[0]
            assert isinstance(first, Call)
            if annotation_target(first) != DEFAULT_TARGET:
                return post  # annotated for another target by an earlier run
        target = self.candidate_targets(pre)[0]
        if isinstance(pre.op, Var) and not self.include_non_call_ops:
            return Call(post.op, [self.end_and_propagate(a) for a in post.args], post.attrs,
                        source_names=post.source_names)
        _, args = self.annotate_args(post.args, target)
        new_call = Call(post.op, args, post.attrs, source_names=post.source_names)
        self.set_target(new_call, target)
        return new_call


def annotate_target(fn: Function, targets: Sequence[str], include_non_call_ops: bool = True) -> Function:
    """Annotate one typed function (not modified) for ``targets``.

    Parameters
    ----------
    fn : Function
        The function, with types inferred.
    targets : sequence of str
        Target names in priority order.
    include_non_call_ops : bool
        Also annotate tuples and projections (TVM's default); otherwise only calls.

    Returns
    -------
    Function
        The annotated function.
    """
    out = rewrite(fn, _Annotator(targets, include_non_call_ops))
    assert isinstance(out, Function)
    return out


def _usable_targets(names: Sequence[str]) -> list[str]:
    """The names as given; TVM's codegens Kiln lacks are refused, unknown names kept.

    A name no operator declares a rule for annotates nothing (TVM's behaviour); a name of one of
    TVM's external codegens that Kiln does not ship raises
    :class:`~kiln.transform.external_target.ExternalTargetUnavailable`.
    """
    if not names:
        return check_targets(names, "AnnotateTarget")  # raises: no target given
    for name in names:
        try:
            check_targets([name], "AnnotateTarget")
        except ExternalTargetUnavailable:
            raise
        except ExternalTargetError:
            pass  # unknown: nothing takes its operators
    return [str(n) for n in names]


def AnnotateTarget(targets: str | Sequence[str], include_non_call_ops: bool = True) -> Sequential:
    """The pass annotating every function for the given external targets.

    Parameters
    ----------
    targets : str or sequence of str
        Target names, highest priority first (``"kiln_c"``, or names with ``target.<name>``
        operator rules).
    include_non_call_ops : bool
        Also annotate tuples and projections (default, as TVM).

    Returns
    -------
    Sequential
        InferType, the annotation, InferType. Functions already handed to an external compiler
        are left alone. Running it raises
        :class:`~kiln.transform.external_target.ExternalTargetUnavailable` for one of TVM's
        targets Kiln does not have (``"dnnl"``, ...); a name no operator declares a rule for
        annotates nothing, as in TVM.

    Examples
    --------
    >>> mod = AnnotateTarget(["kiln_c"])(mod)  # doctest: +SKIP
    """
    names = [targets] if isinstance(targets, str) else list(targets)

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        valid = _usable_targets(names)
        typed = infer_type(mod)
        out = typed.copy()
        for gv, fn in typed.items():
            if fn.attrs.get("Compiler") or fn.attrs.get("SkipOptimization"):
                continue
            out[gv] = annotate_target(fn, valid, include_non_call_ops)
        return out

    annotate = ModulePass(run, PassInfo(0, "AnnotateTargetFunc"))
    return Sequential([annotate, InferType()], name="AnnotateTarget")
