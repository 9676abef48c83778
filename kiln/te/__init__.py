"""Tensor expressions: compute definitions, schedules (Ansor's steps), lowering to loop IR.

This is the layer between relay operators and C code. An operator's ``compute`` hook
(``OpDef.compute(inputs, attrs, out_type)``) describes *what* each output element is with the
API below; schedules decide *how* loops run; :func:`lower` turns a schedule into loop IR that
:mod:`kiln.codegen.c_codegen` prints as C.

Writing an operator's compute
-----------------------------
``compute(inputs: list[te.Tensor], attrs, out_type) -> te.Tensor | list[te.Tensor]``. Inputs are
tensors with static ``shape`` and ``dtype``; return tensors of exactly ``out_type``'s shape and
dtype. Expressions overload ``+ - * / // %`` and ``< <= > >=`` (use :func:`equal`,
:func:`not_equal`, :func:`all`, :func:`any` for the rest), Python numbers take the other operand's
dtype, and ``x.astype("int32")`` casts. Give every compute a name (``T_<op>`` by convention) and a
tag: ``"elemwise"``/``"broadcast"``/``"injective"`` mark stages the default schedule inlines into
their consumers.

An elementwise op (``y = max(x, 0)``)::

    from kiln import te

    def relu_compute(inputs, attrs, out_type):
        x = inputs[0]
        return te.compute(x.shape, lambda *i: te.max(x(*i), te.const(0, x.dtype)),
                          name="T_relu", tag="elemwise")

A reduction (softmax over the last axis: max, exp-sum, divide)::

    def softmax_compute(inputs, attrs, out_type):
        x = inputs[0]
        *outer, n = x.shape
        k = te.reduce_axis((0, n), name="k")
        xmax = te.compute(outer, lambda *i: te.max(x[(*i, k)], axis=k), name="T_softmax_maxelem")
        e = te.compute(x.shape, lambda *i: te.exp(x(*i) - xmax(*i[:-1])),
                       name="T_softmax_exp", tag="elemwise")
        k2 = te.reduce_axis((0, n), name="k2")
        s = te.compute(outer, lambda *i: te.sum(e[(*i, k2)], axis=k2), name="T_softmax_expsum")
        return te.compute(x.shape, lambda *i: e(*i) / s(*i[:-1]), name="T_softmax_norm",
                          tag="elemwise")

A convolution-like op (NCHW, padding as an inlined stage guarded with ``if_then_else``)::

    def conv2d_compute(inputs, attrs, out_type):
        data, weight = inputs
        n, c, h, w = data.shape
        oc, _, kh, kw = weight.shape
        ph, pw = attrs.padding[0], attrs.padding[1]
        pad = te.compute((n, c, h + 2 * ph, w + 2 * pw),
                         lambda b, ci, y, x: te.if_then_else(
                             te.all(y >= ph, y < h + ph, x >= pw, x < w + pw),
                             data[b, ci, y - ph, x - pw], te.const(0, data.dtype)),
                         name="T_pad", tag="injective")
        rc = te.reduce_axis((0, c), name="rc")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")
        oh, ow = out_type.shape[2], out_type.shape[3]
        return te.compute((n, oc, oh, ow),
                          lambda b, o, y, x: te.sum(pad[b, rc, y + ry, x + rx] * weight[o, rc, ry, rx],
                                                    axis=[rc, ry, rx]),
                          name="T_conv2d_nchw", tag="conv2d_nchw")

Use :func:`if_then_else` (evaluates one branch) rather than :func:`select` when a branch may read
out of bounds. Reductions take ``where=`` (skip elements) and ``init=``; tuple reductions
(argmax) use :func:`comm_reducer`.

Schedules and lowering
----------------------
:class:`ComputeDAG` lists the stages (``print(dag)`` shows them the way Ansor does, and
``dag.workload_key()`` names the task); ``dag.init_state`` is an Ansor :class:`State` whose
methods (``split``, ``fuse``, ``reorder``, ``parallel``, ``vectorize``, ``unroll``, ``compute_at``,
``compute_inline``, ``compute_root``, ``cache_read``, ``cache_write``, ``rfactor``,
``storage_align``, ``pragma``, ``follow_split``, ``follow_fused_split``) append steps that
serialise to tuning records (:func:`parse_step` reads them back). :func:`lower` takes a DAG and a
state (or step list) and returns a :class:`~kiln.te.loop_ir.PrimFunc`::

    A = te.placeholder((512, 512), name="A")
    B = te.placeholder((512, 512), name="B")
    k = te.reduce_axis((0, 512), name="k")
    C = te.compute((512, 512), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    dag = te.ComputeDAG([A, B, C])
    s = dag.init_state
    i_o, i_i = s.split(2, 0, [32])
    s.parallel(2, i_o)
    func = te.lower(dag, s, name="matmul")

:func:`~kiln.te.default_schedule.default_schedule` is the schedule used when no tuned record
exists; :func:`~kiln.te.interp.run_prim_func` runs loop IR on NumPy arrays (slowly) for tests.
"""

from __future__ import annotations

from typing import NoReturn

from kiln.errors import SymbolicShapeError
from kiln.te.dag import ComputeDAG
from kiln.te.expr import PrimExpr, Var, cast, const, legacy_repr, select
from kiln.te.expr import compare as _compare
from kiln.te.intrin import (
    abs,
    acos,
    acosh,
    all,
    any,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    cos,
    cosh,
    erf,
    exp,
    exp2,
    exp10,
    expm1,
    fabs,
    floor,
    floordiv,
    floormod,
    fmod,
    if_then_else,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    log2,
    log10,
    nearbyint,
    pow,
    power,
    round,
    rsqrt,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)
from kiln.te.loop_state import Iterator, State
from kiln.te.lower import lower
from kiln.te.schedule import Schedule, ScheduleError, create_schedule
from kiln.te.steps import parse_step
from kiln.te.tensor import (
    ComputeOp,
    IterVar,
    PlaceholderOp,
    Tensor,
    comm_reducer,
    compute,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    prod,
    reduce_axis,
    sum,
)
from kiln.te.workload import (
    make_workload_key,
    register_workload,
    register_workload_tensors,
    workload_key_to_dag,
    workload_key_to_tensors,
)

__all__ = [
    "ComputeDAG",
    "ComputeOp",
    "IterVar",
    "Iterator",
    "PlaceholderOp",
    "PrimExpr",
    "Schedule",
    "ScheduleError",
    "State",
    "Tensor",
    "Var",
    "abs",
    "acos",
    "acosh",
    "all",
    "any",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "cast",
    "ceil",
    "comm_reducer",
    "compute",
    "const",
    "cos",
    "cosh",
    "create_schedule",
    "equal",
    "erf",
    "exp",
    "exp2",
    "exp10",
    "expm1",
    "fabs",
    "floor",
    "floordiv",
    "floormod",
    "fmod",
    "if_then_else",
    "isfinite",
    "isinf",
    "isnan",
    "legacy_repr",
    "log",
    "log1p",
    "log2",
    "log10",
    "lower",
    "make_workload_key",
    "max",
    "max_value",
    "min",
    "min_value",
    "nearbyint",
    "not_equal",
    "parse_step",
    "placeholder",
    "pow",
    "power",
    "prod",
    "reduce_axis",
    "register_workload",
    "register_workload_tensors",
    "round",
    "rsqrt",
    "select",
    "shift_left",
    "shift_right",
    "sigmoid",
    "sin",
    "sinh",
    "sqrt",
    "sum",
    "tan",
    "tanh",
    "trunc",
    "truncdiv",
    "truncmod",
    "size_var",
    "var",
    "workload_key_to_dag",
    "workload_key_to_tensors",
]


def var(name: str = "tindex", dtype: str = "int32") -> Var:
    """A free scalar variable."""
    return Var(name, dtype)


def size_var(name: str = "size", dtype: str = "int32") -> NoReturn:
    """TVM's symbolic size; Kiln's tensor and relay types have static shapes, so this says so."""
    raise SymbolicShapeError(f"te.size_var({name!r}): symbolic dimensions are not supported; "
                             "Kiln's types have static shapes (give every dimension a size)")


def equal(a: object, b: object) -> PrimExpr:
    """The expression ``a == b``."""
    return _compare("eq", a, b)


def not_equal(a: object, b: object) -> PrimExpr:
    """The expression ``a != b``."""
    return _compare("ne", a, b)
