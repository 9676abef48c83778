"""ONNX converters: tensor sequences inside a graph, as relay tuples of static length.

A sequence that a graph builds and consumes itself (``torch.split`` or a list comprehension in
an exported model: SplitToSequence, SequenceAt, ConcatFromSequence, ...) has a length known at
import, so Kiln holds it as a :class:`~kiln.ir.expr.Tuple` of its tensors: SequenceConstruct,
SequenceEmpty, SequenceInsert, SequenceErase and SplitToSequence build tuples,
SequenceAt takes a field, SequenceLength is a constant, ConcatFromSequence concatenates or
stacks the fields. Positions must be known at import. Sequences as graph inputs or outputs
are not supported: a compiled graph exchanges tensors only. Optional, OptionalHasElement and
OptionalGetElement work on optionals that hold a value, or are missing inputs.
"""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx_common import NodeContext, converter, normalize_axis
from kiln.ir.expr import Constant, Expr, Tuple, TupleGetItem
from kiln.ir.types import TupleType

__all__: list[str] = []


def _fields(ctx: NodeContext, i: int) -> list[Expr]:
    """The tensors of sequence input ``i``."""
    seq = ctx.input(i)
    ty = ctx.importer.type_of(seq)
    if not isinstance(ty, TupleType):
        raise ctx.error(f"input {i} is a tensor where a sequence is expected")
    if isinstance(seq, Tuple):
        return list(seq.fields)
    return [TupleGetItem(seq, k) for k in range(len(ty.fields))]


def _position(ctx: NodeContext, i: int, length: int, insert: bool = False) -> int:
    """Input ``i`` as a position in a sequence of ``length`` (negative counts from the end)."""
    pos = int(ctx.scalar(i, "position"))
    limit = length + 1 if insert else length
    if not -limit <= pos < limit:
        raise ctx.error(f"position {pos} is out of range for a sequence of {length} tensor(s)")
    return pos + limit if pos < 0 else pos


@converter("SequenceConstruct")
def _construct(ctx: NodeContext) -> Expr:
    return Tuple([ctx.input(i) for i in range(len(ctx.inputs))])


@converter("SequenceEmpty")
def _empty(ctx: NodeContext) -> Expr:
    return Tuple([])


@converter("SequenceAt")
def _at(ctx: NodeContext) -> Expr:
    fields = _fields(ctx, 0)
    return fields[_position(ctx, 1, len(fields))]


@converter("SequenceLength")
def _length(ctx: NodeContext) -> Expr:
    return Constant(np.array(len(_fields(ctx, 0)), np.int64))


@converter("SequenceInsert")
def _insert(ctx: NodeContext) -> Expr:
    fields = _fields(ctx, 0)
    pos = _position(ctx, 2, len(fields), insert=True) if ctx.has_input(2) else len(fields)
    return Tuple([*fields[:pos], ctx.input(1), *fields[pos:]])


@converter("SequenceErase")
def _erase(ctx: NodeContext) -> Expr:
    fields = _fields(ctx, 0)
    if not fields:
        raise ctx.error("cannot erase from an empty sequence")
    pos = _position(ctx, 1, len(fields)) if ctx.has_input(1) else len(fields) - 1
    return Tuple([*fields[:pos], *fields[pos + 1:]])


@converter("SplitToSequence", needs=("split", "squeeze"))
def _split_to_sequence(ctx: NodeContext) -> Expr:
    from kiln.op import transform as tf

    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    dim = shape[axis]
    if ctx.has_input(1):
        split = np.asarray(ctx.const_input(1, "split")).astype(np.int64)
        if split.ndim == 0:  # a chunk size: equal parts, the last one smaller
            chunk = int(split)
            if chunk <= 0:
                raise ctx.error(f"split chunk size {chunk} must be positive")
            sizes = [min(chunk, dim - start) for start in range(0, dim, chunk)]
        else:
            sizes = [int(s) for s in split]
        keep = True
    else:
        sizes, keep = [1] * dim, bool(ctx.attr("keepdims", 1))
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ctx.error(f"split sizes {sizes} do not add up to dim {axis} of shape {shape}")
    if len(sizes) == 1:
        parts = [x]
    else:
        split_parts = tf.split(x, indices_or_sections=np.cumsum(sizes)[:-1].tolist(), axis=axis)
        parts = [split_parts[i] for i in range(len(sizes))]
    return Tuple(parts if keep else [tf.squeeze(p, axis=[axis]) for p in parts])


@converter("ConcatFromSequence", needs=("concatenate", "stack"))
def _concat_from_sequence(ctx: NodeContext) -> Expr:
    from kiln.op import transform as tf

    fields = _fields(ctx, 0)
    if not fields:
        raise ctx.error("cannot concatenate an empty sequence")
    rank = len(ctx.shape(fields[0]))
    if int(ctx.attr("new_axis", 0)):
        return tf.stack(fields, axis=normalize_axis(ctx, int(ctx.attr("axis")), rank + 1))
    return tf.concatenate(fields, axis=normalize_axis(ctx, int(ctx.attr("axis")), rank))


# Optionals: Kiln holds an optional that has a value as the value itself (a tensor or a sequence);
# an empty optional exists only as a missing input, which OptionalHasElement reports as false.

@converter("Optional")
def _optional(ctx: NodeContext) -> Expr:
    if not ctx.has_input(0):
        raise ctx.unsupported("an empty optional (no input) has no value Kiln can hold")
    return ctx.input(0)


@converter("OptionalHasElement")
def _optional_has_element(ctx: NodeContext) -> Expr:
    return Constant(np.array(ctx.has_input(0), np.bool_))


@converter("OptionalGetElement")
def _optional_get_element(ctx: NodeContext) -> Expr:
    if not ctx.has_input(0):
        raise ctx.error("input 0 (an optional) is required")
    return ctx.input(0)
