"""TFLite importer: a TFLite flatbuffer to a relay :class:`~kiln.ir.IRModule` plus a params dict.

The model is read with the ``tflite`` package's generated flatbuffer classes (``tflite.Model``),
as TVM's ``relay.frontend.from_tflite`` does. The import runs in three steps:

1. **Check**: every operator of the main subgraph without a converter (builtin or custom), or with
   options Kiln rejects, is listed in one :class:`~kiln.errors.UnsupportedOpError` with the names
   of the tensors it produces.
2. **Bind inputs**: the subgraph's inputs become variables named after their tensors, with the
   model's shapes (``shape_dict`` overrides them). A dynamic batch dim (``-1`` in the shape
   signature) takes the model's own size, as the TFLite interpreter does; any other dynamic dim
   needs ``shape_dict``. Constant tensors become constants (``freeze_params=True``) or named params.
3. **Convert** the operators in order (:mod:`kiln.frontend.tflite_ops`), keeping TFLite's NHWC
   layout. After each operator, :meth:`ImportState.finish` stamps the name of its first output
   tensor on the new calls (provenance) and folds constant subexpressions.

Quantized tensors (int8/uint8/int16 with a scale and zero point) hold their integer values. An
operator whose tensors are quantized is converted in one of three ways, chosen by its converter:

* ``int``: integer arithmetic like the ONNX importer's QLinearConv/QLinearMatMul (CONV_2D,
  DEPTHWISE_CONV_2D, FULLY_CONNECTED): zero-point-centred operands accumulate in int32, then one
  requantization (scale ``s_in * s_w / s_out`` per channel) rounds to nearest (ties up) and
  saturates, like TFLite's reference kernels (which round ties away from zero);
* ``pass``: data movement (reshape, concatenation, slicing, max pooling, ...) works on the
  integers directly; an input whose scale or zero point differs from the output's is requantized
  first;
* ``float`` (default): the inputs are dequantized (DequantizeLinear), the float operator runs and
  the outputs are quantized again (QuantizeLinear), which matches TFLite to one quantization step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import FrontendError
from kiln.frontend.common import ImportState, check_input_shape, require, unsupported_error
from kiln.ir.expr import Constant, Expr
from kiln.ir.module import IRModule

__all__ = ["CONVERTERS", "OpContext", "TensorInfo", "converter", "from_tflite"]

_TENSOR_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16",
                 9: "int8", 10: "float64", 12: "uint64", 15: "uint32", 16: "uint16"}
_QUANT_TYPES = ("int8", "uint8", "int16", "int32", "int64")
_PADDING = {0: "SAME", 1: "VALID"}


@dataclass
class TensorInfo:
    """The static facts of one TFLite tensor.

    ``scale`` and ``zero_point`` are 1-d arrays (one entry, or one per index of ``qdim``).
    """

    index: int
    name: str
    shape: tuple[int, ...]
    signature: tuple[int, ...] | None
    dtype: str
    data: np.ndarray | None
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    qdim: int
    is_variable: bool

    @property
    def quantized(self) -> bool:
        """Whether the tensor holds integers with a scale and zero point."""
        return self.scale is not None and self.dtype in _QUANT_TYPES

    def same_qparams(self, other: TensorInfo) -> bool:
        """Whether ``other`` has the same scale and zero point."""
        if self.scale is None or other.scale is None or self.zero_point is None or other.zero_point is None:
            return False
        return np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point)


@dataclass(frozen=True)
class ConverterSpec:
    """A converter: ``fn(ctx)`` returns the operator's output expression(s)."""

    fn: Callable[[OpContext], Expr | Sequence[Expr | None]]
    quant: str  # "float", "pass" or "int" (see the module docstring)
    check: Callable[[OpContext], str | None] | None


CONVERTERS: dict[str, ConverterSpec] = {}


def converter(*codes: str, quant: str = "float", check: Callable[[OpContext], str | None] | None = None
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the converter of the builtin operators ``codes``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for code in codes:
            CONVERTERS[code] = ConverterSpec(fn, quant, check)
        return fn

    return deco


def _const(value: Any, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def _along(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A per-tensor (scalar) or per-axis vector shaped to broadcast against a rank-``rank`` tensor."""
    v = np.asarray(values).reshape(-1)
    if v.size == 1 or rank == 0:
        return v.reshape(())
    shape = [1] * rank
    shape[axis % rank] = v.size
    return v.reshape(shape)


def round_half_up(x: Expr, dtype: str = "float32") -> Expr:
    """Round float ``x`` (of ``dtype``) to nearest, ties up: ``floor(x + 0.5)``.

    TFLite's kernels round ties away from zero; the two differ by one step on exact negative
    ties only. ``x`` is read once: ``sign(x) * floor(|x| + 0.5)`` reads it twice, which Kiln's
    scheduler rejects when ``x`` is fused into a batch_matmul (see the module notes).
    """
    from kiln.op import elemwise as ew

    return ew.floor(ew.add(x, _const(0.5, dtype)))


def saturate(x: Expr, dtype: str, lo: float | None = None, hi: float | None = None,
             work: str = "float32") -> Expr:
    """Round float ``x`` (of ``work``) to nearest, clamp to ``dtype`` (and ``[lo, hi]``), convert."""
    from kiln.op import elemwise as ew

    info = np.iinfo(np.dtype(dtype))
    low = float(info.min) if lo is None else max(float(info.min), lo)
    high = float(info.max) if hi is None else min(float(info.max), hi)
    return ew.cast(ew.clip(round_half_up(x, work), low, high), dtype)


def dequantize(x: Expr, info: TensorInfo, rank: int) -> Expr:
    """``(x - zero_point) * scale`` in float32 (DequantizeLinear)."""
    from kiln.op import elemwise as ew

    assert info.scale is not None and info.zero_point is not None
    work = "float64" if info.dtype in ("int32", "int64") else "float32"
    v = ew.cast(x, work)
    zp = _along(info.zero_point, rank, info.qdim)
    if np.any(zp != 0):
        v = ew.subtract(v, _const(zp, work))
    v = ew.multiply(v, _const(_along(info.scale, rank, info.qdim), work))
    return ew.cast(v, "float32") if work != "float32" else v


def quantize(x: Expr, info: TensorInfo, rank: int, lo: float | None = None,
             hi: float | None = None) -> Expr:
    """``saturate(x / scale + zero_point)`` (QuantizeLinear); ``lo``/``hi`` clamp the integers."""
    from kiln.op import elemwise as ew

    assert info.scale is not None and info.zero_point is not None
    v = ew.divide(ew.cast(x, "float32"), _const(_along(info.scale, rank, info.qdim), "float32"))
    zp = _along(info.zero_point, rank, info.qdim)
    if np.any(zp != 0):
        v = ew.add(v, _const(zp, "float32"))
    return saturate(v, info.dtype, lo, hi)


def requantize(x: Expr, src: TensorInfo, dst: TensorInfo, rank: int) -> Expr:
    """Integers of ``src``'s scale and zero point re-expressed with ``dst``'s."""
    from kiln.op import elemwise as ew

    assert src.scale is not None and dst.scale is not None
    assert src.zero_point is not None and dst.zero_point is not None
    v = ew.cast(x, "float64")
    szp = _along(src.zero_point, rank, src.qdim)
    if np.any(szp != 0):
        v = ew.subtract(v, _const(szp, "float64"))
    factor = _along(src.scale, rank, src.qdim).astype(np.float64) / _along(dst.scale, rank, dst.qdim)
    v = ew.multiply(v, _const(factor, "float64"))
    dzp = _along(dst.zero_point, rank, dst.qdim)
    if np.any(dzp != 0):
        v = ew.add(v, _const(dzp, "float64"))
    return saturate(v, dst.dtype, work="float64")


class OpContext:
    """What a converter sees of one operator: its input expressions, options and tensors."""

    def __init__(self, importer: _Importer, op: Any, code: str, dequant: bool, mode: str):
        self.imp = importer
        self.state: ImportState = importer.state
        self.op = op
        self.code = code
        self.inputs: list[TensorInfo | None] = [
            None if int(i) < 0 else importer.tensor(int(i)) for i in op.InputsAsNumpy()
        ] if op.InputsLength() else []
        self.outputs: list[TensorInfo] = [importer.tensor(int(i)) for i in op.OutputsAsNumpy()] \
            if op.OutputsLength() else []
        self.name = self.outputs[0].name if self.outputs else code
        self.dequant = dequant
        self.mode = mode

    # --- errors ---------------------------------------------------------------------------------
    def error(self, msg: str) -> FrontendError:
        """A :class:`FrontendError` naming this operator and its first output tensor."""
        return FrontendError(f"TFLite {self.code} (output {self.name!r}): {msg}")

    # --- inputs ---------------------------------------------------------------------------------
    def has_input(self, i: int) -> bool:
        """Whether optional input ``i`` is present."""
        return i < len(self.inputs) and self.inputs[i] is not None

    def info(self, i: int) -> TensorInfo:
        """The tensor of input ``i``."""
        if not self.has_input(i):
            raise self.error(f"input {i} is missing")
        info = self.inputs[i]
        assert info is not None
        return info

    def raw(self, i: int) -> Expr:
        """Input ``i`` as stored (integers for a quantized tensor)."""
        return self.imp.expr(self.info(i))

    def input(self, i: int) -> Expr:
        """Input ``i`` as the converter's mode presents it (dequantized, requantized or raw)."""
        info = self.info(i)
        x = self.imp.expr(info)
        if not info.quantized:
            return x
        if self.dequant:
            return dequantize(x, info, len(self.state.shape_of(x)))
        out = self.outputs[0] if self.outputs else None
        if self.mode == "pass" and out is not None and out.quantized and out.dtype == info.dtype \
                and not info.same_qparams(out):
            return requantize(x, info, out, len(self.state.shape_of(x)))
        return x

    def value(self, i: int, what: str) -> np.ndarray:
        """The constant value of input ``i`` (shapes, axes, paddings, ...)."""
        info = self.info(i)
        if info.data is not None:
            return info.data
        v = self.state.value_of(self.imp.expr(info))
        if v is None:
            raise self.error(f"{what} (input {i}, {info.name!r}) must be a constant")
        return np.asarray(v)

    def options(self, cls_name: str) -> Any:
        """The operator's builtin options parsed as ``tflite.<cls_name>`` (None if absent)."""
        table = self.op.BuiltinOptions()
        if table is None:
            return None
        opts = getattr(self.imp.tfl, cls_name)()
        opts.Init(table.Bytes, table.Pos)
        return opts

    def opt(self, cls_name: str, field: str, default: Any = 0) -> Any:
        """One field of the builtin options (``default`` when the options are absent)."""
        opts = self.options(cls_name)
        return default if opts is None else getattr(opts, field)()

    # --- types ----------------------------------------------------------------------------------
    def shape(self, x: Expr) -> tuple[int, ...]:
        """Static shape of ``x``."""
        return self.state.shape_of(x)

    def dtype(self, x: Expr) -> str:
        """Dtype of ``x``."""
        return self.state.dtype_of(x)

    def out_dtype(self, i: int = 0) -> str:
        """The dtype the converter should produce for output ``i`` (float32 when dequantized)."""
        info = self.outputs[i]
        return "float32" if info.quantized and self.dequant else info.dtype

    @property
    def quantized(self) -> bool:
        """Whether input 0 and output 0 are quantized (integer arithmetic applies)."""
        return bool(self.inputs) and self.inputs[0] is not None and self.inputs[0].quantized \
            and bool(self.outputs) and self.outputs[0].quantized


def padding_mode(code: int) -> str:
    """``"SAME"`` or ``"VALID"`` from TFLite's Padding enum."""
    return _PADDING.get(int(code), "VALID")


class _Importer:
    """The state of one import: the model, its tensors and the expression of each tensor."""

    def __init__(self, model: Any, buf: bytes | None, freeze_params: bool):
        self.tfl = require("tflite", "tflite", "from_tflite")
        self.model = model
        self.buf = buf
        if model.SubgraphsLength() < 1:
            raise FrontendError("the TFLite model has no subgraph")
        self.graph = model.Subgraphs(0)
        self.state = ImportState(freeze_params=freeze_params)
        self.infos: dict[int, TensorInfo] = {}
        self.exprs: dict[int, Expr] = {}
        self.builtin_names = {v: k for k, v in vars(self.tfl.BuiltinOperator).items()
                              if not k.startswith("_") and isinstance(v, int)}

    def op_code(self, op: Any) -> str:
        """The builtin name of ``op`` (``CUSTOM:<code>`` for custom operators)."""
        oc = self.model.OperatorCodes(op.OpcodeIndex())
        code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
        name = self.builtin_names.get(code, f"BUILTIN_{code}")
        if name == "CUSTOM":
            custom = oc.CustomCode()
            return f"CUSTOM:{custom.decode() if isinstance(custom, bytes) else custom}"
        return name

    def _buffer(self, index: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
        b = self.model.Buffers(index)
        if b is None:
            return None
        raw: Any = None
        if b.DataLength() > 0:
            raw = b.DataAsNumpy()
        elif b.Offset() > 1:
            data = self.buf if self.buf is not None else bytes(self.model._tab.Bytes)
            raw = np.frombuffer(data, dtype=np.uint8, count=int(b.Size()), offset=int(b.Offset()))
        if raw is None or isinstance(raw, int):
            return None
        if dtype not in _TENSOR_TYPES.values():
            return None
        return np.frombuffer(np.asarray(raw, dtype=np.uint8).tobytes(), dtype=np.dtype(dtype)).reshape(shape)

    def tensor(self, index: int) -> TensorInfo:
        """The facts of tensor ``index`` (cached)."""
        if index in self.infos:
            return self.infos[index]
        t = self.graph.Tensors(index)
        name = t.Name().decode() if t.Name() is not None else f"tensor_{index}"
        ttype = int(t.Type())
        dtype = _TENSOR_TYPES.get(ttype, f"type{ttype}")  # strings, resources, ...: only an error if used
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        sig = tuple(int(d) for d in t.ShapeSignatureAsNumpy()) if t.ShapeSignatureLength() else None
        scale = zp = None
        qdim = 0
        q = t.Quantization()
        if q is not None and q.ScaleLength() > 0:
            scale = np.asarray(q.ScaleAsNumpy(), dtype=np.float32).reshape(-1)
            zp = (np.asarray(q.ZeroPointAsNumpy(), dtype=np.int64).reshape(-1) if q.ZeroPointLength()
                  else np.zeros(scale.shape, np.int64))
            qdim = int(q.QuantizedDimension())
            if not np.any(scale):
                scale = zp = None
        info = TensorInfo(index, name, shape, sig, dtype, self._buffer(int(t.Buffer()), dtype, shape),
                          scale, zp, qdim, bool(t.IsVariable()))
        self.infos[index] = info
        return info

    def expr(self, info: TensorInfo) -> Expr:
        """The expression of a tensor: converted before, a constant, or a zero-filled state."""
        if info.index in self.exprs:
            return self.exprs[info.index]
        if info.dtype not in _TENSOR_TYPES.values():
            raise FrontendError(f"TFLite tensor {info.name!r} has an element type Kiln does not support "
                                f"({info.dtype})")
        if info.data is not None:
            e = self.state.constant(info.name, info.data.copy())
        elif info.is_variable:
            e = self.state.register(Constant(np.zeros(info.shape, np.dtype(info.dtype))))
        else:
            raise FrontendError(f"TFLite tensor {info.name!r} is used before any operator produces it")
        self.exprs[info.index] = e
        return e


def _load(model: Any) -> tuple[Any, bytes | None]:
    """A ``tflite.Model`` from a Model, flatbuffer bytes or a ``.tflite`` path."""
    tfl = require("tflite", "tflite", "from_tflite")
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                model = f.read()
        except OSError as e:
            raise FrontendError(f"cannot read the TFLite model {str(model)!r}: {e}") from None
    if isinstance(model, (bytes, bytearray, memoryview)):
        buf = bytes(model)
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise FrontendError("not a TFLite flatbuffer (the file identifier 'TFL3' is missing)")
        try:
            return tfl.Model.GetRootAsModel(buf, 0), buf
        except Exception as e:
            raise FrontendError(f"corrupt TFLite flatbuffer: {e}") from None
    if hasattr(model, "Subgraphs") and hasattr(model, "OperatorCodes"):
        return model, None
    raise FrontendError(f"from_tflite expects a tflite.Model, flatbuffer bytes or a path, got "
                        f"{type(model).__name__}")


def _check(imp: _Importer) -> None:
    """One UnsupportedOpError listing every operator Kiln cannot convert."""
    problems: dict[tuple[str, str], list[str]] = {}
    g = imp.graph
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        code = imp.op_code(op)
        names = [imp.tensor(int(i)).name for i in op.OutputsAsNumpy()] if op.OutputsLength() else [code]
        spec = CONVERTERS.get(code)
        detail = ""
        if spec is None:
            detail = "custom operator" if code.startswith("CUSTOM:") else ""
        else:
            quant = _is_quantized(imp, op)
            ctx = OpContext(imp, op, code, dequant=quant and spec.quant != "pass", mode=spec.quant)
            found = spec.check(ctx) if spec.check is not None else None
            if found is None:
                continue
            detail = found
        problems.setdefault((code, detail), []).extend(names)
    if problems:
        raise unsupported_error([(code, names, detail) for (code, detail), names in problems.items()],
                                framework="TFLite")


def _is_quantized(imp: _Importer, op: Any) -> bool:
    idx = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
    idx += [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
    return any(imp.tensor(i).quantized and imp.tensor(i).dtype != "int32" for i in idx if i >= 0)


def _input_shape(info: TensorInfo, shape_dict: Mapping[str, Any]) -> tuple[int, ...]:
    if info.name in shape_dict:
        declared = info.signature if info.signature is not None else info.shape
        return check_input_shape(info.name, [d if d >= 0 else None for d in declared],
                                 shape_dict[info.name])
    shape = list(info.shape)
    if info.signature is not None and len(info.signature) == len(shape):
        dynamic = [i for i, d in enumerate(info.signature) if d < 0]
        if [i for i in dynamic if i != 0]:
            raise FrontendError(f"TFLite input {info.name!r} has dynamic dims (shape signature "
                                f"{list(info.signature)}): give its shape with shape_dict="
                                f"{{{info.name!r}: (...)}}")
    if any(d < 0 for d in shape):
        raise FrontendError(f"TFLite input {info.name!r} has an unknown shape {shape}: give it with "
                            f"shape_dict={{{info.name!r}: (...)}}")
    return tuple(shape)


def _convert_op(imp: _Importer, op: Any, code: str) -> None:
    spec = CONVERTERS[code]
    quant = _is_quantized(imp, op)
    ctx = OpContext(imp, op, code, dequant=quant and spec.quant != "pass", mode=spec.quant)
    result = spec.fn(ctx)
    outs: list[Expr | None] = [result] if isinstance(result, Expr) else list(result)
    if len(outs) != len(ctx.outputs):
        raise ctx.error(f"the converter made {len(outs)} outputs, the model has {len(ctx.outputs)}")
    from kiln.op import elemwise as ew

    fixed: list[Expr | None] = []
    for e, info in zip(outs, ctx.outputs):
        if e is not None:
            have = ctx.dtype(e)
            if info.quantized and have in ("float32", "float64") and info.dtype != have:
                e = quantize(e, info, len(ctx.shape(e)))
            elif have != info.dtype:
                e = ew.cast(e, info.dtype)  # e.g. an index result in int64 for an int32 tensor
        fixed.append(e)
    done = imp.state.finish(fixed, ctx.name)
    for e, info in zip(done, ctx.outputs):
        if e is not None:
            imp.exprs[info.index] = e


def from_tflite(model: Any, shape_dict: Mapping[str, Any] | None = None,
                dtype_dict: Mapping[str, str] | None = None, freeze_params: bool = False
                ) -> tuple[IRModule, dict[str, Any]]:
    """Import a TFLite model (``relay.frontend.from_tflite``).

    Parameters
    ----------
    model : tflite.Model, bytes or path
        The model: ``tflite.Model.GetRootAsModel(buf, 0)`` as in TVM, the flatbuffer bytes, or a
        ``.tflite`` file.
    shape_dict : dict of str to tuple of int, optional
        Input shapes by tensor name (default: the model's; dynamic dims other than the batch dim
        must be given).
    dtype_dict : dict of str to str, optional
        Input dtypes by tensor name (default: the model's).
    freeze_params : bool
        False (TVM's behaviour): weights are parameters of ``main`` named after their tensors and
        returned in the params dict. True: they are embedded as constants.

    Returns
    -------
    mod : IRModule
        ``main`` takes the subgraph's inputs (then the params) and returns its outputs (a tuple
        when several); ``mod.attrs["output_names"]`` holds the output tensor names.
    params : dict of str to NDArray
        The weights (empty with ``freeze_params=True``).

    Examples
    --------
    >>> mod, params = from_tflite(tflite.Model.GetRootAsModel(buf, 0),
    ...                           shape_dict={"input": (1, 224, 224, 3)})  # doctest: +SKIP
    """
    from kiln.frontend import tflite_ops  # noqa: F401  (registers the converters)

    tfl_model, buf = _load(model)
    imp = _Importer(tfl_model, buf, freeze_params)
    shape_dict = dict(shape_dict or {})
    dtype_dict = dict(dtype_dict or {})
    g = imp.graph
    in_idx = [int(i) for i in g.InputsAsNumpy()] if g.InputsLength() else []
    known = {imp.tensor(i).name for i in in_idx}
    stray = sorted(set(shape_dict) - known) + sorted(set(dtype_dict) - known)
    if stray:
        raise FrontendError(f"shape_dict/dtype_dict name {stray}, which are not inputs of the TFLite "
                            f"model (inputs: {sorted(known)})")
    _check(imp)
    for i in in_idx:
        info = imp.tensor(i)
        shape = _input_shape(info, shape_dict)
        imp.exprs[i] = imp.state.add_input(info.name, shape, str(dtype_dict.get(info.name, info.dtype)))
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        _convert_op(imp, op, imp.op_code(op))
    out_idx = [int(i) for i in g.OutputsAsNumpy()] if g.OutputsLength() else []
    if not out_idx:
        raise FrontendError("the TFLite model's main subgraph has no outputs")
    outs = [imp.expr(imp.tensor(i)) for i in out_idx]
    return imp.state.module(outs, [imp.tensor(i).name for i in out_idx])
