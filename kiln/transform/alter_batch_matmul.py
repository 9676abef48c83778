"""AlterBatchMatmul: batched products in the operand layout the CPU schedules run fastest.

The x86 schedule of ``nn.batch_matmul`` (:mod:`kiln.te.templates.batch_matmul`) reads rows of
the right operand ``B`` as vectors along the output columns and keeps a register tile of
``rows x vectors`` accumulators. Two shapes defeat it, and this pass (opt level 3, for native
targets, after ``AlterOpLayout``) rewrites them around the product:

- a transposed right operand (``transpose_b=True``, relay's default: ``B`` is ``(batch, N, K)``)
  is transposed once into ``(batch, K, N)``::

      batch_matmul(a, b, transpose_b=True)
        -> batch_matmul(a, transpose(b, [0, 2, 1]), transpose_b=False)

  (only when the product has at least :data:`MIN_ROWS` rows, so that the copy is small next to
  the product; the transpose fuses into ``B``'s producer when that is injective);
- a column count ``N`` that is not a multiple of the vector length ``v`` (ViT's 197 tokens: the
  last vector of every row would need bound checks in the innermost loop) gets ``B`` padded with
  zero columns to the next multiple and the extra result columns sliced off::

      batch_matmul(a, b)  ->  strided_slice(batch_matmul(a, pad(b, N -> N')), end=N on axis 2)

  The pad fuses into ``B``'s producer and the slice into the product's consumer (the attention
  scale, the mask add), so neither costs a pass over memory of its own.

``v`` is the target's vector width for the dtype (:meth:`~kiln.target.Target.vector_width`),
capped at the power of two at or above ``N`` for narrow products. Only float32/float64 products
of 3-d operands change; the result is the same tensor with the same type.

While a tuning log is applied (``with auto_scheduler.ApplyHistoryBest(log)``), a product whose
TVM form (``T_batch_matmul_NT(b, i, j)``, TVM's x86 ``batch_matmul.generic`` under the
auto-scheduler) has a record in the log is left as it is, so the record applies.
"""

from __future__ import annotations

import kiln.op as K
from kiln.ir.expr import Call, Expr, Function
from kiln.ir.module import IRModule
from kiln.target import Target
from kiln.te import dispatch as te_dispatch
from kiln.transform.alter_op_layout import log_has_task, tvm_task_dags
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import Rule, call_attrs, graph_rewrite, tensor_type

__all__ = ["MIN_ROWS", "AlterBatchMatmul", "alter_batch_matmul", "padded_columns"]

# Fewest rows (M) for which transposing B pays for itself.
MIN_ROWS = 4
_FLOATS = ("float32", "float64")


def padded_columns(cols: int, lanes: int) -> int:
    """Columns ``N`` rounded up to whole vectors.

    Parameters
    ----------
    cols : int
        ``N`` (positive).
    lanes : int
        Vector lanes of the dtype.

    Returns
    -------
    int
        The next multiple of ``min(lanes, next power of two >= cols)``.

    Examples
    --------
    >>> padded_columns(197, 16), padded_columns(128, 16), padded_columns(5, 16), padded_columns(12, 8)
    (208, 128, 8, 16)
    """
    width = min(lanes, 1 << max(cols - 1, 0).bit_length())
    return -(-cols // width) * width


def _rewrite(call: Call, lanes_of: dict[str, int]) -> Expr | None:
    """``batch_matmul(a, b)`` with ``B`` transposed and/or padded (see the module docstring)."""
    a, b = call.args
    ta, tb, out = tensor_type(a), tensor_type(b), tensor_type(call)
    attrs = call_attrs(call)
    if ta is None or tb is None or out is None or ta.ndim != 3 or tb.ndim != 3 \
            or ta.dtype != tb.dtype or ta.dtype not in _FLOATS:
        return None
    if te_dispatch.current_dispatchers() and log_has_task(
            tvm_task_dags("nn.batch_matmul", attrs, [ta, tb], 2), "batch_matmul"):
        return None  # an entered tuning log tunes TVM's form of this product: keep it
    batch, rows, cols = out.shape
    transpose = bool(attrs.transpose_b) and rows >= MIN_ROWS
    lanes = lanes_of.setdefault(ta.dtype, _lanes(ta.dtype))
    width = padded_columns(cols, lanes)
    if not transpose and (attrs.transpose_b or width == cols):
        return None
    rhs: Expr = K.transpose(b, [0, 2, 1]) if attrs.transpose_b else b
    if width != cols:
        rhs = K.nn.pad(rhs, ((0, 0), (0, 0), (0, width - cols)))
    product = K.nn.batch_matmul(a, rhs, out_dtype=attrs.out_dtype,
                                transpose_a=bool(attrs.transpose_a), transpose_b=False)
    if width == cols:
        return product
    return K.strided_slice(product, [0, 0, 0], [batch, rows, cols])


def _lanes(dtype: str) -> int:
    target = Target.current() or Target("c")
    return target.vector_width(dtype)


def alter_batch_matmul(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Rewrite every ``nn.batch_matmul`` of ``expr`` (not modified) as the module docstring says.

    Parameters
    ----------
    expr : Expr
        A typed graph (a function or any expression).
    mod : IRModule, optional
        Module used to type calls of global functions.

    Returns
    -------
    Expr
        The rewritten graph (``expr`` itself when nothing applies).
    """
    lanes_of: dict[str, int] = {}

    def rule(node: Expr) -> Expr | None:
        assert isinstance(node, Call)
        return _rewrite(node, lanes_of)

    # batch_matmul(a, b) -> batch_matmul(a, transpose/pad(b)) [-> strided_slice]
    rules = [Rule("batch_matmul_layout", "nn.batch_matmul", rule)]
    return graph_rewrite(expr, rules, what="AlterBatchMatmul", mod=mod)


def AlterBatchMatmul() -> FunctionPass:
    """The AlterBatchMatmul pass (opt level 3): ``B`` of batched products transposed or padded.

    The vector width comes from ``Target.current()`` (``relay.build`` enters the build's target;
    without one, this machine's).

    Returns
    -------
    FunctionPass
        Rewrites every function except fused and externally compiled ones.

    Examples
    --------
    >>> with Target("c"), PassContext(opt_level=3):  # doctest: +SKIP
    ...     mod = Sequential([AlterOpLayout(), AlterBatchMatmul(), FoldConstant()])(mod)
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        if any(fn.attrs.get(key) for key in ("Primitive", "Compiler", "SkipOptimization")):
            return fn
        out = alter_batch_matmul(fn, mod)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(3, "AlterBatchMatmul", ("InferType",)))
