"""A NumPy/PyTorch re-implementation of darknet's inference, written from darknet's C sources
(pjreddie/darknet and AlexeyAB/darknet ``src/*.c``), independent of Kiln: the oracle of
``test_darknet.py``.

Every layer works, as darknet does, on a flat per-sample buffer ``(batch, outputs)`` with its
``(c, h, w)`` dims, and the index arithmetic of the C loops (``entry_index``, ``reorg_cpu``,
``shortcut_cpu``, ``upsample_cpu``, the maxpool offsets) is reproduced literally. Math is float64.
:meth:`RefNet.write_weights` writes random weights in darknet's binary layout.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

_ALIASES = {"conv": "convolutional", "conn": "connected", "max": "maxpool", "avg": "avgpool",
            "soft": "softmax", "network": "net"}


def _softplus(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log(np.exp(x) + 1)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def activate(x: np.ndarray, name: str) -> np.ndarray:
    """darknet's activations.h / activations.c."""
    with np.errstate(over="ignore", invalid="ignore"):
        table = {
            "linear": lambda: x,
            "logistic": lambda: _sigmoid(x),
            "loggy": lambda: 2.0 / (1.0 + np.exp(-x)) - 1,
            "relu": lambda: x * (x > 0),
            "relu6": lambda: np.minimum(np.maximum(x, 0), 6),
            "elu": lambda: (x >= 0) * x + (x < 0) * (np.exp(np.minimum(x, 0)) - 1),
            "selu": lambda: ((x >= 0) * 1.0507 * x
                             + (x < 0) * 1.0507 * 1.6732 * (np.exp(np.minimum(x, 0)) - 1)),
            "gelu": lambda: 0.5 * x * (1 + np.tanh(0.797885 * x + 0.035677 * x ** 3)),
            "relie": lambda: np.where(x > 0, x, 0.01 * x),
            "ramp": lambda: x * (x > 0) + 0.1 * x,
            "leaky": lambda: np.where(x > 0, x, 0.1 * x),
            "tanh": lambda: 2 / (1 + np.exp(-2 * x)) - 1,
            "hardtan": lambda: np.clip(x, -1, 1),
            "lhtan": lambda: np.where(x < 0, 0.001 * x, np.where(x > 1, 0.001 * (x - 1) + 1, x)),
            "plse": lambda: np.where(x < -4, 0.01 * (x + 4),
                                     np.where(x > 4, 0.01 * (x - 4) + 1, 0.125 * x + 0.5)),
            "swish": lambda: x * _sigmoid(x),
            "mish": lambda: x * np.tanh(_softplus(x)),
            "hard_mish": lambda: np.where(x > 0, x, np.where(x > -2, x * x / 2 + x, 0.0)),
        }
        return table[name]()


class Layer:
    def __init__(self, kind: str, options: dict[str, str]):
        self.kind, self.options = kind, options
        self.c = self.h = self.w = 0  # input dims
        self.out_c = self.out_h = self.out_w = 0
        self.inputs = self.outputs = 0
        self.params: dict[str, np.ndarray] = {}

    def i(self, key: str, default: int) -> int:
        return int(float(self.options.get(key, default)))

    def f(self, key: str, default: float) -> float:
        return float(self.options.get(key, default))

    def s(self, key: str, default: str) -> str:
        return self.options.get(key, default)

    def ints(self, key: str) -> list[int]:
        return [int(v) for v in self.options[key].split(",") if v]


def parse(text: str) -> tuple[dict[str, str], list[Layer]]:
    sections: list[tuple[str, dict[str, str]]] = []
    for raw in text.splitlines():
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            name = line[1:-1]
            sections.append((_ALIASES.get(name, name), {}))
        else:
            k, v = line.split("=", 1)
            sections[-1][1].setdefault(k, v)
    assert sections[0][0] == "net"
    return sections[0][1], [Layer(k, o) for k, o in sections[1:]]


class RefNet:
    """darknet's network: shapes from ``parse_network_cfg``, forward from ``forward_network``."""

    def __init__(self, cfg: str, c: int | None = None, h: int | None = None, w: int | None = None):
        self.cfg = cfg
        self.net_options, self.layers = parse(cfg)
        self.c = c or int(self.net_options["channels"])
        self.h = h or int(self.net_options["height"])
        self.w = w or int(self.net_options["width"])
        c, h, w = self.c, self.h, self.w
        inputs = c * h * w
        for idx, layer in enumerate(self.layers):
            layer.c, layer.h, layer.w, layer.inputs = c, h, w, inputs
            self._shape(idx, layer)
            c, h, w, inputs = layer.out_c, layer.out_h, layer.out_w, layer.outputs

    def _shape(self, idx: int, l: Layer) -> None:
        k = l.kind
        l.out_c, l.out_h, l.out_w = l.c, l.h, l.w
        if k == "convolutional":
            size, stride = l.i("size", 1), l.i("stride", 1)
            sx, sy = l.i("stride_x", stride), l.i("stride_y", stride)
            pad = size // 2 if l.i("pad", 0) else l.i("padding", 0)
            l.out_c = l.i("filters", 1)
            l.out_h = (l.h + 2 * pad - size) // sy + 1
            l.out_w = (l.w + 2 * pad - size) // sx + 1
        elif k == "connected":
            l.out_c, l.out_h, l.out_w = l.i("output", 1), 1, 1
        elif k == "maxpool":
            stride = l.i("stride", 1)
            sx, sy = l.i("stride_x", stride), l.i("stride_y", stride)
            size = l.i("size", stride)
            padding = l.i("padding", size - 1)
            l.out_h = (l.h + padding - size) // sy + 1
            l.out_w = (l.w + padding - size) // sx + 1
        elif k == "avgpool":
            l.out_h = l.out_w = 1
        elif k == "softmax":
            l.out_c, l.out_h, l.out_w = l.inputs, 1, 1
        elif k == "route":
            srcs = [self.layers[j if j >= 0 else idx + j] for j in l.ints("layers")]
            groups = l.i("groups", 1)
            first = srcs[0]
            l.out_w, l.out_h = first.out_w, first.out_h
            l.out_c = sum(s.out_c for s in srcs) // groups
            l.outputs = sum(s.outputs for s in srcs) // groups
            return
        elif k == "upsample":
            s = l.i("stride", 2)
            if s > 0:
                l.out_h, l.out_w = l.h * s, l.w * s
            else:
                l.out_h, l.out_w = l.h // -s, l.w // -s
        elif k == "reorg":
            s = l.i("stride", 1)
            l.out_c, l.out_h, l.out_w = l.c * s * s, l.h // s, l.w // s
        l.outputs = l.out_c * l.out_h * l.out_w

    # --- weights -----------------------------------------------------------------------------
    def write_weights(self, path: Path, rng: np.random.Generator, version: tuple[int, int, int] = (0, 2, 0),
                      transpose: bool = False, extra: int = 0, cut: int = 0) -> None:
        """Random weights in darknet's file layout (``load_weights_upto``), kept in ``params``."""
        major, minor, revision = version
        chunks: list[np.ndarray] = []
        for l in self.layers:
            n = l.out_c
            bn = l.i("batch_normalize", 0)
            if l.kind == "convolutional":
                groups, size = l.i("groups", 1), l.i("size", 1)
                fan_in = l.c // groups * size * size
                l.params["biases"] = rng.normal(0, 0.1, n)
                if bn:
                    self._bn_params(l, n, rng)
                l.params["weights"] = rng.normal(0, 1.0 / np.sqrt(fan_in), (n, l.c // groups, size, size))
                keys = ["biases", *(["scales", "rolling_mean", "rolling_variance"] if bn else []), "weights"]
            elif l.kind == "connected":
                l.params["biases"] = rng.normal(0, 0.1, n)
                l.params["weights"] = rng.normal(0, 1.0 / np.sqrt(l.inputs), (n, l.inputs))
                if bn:
                    self._bn_params(l, n, rng)
                keys = ["biases", "weights", *(["scales", "rolling_mean", "rolling_variance"] if bn else [])]
            elif l.kind == "batchnorm":
                self._bn_params(l, l.c, rng)
                keys = ["scales", "rolling_mean", "rolling_variance"]
            else:
                continue
            for key in keys:
                value = l.params[key] = l.params[key].astype(np.float32).astype(np.float64)
                if key == "weights" and l.kind == "connected" and transpose:
                    value = value.T  # stored (inputs, outputs)
                chunks.append(value.astype("<f4").ravel())
        body = np.concatenate(chunks).tobytes() if chunks else b""
        if cut:
            body = body[:-4 * cut]
        body += rng.normal(size=extra).astype("<f4").tobytes()
        wide = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
        header = struct.pack("<iii", major, minor, revision) + struct.pack("<q" if wide else "<i", 12345)
        path.write_bytes(header + body)

    @staticmethod
    def _bn_params(l: Layer, n: int, rng: np.random.Generator) -> None:
        l.params["scales"] = rng.uniform(0.5, 1.5, n)
        l.params["rolling_mean"] = rng.normal(0, 0.1, n)
        l.params["rolling_variance"] = rng.uniform(0.5, 1.5, n)

    # --- forward -----------------------------------------------------------------------------
    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        """Every layer's output, flat ``(batch, outputs)`` float64, for NCHW input ``x``."""
        batch = x.shape[0]
        prev = x.reshape(batch, -1).astype(np.float64)
        outs: list[np.ndarray] = []
        for idx, l in enumerate(self.layers):
            out = getattr(self, "_" + l.kind)(idx, l, prev, outs, batch)
            outs.append(out.reshape(batch, -1))
            prev = outs[-1]
        return outs

    def _bn(self, l: Layer, x: np.ndarray, n: int) -> np.ndarray:
        shape = (1, n) + (1,) * (x.ndim - 2)
        p = l.params
        x = (x - p["rolling_mean"].reshape(shape)) / np.sqrt(p["rolling_variance"].reshape(shape) + 1e-5)
        return x * p["scales"].reshape(shape)

    def _convolutional(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        size, stride = l.i("size", 1), l.i("stride", 1)
        pad = size // 2 if l.i("pad", 0) else l.i("padding", 0)
        dil = l.i("dilation", 1) if size > 1 else 1
        t = torch.from_numpy(x.reshape(b, l.c, l.h, l.w))
        w = torch.from_numpy(l.params["weights"])
        y = F.conv2d(t, w, stride=(l.i("stride_y", stride), l.i("stride_x", stride)),
                     padding=pad * dil, dilation=dil, groups=l.i("groups", 1)).numpy()
        assert y.shape[1:] == (l.out_c, l.out_h, l.out_w), (y.shape, l.out_c, l.out_h, l.out_w)
        if l.i("batch_normalize", 0):
            y = self._bn(l, y, l.out_c)
        y = y + l.params["biases"].reshape(1, -1, 1, 1)
        return activate(y, l.s("activation", "logistic"))

    def _connected(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        y = x @ l.params["weights"].T
        if l.i("batch_normalize", 0):
            y = self._bn(l, y, l.out_c)
        return activate(y + l.params["biases"], l.s("activation", "logistic"))

    def _batchnorm(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        return self._bn(l, x.reshape(b, l.c, l.h, l.w), l.c)

    def _maxpool(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        # forward_maxpool_layer: cur_h = -pad/2 + i*stride + n, out of range -> -FLT_MAX
        stride = l.i("stride", 1)
        sx, sy = l.i("stride_x", stride), l.i("stride_y", stride)
        size = l.i("size", stride)
        pad = l.i("padding", size - 1)
        xi = x.reshape(b, l.c, l.h, l.w)
        out = np.full((b, l.c, l.out_h, l.out_w), -np.finfo(np.float32).max)
        ii = -(pad // 2) + np.arange(l.out_h) * sy
        jj = -(pad // 2) + np.arange(l.out_w) * sx
        for n in range(size):
            for m in range(size):
                ch, cw = ii + n, jj + m
                vh, vw = (ch >= 0) & (ch < l.h), (cw >= 0) & (cw < l.w)
                vals = xi[:, :, np.clip(ch, 0, l.h - 1)][:, :, :, np.clip(cw, 0, l.w - 1)]
                valid = vh[:, None] & vw[None, :]
                out = np.where(valid, np.maximum(out, vals), out)
        return out

    def _avgpool(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        return x.reshape(b, l.c, l.h * l.w).mean(axis=2)

    def _softmax(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        groups, temp = l.i("groups", 1), l.f("temperature", 1.0)
        y = x.reshape(b, groups, -1) / temp
        e = np.exp(y - y.max(axis=2, keepdims=True))
        return (e / e.sum(axis=2, keepdims=True)).reshape(b, -1)

    def _dropout(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        return x

    _cost = _dropout

    def _route(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        # forward_route_layer (AlexeyAB): part input_size/groups at offset part*group_id
        groups, gid = l.i("groups", 1), l.i("group_id", 0)
        parts = []
        for j in l.ints("layers"):
            src = outs[j if j >= 0 else idx + j]
            part = src.shape[1] // groups
            parts.append(src[:, part * gid:part * (gid + 1)])
        return np.concatenate(parts, axis=1)

    def _shortcut(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        # shortcut_cpu (pjreddie): out = s1*out + s2*add over min(c1, c2) channels, same w, h
        out = x.reshape(b, l.c, l.h, l.w).copy()
        for j in l.ints("from"):
            j = j if j >= 0 else idx + j
            src = self.layers[j]
            add = outs[j].reshape(b, src.out_c, src.out_h, src.out_w)
            minc = min(src.out_c, l.c)
            out[:, :minc] = l.f("alpha", 1) * out[:, :minc] + l.f("beta", 1) * add[:, :minc]
        return activate(out, l.s("activation", "linear"))

    def _upsample(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        # upsample_cpu: out[j, i] = scale * in[j/stride, i/stride]; reverse: in[j/s, i/s] += scale*out[j, i]
        s, scale = l.i("stride", 2), l.f("scale", 1)
        xi = x.reshape(b, l.c, l.h, l.w)
        if s > 0:
            jj, ii = np.arange(l.out_h) // s, np.arange(l.out_w) // s
            return scale * xi[:, :, jj][:, :, :, ii]
        s = -s
        out = np.zeros((b, l.c, l.out_h, l.out_w))
        for j in range(l.out_h * s):
            for i in range(l.out_w * s):
                out[:, :, j // s, i // s] += scale * xi[:, :, j, i]
        return out

    def _entry(self, l: Layer, n: int, entry: int, per: int) -> slice:
        """entry_index(l, b, n*w*h, entry) as a slice of one sample's buffer."""
        start = n * l.w * l.h * per + entry * l.w * l.h
        return slice(start, start + l.w * l.h)

    def _yolo(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        out = x.copy()
        classes = l.i("classes", 20)
        n = len(l.ints("mask")) if "mask" in l.options else l.i("num", 1)
        scale, per = l.f("scale_x_y", 1), 4 + classes + 1
        for a in range(n):
            xy = self._entry(l, a, 0, per)
            xy = slice(xy.start, xy.start + 2 * l.w * l.h)
            obj = self._entry(l, a, 4, per)
            obj = slice(obj.start, obj.start + (1 + classes) * l.w * l.h)
            if not l.i("new_coords", 0):
                out[:, xy] = _sigmoid(out[:, xy])
                out[:, obj] = _sigmoid(out[:, obj])
            out[:, xy] = out[:, xy] * scale - 0.5 * (scale - 1)
        return out

    def _region(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        out = x.copy()
        coords, classes, n = l.i("coords", 4), l.i("classes", 20), l.i("num", 1)
        background, softmax = l.i("background", 0), l.i("softmax", 0)
        per, hw = coords + classes + 1, l.w * l.h
        for a in range(n):
            xy = self._entry(l, a, 0, per)
            xy = slice(xy.start, xy.start + 2 * hw)
            out[:, xy] = _sigmoid(out[:, xy])
            if not background:
                obj = self._entry(l, a, coords, per)
                out[:, obj] = _sigmoid(out[:, obj])
            cls = self._entry(l, a, coords + 1, per)
            cls = slice(cls.start, cls.start + classes * hw)
            if not softmax:
                out[:, cls] = _sigmoid(out[:, cls])
        if softmax:  # softmax_cpu over classes + background entries, stride w*h, from the raw input
            for a in range(n):
                start = self._entry(l, a, coords + (0 if background else 1), per).start
                k = classes + background
                block = x[:, start:start + k * hw].reshape(b, k, hw)
                e = np.exp(block - block.max(axis=1, keepdims=True))
                out[:, start:start + k * hw] = (e / e.sum(axis=1, keepdims=True)).reshape(b, -1)
        return out

    def _reorg(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        # reorg_cpu(x, w, h, c, batch, stride, forward=0, out): out[in_index] = x[out_index]
        s, w, h, c = l.i("stride", 1), l.w, l.h, l.c
        out_c = c // (s * s)
        k, j, i = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
        in_index = i + w * (j + h * k)
        c2, offset = k % out_c, k // out_c
        w2, h2 = i * s + offset % s, j * s + offset // s
        out_index = w2 + w * s * (h2 + h * s * c2)
        out = np.empty_like(x)
        out[:, in_index.ravel()] = x[:, out_index.ravel()]
        return out

    def _activation(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        return activate(x, l.s("activation", "linear"))

    def _logistic(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        return _sigmoid(x)

    def _l2norm(self, idx: int, l: Layer, x: np.ndarray, outs: list, b: int) -> np.ndarray:
        xi = x.reshape(b, l.c, l.h * l.w)
        return xi / np.sqrt((xi ** 2).sum(axis=1, keepdims=True))

    def layer_dims(self, idx: int) -> tuple[int, int, int]:
        l = self.layers[idx]
        return l.out_c, l.out_h, l.out_w


def detection_extras(layer: Layer) -> dict[str, Any]:
    """TVM's extra outputs of a yolo/region layer: mask, biases, attributes."""
    total = layer.i("num", 1)
    biases = np.full(2 * total, 0.5)
    anchors = [float(v) for v in layer.options.get("anchors", "").split(",") if v]
    biases[:len(anchors)] = anchors[:2 * total]
    classes = layer.i("classes", 20)
    if layer.kind == "yolo":
        mask = layer.ints("mask") if "mask" in layer.options else list(range(total))
        return {"mask": np.array(mask), "biases": biases,
                "attr": np.array([len(mask), layer.out_c, layer.out_h, layer.out_w, classes, total])}
    return {"biases": biases, "attr": np.array([total, layer.out_c, layer.out_h, layer.out_w, classes,
                                                layer.i("coords", 4), layer.i("background", 0)])}
