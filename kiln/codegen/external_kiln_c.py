"""``kiln_c``: Kiln's shipped external target, regions compiled to their own C library.

Each operator below is declared once, with the condition under which ``kiln_c`` takes a call of
it (float32 tensors, and the layouts and attributes its template handles) and the C template the
external codegen (:func:`kiln.codegen.external.c_codegen`) writes for it. ``AnnotateTarget`` asks
the conditions; the build compiles the partitioned functions with the templates into a library
of their own, built with different flags than the main C build. Reductions accumulate in double.

``ccompiler`` (the name of TVM's example C codegen) uses the same codegen but takes no operator
by default: scripts declare its operators with ``register_op_attr(op, "target.ccompiler")``, as
TVM's tests do.

This module is the compiler's: the build loads it with :mod:`kiln.codegen.external`, and the
relay facade re-exports it as ``kiln.relay.op.contrib.kiln_c``.

Examples
--------
>>> mod = relay.transform.AnnotateTarget(["kiln_c"])(mod)  # doctest: +SKIP
>>> kiln.relay.op.contrib.supported_ops("kiln_c")  # doctest: +SKIP
['abs', 'add', 'clip', 'concatenate', 'divide', ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from math import prod
from typing import Any

from kiln.codegen.external import (
    Buf,
    CEmitter,
    ExternalCodegen,
    ExternalLibrary,
    c_codegen,
    c_emitter,
    register_codegen,
)
from kiln.ir.expr import Call, Function, Op
from kiln.ir.types import TensorType, TupleType, Type
from kiln.transform.external_target import register_external_target, register_op_target

__all__ = ["TARGET", "float32_only", "kiln_c_op"]

TARGET = "kiln_c"

Predicate = Callable[[Call], bool]


def _is_f32(ty: Type) -> bool:
    if isinstance(ty, TupleType):
        return all(_is_f32(f) for f in ty.fields)
    return isinstance(ty, TensorType) and ty.dtype == "float32"


def float32_only(call: Call) -> bool:
    """Every argument and the result are float32 tensors (or tuples of them)."""
    return all(_is_f32(a.checked_type) for a in call.args) and _is_f32(call.checked_type)


def kiln_c_op(*names: str, when: Predicate | None = None) -> Callable[[CEmitter], CEmitter]:
    """Declare operators ``kiln_c`` takes (float32, and ``when(call)``) with their C template."""

    def wrap(emit: CEmitter) -> CEmitter:
        def supports(call: Call) -> bool:
            return float32_only(call) and (when is None or bool(when(call)))

        for name in names:
            register_op_target(name, TARGET, supports)
        return c_emitter(*names)(emit)

    return wrap


# --- C helpers --------------------------------------------------------------------------------

def _attrs(call: Call) -> Any:
    """The call's attributes (each template knows its op's attrs class)."""
    return call.attrs


def _op_name(call: Call) -> str:
    assert isinstance(call.op, Op)
    return call.op.name


def _flit(value: float) -> str:
    """A float literal."""
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return f"{float(value)!r}f"


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for dim in reversed(shape):
        out.append(acc)
        acc *= dim
    return out[::-1]


def _loops(shape: tuple[int, ...], body: list[str], prefix: str = "i") -> list[str]:
    """Nested loops over ``shape`` (index variables ``<prefix>0``, ...) around ``body``."""
    lines = []
    for d, extent in enumerate(shape):
        lines.append("  " * d + f"for (int64_t {prefix}{d} = 0; {prefix}{d} < {extent}; ++{prefix}{d}) {{")
    lines += ["  " * len(shape) + line for line in body]
    lines += ["  " * d + "}" for d in reversed(range(len(shape)))]
    return lines


def _broadcast_offset(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> str:
    """Offset into a NumPy-broadcast input at output index ``i0, i1, ...``."""
    lead = len(out_shape) - len(in_shape)
    terms = [f"i{lead + d}*{s}" if s != 1 else f"i{lead + d}"
             for d, s in enumerate(_strides(in_shape)) if in_shape[d] != 1]
    return " + ".join(terms) or "0"


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, extent, inner) sizes around ``axis``."""
    axis %= len(shape)
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def _pads(padding: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from relay's 1-, 2- or 4-value padding."""
    if len(padding) == 1:
        p = padding[0]
        return p, p, p, p
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    return padding[0], padding[1], padding[2], padding[3]


# --- elementwise ------------------------------------------------------------------------------

_BINARY = {"add": "x + y", "subtract": "x - y", "multiply": "x * y", "divide": "x / y",
           "maximum": "(x > y ? x : y)", "minimum": "(x < y ? x : y)"}


@kiln_c_op(*_BINARY)
def _binary(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    a, b = ins
    o = outs[0]
    expr = _BINARY[_op_name(call)]
    if a.ty.shape == b.ty.shape == o.ty.shape:
        return [f"for (int64_t k = 0; k < {o.size}; ++k) {{",
                f"  const float x = {a.name}[k], y = {b.name}[k];",
                f"  {o.name}[k] = {expr};", "}"]
    shape = o.ty.shape
    body = [f"const float x = {a.name}[{_broadcast_offset(shape, a.ty.shape)}];",
            f"const float y = {b.name}[{_broadcast_offset(shape, b.ty.shape)}];",
            f"{o.name}[{_broadcast_offset(shape, shape)}] = {expr};"]
    return _loops(shape, body)


_UNARY = {"nn.relu": "v < 0.0f ? 0.0f : v", "negative": "-v", "abs": "fabsf(v)",
          "exp": "(float)exp((double)v)", "log": "(float)log((double)v)",
          "sqrt": "(float)sqrt((double)v)", "tanh": "(float)tanh((double)v)",
          "sigmoid": "(float)(1.0 / (1.0 + exp(-(double)v)))"}


@kiln_c_op(*_UNARY, "clip")
def _unary(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    name = _op_name(call)
    if name == "clip":
        expr = f"fminf(fmaxf(v, {_flit(_attrs(call).a_min)}), {_flit(_attrs(call).a_max)})"
    else:
        expr = _UNARY[name]
    a, o = ins[0], outs[0]
    return [f"for (int64_t k = 0; k < {o.size}; ++k) {{", f"  const float v = {a.name}[k];",
            f"  {o.name}[k] = {expr};", "}"]


@kiln_c_op("reshape", "nn.batch_flatten", "squeeze", "expand_dims")
def _copy(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    return [f"memcpy({outs[0].name}, {ins[0].name}, {outs[0].size}u * sizeof(float));"]


# --- convolution, dense, bias, batch norm ---------------------------------------------------------

def _conv2d_ok(call: Call) -> bool:
    a = _attrs(call)
    return (a.data_layout == "NCHW" and a.kernel_layout == "OIHW"
            and a.out_dtype in ("", "float32"))


@kiln_c_op("nn.conv2d", when=_conv2d_ok)
def _conv2d(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, w = ins
    o = outs[0]
    n, c, h, wd = x.ty.shape
    oc, icg, kh, kw = w.ty.shape
    _, _, oh, ow = o.ty.shape
    attrs = _attrs(call)
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, _, _ = _pads(attrs.padding)
    ocg = oc // attrs.groups
    body = [f"const int64_t g = i1 / {ocg};", "double acc = 0.0;",
            f"for (int64_t ic = 0; ic < {icg}; ++ic) {{",
            f"  for (int64_t kh = 0; kh < {kh}; ++kh) {{",
            f"    const int64_t ih = i2*{sh} - {pt} + kh*{dh};",
            f"    if (ih < 0 || ih >= {h}) continue;",
            f"    for (int64_t kw = 0; kw < {kw}; ++kw) {{",
            f"      const int64_t iw = i3*{sw} - {pl} + kw*{dw};",
            f"      if (iw < 0 || iw >= {wd}) continue;",
            f"      acc += (double){x.name}[((i0*{c} + g*{icg} + ic)*{h} + ih)*{wd} + iw]"
            f" * (double){w.name}[((i1*{icg} + ic)*{kh} + kh)*{kw} + kw];",
            "    }", "  }", "}",
            f"{o.name}[((i0*{oc} + i1)*{oh} + i2)*{ow} + i3] = (float)acc;"]
    return _loops((n, oc, oh, ow), body)


def _dense_ok(call: Call) -> bool:
    data, weight = (a.checked_type for a in call.args)
    return (isinstance(data, TensorType) and len(data.shape) == 2 and isinstance(weight, TensorType)
            and len(weight.shape) == 2 and _attrs(call).out_dtype in ("", "float32"))


@kiln_c_op("nn.dense", when=_dense_ok)
def _dense(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, w = ins
    o = outs[0]
    m, k = x.ty.shape
    units = w.ty.shape[0]
    body = ["double acc = 0.0;",
            f"for (int64_t k = 0; k < {k}; ++k) "
            f"acc += (double){x.name}[i0*{k} + k] * (double){w.name}[i1*{k} + k];",
            f"{o.name}[i0*{units} + i1] = (float)acc;"]
    return _loops((m, units), body)


@kiln_c_op("nn.bias_add")
def _bias_add(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, b = ins
    o = outs[0]
    outer, extent, inner = _split(x.ty.shape, _attrs(call).axis)
    body = [f"const int64_t at = (i0*{extent} + i1)*{inner} + i2;",
            f"{o.name}[at] = {x.name}[at] + {b.name}[i1];"]
    return _loops((outer, extent, inner), body)


@kiln_c_op("nn.batch_norm")
def _batch_norm(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, gamma, beta, mean, var = ins
    o, o_mean, o_var = outs
    attrs = _attrs(call)
    outer, extent, inner = _split(x.ty.shape, attrs.axis)
    scale = f" * (double){gamma.name}[i1]" if attrs.scale else ""
    shift = f" + (double){beta.name}[i1]" if attrs.center else ""
    body = [f"const int64_t at = (i0*{extent} + i1)*{inner} + i2;",
            f"const double inv = 1.0 / sqrt((double){var.name}[i1] + {float(attrs.epsilon)!r});",
            f"{o.name}[at] = (float)((((double){x.name}[at] - (double){mean.name}[i1]) * inv)"
            f"{scale}{shift});"]
    return [*_loops((outer, extent, inner), body),
            f"memcpy({o_mean.name}, {mean.name}, {extent}u * sizeof(float));",
            f"memcpy({o_var.name}, {var.name}, {extent}u * sizeof(float));"]


# --- pooling, softmax, concatenate ------------------------------------------------------------

def _nchw(call: Call) -> bool:
    return _attrs(call).layout == "NCHW" and _attrs(call).out_layout in ("", "NCHW")


@kiln_c_op("nn.global_avg_pool2d", "nn.global_max_pool2d", when=_nchw)
def _global_pool(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, o = ins[0], outs[0]
    n, c, h, w = x.ty.shape
    hw = h * w
    if _op_name(call) == "nn.global_avg_pool2d":
        body = ["double acc = 0.0;",
                f"for (int64_t k = 0; k < {hw}; ++k) acc += (double){x.name}[i0*{hw} + k];",
                f"{o.name}[i0] = (float)(acc / {hw}.0);"]
    else:
        body = [f"float best = {x.name}[i0*{hw}];",
                f"for (int64_t k = 1; k < {hw}; ++k) {{",
                f"  const float v = {x.name}[i0*{hw} + k];", "  if (v > best) best = v;", "}",
                f"{o.name}[i0] = best;"]
    return _loops((n * c,), body)


def _pool_ok(call: Call) -> bool:
    return _nchw(call) and not _attrs(call).ceil_mode


@kiln_c_op("nn.max_pool2d", "nn.avg_pool2d", when=_pool_ok)
def _pool2d(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, o = ins[0], outs[0]
    n, c, h, w = x.ty.shape
    _, _, oh, ow = o.ty.shape
    attrs = _attrs(call)
    kh, kw = attrs.pool_size
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    pt, pl, pb, pr = _pads(attrs.padding)
    is_max = _op_name(call) == "nn.max_pool2d"
    include_pad = not is_max and attrs.count_include_pad
    update = "if (v > acc) acc = v;" if is_max else "acc += v;"
    body = ["double acc = " + ("-3.4028234663852886e38;" if is_max else "0.0;"), "int64_t count = 0;",
            f"for (int64_t kh = 0; kh < {kh}; ++kh) {{",
            f"  const int64_t ih = i2*{sh} - {pt} + kh*{dh};",
            f"  for (int64_t kw = 0; kw < {kw}; ++kw) {{",
            f"    const int64_t iw = i3*{sw} - {pl} + kw*{dw};"]
    if include_pad:
        body.append(f"    if (ih >= -{pt} && ih < {h + pb} && iw >= -{pl} && iw < {w + pr}) ++count;")
    body += [f"    if (ih < 0 || ih >= {h} || iw < 0 || iw >= {w}) continue;",
             *([] if include_pad else ["    ++count;"]),
             f"    const double v = (double){x.name}[((i0*{c} + i1)*{h} + ih)*{w} + iw];",
             f"    {update}", "  }", "}"]
    result = "acc" if is_max else "acc / (double)(count > 0 ? count : 1)"
    body.append(f"{o.name}[((i0*{c} + i1)*{oh} + i2)*{ow} + i3] = (float)({result});")
    return _loops((n, c, oh, ow), body)


@kiln_c_op("nn.softmax")
def _softmax(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    x, o = ins[0], outs[0]
    outer, extent, inner = _split(x.ty.shape, _attrs(call).axis)
    at = f"(i0*{extent} + a)*{inner} + i1"
    body = [f"double top = (double){x.name}[i0*{extent * inner} + i1];",
            f"for (int64_t a = 1; a < {extent}; ++a) "
            f"if ((double){x.name}[{at}] > top) top = (double){x.name}[{at}];",
            "double sum = 0.0;",
            f"for (int64_t a = 0; a < {extent}; ++a) sum += exp((double){x.name}[{at}] - top);",
            f"for (int64_t a = 0; a < {extent}; ++a) "
            f"{o.name}[{at}] = (float)(exp((double){x.name}[{at}] - top) / sum);"]
    return _loops((outer, inner), body)


@kiln_c_op("concatenate")
def _concatenate(call: Call, ins: list[Buf], outs: list[Buf]) -> list[str]:
    o = outs[0]
    outer, extent, inner = _split(o.ty.shape, _attrs(call).axis)
    lines, offset = [], 0
    for b in ins:
        chunk = _split(b.ty.shape, _attrs(call).axis)[1] * inner
        lines.append(f"for (int64_t q = 0; q < {outer}; ++q) memcpy({o.name} + q*{extent * inner} + "
                     f"{offset}, {b.name} + q*{chunk}, {chunk}u * sizeof(float));")
        offset += chunk
    return lines


# --- registration -----------------------------------------------------------------------------

def _codegen_for(compiler: str) -> ExternalCodegen:
    def codegen(functions: Mapping[str, Function]) -> ExternalLibrary:
        return c_codegen(functions, compiler)

    return codegen


register_external_target(TARGET, description="Kiln's C codegen for float32 regions, built as a "
                         "separate library")
register_external_target("ccompiler", description="the same C codegen under TVM's example name; "
                         "declare its ops with register_op_attr")
for _compiler in (TARGET, "ccompiler"):
    register_codegen(_compiler, _codegen_for(_compiler))
