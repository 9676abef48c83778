"""CoreML importer: a CoreML model to a relay :class:`~kiln.ir.IRModule` plus a params dict.

Two model formats are read:

* **NeuralNetwork** specs (``neuralNetwork``, ``neuralNetworkClassifier``,
  ``neuralNetworkRegressor``): the layers are converted in order by the converters of
  :mod:`kiln.frontend.coreml_ops`; each layer's name is stamped on the calls it produces. The
  image preprocessing (``scaler``, ``meanImage``) is applied to the inputs first, as TVM does.
* **ML Program** specs (``mlProgram``, MIL operations, weights in the package's ``weight.bin``):
  a subset of MIL operations (see :data:`MIL_OPS`).

Every layer or MIL operation without a converter is listed in one
:class:`~kiln.errors.UnsupportedOpError` before anything is converted. Inputs are NCHW: an image
input of ``H x W`` pixels is ``(1, C, H, W)``; a ``[C, H, W]`` multi-array of an old (rank-5
mapped) spec gets a batch axis as TVM's tests give it; other multi-arrays keep their shape.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError
from kiln.frontend.common import ImportState, check_input_shape, require, unsupported_error
from kiln.frontend.coreml_ops import CHECKS, LAYERS, matmul, same_pad
from kiln.ir.expr import Expr, const
from kiln.ir.module import IRModule

__all__ = ["MIL_OPS", "from_coreml", "supported_layers", "supported_mil_ops"]

_NN_TYPES = ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor")


def supported_layers() -> list[str]:
    """The ``NeuralNetworkLayer`` kinds (oneof field names) with a converter."""
    return sorted(LAYERS)


def from_coreml(model: Any, shape: Mapping[str, Sequence[int]] | None = None,
                freeze_params: bool = True) -> tuple[IRModule, dict[str, Any]]:
    """Import a CoreML model.

    Parameters
    ----------
    model : coremltools.models.MLModel, Model_pb2.Model, path or bytes
        The model, its spec, the path of an ``.mlmodel`` file or ``.mlpackage`` folder, or the
        serialized spec.
    shape : dict of str to tuple of int, optional
        Input shapes (NCHW), overriding the shapes the spec declares.
    freeze_params : bool
        True: weights are embedded as constants and ``params`` is empty. False: they become
        parameters of ``main`` named ``<layer>.<weight>``, returned in ``params``.

    Returns
    -------
    mod : IRModule
        ``main`` takes the model inputs and returns its tensor outputs (a tuple when several);
        ``mod.attrs["output_names"]`` holds their CoreML names.
    params : dict of str to NDArray
        The params ``main`` takes besides the inputs.

    Examples
    --------
    >>> mod, params = from_coreml("mobilenet.mlmodel", shape={"image": (1, 3, 224, 224)})  # doctest: +SKIP
    """
    spec, weights_dir = _load(model)
    kind = spec.WhichOneof("Type")
    if kind in _NN_TYPES:
        return _NNImporter(spec, getattr(spec, kind), shape or {}, freeze_params).run()
    if kind == "mlProgram":
        return _MILImporter(spec, weights_dir, shape or {}, freeze_params).run()
    raise FrontendError(f"CoreML model type {kind!r} is not a neural network; the importer reads "
                        f"neuralNetwork, neuralNetworkClassifier, neuralNetworkRegressor and mlProgram")


def _load(model: Any) -> tuple[Any, str | None]:
    """The ``Model_pb2.Model`` spec of ``model`` and its weights folder (ML programs)."""
    require("coremltools", "coreml", "from_coreml")
    from coremltools.proto import Model_pb2

    if isinstance(model, Model_pb2.Model):
        return model, None
    if hasattr(model, "get_spec"):  # an MLModel
        return model.get_spec(), getattr(model, "weights_dir", None)
    if isinstance(model, (bytes, bytearray)):
        return _parse(bytes(model), "the given bytes"), None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        weights = None
        if os.path.isdir(path):  # an .mlpackage
            data = os.path.join(path, "Data", "com.apple.CoreML")
            weights = os.path.join(data, "weights")
            path = os.path.join(data, "model.mlmodel")
        if not os.path.isfile(path):
            raise FrontendError(f"CoreML model file {path!r} does not exist")
        with open(path, "rb") as f:
            return _parse(f.read(), repr(os.fspath(model))), weights
    raise FrontendError(f"from_coreml expects an MLModel, a Model_pb2.Model spec, a path or bytes, "
                        f"got {type(model).__name__}")


def _parse(data: bytes, what: str) -> Any:
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise FrontendError(f"{what} is not a CoreML model (protobuf parse failed: {e})") from None
    if spec.WhichOneof("Type") is None:
        raise FrontendError(f"{what} is not a CoreML model (no model type in the spec)")
    return spec


def _feature_shape(feature: Any, rank5: bool) -> tuple[tuple[int, ...], str]:
    """The NCHW shape and dtype of an input feature (image or multi-array)."""
    ty = feature.type
    which = ty.WhichOneof("Type")
    if which == "imageType":
        img = ty.imageType
        gray = img.colorSpace in (img.GRAYSCALE, img.GRAYSCALE_FLOAT16)
        return (1, 1 if gray else 3, int(img.height), int(img.width)), "float32"
    if which == "multiArrayType":
        arr = ty.multiArrayType
        dtype = {arr.INT32: "int32"}.get(arr.dataType, "float32")
        shape = tuple(int(d) for d in arr.shape)
        if not shape and arr.WhichOneof("ShapeFlexibility") == "shapeRange":
            shape = tuple(int(r.lowerBound) for r in arr.shapeRange.sizeRanges)
        if rank5 and len(shape) in (1, 3):
            shape = (1, *shape)  # [C] / [C, H, W] -> batch of one
        return shape, dtype
    raise FrontendError(f"input {feature.name!r} has feature type {which!r}; the importer takes "
                        f"image and multi-array inputs")


class _NNImporter(ImportState):
    """One NeuralNetwork import: the state shared by every layer conversion."""

    def __init__(self, spec: Any, nn: Any, shape: Mapping[str, Sequence[int]], freeze_params: bool):
        super().__init__(freeze_params)
        self.spec, self.nn = spec, nn
        self.shape = {k: tuple(int(d) for d in v) for k, v in shape.items()}
        self.layer_name = ""
        self.blobs: dict[str, Expr] = {}  # blob name -> expression

    def run(self) -> tuple[IRModule, dict[str, Any]]:
        self.check_supported()
        self.bind_inputs()
        self.preprocess()
        for lay in self.nn.layers:
            self.convert(lay)
        return self.outputs()

    def check_supported(self) -> None:
        problems: dict[tuple[str, str], list[str]] = {}
        for lay in self.nn.layers:
            kind = lay.WhichOneof("layer")
            detail = ""
            if kind not in LAYERS:
                detail = "no converter"
            elif kind in CHECKS:
                detail = CHECKS[kind](getattr(lay, kind))
                if not detail:
                    continue
            else:
                continue
            problems.setdefault((str(kind), detail), []).append(lay.name)
        if problems:
            raise unsupported_error([(k, names, "" if d == "no converter" else d)
                                     for (k, d), names in problems.items()], framework="CoreML")

    def bind_inputs(self) -> None:
        names = [f.name for f in self.spec.description.input]
        for key in self.shape:
            if key not in names:
                raise FrontendError(f"a shape was given for {key!r}, which is not a model input "
                                    f"(the inputs are {', '.join(map(repr, names))})")
        rank5 = self.nn.arrayInputShapeMapping == 0 and self.nn.imageInputShapeMapping == 0
        for feature in self.spec.description.input:
            declared, dtype = _feature_shape(feature, rank5)
            if feature.name in self.shape:
                shp = check_input_shape(feature.name, None, self.shape[feature.name])
            else:
                shp = declared
            self.blobs[feature.name] = self.add_input(feature.name, shp, dtype)

    def preprocess(self) -> None:
        inputs = {f.name: f for f in self.spec.description.input}
        for pp in self.nn.preprocessing:
            name = pp.featureName or next(iter(inputs))
            if name not in inputs:
                raise FrontendError(f"preprocessing names input {name!r}, which is not a model input")
            x = self.blobs[name]
            self.layer_name = f"preprocessing.{name}"
            which = pp.WhichOneof("preprocessor")
            if which == "scaler":
                sc = pp.scaler
                img = inputs[name].type.imageType
                if img.colorSpace in (img.GRAYSCALE, img.GRAYSCALE_FLOAT16):
                    bias = [sc.grayBias]
                elif img.colorSpace == img.RGB:
                    bias = [sc.redBias, sc.greenBias, sc.blueBias]
                else:  # BGR, or a multi-array input (TVM's order)
                    bias = [sc.blueBias, sc.greenBias, sc.redBias]
                scale = sc.channelScale if sc.channelScale != 0 else 1.0
                b = np.asarray(bias, dtype=np.float32).reshape(-1, 1, 1)
                out = K.add(K.multiply(x, const(np.float32(scale))), self.constant(f"{name}.bias", b))
            else:  # meanImage
                mean = np.asarray(pp.meanImage.meanImage, dtype=np.float32)
                out = K.subtract(x, self.constant(f"{name}.mean", mean.reshape(self.shape_of(x)[1:])))
            (done,) = self.finish([out], self.layer_name)
            assert done is not None  # finish keeps every (present) output
            self.blobs[name] = done

    def convert(self, lay: Any) -> None:
        kind = lay.WhichOneof("layer")
        self.layer_name = lay.name
        missing = [i for i in lay.input if i not in self.blobs]
        if missing:
            raise FrontendError(f"layer {lay.name!r} ({kind}) reads {missing}, which no earlier layer "
                                f"or input produces")
        xs = [self.blobs[i] for i in lay.input]
        try:
            outs = LAYERS[kind](self, getattr(lay, kind), xs)
        except FrontendError:
            raise
        except Exception as e:
            raise FrontendError(f"layer {lay.name!r} ({kind}): {type(e).__name__}: {e}") from e
        outs = outs if isinstance(outs, list) else [outs]
        if len(outs) < len(lay.output):
            raise FrontendError(f"layer {lay.name!r} ({kind}) has {len(lay.output)} outputs, the "
                                f"converter made {len(outs)}")
        done = self.finish(outs[:len(lay.output)], lay.name)
        for name, expr in zip(lay.output, done):
            assert expr is not None
            self.blobs[name] = expr

    def outputs(self) -> tuple[IRModule, dict[str, Any]]:
        names = [o.name for o in self.spec.description.output if o.name in self.blobs]
        if not names:
            raise FrontendError("no model output is produced by a layer")
        return self.module([self.blobs[n] for n in names], names)


# --- ML Program ----------------------------------------------------------------------------------

MIL_OPS: dict[str, Callable[..., Expr]] = {}


def supported_mil_ops() -> list[str]:
    """The MIL operation types with a converter (besides ``const``)."""
    return sorted(MIL_OPS)


def mil_op(*names: str) -> Callable[[Callable[..., Expr]], Callable[..., Expr]]:
    """Register a MIL operation converter ``fn(imp, args) -> Expr``."""
    def deco(fn: Callable[..., Expr]) -> Callable[..., Expr]:
        for n in names:
            MIL_OPS[n] = fn
        return fn
    return deco


def mil_conv_pad(imp: Any, args: Mapping[str, Any], x: Expr, eff: Sequence[int],
                 strides: Sequence[int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) for a MIL ``pad_type``/``pad`` pair."""
    kind = str(args.get("pad_type", "valid"))
    h, w = imp.shape_of(x)[-2:]
    if kind == "custom":
        t, b, left, r = (int(v) for v in np.asarray(args["pad"]).ravel())
        return (t, left, b, r)
    if kind in ("same", "same_lower"):
        pt, pb = same_pad(h, eff[0], strides[0], kind == "same_lower")
        pl, pr = same_pad(w, eff[1], strides[1], kind == "same_lower")
        return (pt, pl, pb, pr)
    return (0, 0, 0, 0)



_MIL_DTYPES = {10: np.float16, 11: np.float32, 12: np.float64, 21: np.int8, 22: np.int16, 23: np.int32,
               24: np.int64, 31: np.uint8, 32: np.uint16, 33: np.uint32, 34: np.uint64, 1: np.bool_}


class _MILImporter(ImportState):
    """One ML Program import: MIL operations of the ``main`` function, in order."""

    def __init__(self, spec: Any, weights_dir: str | None, shape: Mapping[str, Sequence[int]],
                 freeze_params: bool):
        super().__init__(freeze_params)
        self.spec, self.weights_dir = spec, weights_dir
        self.shape = {k: tuple(int(d) for d in v) for k, v in shape.items()}
        self.blobs: dict[str, Any] = {}  # MIL value name -> Expr, or ndarray/str for constants
        self.readers: dict[str, Any] = {}
        self.layer_name = self.current_type = ""

    def run(self) -> tuple[IRModule, dict[str, Any]]:
        prog = self.spec.mlProgram
        if "main" not in prog.functions:
            raise FrontendError("the ML program has no 'main' function")
        fn = prog.functions["main"]
        block = fn.block_specializations[fn.opset]
        bad: dict[str, list[str]] = {}
        for op in block.operations:
            if op.type != "const" and op.type not in MIL_OPS:
                bad.setdefault(op.type, []).append(op.outputs[0].name if op.outputs else op.type)
        if bad:
            raise unsupported_error(bad, framework="CoreML ML Program")
        for name in self.shape:
            if name not in [i.name for i in fn.inputs]:
                raise FrontendError(f"a shape was given for {name!r}, which is not a model input")
        for inp in fn.inputs:
            tt = inp.type.tensorType
            declared = tuple(int(d.constant.size) for d in tt.dimensions)
            shp = check_input_shape(inp.name, None, self.shape.get(inp.name, declared))
            dtype = "int32" if tt.dataType == 23 else "float32"
            self.blobs[inp.name] = self.add_input(inp.name, shp, dtype)
        for op in block.operations:
            self.convert(op)
        names = list(block.outputs)
        exprs = [self.expr(n) for n in names]
        out_names = [o.name for o in self.spec.description.output]
        return self.module(exprs, out_names if len(out_names) == len(names) else names)

    # values -------------------------------------------------------------------------------------
    def value(self, v: Any) -> Any:
        """A MIL ``Value`` (immediate or in the weight file) as an ndarray (or str)."""
        tt = v.type.tensorType
        shape = tuple(int(d.constant.size) for d in tt.dimensions)
        dtype = _MIL_DTYPES.get(tt.dataType, np.float32)
        if v.WhichOneof("value") == "blobFileValue":
            arr = self.read_blob(v.blobFileValue.fileName, int(v.blobFileValue.offset), dtype)
            return arr.reshape(shape).astype(np.float32 if dtype == np.float16 else dtype)
        tv = v.immediateValue.tensor
        kind = tv.WhichOneof("value")
        if kind == "strings":
            vals = list(tv.strings.values)
            return vals[0] if not shape else vals
        if kind == "bytes":
            arr = np.frombuffer(tv.bytes.values, dtype=dtype)
        elif kind is None:
            arr = np.zeros(0, dtype=dtype)
        else:
            arr = np.asarray(list(getattr(tv, kind).values), dtype=dtype)
        arr = arr.reshape(shape)
        return arr.astype(np.float32) if dtype == np.float16 else arr

    def read_blob(self, file_name: str, offset: int, dtype: Any) -> np.ndarray:
        if self.weights_dir is None:
            raise FrontendError("the ML program keeps weights in a weight file; pass the MLModel or the "
                                ".mlpackage path (a bare spec has no weights)")
        path = os.path.join(self.weights_dir, file_name.split("/weights/")[-1])
        if path not in self.readers:
            storage = require("coremltools.libmilstoragepython", "coreml", "from_coreml")
            self.readers[path] = storage._BlobStorageReader(path)
        reader = self.readers[path]
        read = {np.float16: "read_fp16_data", np.float32: "read_float_data", np.int8: "read_int8_data",
                np.uint8: "read_uint8_data", np.int32: "read_int32_data"}.get(dtype)
        if read is None:
            raise FrontendError(f"weights of dtype {np.dtype(dtype).name} in the weight file are not "
                                f"supported")
        arr = np.asarray(getattr(reader, read)(offset))
        return arr.view(np.float16) if dtype == np.float16 and arr.dtype == np.uint16 else arr

    def expr(self, name: str) -> Expr:
        v = self.blobs[name]
        if isinstance(v, np.ndarray):
            return self.constant(name, v)
        if isinstance(v, (str, list)):
            raise FrontendError(f"MIL value {name!r} is a string, not a tensor")
        return v

    def arg(self, binding: Any) -> Any:
        if binding.WhichOneof("binding") == "name":
            return self.blobs[binding.name]
        return self.value(binding.value)

    def convert(self, op: Any) -> None:
        outs = [o.name for o in op.outputs]
        self.layer_name = outs[0] if outs else op.type
        self.current_type = op.type
        if op.type == "const":
            self.blobs[outs[0]] = self.value(op.attributes["val"])
            return
        args: dict[str, Any] = {}
        for key, argument in op.inputs.items():
            vals = [self.arg(b) for b in argument.arguments]
            args[key] = vals if key == "values" else vals[0]
        try:
            out = MIL_OPS[op.type](self, args)
        except FrontendError:
            raise
        except Exception as e:
            raise FrontendError(f"MIL operation {self.layer_name!r} ({op.type}): "
                                f"{type(e).__name__}: {e}") from e
        (self.blobs[outs[0]],) = self.finish([out], self.layer_name)

    def t(self, v: Any) -> Expr:
        """``v`` as an expression (constants become weights named after the operation)."""
        if isinstance(v, Expr):
            return v
        arr = np.asarray(v)
        if arr.ndim == 0:
            return const(arr.astype(np.float32) if arr.dtype.kind == "f" else arr)
        return self.constant(f"{self.layer_name}.w", arr)


def _ints(v: Any, default: Sequence[int] = ()) -> list[int]:
    return [int(i) for i in np.asarray(v).ravel()] if v is not None else list(default)


@mil_op("cast")
def _mil_cast(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    dtype = {"fp32": "float32", "fp16": "float32", "fp64": "float32", "int32": "int32", "int64": "int32",
             "bool": "bool"}.get(str(a["dtype"]), "float32")
    x = imp.t(a["x"])
    return x if imp.dtype_of(x) == dtype else K.cast(x, dtype)


@mil_op("conv")
def _mil_conv(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    x, w = imp.t(a["x"]), imp.t(a["weight"])
    ks = list(imp.shape_of(w)[2:])
    st, dil = _ints(a.get("strides"), [1, 1]), _ints(a.get("dilations"), [1, 1])
    pad = mil_conv_pad(imp, a, x, [(k - 1) * d + 1 for k, d in zip(ks, dil)], st)
    out = K.conv.conv2d(x, w, strides=st, padding=pad, dilation=dil, groups=int(a.get("groups", 1)),
                      channels=imp.shape_of(w)[0], kernel_size=ks)
    return K.nn.bias_add(out, imp.t(a["bias"])) if "bias" in a else out


@mil_op("linear")
def _mil_linear(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    w = imp.t(a["weight"])
    out = K.nn.dense(imp.t(a["x"]), w, units=imp.shape_of(w)[0])
    return K.add(out, imp.t(a["bias"])) if "bias" in a else out


@mil_op("matmul")
def _mil_matmul(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    x, y = imp.t(a["x"]), imp.t(a["y"])
    if bool(a.get("transpose_x", False)):
        x = K.transpose(x, [*range(len(imp.shape_of(x)) - 2), -1, -2])
    if bool(a.get("transpose_y", False)):
        y = K.transpose(y, [*range(len(imp.shape_of(y)) - 2), -1, -2])
    return matmul(imp, x, y)


@mil_op("batch_norm")
def _mil_batch_norm(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    x = imp.t(a["x"])
    c = imp.shape_of(x)[1]
    gamma = imp.t(a["gamma"]) if "gamma" in a else imp.t(np.ones(c, np.float32))
    beta = imp.t(a["beta"]) if "beta" in a else imp.t(np.zeros(c, np.float32))
    return K.nn.batch_norm(x, gamma, beta, imp.t(a["mean"]), imp.t(a["variance"]),
                           epsilon=float(a.get("epsilon", 1e-5)))[0]


@mil_op("max_pool", "avg_pool")
def _mil_pool(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    x = imp.t(a["x"])
    ks, st = _ints(a["kernel_sizes"]), _ints(a.get("strides"), [1, 1])
    pad = mil_conv_pad(imp, a, x, ks, st)
    ceil = bool(a.get("ceil_mode", False))
    if "exclude_padding_from_average" in a:
        return K.pool.avg_pool2d(x, pool_size=ks, strides=st, padding=pad, ceil_mode=ceil,
                               count_include_pad=not bool(a["exclude_padding_from_average"]))
    return K.pool.max_pool2d(x, pool_size=ks, strides=st, padding=pad, ceil_mode=ceil)


def _mil_unary(fn: Callable[[Expr], Expr]) -> Callable[..., Expr]:
    return lambda imp, a: fn(imp.t(a["x"]))


for _name, _fn in {"relu": K.nn.relu, "sigmoid": K.sigmoid, "tanh": K.tanh, "exp": K.exp, "sqrt": K.sqrt,
                   "log": K.log, "abs": K.abs, "rsqrt": K.rsqrt, "erf": K.erf}.items():
    mil_op(_name)(_mil_unary(_fn))


def _mil_binary(fn: Callable[[Expr, Expr], Expr]) -> Callable[..., Expr]:
    return lambda imp, a: fn(imp.t(a["x"]), imp.t(a["y"]))


for _name, _fn in {"add": K.add, "sub": K.subtract, "mul": K.multiply, "real_div": K.divide,
                   "maximum": K.maximum, "minimum": K.minimum, "pow": K.power}.items():
    mil_op(_name)(_mil_binary(_fn))


@mil_op("softmax")
def _mil_softmax(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.nn.softmax(imp.t(a["x"]), axis=int(a.get("axis", -1)))


@mil_op("clip")
def _mil_clip(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.clip(imp.t(a["x"]), float(a["alpha"]), float(a["beta"]))


@mil_op("relu6")
def _mil_relu6(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.clip(imp.t(a["x"]), 0.0, 6.0)


@mil_op("leaky_relu")
def _mil_leaky(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.nn.leaky_relu(imp.t(a["x"]), alpha=float(a.get("alpha", 0.01)))


@mil_op("reduce_mean", "reduce_sum", "reduce_max", "reduce_min")
def _mil_reduce(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    fn = {"reduce_mean": K.mean, "reduce_sum": K.sum, "reduce_max": K.max, "reduce_min": K.min}
    kind = imp.current_type
    axes = _ints(a["axes"]) if a.get("axes") is not None else None
    return fn[kind](imp.t(a["x"]), axis=axes, keepdims=bool(a.get("keep_dims", False)))


@mil_op("reshape")
def _mil_reshape(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.reshape(imp.t(a["x"]), _ints(a["shape"]))


@mil_op("transpose")
def _mil_transpose(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.transpose(imp.t(a["x"]), _ints(a["perm"]))


@mil_op("concat")
def _mil_concat(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.concatenate([imp.t(v) for v in a["values"]], axis=int(a["axis"]))


@mil_op("squeeze")
def _mil_squeeze(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    return K.squeeze(imp.t(a["x"]), _ints(a["axes"]) if "axes" in a else None)


@mil_op("expand_dims")
def _mil_expand_dims(imp: _MILImporter, a: dict[str, Any]) -> Expr:
    x = imp.t(a["x"])
    shape = list(imp.shape_of(x))
    rank = len(shape) + len(_ints(a["axes"]))
    for ax in sorted(i % rank for i in _ints(a["axes"])):
        shape.insert(ax, 1)
    return K.reshape(x, shape)
