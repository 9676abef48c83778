"""PyTorch converters: one table keyed by ATen operator name, shared by ``torch.export`` and
TorchScript imports (:mod:`kiln.frontend.pytorch`).

A converter gets a :class:`Cx` (the import state and node name) and the call's :class:`Args`:
the schema's full argument list (defaults filled in), readable by position or by schema name.
Tensors arrive as relay expressions; ints, floats, lists, ``None`` and dtypes as Python values
(TorchScript's scalar arithmetic on sizes is evaluated at import). It returns an expression, a
Python value, or a tuple/list of them for multi-output operators.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError
from kiln.frontend.common import ImportState
from kiln.ir.expr import Constant, Expr

__all__ = ["CONVERTERS", "PASSTHROUGH", "Args", "Cx", "dtype_name"]

Converter = Callable[["Cx", "Args"], Any]
CONVERTERS: dict[str, Converter] = {}
PASSTHROUGH: dict[str, Converter] = {}  # scalar/shape helpers and no-ops, not tensor operators

_SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                 6: "float32", 7: "float64", 11: "bool", 15: "float32"}
_INT_MAX = 2 ** 62


def dtype_name(dt: Any) -> str:
    """A torch dtype (or TorchScript ScalarType code, or dtype string) as Kiln's dtype name."""
    if dt is None:
        raise FrontendError("no dtype")
    if isinstance(dt, str):
        return dt
    if isinstance(dt, (int, np.integer)) and not isinstance(dt, bool):
        if int(dt) not in _SCALAR_TYPES:
            raise FrontendError(f"unsupported torch ScalarType code {dt}")
        return _SCALAR_TYPES[int(dt)]
    name = str(dt).replace("torch.", "")
    if name == "bfloat16":
        return "float32"
    if name not in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"):
        raise FrontendError(f"unsupported torch dtype {dt}")
    return name


class Args:
    """A call's arguments by position or schema name."""

    def __init__(self, names: Sequence[str], values: Sequence[Any], node: str):
        self.names, self.values, self.node = list(names), list(values), node

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            return self.values[key] if key < len(self.values) else None
        return self.values[self.names.index(key)] if key in self.names else None

    def get(self, key: str, default: Any = None) -> Any:
        v = self[key]
        return default if v is None else v

    def has(self, key: str) -> bool:
        return key in self.names


class Cx:
    """What a converter needs besides its arguments."""

    def __init__(self, state: ImportState, op: str, node: str):
        self.state, self.op, self.node = state, op, node

    def shape(self, x: Expr) -> tuple[int, ...]:
        return self.state.shape_of(x)

    def dtype(self, x: Any) -> str:
        if isinstance(x, Expr):
            return self.state.dtype_of(x)
        if isinstance(x, bool):
            return "bool"
        return "int64" if isinstance(x, int) else "float32"

    def ndim(self, x: Expr) -> int:
        return len(self.shape(x))

    def error(self, msg: str) -> FrontendError:
        return FrontendError(f"PyTorch node {self.node!r} (aten::{self.op}): {msg}")

    def value(self, x: Any) -> Any:
        """A Python number/array for constant arguments, else ``None``."""
        if isinstance(x, Expr):
            v = self.state.value_of(x)
            return None if v is None else (v.item() if v.ndim == 0 else v)
        return x

    def tensor(self, x: Any, dtype: str | None = None) -> Expr:
        """``x`` as an expression (a Python scalar becomes a constant of ``dtype``)."""
        if isinstance(x, Expr):
            return x if dtype is None or self.dtype(x) == dtype else K.cast(x, dtype)
        return Constant(np.asarray(x, dtype=dtype or self.dtype(x)))

    def axis(self, axis: int, ndim: int) -> int:
        a = int(axis)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise self.error(f"dim {axis} is out of range for a {ndim}-d tensor")
        return a + ndim if a < 0 else a


def converter(*names: str, table: dict[str, Converter] = CONVERTERS) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for n in names:
            table[n] = fn
        return fn
    return register


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
         "float32": 6, "float64": 7}


def _promote(cx: Cx, a: Any, b: Any) -> tuple[Expr, Expr]:
    """Both operands as expressions of one dtype, close to PyTorch's promotion."""
    ea, eb = isinstance(a, Expr), isinstance(b, Expr)
    if ea and eb:
        da, db = cx.dtype(a), cx.dtype(b)
        if da == db:
            return a, b
        # a 0-d tensor does not widen a dimensioned one within the same category
        sa, sb = cx.ndim(a) == 0, cx.ndim(b) == 0
        if sa != sb and _is_float(da) == _is_float(db) and (da == "bool") == (db == "bool"):
            want = db if sa else da
        else:
            want = da if _RANK[da] >= _RANK[db] else db
        return cx.tensor(a, want), cx.tensor(b, want)
    if not ea and not eb:
        t = cx.dtype(a) if _RANK[cx.dtype(a)] >= _RANK[cx.dtype(b)] else cx.dtype(b)
        return cx.tensor(a, t), cx.tensor(b, t)
    tensor, scalar = (a, b) if ea else (b, a)
    dt = cx.dtype(tensor)
    if isinstance(scalar, float) and not _is_float(dt):
        dt = "float32"
    elif isinstance(scalar, int) and not isinstance(scalar, bool) and dt == "bool":
        dt = "int64"
    ta, tb = cx.tensor(a, dt), cx.tensor(b, dt)
    return ta, tb


def _binary(kiln_fn: Callable[[Expr, Expr], Expr], py_fn: Callable[[Any, Any], Any]) -> Converter:
    def conv(cx: Cx, a: Args) -> Any:
        x, y = a[0], a[1]
        if not isinstance(x, Expr) and not isinstance(y, Expr):
            return py_fn(x, y)
        return kiln_fn(*_promote(cx, x, y))
    return conv


_BINARY_OPS: list[tuple[tuple[str, ...], Callable[[Expr, Expr], Expr], Callable[[Any, Any], Any]]] = [
    (("mul", "mul_", "multiply"), K.multiply, lambda x, y: x * y),
    (("maximum", "fmax"), K.maximum, max),
    (("minimum", "fmin"), K.minimum, min),
    (("eq", "eq_"), K.equal, lambda x, y: x == y),
    (("ne", "ne_"), K.not_equal, lambda x, y: x != y),
    (("lt", "lt_", "less"), K.less, lambda x, y: x < y),
    (("le", "le_", "less_equal"), K.less_equal, lambda x, y: x <= y),
    (("gt", "gt_", "greater"), K.greater, lambda x, y: x > y),
    (("ge", "ge_", "greater_equal"), K.greater_equal, lambda x, y: x >= y),
    (("remainder", "remainder_"), K.floor_mod, lambda x, y: x % y),
    (("fmod",), K.mod, math.fmod),
    (("floor_divide", "floordiv"), K.floor_divide, lambda x, y: x // y),
    (("atan2",), K.atan2, math.atan2),
    (("logical_and",), K.logical_and, lambda x, y: bool(x) and bool(y)),
    (("logical_or",), K.logical_or, lambda x, y: bool(x) or bool(y)),
    (("logical_xor",), K.logical_xor, lambda x, y: bool(x) != bool(y)),
]
for _names, _fn, _py in _BINARY_OPS:
    converter(*_names)(_binary(_fn, _py))


def _bitwise(logical: Callable[[Expr, Expr], Expr], bitwise: Callable[[Expr, Expr], Expr],
             py: Callable[[Any, Any], Any]) -> Converter:
    def conv(cx: Cx, a: Args) -> Any:
        x, y = a[0], a[1]
        if not isinstance(x, Expr) and not isinstance(y, Expr):
            return py(x, y)
        x, y = _promote(cx, x, y)
        return logical(x, y) if cx.dtype(x) == "bool" else bitwise(x, y)
    return conv


converter("bitwise_and", "__and__", "__iand__")(_bitwise(K.logical_and, K.bitwise_and,
                                                         lambda x, y: x & y))
converter("bitwise_or", "__or__", "__ior__")(_bitwise(K.logical_or, K.bitwise_or,
                                                      lambda x, y: x | y))
converter("bitwise_xor", "__xor__")(_bitwise(K.logical_xor, K.bitwise_xor, lambda x, y: x ^ y))


def _scaled(cx: Cx, y: Any, alpha: Any) -> Any:
    if alpha is None or alpha == 1:
        return y
    if isinstance(y, Expr):
        return K.multiply(*_promote(cx, y, alpha))
    return y * alpha


@converter("add", "add_", "__iadd__")
def _add(cx: Cx, a: Args) -> Any:
    x, y = a[0], _scaled(cx, a[1], a["alpha"])
    if isinstance(x, (list, tuple)):  # TorchScript list concatenation
        return list(x) + list(y)
    if not isinstance(x, Expr) and not isinstance(y, Expr):
        return x + y
    return K.add(*_promote(cx, x, y))


@converter("sub", "sub_", "subtract", "__isub__")
def _sub(cx: Cx, a: Args) -> Any:
    x, y = a[0], _scaled(cx, a[1], a["alpha"])
    if not isinstance(x, Expr) and not isinstance(y, Expr):
        return x - y
    return K.subtract(*_promote(cx, x, y))


@converter("rsub")
def _rsub(cx: Cx, a: Args) -> Any:
    x, y = a[1], _scaled(cx, a[0], a["alpha"])
    if not isinstance(x, Expr) and not isinstance(y, Expr):
        return x - y
    return K.subtract(*_promote(cx, x, y))


@converter("div", "div_", "true_divide", "divide")
def _div(cx: Cx, a: Args) -> Any:
    x, y, mode = a[0], a[1], a["rounding_mode"]
    if not isinstance(x, Expr) and not isinstance(y, Expr):
        if mode == "floor":
            return x // y
        q = x / y
        return int(q) if mode == "trunc" else q
    x, y = _promote(cx, x, y)
    if mode is None:
        if not _is_float(cx.dtype(x)):
            x, y = K.cast(x, "float32"), K.cast(y, "float32")
        return K.divide(x, y)
    if mode == "floor":
        return K.floor_divide(x, y)
    if _is_float(cx.dtype(x)):
        return K.trunc(K.divide(x, y))
    return K.divide(x, y)  # integer divide truncates


@converter("pow", "pow_", "float_power")
def _pow(cx: Cx, a: Args) -> Any:
    x, y = a[0], a[1]
    if not isinstance(x, Expr) and not isinstance(y, Expr):
        return x ** y
    if isinstance(x, Expr) and not isinstance(y, Expr):
        if y == 2:
            return K.multiply(x, x)
        if y == 0.5 and _is_float(cx.dtype(x)):
            return K.sqrt(x)
        if y == 1:
            return x
    return K.power(*_promote(cx, x, y))


def _unary(fn: Callable[[Expr], Expr], py: Callable[[Any], Any] | None = None,
           floating: bool = False) -> Converter:
    def conv(cx: Cx, a: Args) -> Any:
        x = a[0]
        if not isinstance(x, Expr):
            if py is None:
                x = cx.tensor(x)
            else:
                return py(x)
        if floating and not _is_float(cx.dtype(x)):
            x = K.cast(x, "float32")
        return fn(x)
    return conv


_UNARY_OPS: list[tuple[tuple[str, ...], Callable[[Expr], Expr], Callable[[Any], Any] | None, bool]] = [
    (("neg", "neg_", "negative"), K.negative, lambda v: -v, False),
    (("abs", "abs_"), K.abs, abs, False),
    (("exp", "exp_"), K.exp, math.exp, True),
    (("log", "log_"), K.log, math.log, True),
    (("log2",), K.log2, math.log2, True),
    (("log10",), K.log10, math.log10, True),
    (("sqrt", "sqrt_"), K.sqrt, math.sqrt, True),
    (("rsqrt", "rsqrt_"), K.rsqrt, lambda v: 1 / math.sqrt(v), True),
    (("sin",), K.sin, math.sin, True),
    (("cos",), K.cos, math.cos, True),
    (("tan",), K.tan, math.tan, True),
    (("atan",), K.atan, math.atan, True),
    (("tanh", "tanh_"), K.tanh, math.tanh, True),
    (("sigmoid", "sigmoid_"), K.sigmoid, None, True),
    (("erf",), K.erf, math.erf, True),
    (("floor", "floor_"), K.floor, math.floor, False),
    (("ceil", "ceil_"), K.ceil, math.ceil, False),
    (("round",), K.round, round, False),
    (("trunc", "fix"), K.trunc, math.trunc, False),
    (("sign", "sgn"), K.sign, None, False),
    (("logical_not",), K.logical_not, lambda v: not v, False),
    (("isnan",), K.isnan, math.isnan, False),
    (("isinf",), K.isinf, math.isinf, False),
]
for _names, _ufn, _upy, _fl in _UNARY_OPS:
    converter(*_names)(_unary(_ufn, _upy, _fl))


@converter("bitwise_not")
def _bitwise_not(cx: Cx, a: Args) -> Expr:
    x = cx.tensor(a[0])
    return K.logical_not(x) if cx.dtype(x) == "bool" else K.bitwise_not(x)


def _const_like(cx: Cx, v: float, x: Expr) -> Expr:
    return Constant(np.asarray(v, dtype=cx.dtype(x)))


@converter("reciprocal", "reciprocal_")
def _reciprocal(cx: Cx, a: Args) -> Expr:
    x = _float(cx, a[0])
    return K.divide(_const_like(cx, 1.0, x), x)


@converter("square")
def _square(cx: Cx, a: Args) -> Expr:
    return K.multiply(a[0], a[0])


@converter("expm1")
def _expm1(cx: Cx, a: Args) -> Expr:
    x = _float(cx, a[0])
    return K.subtract(K.exp(x), _const_like(cx, 1.0, x))


@converter("log1p")
def _log1p(cx: Cx, a: Args) -> Expr:
    x = _float(cx, a[0])
    return K.log(K.add(x, _const_like(cx, 1.0, x)))


def _float(cx: Cx, x: Any) -> Expr:
    x = cx.tensor(x)
    return x if _is_float(cx.dtype(x)) else K.cast(x, "float32")


# --- activations -----------------------------------------------------------------------------------
@converter("relu", "relu_")
def _relu(cx: Cx, a: Args) -> Expr:
    return K.nn.relu(a[0])


def _clip(cx: Cx, x: Expr, lo: float | None, hi: float | None) -> Expr:
    info = np.finfo(np.float32)
    return K.clip(x, float(info.min) if lo is None else float(lo),
                      float(info.max) if hi is None else float(hi))


@converter("relu6", "relu6_")
def _relu6(cx: Cx, a: Args) -> Expr:
    return _clip(cx, a[0], 0.0, 6.0)


@converter("hardtanh", "hardtanh_")
def _hardtanh(cx: Cx, a: Args) -> Expr:
    return _clip(cx, a[0], a.get("min_val", -1.0), a.get("max_val", 1.0))


@converter("hardswish", "hardswish_")
def _hardswish(cx: Cx, a: Args) -> Expr:
    x = a[0]
    gate = _clip(cx, K.add(x, _const_like(cx, 3.0, x)), 0.0, 6.0)
    return K.divide(K.multiply(x, gate), _const_like(cx, 6.0, x))


@converter("hardsigmoid", "hardsigmoid_")
def _hardsigmoid(cx: Cx, a: Args) -> Expr:
    x = a[0]
    return K.divide(_clip(cx, K.add(x, _const_like(cx, 3.0, x)), 0.0, 6.0),
                        _const_like(cx, 6.0, x))


@converter("silu", "silu_")
def _silu(cx: Cx, a: Args) -> Expr:
    return K.multiply(a[0], K.sigmoid(a[0]))


@converter("gelu", "gelu_")
def _gelu(cx: Cx, a: Args) -> Expr:
    x, approx = a[0], a.get("approximate", "none")
    half = K.multiply(_const_like(cx, 0.5, x), x)
    if approx == "tanh":
        inner = K.add(x, K.multiply(_const_like(cx, 0.044715, x),
                                            K.multiply(x, K.multiply(x, x))))
        t = K.tanh(K.multiply(_const_like(cx, math.sqrt(2 / math.pi), x), inner))
    elif approx == "none":
        t = K.erf(K.multiply(x, _const_like(cx, 1 / math.sqrt(2), x)))
    else:
        raise cx.error(f"approximate={approx!r}")
    return K.multiply(half, K.add(_const_like(cx, 1.0, x), t))


@converter("leaky_relu", "leaky_relu_")
def _leaky_relu(cx: Cx, a: Args) -> Expr:
    return K.nn.leaky_relu(a[0], float(a.get("negative_slope", 0.01)))


@converter("elu", "elu_", "selu", "selu_", "celu", "celu_")
def _elu(cx: Cx, a: Args) -> Expr:
    x = a[0]
    if cx.op.startswith("selu"):
        alpha, scale, in_scale = 1.6732632423543772, 1.0507009873554805, 1.0
    elif cx.op.startswith("celu"):
        alpha = float(a.get("alpha", 1.0))
        scale, in_scale = 1.0, 1.0 / alpha
    else:
        alpha, scale, in_scale = (float(a.get("alpha", 1.0)), float(a.get("scale", 1.0)),
                                  float(a.get("input_scale", 1.0)))
    neg = K.multiply(_const_like(cx, alpha * scale, x),
                         K.subtract(K.exp(K.multiply(x, _const_like(cx, in_scale, x))),
                                        _const_like(cx, 1.0, x)))
    return K.where(K.greater(x, _const_like(cx, 0.0, x)),
                       K.multiply(x, _const_like(cx, scale, x)), neg)


def _softplus_expr(cx: Cx, x: Expr, beta: float, threshold: float) -> Expr:
    bx = K.multiply(x, _const_like(cx, beta, x))
    soft = K.divide(K.log(K.add(K.exp(bx), _const_like(cx, 1.0, x))),
                        _const_like(cx, beta, x))
    return K.where(K.greater(bx, _const_like(cx, threshold, x)), x, soft)


@converter("softplus")
def _softplus(cx: Cx, a: Args) -> Expr:
    return _softplus_expr(cx, a[0], float(a.get("beta", 1.0)), float(a.get("threshold", 20.0)))


@converter("mish", "mish_")
def _mish(cx: Cx, a: Args) -> Expr:
    return K.multiply(a[0], K.tanh(_softplus_expr(cx, a[0], 1.0, 20.0)))


@converter("prelu", "_prelu_kernel")
def _prelu(cx: Cx, a: Args) -> Expr:
    x, w = a[0], a[1]
    if cx.ndim(x) >= 2 and cx.shape(w) == (cx.shape(x)[1],):
        return K.nn.prelu(x, w, axis=1)
    if cx.ndim(x) >= 2 and cx.shape(w) == (1,):
        w = K.reshape(w, ())
    return K.where(K.greater(x, _const_like(cx, 0.0, x)), x, K.multiply(x, w))


def _softmax_like(log: bool) -> Converter:
    def conv(cx: Cx, a: Args) -> Expr:
        x = a[0]
        dt = a["dtype"] if a.has("dtype") else None
        if dt is not None:
            x = K.cast(x, dtype_name(dt))
        axis = cx.axis(a[1], cx.ndim(x))
        return K.nn.log_softmax(x, axis) if log else K.nn.softmax(x, axis)
    return conv


converter("softmax", "_softmax", "special_softmax")(_softmax_like(False))
converter("log_softmax", "_log_softmax")(_softmax_like(True))


@converter("logsigmoid", "log_sigmoid", "log_sigmoid_forward")
def _logsigmoid(cx: Cx, a: Args) -> Any:
    out = K.log(K.sigmoid(a[0]))
    return (out, out) if cx.op == "log_sigmoid_forward" else out


# --- clamp / where -------------------------------------------------------------------------------
@converter("clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_")
def _clamp(cx: Cx, a: Args) -> Expr:
    x = a[0]
    if cx.op.startswith("clamp_min"):
        lo, hi = a[1], None
    elif cx.op.startswith("clamp_max"):
        lo, hi = None, a[1]
    else:
        lo, hi = a[1], a[2]
    if not isinstance(lo, Expr) and not isinstance(hi, Expr) and _is_float(cx.dtype(x)):
        return _clip(cx, x, lo, hi)
    if lo is not None:
        x = K.maximum(*_promote(cx, x, lo))
    if hi is not None:
        x = K.minimum(*_promote(cx, x, hi))
    return x


@converter("where")
def _where(cx: Cx, a: Args) -> Any:
    cond = a[0]
    if len(a) == 1 or a[1] is None:
        raise cx.error("where(condition) has a data-dependent shape")
    x, y = _promote(cx, a[1], a[2])
    cond = cx.tensor(cond)
    if cx.dtype(cond) != "bool":
        cond = K.cast(cond, "bool")
    return K.where(cond, x, y)


@converter("masked_fill", "masked_fill_")
def _masked_fill(cx: Cx, a: Args) -> Expr:
    x, mask = a[0], cx.tensor(a[1])
    if cx.dtype(mask) != "bool":
        mask = K.cast(mask, "bool")
    return K.where(mask, cx.tensor(a[2], cx.dtype(x)), x)


# --- convolution / linear ------------------------------------------------------------------------
def _conv(cx: Cx, x: Expr, w: Expr, b: Any, stride: Any, padding: Any, dilation: Any,
          transposed: bool, output_padding: Any, groups: int) -> Expr:
    nsp = cx.ndim(x) - 2
    if nsp not in (1, 2):
        raise cx.error(f"{nsp}-d convolution (Kiln's PyTorch importer converts 1-d and 2-d)")

    def tup(v: Any, default: int) -> tuple[int, ...]:
        v = [default] if v is None or (isinstance(v, (list, tuple)) and not v) else v
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        return tuple(int(i) for i in (v * nsp if len(v) == 1 else v))

    strides, dil = tup(stride, 1), tup(dilation, 1)
    kernel = cx.shape(w)[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0,) * nsp * 2
        elif padding == "same":
            total = [d * (k - 1) for d, k in zip(dil, kernel)]
            pad = tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
        else:
            raise cx.error(f"padding={padding!r}")
    else:
        p = tup(padding, 0)
        pad = p + p
    groups = int(groups)
    fn: Callable[..., Expr]  # the 1-d and 2-d variants take the same keywords
    if transposed:
        opad = tup(output_padding, 0)
        fn = K.conv.conv2d_transpose if nsp == 2 else K.conv.conv1d_transpose
        y = fn(x, w, strides=strides, padding=pad, dilation=dil, groups=groups, output_padding=opad,
               kernel_layout="IOHW" if nsp == 2 else "IOW", data_layout="NCHW" if nsp == 2 else "NCW")
    else:
        fn = K.conv.conv2d if nsp == 2 else K.conv.conv1d
        y = fn(x, w, strides=strides, padding=pad, dilation=dil, groups=groups,
               kernel_layout="OIHW" if nsp == 2 else "OIW", data_layout="NCHW" if nsp == 2 else "NCW")
    if b is not None:
        y = K.nn.bias_add(y, b, axis=1)
    return y


@converter("conv1d", "conv2d", "_convolution_mode")
def _convnd(cx: Cx, a: Args) -> Expr:
    x = a[0]
    nsp = cx.ndim(a[1]) - 2
    unbatched = cx.ndim(x) == nsp + 1
    if unbatched:
        x = K.expand_dims(x, 0)
    y = _conv(cx, x, a[1], a[2], a[3], a[4], a[5], False, None, a[6] or 1)
    return K.squeeze(y, axis=[0]) if unbatched else y


@converter("conv_transpose1d", "conv_transpose2d")
def _conv_transpose(cx: Cx, a: Args) -> Expr:
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    return _conv(cx, a[0], a[1], a[2], a[3], a[4], a[7], True, a[5], a[6] or 1)


@converter("convolution", "_convolution")
def _convolution(cx: Cx, a: Args) -> Expr:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    return _conv(cx, a[0], a[1], a[2], a[3], a[4], a[5], bool(a[6]), a[7], a[8])


def _matmul2d(cx: Cx, x: Expr, w_t: Expr) -> Expr:
    """``x @ w_t`` with ``w_t`` 2-d, for any rank of ``x``."""
    return K.nn.dense(x, K.transpose(w_t, (1, 0)))


@converter("linear")
def _linear(cx: Cx, a: Args) -> Expr:
    x, w, b = a[0], a[1], a[2]
    if cx.ndim(w) == 1:
        y = K.sum(K.multiply(x, w), axis=-1)
    else:
        y = K.nn.dense(x, w)
    return y if b is None else K.add(y, b)


@converter("addmm", "addmm_")
def _addmm(cx: Cx, a: Args) -> Expr:
    bias, m1, m2 = a[0], a[1], a[2]
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    y = _matmul2d(cx, m1, m2)
    if alpha != 1:
        y = K.multiply(y, _const_like(cx, alpha, y))
    if beta == 0:
        return y
    b = cx.tensor(bias, cx.dtype(y))
    if beta != 1:
        b = K.multiply(b, _const_like(cx, beta, y))
    return K.add(y, b)


@converter("mm")
def _mm(cx: Cx, a: Args) -> Expr:
    return _matmul2d(cx, a[0], a[1])


@converter("bmm")
def _bmm(cx: Cx, a: Args) -> Expr:
    return K.nn.batch_matmul(a[0], a[1], transpose_b=False)


@converter("baddbmm")
def _baddbmm(cx: Cx, a: Args) -> Expr:
    y = K.nn.batch_matmul(a[1], a[2], transpose_b=False)
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    if alpha != 1:
        y = K.multiply(y, _const_like(cx, alpha, y))
    if beta == 0:
        return y
    b = a[0] if beta == 1 else K.multiply(a[0], _const_like(cx, beta, y))
    return K.add(y, b)


def matmul(cx: Cx, x: Expr, y: Expr) -> Expr:
    """NumPy/PyTorch ``matmul`` of any ranks (batch dims broadcast)."""
    sx, sy = cx.shape(x), cx.shape(y)
    if len(sx) == 1 and len(sy) == 1:
        return K.sum(K.multiply(x, y))
    if len(sy) == 1:
        return K.squeeze(matmul(cx, x, K.expand_dims(y, 1)), axis=[-1])
    if len(sx) == 1:
        return K.squeeze(matmul(cx, K.expand_dims(x, 0), y), axis=[-2])
    if len(sy) == 2:
        return _matmul2d(cx, x, y)
    batch = tuple(np.broadcast_shapes(sx[:-2], sy[:-2]))
    n = int(np.prod(batch)) if batch else 1
    xb = K.reshape(K.broadcast_to(x, batch + sx[-2:]) if sx[:-2] != batch else x,
                       (n, *sx[-2:]))
    yb = K.reshape(K.broadcast_to(y, batch + sy[-2:]) if sy[:-2] != batch else y,
                       (n, *sy[-2:]))
    out = K.nn.batch_matmul(xb, yb, transpose_b=False)
    return K.reshape(out, (*batch, sx[-2], sy[-1]))


@converter("matmul")
def _matmul(cx: Cx, a: Args) -> Expr:
    return matmul(cx, a[0], a[1])


@converter("einsum")
def _einsum(cx: Cx, a: Args) -> Expr:
    return K.einsum(list(a[1]), str(a[0]))


# --- normalisation ---------------------------------------------------------------------------------
def _vec(cx: Cx, v: Any, n: int, fill: float, like: Expr) -> Expr:
    return Constant(np.full((n,), fill, dtype=cx.dtype(like))) if v is None else v


@converter("batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm",
           "_native_batch_norm_legit", "instance_norm")
def _batch_norm(cx: Cx, a: Args) -> Any:
    x = a[0]
    c = cx.shape(x)[1]
    if cx.op == "instance_norm":
        if a[3] is not None and not a[5]:
            raise cx.error("instance_norm with running stats (use_input_stats=False)")
        return K.nn.instance_norm(x, _vec(cx, a[1], c, 1.0, x), _vec(cx, a[2], c, 0.0, x),
                                      axis=1, epsilon=float(a["eps"]))
    training = a["training"]
    if training:
        raise cx.error("batch_norm in training mode: call model.eval() before exporting")
    mean, var = a[3], a[4]
    if mean is None or var is None:
        raise cx.error("batch_norm without running statistics")
    y = K.nn.batch_norm(x, _vec(cx, a[1], c, 1.0, x), _vec(cx, a[2], c, 0.0, x), mean, var,
                            axis=1, epsilon=float(a["eps"]))[0]
    if cx.op == "batch_norm":
        return y
    return (y, None, None)  # the saved statistics: unused in inference graphs


def _flat_norm(cx: Cx, x: Expr, k: int, fn: Callable[[Expr], Expr]) -> Expr:
    """``fn`` (a normalisation of the last axis) applied over the last ``k`` axes."""
    if k == 1:
        return fn(x)
    shape = cx.shape(x)
    flat = K.reshape(x, (*shape[:-k], int(np.prod(shape[-k:]))))
    return K.reshape(fn(flat), shape)


@converter("layer_norm", "native_layer_norm")
def _layer_norm(cx: Cx, a: Args) -> Any:
    x, norm_shape, w, b, eps = a[0], list(a[1]), a[2], a[3], float(a[4])
    k = len(norm_shape)
    n = int(np.prod(norm_shape))
    gw = K.reshape(w, (n,)) if w is not None else _vec(cx, None, n, 1.0, x)
    gb = K.reshape(b, (n,)) if b is not None else _vec(cx, None, n, 0.0, x)
    y = _flat_norm(cx, x, k, lambda t: K.nn.layer_norm(t, gw, gb, axis=-1, epsilon=eps))
    if cx.op == "layer_norm":
        return y
    return (y, None, None)  # the saved statistics: unused in inference graphs


@converter("group_norm", "native_group_norm")
def _group_norm(cx: Cx, a: Args) -> Any:
    x = a[0]
    c = cx.shape(x)[1]
    if cx.op == "group_norm":
        groups, w, b, eps = int(a[1]), a[2], a[3], float(a[4])
    else:
        w, b, groups, eps = a[1], a[2], int(a[6]), float(a[7])
    y = K.nn.group_norm(x, _vec(cx, w, c, 1.0, x), _vec(cx, b, c, 0.0, x), num_groups=groups,
                            axis=1, epsilon=eps)
    if cx.op == "group_norm":
        return y
    return (y, None, None)  # the saved statistics: unused in inference graphs


# --- pooling -------------------------------------------------------------------------------------
def _ints(v: Any, n: int, default: Sequence[int] | None = None) -> tuple[int, ...]:
    if v is None or (isinstance(v, (list, tuple)) and not v):
        if default is None:
            raise FrontendError("missing pooling argument")
        return tuple(default)
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(int(i) for i in (v * n if len(v) == 1 else v))


@converter("max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool1d_with_indices")
def _max_pool(cx: Cx, a: Args) -> Any:
    x = a[0]
    n = 1 if cx.op.startswith("max_pool1d") else 2
    k = _ints(a[1], n)
    s = _ints(a[2], n, k)
    p = _ints(a[3], n, (0,) * n)
    d = _ints(a[4], n, (1,) * n)
    fn = K.pool.max_pool2d if n == 2 else K.pool.max_pool1d
    unbatched = cx.ndim(x) == n + 1
    xin = K.expand_dims(x, 0) if unbatched else x
    y = fn(xin, pool_size=k, strides=s, dilation=d, padding=p + p, ceil_mode=bool(a[5]))
    if unbatched:
        y = K.squeeze(y, axis=[0])
    if cx.op.endswith("with_indices"):
        return (y, None)
    return y


@converter("avg_pool1d", "avg_pool2d")
def _avg_pool(cx: Cx, a: Args) -> Expr:
    x = a[0]
    n = 1 if cx.op == "avg_pool1d" else 2
    k = _ints(a[1], n)
    s = _ints(a[2], n, k)
    p = _ints(a[3], n, (0,) * n)
    ceil_mode, include = bool(a[4]), bool(a.get("count_include_pad", True))
    divisor = a["divisor_override"] if a.has("divisor_override") else None
    fn = K.pool.avg_pool2d if n == 2 else K.pool.avg_pool1d
    unbatched = cx.ndim(x) == n + 1
    xin = K.expand_dims(x, 0) if unbatched else x
    if divisor is not None:
        y = fn(xin, pool_size=k, strides=s, padding=p + p, ceil_mode=ceil_mode, count_include_pad=True)
        y = K.multiply(y, _const_like(cx, float(np.prod(k)) / float(divisor), x))
    else:
        y = fn(xin, pool_size=k, strides=s, padding=p + p, ceil_mode=ceil_mode, count_include_pad=include)
    return K.squeeze(y, axis=[0]) if unbatched else y


@converter("adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
           "adaptive_max_pool1d", "adaptive_max_pool2d")
def _adaptive_pool(cx: Cx, a: Args) -> Any:
    x = a[0]
    n = 1 if "1d" in cx.op else 2
    unbatched = cx.ndim(x) == n + 1
    xin = K.expand_dims(x, 0) if unbatched else x
    insize = cx.shape(xin)[2:]
    sizes = list(a[1]) if isinstance(a[1], (list, tuple)) else [a[1]]
    sizes = sizes * n if len(sizes) == 1 else sizes
    out = tuple(i if o is None else int(o) for o, i in zip(sizes, insize))
    is_max = "max" in cx.op
    if n == 2:
        fn = K.pool.adaptive_max_pool2d if is_max else K.pool.adaptive_avg_pool2d
    else:
        fn = K.pool.adaptive_max_pool1d if is_max else K.pool.adaptive_avg_pool1d
    y = fn(xin, output_size=out)
    if unbatched:
        y = K.squeeze(y, axis=[0])
    return (y, None) if is_max else y


# --- resampling / padding --------------------------------------------------------------------------
@converter("upsample_nearest1d", "upsample_nearest2d", "upsample_bilinear2d", "upsample_linear1d",
           "_upsample_nearest_exact1d", "_upsample_nearest_exact2d")
def _upsample(cx: Cx, a: Args) -> Expr:
    x = a[0]
    n = cx.ndim(x) - 2
    insize = cx.shape(x)[2:]
    size = a["output_size"]
    if a.has("scale_factors"):
        scales = a["scale_factors"]
    else:
        names = ["scales"] if n == 1 else ["scales_h", "scales_w"]
        scales = [a[nm] for nm in names] if any(a[nm] is not None for nm in names) else None
    if size:
        out = tuple(int(s) for s in size)
    elif scales:
        out = tuple(math.floor(i * float(s)) for i, s in zip(insize, scales))
    else:
        raise cx.error("neither output_size nor scale factors given")
    nearest = "nearest" in cx.op
    align = bool(a["align_corners"]) if a.has("align_corners") else False
    kw: dict[str, Any]
    if nearest:
        exact = "exact" in cx.op
        kw = dict(method="nearest_neighbor",
                  coordinate_transformation_mode="half_pixel" if exact else "asymmetric",
                  rounding_method="round_prefer_ceil" if exact else "floor")
    else:
        kw = dict(method="linear",
                  coordinate_transformation_mode="align_corners" if align else "half_pixel")
    if n == 1:
        return K.image.resize1d(x, out, layout="NCW", **kw)
    return K.image.resize2d(x, out, layout="NCHW", **kw)


def _pad_width(cx: Cx, x: Expr, pad: Sequence[int]) -> list[tuple[int, int]]:
    nd = cx.ndim(x)
    widths = [(0, 0)] * nd
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > nd:
        raise cx.error(f"pad {pad} for a {nd}-d tensor")
    for i in range(len(pad) // 2):
        widths[nd - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


def _pad(cx: Cx, x: Expr, pad: Sequence[int], mode: str, value: Any) -> Expr:
    widths = _pad_width(cx, x, pad)
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise cx.error(f"pad mode {mode!r}")
    if mode == "constant":
        return K.nn.pad(x, widths, pad_value=float(value or 0.0))
    return K.nn.pad(x, widths, pad_mode=modes[mode])


@converter("constant_pad_nd")
def _constant_pad(cx: Cx, a: Args) -> Expr:
    return _pad(cx, a[0], a[1], "constant", a[2])


@converter("pad")
def _pad_any(cx: Cx, a: Args) -> Expr:
    return _pad(cx, a[0], a[1], a.get("mode", "constant"), a["value"])


@converter("reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d")
def _reflect_pad(cx: Cx, a: Args) -> Expr:
    return _pad(cx, a[0], a[1], "reflect" if cx.op.startswith("reflection") else "replicate", None)


@converter("pixel_shuffle")
def _pixel_shuffle(cx: Cx, a: Args) -> Expr:
    return K.nn.depth_to_space(a[0], int(a[1]), layout="NCHW", mode="CRD")


# --- reductions ----------------------------------------------------------------------------------
def _dims(cx: Cx, x: Expr, dim: Any) -> list[int] | None:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return [cx.axis(d, cx.ndim(x)) for d in dims]


def _reduce(fn: Callable[..., Expr], keep_default: bool = False) -> Converter:
    def conv(cx: Cx, a: Args) -> Any:
        x = cx.tensor(a[0])
        dt = a["dtype"] if a.has("dtype") else None
        if dt is not None:
            x = K.cast(x, dtype_name(dt))
        elif fn in (K.sum, K.prod) and not _is_float(cx.dtype(x)):
            x = K.cast(x, "int64")
        elif fn is K.mean and not _is_float(cx.dtype(x)):
            raise cx.error(f"mean of a {cx.dtype(x)} tensor")
        dim = a["dim"] if a.has("dim") else None
        keep = bool(a["keepdim"]) if a.has("keepdim") else keep_default
        return fn(x, axis=_dims(cx, x, dim), keepdims=keep)
    return conv


converter("sum")(_reduce(K.sum))
converter("mean")(_reduce(K.mean))
converter("prod")(_reduce(K.prod))
converter("amax")(_reduce(K.max))
converter("amin")(_reduce(K.min))
converter("logsumexp")(_reduce(K.logsumexp))
converter("all")(_reduce(K.all))
converter("any")(_reduce(K.any))


def _minmax(is_max: bool) -> Converter:
    def conv(cx: Cx, a: Args) -> Any:
        x = a[0]
        if a.has("other"):  # max.other: elementwise
            fn = K.maximum if is_max else K.minimum
            if not isinstance(x, Expr) and not isinstance(a[1], Expr):
                return max(x, a[1]) if is_max else min(x, a[1])
            return fn(*_promote(cx, x, a[1]))
        red = K.max if is_max else K.min
        if not a.has("dim"):
            return red(x)
        axis = cx.axis(a["dim"], cx.ndim(x))
        keep = bool(a["keepdim"])
        arg = K.argmax if is_max else K.argmin
        return (red(x, axis=[axis], keepdims=keep),
                K.cast(arg(x, axis=[axis], keepdims=keep), "int64"))
    return conv


converter("max")(_minmax(True))
converter("min")(_minmax(False))


def _argreduce(fn: Callable[..., Expr]) -> Converter:
    def conv(cx: Cx, a: Args) -> Expr:
        x, dim, keep = a[0], a["dim"], bool(a.get("keepdim", False))
        if dim is None:
            out = fn(K.reshape(x, (-1,)), axis=[0], keepdims=False)
            if keep:
                out = K.reshape(out, (1,) * cx.ndim(x))
        else:
            out = fn(x, axis=[cx.axis(dim, cx.ndim(x))], keepdims=keep)
        return K.cast(out, "int64")
    return conv


converter("argmax")(_argreduce(K.argmax))
converter("argmin")(_argreduce(K.argmin))


@converter("var", "std", "var_mean", "std_mean")
def _var(cx: Cx, a: Args) -> Any:
    x = a[0]
    dim = a["dim"] if a.has("dim") else None
    if a.has("correction"):
        corr = a["correction"]
        corr = 1 if corr is None else corr
    else:
        corr = 1 if a.get("unbiased", True) else 0
    if corr not in (0, 1):
        raise cx.error(f"correction={corr}")
    keep = bool(a.get("keepdim", False))
    axes = _dims(cx, x, dim)
    v = K.variance(x, axis=axes, keepdims=keep, unbiased=bool(corr))
    out = K.sqrt(v) if cx.op.startswith("std") else v
    if cx.op.endswith("_mean"):
        return (out, K.mean(x, axis=axes, keepdims=keep))
    return out


@converter("cumsum", "cumsum_")
def _cumsum(cx: Cx, a: Args) -> Expr:
    x = a[0]
    dt = a["dtype"]
    if dt is not None:
        x = K.cast(x, dtype_name(dt))
    elif not _is_float(cx.dtype(x)):
        x = K.cast(x, "int64")
    return K.cumsum(x, axis=cx.axis(a[1], cx.ndim(x)))


# --- shapes ----------------------------------------------------------------------------------------
def _shape_arg(cx: Cx, x: Expr, size: Any) -> tuple[int, ...]:
    if isinstance(size, (int, np.integer)):
        size = [size]
    size = [int(cx.value(s)) for s in size]
    n = int(np.prod(cx.shape(x)))
    if size.count(-1) > 1:
        raise cx.error(f"view size {size} has more than one -1")
    if -1 in size:
        rest = int(np.prod([s for s in size if s != -1]))
        size[size.index(-1)] = n // rest if rest else 0
    if int(np.prod(size)) != n:
        raise cx.error(f"cannot view a tensor of shape {list(cx.shape(x))} as {size}")
    return tuple(size)


@converter("view", "reshape", "_unsafe_view", "_reshape_alias")
def _view(cx: Cx, a: Args) -> Expr:
    if a.has("dtype"):  # view.dtype: a bit cast
        return K.reinterpret(a[0], dtype_name(a["dtype"]))
    return K.reshape(a[0], _shape_arg(cx, a[0], a[1]))


@converter("view_as", "reshape_as")
def _view_as(cx: Cx, a: Args) -> Expr:
    return K.reshape(a[0], cx.shape(a[1]))


@converter("flatten")
def _flatten(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = cx.shape(x)
    nd = len(shape)
    if nd == 0:
        return K.reshape(x, (1,))
    s = cx.axis(a.get("start_dim", 0), nd)
    e = cx.axis(a.get("end_dim", -1), nd)
    new = (*shape[:s], int(np.prod(shape[s:e + 1])), *shape[e + 1:])
    return K.reshape(x, new)


@converter("unflatten")
def _unflatten(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = list(cx.shape(x))
    d = cx.axis(a[1], len(shape))
    sizes = [int(s) for s in a[2]]
    if -1 in sizes:
        rest = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = shape[d] // rest
    return K.reshape(x, tuple(shape[:d] + sizes + shape[d + 1:]))


@converter("permute")
def _permute(cx: Cx, a: Args) -> Expr:
    nd = cx.ndim(a[0])
    return K.transpose(a[0], [cx.axis(d, nd) for d in a[1]])


@converter("transpose", "swapaxes", "transpose_")
def _transpose(cx: Cx, a: Args) -> Expr:
    x = a[0]
    nd = cx.ndim(x)
    if nd < 2:
        return x
    axes = list(range(nd))
    i, j = cx.axis(a[1], nd), cx.axis(a[2], nd)
    axes[i], axes[j] = axes[j], axes[i]
    return K.transpose(x, axes)


@converter("t", "numpy_T")
def _t(cx: Cx, a: Args) -> Expr:
    nd = cx.ndim(a[0])
    return a[0] if nd < 2 else K.transpose(a[0], list(range(nd))[::-1])


@converter("contiguous", "clone", "detach", "detach_", "alias", "lift_fresh", "lift_fresh_copy",
           "dropout", "dropout_", "feature_dropout", "alpha_dropout", "feature_alpha_dropout",
           "resolve_conj", "resolve_neg", "positive")
def _identity(cx: Cx, a: Args) -> Any:
    return a[0]


@converter("native_dropout")
def _native_dropout(cx: Cx, a: Args) -> Any:
    x = a[0]
    return (x, K.ones(cx.shape(x), "bool"))


@converter("squeeze", "squeeze_")
def _squeeze(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = cx.shape(x)
    dim = a[1] if len(a) > 1 else None
    if dim is None:
        axes = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        axes = [cx.axis(d, len(shape)) for d in dims]
        axes = [d for d in axes if shape[d] == 1]
    return K.squeeze(x, axis=axes) if axes else x


@converter("unsqueeze", "unsqueeze_")
def _unsqueeze(cx: Cx, a: Args) -> Expr:
    x = a[0]
    nd = cx.ndim(x)
    d = int(a[1])
    d = d + nd + 1 if d < 0 else d
    return K.expand_dims(x, d)


@converter("expand", "broadcast_to")
def _expand(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = cx.shape(x)
    size = [int(cx.value(s)) for s in a[1]]
    lead = len(size) - len(shape)
    out = [s if s != -1 else shape[i - lead] for i, s in enumerate(size)]
    return x if tuple(out) == shape else K.broadcast_to(x, tuple(out))


@converter("expand_as")
def _expand_as(cx: Cx, a: Args) -> Expr:
    return K.broadcast_to(a[0], cx.shape(a[1]))


@converter("repeat")
def _repeat(cx: Cx, a: Args) -> Expr:
    x = a[0]
    reps = [int(cx.value(r)) for r in a[1]]
    shape = cx.shape(x)
    if len(reps) > len(shape):
        x = K.reshape(x, (1,) * (len(reps) - len(shape)) + shape)
    return K.tile(x, reps)


@converter("repeat_interleave")
def _repeat_interleave(cx: Cx, a: Args) -> Expr:
    x, reps, dim = a[0], a[1], a["dim"]
    r = cx.value(reps)
    if r is None or (np.ndim(r) > 0 and len(set(np.ravel(r).tolist())) != 1):
        raise cx.error("repeat_interleave with per-element repeats")
    r = int(np.ravel(r)[0])
    if dim is None:
        return K.repeat(K.reshape(x, (-1,)), r, 0)
    return K.repeat(x, r, cx.axis(dim, cx.ndim(x)))


@converter("cat", "concat", "concatenate")
def _cat(cx: Cx, a: Args) -> Expr:
    ts = [t for t in a[0] if not (isinstance(t, Expr) and cx.shape(t) == (0,))]
    if len(ts) == 1:
        return ts[0]
    dt = cx.dtype(ts[0])
    for t in ts[1:]:
        if _RANK[cx.dtype(t)] > _RANK[dt]:
            dt = cx.dtype(t)
    ts = [cx.tensor(t, dt) for t in ts]
    return K.concatenate(ts, axis=cx.axis(a.get("dim", 0), cx.ndim(ts[0])))


@converter("stack")
def _stack(cx: Cx, a: Args) -> Expr:
    ts = [cx.tensor(t) for t in a[0]]
    nd = cx.ndim(ts[0]) + 1
    d = int(a.get("dim", 0))
    return K.stack(ts, axis=d + nd if d < 0 else d)


def _split_at(cx: Cx, x: Expr, sizes: Sequence[int], dim: int) -> list[Expr]:
    if len(sizes) == 1:
        return [x]
    idx = list(np.cumsum(sizes)[:-1].tolist())
    parts = K.split(x, idx, axis=dim)
    return [parts[i] for i in range(len(sizes))]


@converter("split", "split_with_sizes", "chunk", "unsafe_split", "unsafe_chunk", "tensor_split")
def _split(cx: Cx, a: Args) -> list[Expr]:
    x = a[0]
    dim = cx.axis(a.get("dim", 0), cx.ndim(x))
    n = cx.shape(x)[dim]
    arg = a[1]
    if cx.op in ("chunk", "unsafe_chunk"):
        size = -(-n // int(arg))
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
    elif cx.op == "tensor_split" and isinstance(arg, (list, tuple)):
        bounds = [0, *(min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in arg), n]
        sizes = [max(e - b, 0) for b, e in itertools.pairwise(bounds)]
        if 0 in sizes:
            raise cx.error("tensor_split into empty pieces")
    elif cx.op == "tensor_split":
        k = int(arg)
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    elif isinstance(arg, (list, tuple)):
        sizes = [int(s) for s in arg]
    else:
        s = int(arg)
        sizes = [s] * (n // s) + ([n % s] if n % s else [])
    return _split_at(cx, x, sizes, dim)


@converter("unbind")
def _unbind(cx: Cx, a: Args) -> list[Expr]:
    x = a[0]
    dim = cx.axis(a.get("dim", 0), cx.ndim(x))
    parts = _split_at(cx, x, [1] * cx.shape(x)[dim], dim)
    return [K.squeeze(p, axis=[dim]) for p in parts]


def _clamp_index(i: Any, n: int, default: int) -> int:
    if i is None:
        return default
    i = int(i)
    if i < 0:
        i += n
    return min(max(i, 0), n)


@converter("slice", "slice_copy")
def _slice(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = cx.shape(x)
    dim = cx.axis(a.get("dim", 0), len(shape))
    n = shape[dim]
    step = int(a.get("step", 1))
    start = _clamp_index(cx.value(a["start"]), n, 0)
    end = _clamp_index(cx.value(a["end"]), n, n)
    if start == 0 and end == n and step == 1:
        return x
    end = max(end, start)
    return K.strided_slice(x, [start], [end], strides=[step], axes=[dim])


@converter("narrow")
def _narrow(cx: Cx, a: Args) -> Expr:
    x = a[0]
    dim = cx.axis(a[1], cx.ndim(x))
    start = int(cx.value(a[2]))
    start = start + cx.shape(x)[dim] if start < 0 else start
    return K.strided_slice(x, [start], [start + int(a[3])], axes=[dim])


@converter("select", "select_copy")
def _select(cx: Cx, a: Args) -> Expr:
    x = a[0]
    shape = cx.shape(x)
    dim = cx.axis(a[1], len(shape))
    i = int(cx.value(a[2]))
    i = i + shape[dim] if i < 0 else i
    if not 0 <= i < shape[dim]:
        raise cx.error(f"index {a[2]} is out of range for dim {dim} of size {shape[dim]}")
    return K.squeeze(K.strided_slice(x, [i], [i + 1], axes=[dim]), axis=[dim])


def _index_tensor(cx: Cx, idx: Any, n: int) -> Expr:
    idx = cx.tensor(idx)
    if cx.dtype(idx) == "bool":
        raise cx.error("boolean mask indexing has a data-dependent shape")
    v = cx.value(idx)
    if v is not None:
        v = np.asarray(v).astype("int64")
        return Constant(np.where(v < 0, v + n, v))
    return K.where(K.less(idx, Constant(np.asarray(0, cx.dtype(idx)))),
                       K.add(idx, Constant(np.asarray(n, cx.dtype(idx)))), idx)


@converter("index_select")
def _index_select(cx: Cx, a: Args) -> Expr:
    x = a[0]
    dim = cx.axis(a[1], cx.ndim(x))
    return K.take(x, _index_tensor(cx, a[2], cx.shape(x)[dim]), axis=dim)


@converter("index", "_unsafe_index")
def _index(cx: Cx, a: Args) -> Expr:
    x, indices = a[0], list(a[1])
    used = [i for i, t in enumerate(indices) if t is not None]
    if len(used) != 1:
        raise cx.error("advanced indexing with more than one index tensor")
    dim = used[0]
    return K.take(x, _index_tensor(cx, indices[dim], cx.shape(x)[dim]), axis=dim)


@converter("gather")
def _gather(cx: Cx, a: Args) -> Expr:
    x = a[0]
    dim = cx.axis(a[1], cx.ndim(x))
    return K.gather(x, dim, _index_tensor(cx, a[2], cx.shape(x)[dim]))


@converter("embedding")
def _embedding(cx: Cx, a: Args) -> Expr:
    w, idx = a[0], a[1]
    return K.take(w, _index_tensor(cx, idx, cx.shape(w)[0]), axis=0)


@converter("flip")
def _flip(cx: Cx, a: Args) -> Expr:
    x = a[0]
    for d in a[1]:
        x = K.reverse(x, cx.axis(d, cx.ndim(a[0])))
    return x


@converter("triu", "tril")
def _trilu(cx: Cx, a: Args) -> Expr:
    return K.trilu(a[0], int(a.get("diagonal", 0)), upper=cx.op == "triu")


# --- dtype casts and creation ----------------------------------------------------------------------
@converter("to", "_to_copy", "type_as", "_cast_Float", "_cast_Long")
def _to(cx: Cx, a: Args) -> Any:
    x = a[0]
    simple = {"_cast_Float": "float32", "_cast_Long": "int64"}
    if cx.op in simple:
        want: str | None = simple[cx.op]
    elif cx.op == "type_as" or a.has("other"):
        want = cx.dtype(a[1])
    else:
        dt = a["dtype"]
        if dt is None and len(a) > 1 and not a.has("dtype") and isinstance(a[1], int):
            dt = a[1]
        want = dtype_name(dt) if dt is not None else None
    if want is None:
        return x
    if not isinstance(x, Expr):
        return cx.tensor(x, want)
    return x if cx.dtype(x) == want else K.cast(x, want)


def _dtype_or(a: Args, default: str) -> str:
    dt = a["dtype"] if a.has("dtype") else None
    return dtype_name(dt) if dt is not None else default


def _fill_dtype(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return "int64" if isinstance(value, (int, np.integer)) else "float32"


def _size(cx: Cx, size: Any) -> tuple[int, ...]:
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(cx.value(s)) for s in size)


@converter("zeros", "ones", "empty", "new_zeros", "new_ones", "new_empty", "empty_strided",
           "new_empty_strided")
def _zeros(cx: Cx, a: Args) -> Expr:
    new = cx.op.startswith("new_")
    size = _size(cx, a[1] if new else a[0])
    default = cx.dtype(a[0]) if new else "float32"
    fill = 1 if "ones" in cx.op else 0
    return Constant(np.full(size, fill, dtype=_dtype_or(a, default)))


@converter("full", "new_full")
def _full(cx: Cx, a: Args) -> Expr:
    new = cx.op == "new_full"
    size, value = (_size(cx, a[1]), a[2]) if new else (_size(cx, a[0]), a[1])
    value = cx.value(value)
    default = cx.dtype(a[0]) if new else _fill_dtype(value)
    return Constant(np.full(size, value, dtype=_dtype_or(a, default)))


@converter("zeros_like", "ones_like", "empty_like", "full_like")
def _like(cx: Cx, a: Args) -> Expr:
    x = a[0]
    value = 0 if cx.op in ("zeros_like", "empty_like") else 1 if cx.op == "ones_like" else cx.value(a[1])
    return Constant(np.full(cx.shape(x), value, dtype=_dtype_or(a, cx.dtype(x))))


@converter("fill", "fill_")
def _fill(cx: Cx, a: Args) -> Expr:
    x = a[0]
    v = a[1]
    if isinstance(v, Expr):
        return K.broadcast_to(K.cast(v, cx.dtype(x)), cx.shape(x))
    return Constant(np.full(cx.shape(x), v, dtype=cx.dtype(x)))


@converter("arange")
def _arange(cx: Cx, a: Args) -> Expr:
    if a.has("start"):
        start, end = cx.value(a["start"]), cx.value(a["end"])
    else:
        start, end = 0, cx.value(a["end"])
    step = cx.value(a["step"]) if a.has("step") else 1
    step = 1 if step is None else step
    ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dt = _dtype_or(a, "int64" if ints else "float32")
    n = max(math.ceil((end - start) / step), 0)
    return Constant((start + np.arange(n, dtype="float64") * step).astype(dt) if not ints
                    else np.arange(start, end, step).astype(dt))


@converter("scalar_tensor", "tensor", "as_tensor")
def _scalar_tensor(cx: Cx, a: Args) -> Expr:
    v = np.asarray(cx.value(a[0]))
    kind = "bool" if v.dtype == np.bool_ else "int64" if v.dtype.kind in "iu" else "float32"
    return Constant(np.asarray(v, dtype=_dtype_or(a, kind)))


# --- attention -------------------------------------------------------------------------------------
@converter("scaled_dot_product_attention")
def _sdpa(cx: Cx, a: Args) -> Expr:
    q, k, v, mask = a[0], a[1], a[2], a[3]
    causal, scale = bool(a.get("is_causal", False)), a["scale"]
    sq, sk, sv = cx.shape(q), cx.shape(k), cx.shape(v)
    lq, e, s = sq[-2], sq[-1], sk[-2]
    if len(sq) >= 3 and sk[-3] != sq[-3]:  # grouped-query attention: repeat the kv heads
        rep = sq[-3] // sk[-3]
        k = K.repeat(k, rep, len(sk) - 3)
        v = K.repeat(v, rep, len(sv) - 3)
        sk, sv = cx.shape(k), cx.shape(v)
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    scores = matmul(cx, q, K.transpose(k, [*list(range(len(sk) - 2)), len(sk) - 1, len(sk) - 2]))
    scores = K.multiply(scores, _const_like(cx, scale, q))
    if causal:
        m = np.triu(np.full((lq, s), -np.inf, dtype=cx.dtype(q)), 1)
        scores = K.add(scores, Constant(m))
    if mask is not None:
        if cx.dtype(mask) == "bool":
            scores = K.where(mask, scores, _const_like(cx, -np.inf, q))
        else:
            scores = K.add(scores, cx.tensor(mask, cx.dtype(q)))
    p = K.nn.softmax(scores, axis=-1)
    return matmul(cx, p, v)


def _attention_heads(cx: Cx, q: Expr, k: Expr, v: Expr, heads: int, mask: Any,
                     need_weights: bool = False, average: bool = True) -> tuple[Expr, Expr | None]:
    """Multi-head attention of batch-first ``(B, L, E)`` projections; ``(B, L, E)`` and the weights."""
    b, lq, e = cx.shape(q)
    s = cx.shape(k)[1]
    d = e // heads

    def split(t: Expr, n: int) -> Expr:
        return K.transpose(K.reshape(t, (b, n, heads, d)), (0, 2, 1, 3))

    qh, kh, vh = split(q, lq), split(k, s), split(v, s)
    scores = matmul(cx, qh, K.transpose(kh, (0, 1, 3, 2)))
    scores = K.multiply(scores, _const_like(cx, 1.0 / math.sqrt(d), q))
    if mask is not None:
        m = mask
        if cx.ndim(m) == 2 and cx.shape(m) == (b, s):  # key padding mask
            m = K.reshape(m, (b, 1, 1, s))
        if cx.dtype(m) == "bool":
            scores = K.where(m, _const_like(cx, -np.inf, q), scores)
        else:
            scores = K.add(scores, cx.tensor(m, cx.dtype(q)))
    p = K.nn.softmax(scores, axis=-1)
    out = K.reshape(K.transpose(matmul(cx, p, vh), (0, 2, 1, 3)), (b, lq, e))
    weights = None
    if need_weights:
        weights = K.mean(p, axis=[1]) if average else p
    return out, weights


def _dense_bias(x: Expr, w: Expr, b: Any) -> Expr:
    y = K.nn.dense(x, w)
    return y if b is None else K.add(y, b)


@converter("_native_multi_head_attention")
def _native_mha(cx: Cx, a: Args) -> Any:
    # (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
    #  need_weights, average_attn_weights, mask_type); inputs are batch-first
    q_in, k_in, v_in = a[0], a[1], a[2]
    e, heads = int(a[3]), int(a[4])
    w, bias = a[5], a[6]
    ws = [K.strided_slice(w, [i * e], [(i + 1) * e], axes=[0]) for i in range(3)]
    bs = [K.strided_slice(bias, [i * e], [(i + 1) * e], axes=[0]) for i in range(3)]
    q, k, v = (_dense_bias(t, wi, bi) for t, wi, bi in zip((q_in, k_in, v_in), ws, bs))
    out, weights = _attention_heads(cx, q, k, v, heads, a[9], bool(a[10]), bool(a[11]))
    out = _dense_bias(out, a[7], a[8])
    return (out, weights)


@converter("_transformer_encoder_layer_fwd")
def _encoder_layer(cx: Cx, a: Args) -> Expr:
    # (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
    #  eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
    #  ffn_weight_2, ffn_bias_2, mask, mask_type)
    x, heads = a[0], int(a[2])
    use_gelu, norm_first, eps = bool(a[7]), bool(a[8]), float(a[9])

    def norm(t: Expr, i: int) -> Expr:
        return K.nn.layer_norm(t, a[10 + 2 * i], a[11 + 2 * i], axis=-1, epsilon=eps)

    def attention(t: Expr) -> Expr:
        q, k, v = (K.split(_dense_bias(t, a[3], a[4]), 3, axis=-1)[i] for i in range(3))
        return _dense_bias(_attention_heads(cx, q, k, v, heads, a[18])[0], a[5], a[6])

    def ffn(t: Expr) -> Expr:
        h = _dense_bias(t, a[14], a[15])
        h = _gelu(cx, Args(["self"], [h], cx.node)) if use_gelu else K.nn.relu(h)
        return _dense_bias(h, a[16], a[17])

    if norm_first:
        x = K.add(x, attention(norm(x, 0)))
        return K.add(x, ffn(norm(x, 1)))
    x = norm(K.add(x, attention(x)), 0)
    return norm(K.add(x, ffn(x)), 1)


# --- recurrent layers ------------------------------------------------------------------------------
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _rnn_cell(cx: Cx, kind: str, xw: Expr, h: Expr, c: Expr | None, w_hh: Expr,
              b_hh: Expr | None, hidden: int) -> tuple[Expr, Expr | None]:
    hw = K.nn.dense(h, w_hh)
    if b_hh is not None:
        hw = K.add(hw, b_hh)
    if kind == "lstm":
        assert c is not None
        gates = K.split(K.add(xw, hw), 4, axis=-1)
        gi, gf, gg, go = (gates[i] for i in range(4))
        c = K.add(K.multiply(K.sigmoid(gf), c),
                      K.multiply(K.sigmoid(gi), K.tanh(gg)))
        return K.multiply(K.sigmoid(go), K.tanh(c)), c
    if kind == "gru":
        xs = K.split(xw, 3, axis=-1)
        hs = K.split(hw, 3, axis=-1)
        r = K.sigmoid(K.add(xs[0], hs[0]))
        z = K.sigmoid(K.add(xs[1], hs[1]))
        n = K.tanh(K.add(xs[2], K.multiply(r, hs[2])))
        one = Constant(np.asarray(1.0, dtype=cx.dtype(h)))
        return K.add(K.multiply(K.subtract(one, z), n), K.multiply(z, h)), None
    pre = K.add(xw, hw)
    return (K.tanh(pre) if kind == "rnn_tanh" else K.nn.relu(pre)), None


@converter("lstm", "gru", "rnn_tanh", "rnn_relu")
def _rnn(cx: Cx, a: Args) -> Any:
    kind = cx.op
    if a.has("batch_sizes"):
        raise cx.error("packed sequences (pack_padded_sequence)")
    x, hx, params = a[0], a[1], list(a[2])
    has_bias, layers = bool(a[3]), int(a[4])
    bidir, batch_first = bool(a[7]), bool(a[8])
    if bool(a[6]):
        raise cx.error("recurrent layer in training mode")
    dirs = 2 if bidir else 1
    per = 4 if has_bias else 2
    if len(params) != layers * dirs * per:
        raise cx.error(f"{len(params)} weights for {layers} layer(s) x {dirs} direction(s): "
                       "projections (proj_size) are not supported")
    if kind == "lstm":
        h0_all, c0_all = hx[0], hx[1]
    else:
        h0_all, c0_all = hx, None
    unbatched = cx.ndim(x) == 2
    if unbatched:
        x = K.expand_dims(x, 1)
        h0_all = K.expand_dims(h0_all, 1)
        c0_all = K.expand_dims(c0_all, 1) if c0_all is not None else None
    elif batch_first:
        x = K.transpose(x, (1, 0, 2))
    seq, batch = cx.shape(x)[0], cx.shape(x)[1]
    hidden = cx.shape(params[1])[1]
    h_n: list[Expr] = []
    c_n: list[Expr] = []
    layer_in = x
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            base = (layer * dirs + d) * per
            w_ih, w_hh = params[base], params[base + 1]
            b_ih, b_hh = (params[base + 2], params[base + 3]) if has_bias else (None, None)
            idx = layer * dirs + d
            h: Expr = K.squeeze(K.strided_slice(h0_all, [idx], [idx + 1], axes=[0]), axis=[0])
            c: Expr | None = (K.squeeze(K.strided_slice(c0_all, [idx], [idx + 1], axes=[0]), axis=[0])
                              if c0_all is not None else None)
            xw = K.nn.dense(layer_in, w_ih)  # (seq, batch, gates*hidden)
            if b_ih is not None:
                xw = K.add(xw, b_ih)
            steps = K.split(xw, seq, axis=0) if seq > 1 else None
            hs: list[Expr] = [None] * seq  # type: ignore[list-item]
            order = range(seq) if d == 0 else range(seq - 1, -1, -1)
            for t in order:
                xt = K.squeeze(steps[t] if steps is not None else xw, axis=[0])
                h, c = _rnn_cell(cx, kind, xt, h, c, w_hh, b_hh, hidden)
                hs[t] = h
            outs.append(K.stack(hs, axis=0))
            h_n.append(h)
            if c is not None:
                c_n.append(c)
        layer_in = outs[0] if dirs == 1 else K.concatenate(outs, axis=-1)
    out = layer_in
    hn = K.stack(h_n, axis=0)
    cn = K.stack(c_n, axis=0) if c_n else None
    if unbatched:
        out = K.squeeze(out, axis=[1])
        hn = K.squeeze(hn, axis=[1])
        cn = K.squeeze(cn, axis=[1]) if cn is not None else None
    elif batch_first:
        out = K.transpose(out, (1, 0, 2))
    del batch
    return (out, hn, cn) if kind == "lstm" else (out, hn)


# --- scalar and shape helpers (evaluated at import) ------------------------------------------------
def _passthrough(*names: str) -> Callable[[Converter], Converter]:
    return converter(*names, table=PASSTHROUGH)


@_passthrough("size", "sym_size")
def _size_of(cx: Cx, a: Args) -> Any:
    shape = cx.shape(a[0])
    if len(a) > 1 and a[1] is not None:
        return shape[cx.axis(a[1], len(shape))]
    return list(shape)


@_passthrough("dim")
def _dim(cx: Cx, a: Args) -> int:
    return cx.ndim(a[0])


@_passthrough("numel", "sym_numel")
def _numel(cx: Cx, a: Args) -> int:
    return int(np.prod(cx.shape(a[0])))


@_passthrough("len")
def _len(cx: Cx, a: Args) -> int:
    x = a[0]
    return cx.shape(x)[0] if isinstance(x, Expr) else len(x)


@_passthrough("Int", "Float", "Bool", "ScalarImplicit", "item", "_local_scalar_dense", "FloatImplicit",
              "IntImplicit")
def _scalar(cx: Cx, a: Args) -> Any:
    v = cx.value(a[0])
    if v is None:
        raise cx.error("a tensor's value is needed at import (data-dependent), but it is not constant")
    if cx.op in ("Int", "IntImplicit"):
        return int(v)
    if cx.op in ("Float", "FloatImplicit"):
        return float(v)
    if cx.op == "Bool":
        return bool(v)
    return v.item() if isinstance(v, np.ndarray) else v


@_passthrough("__getitem__")
def _getitem(cx: Cx, a: Args) -> Any:
    return a[0][int(a[1])]


@_passthrough("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
              "sym_constrain_range", "_assert_async", "warn", "_functional_assert_async")
def _noop(cx: Cx, a: Args) -> Any:
    return None


@_passthrough("__not__")
def _not(cx: Cx, a: Args) -> Any:
    return not a[0]


@_passthrough("__is__", "__isnot__")
def _is(cx: Cx, a: Args) -> Any:
    same = a[0] is a[1]
    return same if cx.op == "__is__" else not same
