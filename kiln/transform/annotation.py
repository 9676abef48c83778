"""The region annotations of graph partitioning: ``annotation.compiler_begin`` / ``compiler_end``.

``AnnotateTarget`` puts a ``compiler_begin(x, compiler="t")`` on every edge entering a region of
nodes that target ``t`` handles, and a ``compiler_end(y, compiler="t")`` on every edge leaving it;
``MergeCompilerRegions`` removes the pairs that end up inside one region, and ``PartitionGraph``
turns each region into a global function. Both annotations are identities on values (any type,
tuples included), so an annotated module still type-checks and runs in the interpreter. The
target ``"default"`` marks nodes no external compiler takes; ``PartitionGraph`` drops those.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, Op
from kiln.ir.types import Type
from kiln.op.arg_types import same_as_result
from kiln.op.registry import OpPattern, make_call, register_op

__all__ = [
    "COMPILER_BEGIN",
    "COMPILER_END",
    "DEFAULT_TARGET",
    "STOP_FUSION",
    "CompilerAttrs",
    "annotation_target",
    "compiler_begin",
    "compiler_end",
    "is_compiler_begin",
    "is_compiler_end",
    "stop_fusion",
]

COMPILER_BEGIN = "annotation.compiler_begin"
COMPILER_END = "annotation.compiler_end"
DEFAULT_TARGET = "default"  # nodes left to Kiln's own pipeline


@attrs_class("relay.attrs.CompilerAttrs")
class CompilerAttrs(Attrs):
    """Attributes of the region annotations: the external compiler (target) name."""

    compiler: str


def _identity_rel(arg_types: list[Type], attrs: Any) -> Type:
    return arg_types[0]


def _identity_ref(args: list[Any], attrs: Any, out_type: Type) -> Any:
    return args[0]


for _name, _doc in ((COMPILER_BEGIN, "Marks an edge entering a region of an external compiler."),
                    (COMPILER_END, "Marks an edge leaving a region of an external compiler.")):
    register_op(_name, num_inputs=1, type_rel=_identity_rel, reference=_identity_ref,
                pattern=OpPattern.OPAQUE, attrs_type=CompilerAttrs, doc=_doc,
                infer_args=same_as_result)


STOP_FUSION = "annotation.stop_fusion"
register_op(STOP_FUSION, num_inputs=1, type_rel=_identity_rel, reference=_identity_ref,
            pattern=OpPattern.OPAQUE, infer_args=same_as_result,
            doc="Identity that FuseOps never fuses across; FuseOps removes it (TVM's stop_fusion).")


def stop_fusion(data: Expr) -> Call:
    """Mark ``data`` so that FuseOps puts its producer and its users in different groups.

    Parameters
    ----------
    data : Expr
        The value to fence.

    Returns
    -------
    Call
        ``annotation.stop_fusion(data)``; FuseOps replaces it by ``data`` after grouping.
    """
    return make_call(STOP_FUSION, [data], None)


def compiler_begin(data: Expr, compiler: str) -> Call:
    """Annotate ``data`` as an input of a region handled by ``compiler``.

    Parameters
    ----------
    data : Expr
        The value entering the region.
    compiler : str
        The external compiler (target) name, or ``"default"``.

    Returns
    -------
    Call
        ``annotation.compiler_begin(data, compiler=...)``.
    """
    return make_call(COMPILER_BEGIN, [data], CompilerAttrs(str(compiler)))


def compiler_end(data: Expr, compiler: str) -> Call:
    """Annotate ``data`` as an output of a region handled by ``compiler``.

    Parameters
    ----------
    data : Expr
        The value leaving the region.
    compiler : str
        The external compiler (target) name, or ``"default"``.

    Returns
    -------
    Call
        ``annotation.compiler_end(data, compiler=...)``.
    """
    return make_call(COMPILER_END, [data], CompilerAttrs(str(compiler)))


def _is_call_of(expr: Expr, name: str) -> TypeGuard[Call]:
    return isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == name


def is_compiler_begin(expr: Expr) -> TypeGuard[Call]:
    """Whether ``expr`` is a ``compiler_begin`` annotation."""
    return _is_call_of(expr, COMPILER_BEGIN)


def is_compiler_end(expr: Expr) -> TypeGuard[Call]:
    """Whether ``expr`` is a ``compiler_end`` annotation."""
    return _is_call_of(expr, COMPILER_END)


def annotation_target(call: Call) -> str:
    """The compiler named by a ``compiler_begin`` / ``compiler_end`` annotation."""
    assert isinstance(call.attrs, CompilerAttrs)
    return call.attrs.compiler
