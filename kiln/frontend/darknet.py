"""Darknet importer: a ``.cfg`` file and a ``.weights`` file, read in pure Python (no darknet library).

:func:`load_net` parses the cfg's sections and options, works out every layer's output shape the
way darknet's ``parse_network_cfg`` does, and reads the weights in darknet's order (header
``major, minor, revision`` as int32, then ``seen`` as int64 when ``major*10+minor >= 2`` else
int32, then per layer: convolutional ``biases, [scales, rolling_mean, rolling_variance], weights``;
connected ``biases, weights, [scales, rolling_mean, rolling_variance]``; batchnorm ``scales,
rolling_mean, rolling_variance``). :func:`from_darknet` converts the :class:`DarknetNet` with TVM's
signature and output convention (see ``docs/frontends/darknet.md``).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError
from kiln.frontend.common import ImportState, unsupported_error
from kiln.ir.expr import Constant, Expr

__all__ = ["DarknetLayer", "DarknetNet", "from_darknet", "load_net"]

#: Section names (as written in a cfg) of every layer kind, darknet's aliases included.
SECTION_KINDS: dict[str, str] = {
    "conv": "convolutional", "convolutional": "convolutional", "conn": "connected",
    "connected": "connected", "max": "maxpool", "maxpool": "maxpool", "avg": "avgpool",
    "avgpool": "avgpool", "soft": "softmax", "softmax": "softmax", "dropout": "dropout",
    "route": "route", "shortcut": "shortcut", "upsample": "upsample", "yolo": "yolo",
    "region": "region", "reorg": "reorg", "batchnorm": "batchnorm", "activation": "activation",
    "logistic": "logistic", "l2norm": "l2norm", "cost": "cost",
}
#: Layer names for provenance and output names: ``conv_0``, ``maxpool_1``, ``yolo_16``, ...
SHORT_NAMES = {"convolutional": "conv"}
#: Option values that change inference and that Kiln does not implement: (kind, option) -> reason.
_UNSUPPORTED_OPTIONS: dict[tuple[str, str], str] = {
    ("convolutional", "binary"): "binary (XNOR-net) weights",
    ("convolutional", "xnor"): "XNOR convolution",
    ("convolutional", "antialiasing"): "anti-aliased convolution",
    ("convolutional", "share_index"): "weights shared with another layer",
    ("convolutional", "sway"): "deformable convolution",
    ("convolutional", "rotate"): "deformable convolution",
    ("convolutional", "stretch"): "deformable convolution",
    ("convolutional", "stretch_sway"): "deformable convolution",
    ("convolutional", "coordconv"): "coordconv", ("convolutional", "dontloadscales"): "dontloadscales",
    ("convolutional", "cbn"): "cross-iteration batch norm", ("connected", "dontloadscales"): "dontloadscales",
    ("maxpool", "maxpool_depth"): "max over channels", ("maxpool", "antialiasing"): "anti-aliased pooling",
    ("softmax", "tree"): "hierarchical softmax", ("softmax", "spatial"): "spatial softmax",
    ("region", "tree"): "hierarchical softmax", ("reorg", "reverse"): "reverse reorg",
    ("reorg", "flatten"): "flatten reorg", ("reorg", "extra"): "reorg with extra outputs",
}
_BN_EPS = 1e-5  # AlexeyAB's normalize_cpu: (x - mean) / sqrt(var + .00001)
_Shape = tuple[int, ...]  # per-sample shape: (c, h, w) for an image, (n,) for a flat vector


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class DarknetLayer:
    """One layer of a darknet cfg (every section after ``[net]``)."""

    index: int
    kind: str  # canonical kind: "convolutional", "maxpool", ...
    section: str  # the section name as written: "conv", "convolutional", ...
    line: int  # 1-based cfg line of the section header
    options: dict[str, str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    in_shape: _Shape = ()
    out_shape: _Shape = ()
    path: str = "<cfg>"  # the cfg file, for messages

    @property
    def name(self) -> str:
        """``conv_0``, ``maxpool_1``, ...: the provenance and output name of this layer."""
        return f"{SHORT_NAMES.get(self.kind, self.kind)}_{self.index}"

    def where(self) -> str:
        return f"{self.path}: layer {self.index} [{self.section}] (line {self.line})"

    def _bad(self, key: str, value: str, expected: str) -> FrontendError:
        return FrontendError(f"{self.where()}: option {key}={value!r}: expected {expected}")

    def get_int(self, key: str, default: int) -> int:
        value = self.options.get(key)
        if value is None:
            return default
        number = _number(value)
        if number is None or not float(number).is_integer():
            raise self._bad(key, value, "an integer")
        return int(number)

    def get_float(self, key: str, default: float) -> float:
        value = self.options.get(key)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise self._bad(key, value, "a number") from None

    def get_str(self, key: str, default: str) -> str:
        return self.options.get(key, default)

    def get_list(self, key: str, kind: type = int) -> list[Any] | None:
        """A comma-separated list (``None`` when absent; a ``#`` ends it, as in darknet)."""
        value = self.options.get(key)
        if value is None:
            return None
        items = [v for v in value.split("#")[0].split(",") if v != ""]
        numbers = [_number(v) for v in items]
        if any(v is None or (kind is int and not float(v).is_integer()) for v in numbers):
            raise self._bad(key, value, f"a comma-separated list of {kind.__name__}s")
        return [kind(v) for v in numbers]


@dataclass
class DarknetNet:
    """A darknet network read by :func:`load_net`: the layers, the input and the weights."""

    cfg_path: str
    weights_path: str | None
    options: dict[str, str]  # the [net] section
    layers: list[DarknetLayer]
    channels: int
    height: int
    width: int
    version: tuple[int, int, int] = (0, 2, 0)
    seen: int = 0

    @property
    def n(self) -> int:
        """The number of layers (darknet's ``net->n``)."""
        return len(self.layers)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(1, channels, height, width)``: the NCHW input darknet infers on."""
        return (1, self.channels, self.height, self.width)


# --------------------------------------------------------------------------------------------
# cfg parsing and shapes
# --------------------------------------------------------------------------------------------
def parse_cfg(text: str, path: str = "<cfg>") -> list[tuple[str, int, dict[str, str]]]:
    """Sections ``(name, line, options)`` of a cfg, read as darknet's ``read_cfg`` does.

    Whitespace anywhere in a line is removed; ``#`` and ``;`` start comment lines; the first
    occurrence of a repeated option wins (``option_find``).
    """
    sections: list[tuple[str, int, dict[str, str]]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]") or len(line) < 3:
                raise FrontendError(f"{path}:{number}: bad section header {raw.strip()!r}: "
                                    "expected [name]")
            sections.append((line[1:-1].lower(), number, {}))
            continue
        if "=" not in line:
            raise FrontendError(f"{path}:{number}: cannot parse {raw.strip()!r}: expected key=value")
        if not sections:
            raise FrontendError(f"{path}:{number}: option {raw.strip()!r} comes before any section")
        key, value = line.split("=", 1)
        sections[-1][2].setdefault(key, value)
    return sections


def _layers_from_cfg(text: str, path: str) -> tuple[dict[str, str], list[DarknetLayer]]:
    sections = parse_cfg(text, path)
    if not sections or sections[0][0] not in ("net", "network"):
        first = f"[{sections[0][0]}] at line {sections[0][1]}" if sections else "no section"
        raise FrontendError(f"{path}: the first section must be [net] or [network], found {first}")
    layers: list[DarknetLayer] = []
    for index, (section, line, options) in enumerate(sections[1:]):
        kind = SECTION_KINDS.get(section, section)
        layers.append(DarknetLayer(index, kind, section, line, options, path=path))
    return sections[0][2], layers


def _check_supported(layers: Sequence[DarknetLayer], path: str) -> None:
    """Raise one :class:`UnsupportedOpError` listing every unsupported layer and option."""
    problems: dict[tuple[str, str], list[str]] = {}
    for layer in layers:
        where = f"{layer.name} (line {layer.line})"
        if layer.kind not in _CONVERTERS:
            problems.setdefault((f"[{layer.section}]", "unknown or unsupported layer type"), []).append(where)
            continue
        for (kind, key), reason in _UNSUPPORTED_OPTIONS.items():
            if kind == layer.kind and layer.get_str(key, "0") not in ("0", "", "none"):
                problems.setdefault((f"[{layer.section}] {key}={layer.options[key]}", reason),
                                    []).append(where)
        if layer.kind == "shortcut" and layer.get_str("weights_type", "none") != "none":
            problems.setdefault(("[shortcut] weights_type", "weighted shortcut"), []).append(where)
    if problems:
        raise unsupported_error([(op, names, detail) for (op, detail), names in problems.items()],
                                framework=f"Darknet ({path})")


def _image(layer: DarknetLayer, shape: _Shape) -> tuple[int, int, int]:
    """``shape`` as (c, h, w): a flat vector counts as (n, 1, 1), as darknet's connected output."""
    if len(shape) == 3:
        return shape  # type: ignore[return-value]
    if len(shape) == 1 and shape[0] > 0:
        return (shape[0], 1, 1)
    raise FrontendError(f"{layer.where()}: the layer before must output an image, got shape {shape}")


def _size(shape: _Shape) -> int:
    return int(np.prod(shape))


def _layer_inputs(layer: DarknetLayer, key: str) -> list[int]:
    """Absolute indices of the layers named by option ``key`` (negative = relative)."""
    raw = layer.get_list(key)
    if not raw:
        raise FrontendError(f"{layer.where()}: option {key}= is required")
    out = []
    for r in raw:
        i = layer.index + r if r < 0 else r
        if not 0 <= i < layer.index:
            raise FrontendError(f"{layer.where()}: {key}={layer.options[key]!r} refers to layer {i}; "
                                f"expected an earlier layer (0..{layer.index - 1})")
        out.append(i)
    return out


def _infer_shapes(layers: Sequence[DarknetLayer], input_shape: _Shape) -> list[tuple[_Shape, _Shape]]:
    """(input, output) per-sample shape of every layer, as darknet's parser computes them."""
    result: list[tuple[_Shape, _Shape]] = []
    prev = input_shape
    for layer in layers:
        out = _out_shape(layer, prev, [o for _, o in result])
        if any(d <= 0 for d in out):
            raise FrontendError(f"{layer.where()}: the output shape {out} for input {prev} is empty")
        result.append((prev, out))
        prev = out
    return result


def _out_shape(layer: DarknetLayer, prev: _Shape, outs: list[_Shape]) -> _Shape:
    kind = layer.kind
    if kind == "convolutional":
        c, h, w = _image(layer, prev)
        n, size, groups = layer.get_int("filters", 1), layer.get_int("size", 1), layer.get_int("groups", 1)
        sy, sx = _conv_strides(layer)
        pad = _conv_padding(layer)
        if n < 1 or size < 1 or groups < 1 or c % groups or n % groups:
            raise FrontendError(f"{layer.where()}: filters={n}, size={size}, groups={groups} do not fit "
                                f"{c} input channels: expected positive values, groups dividing both")
        dil = layer.get_int("dilation", 1) if size > 1 else 1
        if dil > 1 and 2 * pad * dil - dil * (size - 1) != 2 * pad - size + 1:
            raise FrontendError(f"{layer.where()}: dilation={dil} with padding {pad} gives darknet two "
                                "different output sizes; expected pad=1 (same padding)")
        return (n, (h + 2 * pad - size) // sy + 1, (w + 2 * pad - size) // sx + 1)
    if kind == "connected":
        return (layer.get_int("output", 1),)
    if kind == "maxpool":
        c, h, w = _image(layer, prev)
        size, (sy, sx), padding = _pool_params(layer)
        return (c, (h + padding - size) // sy + 1, (w + padding - size) // sx + 1)
    if kind == "avgpool":
        return (_image(layer, prev)[0], 1, 1)
    if kind == "softmax":
        groups = layer.get_int("groups", 1)
        if groups < 1 or _size(prev) % groups:
            raise FrontendError(f"{layer.where()}: groups={groups} does not divide the {_size(prev)} inputs")
        return (_size(prev),)
    if kind in ("dropout", "activation", "logistic", "l2norm", "cost"):
        return prev
    if kind == "batchnorm":
        return _image(layer, prev)
    if kind == "route":
        srcs = [outs[i] for i in _layer_inputs(layer, "layers")]
        groups, gid = layer.get_int("groups", 1), layer.get_int("group_id", 0)
        if groups < 1 or not 0 <= gid < groups:
            raise FrontendError(f"{layer.where()}: groups={groups}, group_id={gid}: expected "
                                "0 <= group_id < groups")
        images = all(len(s) == 3 for s in srcs) and len({s[1:] for s in srcs}) == 1
        if images:
            if any(s[0] % groups for s in srcs):
                raise FrontendError(f"{layer.where()}: groups={groups} does not divide the input channels "
                                    f"{[s[0] for s in srcs]}")
            return (sum(s[0] for s in srcs) // groups, srcs[0][1], srcs[0][2])
        if any(_size(s) % groups for s in srcs):
            raise FrontendError(f"{layer.where()}: groups={groups} does not divide the input sizes")
        return (sum(_size(s) for s in srcs) // groups,)
    if kind == "shortcut":
        c, h, w = _image(layer, prev)
        for i in _layer_inputs(layer, "from"):
            src = _image(layer, outs[i])
            if src[1:] != (h, w):
                raise FrontendError(f"{layer.where()}: from layer {i} outputs {src[1]}x{src[2]}, this "
                                    f"layer's input is {h}x{w}; expected equal sizes (darknet forks "
                                    "disagree on shortcuts between different sizes)")
        return (c, h, w)
    if kind == "upsample":
        c, h, w = _image(layer, prev)
        s = layer.get_int("stride", 2)
        if s == 0:
            raise FrontendError(f"{layer.where()}: stride=0: expected a non-zero integer")
        return (c, h * s, w * s) if s > 0 else (c, h // -s, w // -s)
    if kind in ("yolo", "region"):
        c, h, w = _image(layer, prev)
        n, per = _detection_layout(layer)
        if c != n * per:
            raise FrontendError(f"{layer.where()}: the input has {c} channels; expected {n * per} "
                                f"({n} anchors x {per}): check filters= of the convolution before")
        return (c, h, w)
    if kind == "reorg":
        c, h, w = _image(layer, prev)
        s = layer.get_int("stride", 1)
        if s < 1 or c % (s * s) or h % s or w % s:
            raise FrontendError(f"{layer.where()}: stride={s} must divide the height {h} and width {w}, "
                                f"and its square the channels {c}")
        return (c * s * s, h // s, w // s)
    raise FrontendError(f"{layer.where()}: unsupported layer type")


def _conv_strides(layer: DarknetLayer) -> tuple[int, int]:
    stride = layer.get_int("stride", 1)
    sy, sx = layer.get_int("stride_y", stride), layer.get_int("stride_x", stride)
    if sy < 1 or sx < 1:
        raise FrontendError(f"{layer.where()}: stride {sy}x{sx}: expected positive strides")
    return sy, sx


def _conv_padding(layer: DarknetLayer) -> int:
    return layer.get_int("size", 1) // 2 if layer.get_int("pad", 0) else layer.get_int("padding", 0)


def _pool_params(layer: DarknetLayer) -> tuple[int, tuple[int, int], int]:
    stride = layer.get_int("stride", 1)
    sy, sx = layer.get_int("stride_y", stride), layer.get_int("stride_x", stride)
    size = layer.get_int("size", stride)
    padding = layer.get_int("padding", size - 1)
    if size < 1 or sy < 1 or sx < 1 or padding < 0:
        raise FrontendError(f"{layer.where()}: size={size}, stride={sy}x{sx}, padding={padding}: "
                            "expected positive size and strides, padding >= 0")
    return size, (sy, sx), padding


def _detection_layout(layer: DarknetLayer) -> tuple[int, int]:
    """(anchors used, entries per anchor) of a yolo or region layer."""
    classes = layer.get_int("classes", 20)
    if layer.kind == "yolo":
        total = layer.get_int("num", 1)
        mask = layer.get_list("mask")
        if mask is not None and any(not 0 <= m < total for m in mask):
            raise FrontendError(f"{layer.where()}: mask={layer.options['mask']!r}: expected indices "
                                f"below num={total}")
        return (len(mask) if mask is not None else total), classes + 5
    return layer.get_int("num", 1), layer.get_int("coords", 4) + classes + 1


# --------------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------------
def _weight_plan(layer: DarknetLayer) -> list[tuple[str, tuple[int, ...]]]:
    """The arrays ``layer`` reads from the weights file, in file order."""
    if layer.kind == "convolutional":
        n, c = layer.out_shape[0], _image(layer, layer.in_shape)[0]
        size, groups = layer.get_int("size", 1), layer.get_int("groups", 1)
        bn = [("scales", (n,)), ("rolling_mean", (n,)), ("rolling_variance", (n,))]
        return [("biases", (n,)), *(bn if layer.get_int("batch_normalize", 0) else []),
                ("weights", (n, c // groups, size, size))]
    if layer.kind == "connected":
        n, inputs = layer.out_shape[0], _size(layer.in_shape)
        bn = [("scales", (n,)), ("rolling_mean", (n,)), ("rolling_variance", (n,))]
        return [("biases", (n,)), ("weights", (n, inputs)),
                *(bn if layer.get_int("batch_normalize", 0) else [])]
    if layer.kind == "batchnorm":
        c = layer.out_shape[0]
        return [("scales", (c,)), ("rolling_mean", (c,)), ("rolling_variance", (c,))]
    return []


def _read_weights(net: DarknetNet, strict: bool) -> None:
    path = str(net.weights_path)
    data = Path(path).read_bytes()
    if len(data) < 16:
        raise FrontendError(f"{path}: {len(data)} bytes: too short for a darknet weights header "
                            "(major, minor, revision, seen)")
    major, minor, revision = (int(v) for v in np.frombuffer(data, "<i4", 3))
    wide = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
    start = 20 if wide else 16
    if len(data) < start:
        raise FrontendError(f"{path}: {len(data)} bytes: too short for a version {major}.{minor} header")
    net.seen = int(np.frombuffer(data, "<i8" if wide else "<i4", 1, 12)[0])
    net.version = (major, minor, revision)
    transpose = major > 1000 or minor > 1000
    count = (len(data) - start) // 4
    floats = np.frombuffer(data, "<f4", count, start)
    pos = 0
    for layer in net.layers:
        plan = _weight_plan(layer)
        need = sum(_size(s) for _, s in plan)
        if pos + need > count:
            parts = ", ".join(f"{k} {_size(s)}" for k, s in plan)
            raise FrontendError(
                f"{path}: truncated at {layer.where()}: the layer needs {need} floats "
                f"({parts}) from float {pos} (byte {start + 4 * pos}), but the file has only "
                f"{count - pos} left; the cfg does not match the weights, or the file is cut short")
        for key, shape in plan:
            k = _size(shape)
            value = floats[pos:pos + k].astype(np.float32)
            if key == "weights" and transpose and layer.kind == "connected":
                value = value.reshape(shape[1], shape[0]).T
            if key == "weights" and layer.kind == "convolutional" and layer.get_int("flipped", 0):
                value = value.reshape(shape[1] * shape[2] * shape[3], shape[0]).T
            layer.weights[key] = np.ascontiguousarray(value.reshape(shape))
            pos += k
    extra = len(data) - start - 4 * pos
    if extra:
        msg = (f"{path}: {extra} bytes ({extra // 4} floats) after the weights of the last layer of "
               f"{net.cfg_path}: the cfg does not match the weights file")
        if strict:
            raise FrontendError(msg + " (load_net(..., strict=False) ignores them, as darknet does)")
        warnings.warn(msg, stacklevel=3)


def load_net(cfg_path: str | Path, weights_path: str | Path | None, strict: bool = True) -> DarknetNet:
    """Read a darknet network: the ``.cfg`` and its ``.weights``.

    Parameters
    ----------
    cfg_path : str or Path
        The network description.
    weights_path : str or Path or None
        The weights in darknet's binary layout; ``None`` gives an empty net (layers and shapes
        only, which :func:`from_darknet` rejects).
    strict : bool
        True: extra data after the last layer's weights is an error (the cfg and the weights do
        not match); False: a warning, as darknet silently ignores it.

    Returns
    -------
    DarknetNet
    """
    cfg = str(cfg_path)
    try:
        text = Path(cfg).read_text()
    except OSError as e:
        raise FrontendError(f"cannot read the darknet cfg {cfg}: {e}") from None
    options, layers = _layers_from_cfg(text, cfg)
    _check_supported(layers, cfg)
    dims = {}
    for key in ("channels", "height", "width"):
        value = options.get(key, "0")
        if not value.isdigit() or int(value) <= 0:
            raise FrontendError(f"{cfg}: [net] {key}={value!r}: expected a positive integer")
        dims[key] = int(value)
    net = DarknetNet(cfg, None if weights_path is None else str(weights_path), options, layers,
                     dims["channels"], dims["height"], dims["width"])
    for layer, (ins, outs) in zip(layers, _infer_shapes(layers, (net.channels, net.height, net.width))):
        layer.in_shape, layer.out_shape = ins, outs
    if weights_path is not None:
        try:
            _read_weights(net, strict)
        except OSError as e:
            raise FrontendError(f"cannot read the darknet weights {weights_path}: {e}") from None
    return net


# --------------------------------------------------------------------------------------------
# conversion
# --------------------------------------------------------------------------------------------
def _f(value: float) -> Constant:
    return Constant(np.array(value, np.float32))


def _where(cond: Expr, a: Expr, b: Expr) -> Expr:
    return K.where(cond, a, b)


def _softplus(x: Expr) -> Expr:  # darknet's softplus_activate with threshold 20
    return _where(K.greater(x, _f(20.0)), x,
                  _where(K.less(x, _f(-20.0)), K.exp(x), K.log(K.add(K.exp(x), _f(1.0)))))


#: Darknet activations (activations.h), as relay expressions.
ACTIVATIONS: dict[str, Callable[[Expr], Expr]] = {
    "linear": lambda x: x,
    "logistic": K.sigmoid,
    "loggy": lambda x: K.subtract(K.multiply(K.sigmoid(x), _f(2.0)), _f(1.0)),
    "relu": K.nn.relu,
    "relu6": lambda x: K.clip(x, 0.0, 6.0),
    "elu": lambda x: _where(K.greater_equal(x, _f(0.0)), x, K.subtract(K.exp(x), _f(1.0))),
    "selu": lambda x: K.multiply(_where(K.greater_equal(x, _f(0.0)), x,
                                        K.multiply(K.subtract(K.exp(x), _f(1.0)), _f(1.6732))), _f(1.0507)),
    "gelu": lambda x: K.multiply(K.multiply(x, _f(0.5)), K.add(_f(1.0), K.tanh(K.add(
        K.multiply(x, _f(0.797885)), K.multiply(K.multiply(K.multiply(x, x), x), _f(0.035677)))))),
    "relie": lambda x: K.nn.leaky_relu(x, 0.01),
    "ramp": lambda x: K.add(K.nn.relu(x), K.multiply(x, _f(0.1))),
    "leaky": lambda x: K.nn.leaky_relu(x, 0.1),
    "tanh": K.tanh,
    "hardtan": lambda x: K.clip(x, -1.0, 1.0),
    "lhtan": lambda x: _where(K.less(x, _f(0.0)), K.multiply(x, _f(0.001)), _where(
        K.greater(x, _f(1.0)), K.add(K.multiply(K.subtract(x, _f(1.0)), _f(0.001)), _f(1.0)), x)),
    "plse": lambda x: _where(K.less(x, _f(-4.0)), K.multiply(K.add(x, _f(4.0)), _f(0.01)), _where(
        K.greater(x, _f(4.0)), K.add(K.multiply(K.subtract(x, _f(4.0)), _f(0.01)), _f(1.0)),
        K.add(K.multiply(x, _f(0.125)), _f(0.5)))),
    "swish": lambda x: K.multiply(x, K.sigmoid(x)),
    "mish": lambda x: K.multiply(x, K.tanh(_softplus(x))),
    "hard_mish": lambda x: _where(K.greater(x, _f(0.0)), x, _where(
        K.greater(x, _f(-2.0)), K.add(K.multiply(K.multiply(x, x), _f(0.5)), x), _f(0.0))),
}


class _Converter:
    """The state of one :func:`from_darknet` call."""

    def __init__(self, net: DarknetNet, st: ImportState, shapes: list[tuple[_Shape, _Shape]],
                 batch: int):
        self.net, self.st, self.shapes, self.batch = net, st, shapes, batch
        self.outs: list[Expr] = []

    def image(self, layer: DarknetLayer, x: Expr) -> Expr:
        """``x`` as NCHW (a flat (N, n) becomes (N, n, 1, 1))."""
        c, h, w = _image(layer, self.shapes[layer.index][0])
        return x if len(self.st.shape_of(x)) == 4 else K.reshape(x, (self.batch, c, h, w))

    def out(self, layer: DarknetLayer) -> _Shape:
        """The output shape of ``layer`` for this import's input shape."""
        return self.shapes[layer.index][1]

    def flat(self, x: Expr) -> Expr:
        return x if len(self.st.shape_of(x)) == 2 else K.nn.batch_flatten(x)

    def weight(self, layer: DarknetLayer, key: str) -> Expr:
        if key not in layer.weights:
            raise FrontendError(f"{layer.where()}: no {key} loaded (load_net with a weights file)")
        return self.st.constant(f"{layer.name}_{key}", layer.weights[key])

    def activation(self, layer: DarknetLayer, x: Expr, default: str) -> Expr:
        name = layer.get_str("activation", default)
        if name not in ACTIVATIONS:
            raise FrontendError(f"{layer.where()}: activation={name!r}: expected one of "
                                f"{', '.join(sorted(ACTIVATIONS))}")
        return ACTIVATIONS[name](x)

    def normalize(self, layer: DarknetLayer, x: Expr, beta: Expr) -> Expr:
        out = K.nn.batch_norm(x, self.weight(layer, "scales"), beta, self.weight(layer, "rolling_mean"),
                              self.weight(layer, "rolling_variance"), axis=1, epsilon=_BN_EPS)
        return out[0]


def _convolutional(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    size, pad = layer.get_int("size", 1), _conv_padding(layer)
    dil = layer.get_int("dilation", 1) if size > 1 else 1
    out: Expr = K.conv.conv2d(cv.image(layer, x), cv.weight(layer, "weights"), strides=_conv_strides(layer),
                            padding=(pad * dil, pad * dil), dilation=(dil, dil),
                            groups=layer.get_int("groups", 1), channels=cv.out(layer)[0],
                            kernel_size=(size, size))
    if layer.get_int("batch_normalize", 0):
        out = cv.normalize(layer, out, cv.weight(layer, "biases"))
    else:
        out = K.nn.bias_add(out, cv.weight(layer, "biases"), axis=1)
    return cv.activation(layer, out, "logistic")


def _connected(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    out: Expr = K.nn.dense(cv.flat(x), cv.weight(layer, "weights"), units=cv.out(layer)[0])
    if layer.get_int("batch_normalize", 0):
        out = cv.normalize(layer, out, cv.weight(layer, "biases"))
    else:
        out = K.nn.bias_add(out, cv.weight(layer, "biases"), axis=1)
    return cv.activation(layer, out, "logistic")


def _maxpool(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # darknet: window (i, j) starts at (i*stride - padding/2, j*stride - padding/2); outside is -FLT_MAX
    size, (sy, sx), padding = _pool_params(layer)
    _, h, w = _image(layer, cv.shapes[layer.index][0])
    _, oh, ow = cv.out(layer)
    before = padding // 2
    after_h = max(0, (oh - 1) * sy + size - h - before)
    after_w = max(0, (ow - 1) * sx + size - w - before)
    return K.pool.max_pool2d(cv.image(layer, x), pool_size=(size, size), strides=(sy, sx),
                             padding=(before, before, after_h, after_w))


def _avgpool(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    return K.pool.global_avg_pool2d(cv.image(layer, x))


def _softmax(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    out = cv.flat(x)
    temperature = layer.get_float("temperature", 1.0)
    if temperature != 1.0:
        out = K.divide(out, _f(temperature))
    groups, n = layer.get_int("groups", 1), cv.out(layer)[0]
    if groups == 1:
        return K.nn.softmax(out, axis=1)
    out = K.nn.softmax(K.reshape(out, (cv.batch, groups, n // groups)), axis=2)
    return K.reshape(out, (cv.batch, n))


def _identity(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    return x


def _route(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    srcs = _layer_inputs(layer, "layers")
    groups, gid = layer.get_int("groups", 1), layer.get_int("group_id", 0)
    image = len(cv.out(layer)) == 3
    parts = []
    for i in srcs:
        src = cv.outs[i]
        if not image:
            src = cv.flat(src)
        if groups > 1:
            size = cv.st.shape_of(src)[1] // groups
            src = K.strided_slice(src, begin=[gid * size], end=[(gid + 1) * size], axes=[1])
        parts.append(src)
    return parts[0] if len(parts) == 1 else K.concatenate(parts, axis=1)


def _shortcut(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # darknet's shortcut_cpu: out = alpha * input + beta * from over the first min(c_in, c_from)
    # channels (pjreddie's alpha/beta, default 1); the other channels keep the input
    out = cv.image(layer, x)
    c = cv.out(layer)[0]
    alpha, beta = layer.get_float("alpha", 1.0), layer.get_float("beta", 1.0)
    sources = _layer_inputs(layer, "from")
    if (alpha, beta) != (1.0, 1.0) and len(sources) > 1:
        raise FrontendError(f"{layer.where()}: alpha/beta with several from= layers: expected one")
    for i in sources:
        src = cv.outs[i]
        if len(cv.st.shape_of(src)) != 4:
            src = K.reshape(src, (cv.batch, *_image(layer, cv.shapes[i][1])))
        sc = cv.st.shape_of(src)[1]
        if sc > c:
            src = K.strided_slice(src, begin=[0], end=[c], axes=[1])
        elif sc < c:
            src = K.nn.pad(src, ((0, 0), (0, c - sc), (0, 0), (0, 0)))
        if alpha != 1.0:
            scale = np.ones((c, 1, 1), np.float32)
            scale[:min(sc, c)] = alpha
            out = K.multiply(out, Constant(scale))
        out = K.add(out, src if beta == 1.0 else K.multiply(src, _f(beta)))
    return cv.activation(layer, out, "linear")


def _upsample(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    s, scale = layer.get_int("stride", 2), layer.get_float("scale", 1.0)
    x = cv.image(layer, x)
    if s > 0:
        out: Expr = K.nn.upsampling(x, scale_h=s, scale_w=s, method="nearest_neighbor")
        return out if scale == 1.0 else K.multiply(out, _f(scale))
    s = -s  # darknet's reverse upsample: sum over stride x stride blocks, times scale
    out = K.pool.avg_pool2d(x, pool_size=(s, s), strides=(s, s))
    return K.multiply(out, _f(float(s * s) * scale))


def _split_entries(cv: _Converter, layer: DarknetLayer, x: Expr, bounds: Sequence[int]
                   ) -> tuple[list[Expr], tuple[int, ...]]:
    """``x`` as (N, anchors, entries, h, w), split along the entries at ``bounds``."""
    n, per = _detection_layout(layer)
    c, h, w = cv.out(layer)
    block = K.reshape(cv.image(layer, x), (cv.batch, n, per, h, w))
    edges = [0, *bounds, per]
    parts = [K.strided_slice(block, begin=[a], end=[b], axes=[2]) for a, b in itertools.pairwise(edges)
             if b > a]
    return parts, (cv.batch, c, h, w)


def _yolo(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # sigmoid on x, y, objectness and classes; then x, y * scale_x_y - (scale_x_y - 1)/2 (AlexeyAB);
    # new_coords=1: no sigmoid (the convolution before applies it)
    (xy, wh, rest), shape = _split_entries(cv, layer, x, (2, 4))
    scale = layer.get_float("scale_x_y", 1.0)
    if not layer.get_int("new_coords", 0):
        xy, rest = K.sigmoid(xy), K.sigmoid(rest)
    if scale != 1.0:
        xy = K.add(K.multiply(xy, _f(scale)), _f(-0.5 * (scale - 1.0)))
    return K.reshape(K.concatenate([xy, wh, rest], axis=2), shape)


def _region(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # darknet's forward_region_layer: sigmoid on x, y; objectness sigmoid unless background;
    # softmax over the classes (and the objectness when background) unless softmax=0: sigmoid
    coords = layer.get_int("coords", 4)
    background, softmax = layer.get_int("background", 0), layer.get_int("softmax", 0)
    if coords < 2:
        raise FrontendError(f"{layer.where()}: coords={coords}: expected at least 2")
    parts, shape = _split_entries(cv, layer, x, (2, coords, coords + 1))
    xy, obj, classes = parts[0], parts[-2], parts[-1]
    middle = parts[1:-2]
    xy = K.sigmoid(xy)
    if softmax and background:
        tail = K.nn.softmax(K.concatenate([obj, classes], axis=2), axis=2)
    else:
        obj = obj if background else K.sigmoid(obj)
        classes = K.nn.softmax(classes, axis=2) if softmax else K.sigmoid(classes)
        tail = K.concatenate([obj, classes], axis=2)
    return K.reshape(K.concatenate([xy, *middle, tail], axis=2), shape)


def _reorg(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # darknet's reorg_cpu(forward=0): the input read as (c/s^2, h*s, w*s), gathered into (c, h, w),
    # then read as (c*s^2, h/s, w/s)
    s = layer.get_int("stride", 1)
    c, h, w = _image(layer, cv.shapes[layer.index][0])
    out = K.reshape(cv.image(layer, x), (cv.batch, c // (s * s), h, s, w, s))
    out = K.transpose(out, (0, 3, 5, 1, 2, 4))
    return K.reshape(out, (cv.batch, *cv.out(layer)))


def _batchnorm(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    zeros = cv.st.constant(f"{layer.name}_biases", np.zeros(cv.out(layer)[0], np.float32))
    return cv.normalize(layer, cv.image(layer, x), zeros)


def _activation(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    return cv.activation(layer, x, "linear")


def _logistic(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    return K.sigmoid(x)


def _l2norm(cv: _Converter, layer: DarknetLayer, x: Expr) -> Expr:
    # darknet's l2normalize_cpu: x / sqrt(sum over channels of x^2), no epsilon
    return K.divide(x, K.sqrt(K.sum(K.multiply(x, x), axis=1, keepdims=True)))


_CONVERTERS: dict[str, Callable[[_Converter, DarknetLayer, Expr], Expr]] = {
    "convolutional": _convolutional,
    "connected": _connected,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
    "softmax": _softmax,
    "dropout": _identity,
    "route": _route,
    "shortcut": _shortcut,
    "upsample": _upsample,
    "yolo": _yolo,
    "region": _region,
    "reorg": _reorg,
    "batchnorm": _batchnorm,
    "activation": _activation,
    "logistic": _logistic,
    "l2norm": _l2norm,
    "cost": _identity,
}


def _input_shape(net: DarknetNet, shape: Any) -> tuple[int, int, int, int]:
    if shape is None:
        return net.input_shape
    if isinstance(shape, Mapping):
        if set(shape) != {"data"}:
            raise FrontendError(f"shape names inputs {sorted(shape)}; a darknet net has one input, 'data'")
        shape = shape["data"]
    dims = tuple(int(d) for d in shape)
    if len(dims) != 4 or dims[1] != net.channels or min(dims) <= 0:
        raise FrontendError(f"input shape {list(dims)} for {net.cfg_path}: expected NCHW "
                            f"(N, {net.channels}, H, W) with positive dims")
    return dims  # type: ignore[return-value]


def _as_net(net: Any) -> DarknetNet:
    if isinstance(net, DarknetNet):
        return net
    if isinstance(net, (tuple, list)) and len(net) == 2:
        return load_net(net[0], net[1])
    raise FrontendError(f"from_darknet takes a DarknetNet (kiln.frontend.darknet.load_net(cfg, weights)) "
                        f"or a (cfg path, weights path) pair, not {type(net).__name__}")


def from_darknet(net: Any, shape: Any = None, dtype: str = "float32", freeze_params: bool = True,
                 detection_extras: bool = True) -> tuple[Any, dict[str, Any]]:
    """Convert a darknet network into a relay module, with TVM's signature.

    Parameters
    ----------
    net : DarknetNet or (cfg path, weights path)
        The network, from :func:`load_net`.
    shape : tuple or dict, optional
        The NCHW shape of input ``"data"`` (default ``(1, channels, height, width)`` of [net]);
        H and W may differ from the cfg's when no connected layer depends on them.
    dtype : str
        The input dtype.
    freeze_params : bool
        True: weights are embedded constants; False: named params (``conv_0_weights``, ...).
    detection_extras : bool
        True (TVM's layout): every yolo/region layer also outputs its mask (yolo), biases and
        attributes; False: only the layers' tensors.

    Returns
    -------
    mod : IRModule
        ``mod.attrs["output_names"]`` names the outputs (``yolo_23``, ``yolo_23_mask``, ...).
    params : dict of str to NDArray
    """
    net = _as_net(net)
    _check_supported(net.layers, net.cfg_path)
    if not net.layers:
        raise FrontendError(f"{net.cfg_path}: the network has no layers after [net]")
    if net.weights_path is None and any(_weight_plan(layer) for layer in net.layers):
        raise FrontendError(f"{net.cfg_path}: the net was loaded without weights; pass a weights file "
                            "to load_net")
    dims = _input_shape(net, shape)
    shapes = _infer_shapes(net.layers, dims[1:])
    for layer, (ins, _) in zip(net.layers, shapes):
        if layer.kind == "connected" and _size(ins) != _size(layer.in_shape):
            raise FrontendError(f"{layer.where()}: input shape {list(dims)} gives this connected layer "
                                f"{_size(ins)} inputs; its weights expect {_size(layer.in_shape)}")
    st = ImportState(freeze_params)
    cv = _Converter(net, st, shapes, dims[0])
    x: Expr = st.add_input("data", dims, dtype)
    extras: list[tuple[Expr, str]] = []  # TVM: later detection layers first
    for layer in net.layers:
        out, = st.finish([_CONVERTERS[layer.kind](cv, layer, x)], layer.name)
        assert out is not None
        cv.outs.append(out)
        x = out
        if layer.kind in ("yolo", "region"):
            extras = _detection_outputs(cv, layer, shapes[layer.index][1], detection_extras) + extras
    last = max(i for i, layer in enumerate(net.layers) if layer.kind != "cost")
    outputs = [(cv.outs[last], net.layers[last].name)]
    outputs += [(e, name) for e, name in extras if e is not cv.outs[last]]
    return st.module([e for e, _ in outputs], [name for _, name in outputs])


def _detection_outputs(cv: _Converter, layer: DarknetLayer, out_shape: _Shape, extras: bool
                       ) -> list[tuple[Expr, str]]:
    """A yolo/region layer's outputs in TVM's order: tensor, [mask], biases, attributes."""
    outs: list[tuple[Expr, str]] = [(cv.outs[layer.index], layer.name)]
    if not extras:
        return outs
    c, h, w = out_shape
    classes, n = layer.get_int("classes", 20), _detection_layout(layer)[0]
    total = layer.get_int("num", 1)
    anchors = layer.get_list("anchors", float) or []
    biases = np.full(2 * total, 0.5, np.float32)
    biases[:min(len(anchors), 2 * total)] = anchors[:2 * total]
    if layer.kind == "yolo":
        mask = np.array(layer.get_list("mask") or list(range(total)), np.int32)
        attr = np.array([n, c, h, w, classes, total], np.int32)
        outs.append((Constant(mask), f"{layer.name}_mask"))
    else:
        attr = np.array([n, c, h, w, classes, layer.get_int("coords", 4), layer.get_int("background", 0)],
                        np.int32)
    outs += [(Constant(biases), f"{layer.name}_biases"), (Constant(attr), f"{layer.name}_attr")]
    return outs
