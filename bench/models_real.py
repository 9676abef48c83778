"""Real-world benchmark models: PyTorch modules with seeded random weights, exported by PyTorch.

Unlike ``models_cnn`` and ``models_transformer``, which write their graphs node by node, these
builders define the networks as ``torch.nn`` modules and export them with PyTorch's own
TorchScript-based exporter (``torch.onnx.export(..., dynamo=False, opset_version=17)``), so the
graphs are exactly what an application exporting such a model gets: Conv with batch norm folded
in, Split/Concat, Resize, ConvTranspose, LSTM/GRU with the exporter's gate reordering, ...

======================  ==============================================================  ======
name                    structure                                                       inputs
======================  ==============================================================  ======
``dbnet_det``           DBNet text detector: ResNet (basic blocks) backbone, FPN neck   1x3x640x640
                        (1x1 lateral, nearest upsample + Add, 3x3 smooth, concat),
                        head conv+BN+ReLU, 2 x ConvTranspose2d (stride 2), sigmoid
``crnn_rec``            CRNN text recognizer: VGG-style conv stack pooled to height 1,   1x3x32x320
                        squeeze, 2-layer BiLSTM, Linear to 97 classes, softmax
``yolov8n_det``         YOLOv8n: Conv(+BN+SiLU), C2f (Split/Concat), SPPF (3 MaxPool),    1x3x640x640
                        FPN/PAN (nearest Upsample + Concat), decoupled head, DFL
                        (softmax over 16 bins + 1x1 conv with arange weights), boxes +
                        class scores concatenated (1x84x8400)
``mobilenet_v3``        torchvision MobileNetV3-Large: HardSwish, SE with HardSigmoid,   1x3x224x224
                        depthwise convs, classifier 960-1280-1000
``regnet_y_400mf``      torchvision RegNetY-400MF: bottleneck blocks whose 3x3 conv has    1x3x224x224
                        groups of 8 channels, SE (ReLU, Sigmoid), stride-2 projection
                        shortcuts, classifier 440-1000
``conv1d_bilstm``       sequence tagger: 2 x Conv1d(k=5)+ReLU over 80 features, BiLSTM   1x80x200
                        (batch first), Linear per step
``tiny_gru_stream``     streaming per-frame model: Linear+ReLU, GRU (hidden 128) with    x 1x1x64,
                        state in and out, Linear + sigmoid                              h 1x1x128
======================  ==============================================================  ======

PyTorch is imported only when a builder runs. Weights are drawn under a fixed seed:
convolutions and linear layers He-normal (deep stacks keep their scale, logits have some
spread), LSTM/GRU weights uniform in 2.5 x PyTorch's default range; batch norm statistics and
affine parameters are random too, so folding them is not a no-op.
"""

from __future__ import annotations

import functools
import io
import math
import types
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

__all__ = ["conv1d_bilstm", "crnn_rec", "dbnet_det", "export_torch", "mobilenet_v3", "reference_outputs",
           "regnet_y_400mf", "tiny_gru_stream", "torch_model", "yolov8n_det"]

OPSET = 17

# MobileNetV3-Large inverted residuals: kernel, expanded channels, output channels, SE, hard-swish,
# stride (torchvision ``_mobilenet_v3_conf("mobilenet_v3_large")``).
_MNV3_LARGE = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2),
               (3, 72, 24, False, False, 1), (5, 72, 40, True, False, 2),
               (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
               (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1),
               (3, 184, 80, False, True, 1), (3, 184, 80, False, True, 1),
               (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
               (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1),
               (5, 960, 160, True, True, 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: to a multiple of ``divisor``, never below 90% of ``v``."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


@functools.cache
def _nets() -> types.SimpleNamespace:
    """The ``torch.nn`` module classes (defined on first use, so importing this file is cheap)."""
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        return nn.Sequential(*layers)

    # --- DBNet -----------------------------------------------------------------------------------
    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = conv_bn(cin, cout, 3, stride)
            self.conv2 = conv_bn(cout, cout, 3, act=None)
            self.down = (conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout
                         else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.conv2(self.conv1(x)) + self.down(x))

    class DBNet(nn.Module):
        def __init__(self, widths: Sequence[int], inner: int):
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, widths[0], 3, 2), conv_bn(widths[0], widths[0], 3),
                                      nn.MaxPool2d(3, 2, 1))
            stages, cin = [], widths[0]
            for i, w in enumerate(widths):
                stages.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
                cin = w
            self.stages = nn.ModuleList(stages)
            self.lateral = nn.ModuleList(nn.Conv2d(w, inner, 1, bias=False) for w in widths)
            self.smooth = nn.ModuleList(nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False)
                                        for _ in widths)
            q = inner // 4
            self.head = nn.Sequential(
                nn.Conv2d(inner, q, 3, padding=1, bias=False), nn.BatchNorm2d(q), nn.ReLU(),
                nn.ConvTranspose2d(q, q, 2, 2), nn.BatchNorm2d(q), nn.ReLU(),
                nn.ConvTranspose2d(q, 1, 2, 2), nn.Sigmoid())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            feats = []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            lat = [conv(f) for conv, f in zip(self.lateral, feats)]
            outs = [lat[-1]]
            for f in reversed(lat[:-1]):  # top-down: upsample the coarser level and add
                outs.insert(0, f + nn.functional.interpolate(outs[0], scale_factor=2.0, mode="nearest"))
            pyramid = []
            for i, (conv, o) in enumerate(zip(self.smooth, outs)):
                p = conv(o)
                if i:
                    p = nn.functional.interpolate(p, scale_factor=float(2 ** i), mode="nearest")
                pyramid.append(p)
            return self.head(torch.cat(pyramid[::-1], 1))

    # --- CRNN ------------------------------------------------------------------------------------
    class CRNN(nn.Module):
        def __init__(self, widths: Sequence[int], hidden: int, num_classes: int):
            super().__init__()
            c1, c2, c3, c4 = widths
            self.cnn = nn.Sequential(
                conv_bn(3, c1, 3), nn.MaxPool2d(2, 2),
                conv_bn(c1, c2, 3), nn.MaxPool2d(2, 2),
                conv_bn(c2, c3, 3), conv_bn(c3, c3, 3), nn.MaxPool2d((2, 1), (2, 1)),
                conv_bn(c3, c4, 3), conv_bn(c4, c4, 3), nn.MaxPool2d((2, 1), (2, 1)),
                conv_bn(c4, c4, 3), nn.MaxPool2d((2, 1), (2, 1)))
            self.rnn = nn.LSTM(c4, hidden, num_layers=2, bidirectional=True)
            self.fc = nn.Linear(2 * hidden, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # (W, N, C): time-major
            y, _ = self.rnn(f)
            return self.fc(y).permute(1, 0, 2).softmax(-1)

    # --- YOLOv8 ----------------------------------------------------------------------------------
    class Conv(nn.Module):
        """Ultralytics ``Conv``: conv (no bias), batch norm, SiLU."""

        def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(cout)
            self.act = nn.SiLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c: int, shortcut: bool):
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, cin: int, cout: int, n: int, shortcut: bool = False):
            super().__init__()
            self.c = cout // 2
            self.cv1 = Conv(cin, 2 * self.c, 1)
            self.cv2 = Conv((2 + n) * self.c, cout, 1)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # ``forward_split``, which the ultralytics exporter swaps in: a Split, not Slices
            y = list(self.cv1(x).split((self.c, self.c), 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, cin: int, cout: int, k: int = 5):
            super().__init__()
            c = cin // 2
            self.cv1, self.cv2 = Conv(cin, c, 1), Conv(4 * c, cout, 1)
            self.m = nn.MaxPool2d(k, 1, k // 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = [self.cv1(x)]
            y.extend(self.m(y[-1]) for _ in range(3))
            return self.cv2(torch.cat(y, 1))

    class DFL(nn.Module):
        def __init__(self, bins: int = 16):
            super().__init__()
            self.bins = bins
            self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
            self.conv.weight.data[:] = torch.arange(bins, dtype=torch.float).view(1, bins, 1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, _, a = x.shape
            return self.conv(x.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)).view(b, 4, a)

    class Detect(nn.Module):
        def __init__(self, nc: int, ch: Sequence[int], image_size: int, reg_max: int = 16):
            super().__init__()
            self.nc, self.reg_max = nc, reg_max
            c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
            self.cv2 = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3),
                                                   nn.Conv2d(c2, 4 * reg_max, 1)) for c in ch)
            self.cv3 = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3),
                                                   nn.Conv2d(c3, nc, 1)) for c in ch)
            self.dfl = DFL(reg_max)
            anchors, strides = [], []
            for stride in (8, 16, 32):  # ultralytics make_anchors, offset 0.5
                n = image_size // stride
                sy, sx = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
                anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
                strides.append(torch.full((n * n, 1), float(stride)))
            self.register_buffer("anchors", torch.cat(anchors).transpose(0, 1).unsqueeze(0))
            self.register_buffer("strides", torch.cat(strides).transpose(0, 1))

        def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
            b = xs[0].shape[0]
            no = self.nc + 4 * self.reg_max
            x = torch.cat([torch.cat((b2(xi), b3(xi)), 1).view(b, no, -1)
                           for xi, b2, b3 in zip(xs, self.cv2, self.cv3)], 2)
            box, cls = x.split((4 * self.reg_max, self.nc), 1)
            lt, rb = self.dfl(box).chunk(2, 1)  # dist2bbox, xywh
            x1y1, x2y2 = self.anchors - lt, self.anchors + rb
            dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
            return torch.cat((dbox, cls.sigmoid()), 1)

    class YOLOv8(nn.Module):
        def __init__(self, width: Sequence[int], depth: Sequence[int], nc: int, image_size: int):
            super().__init__()
            w0, w1, w2, w3, w4 = width
            n1, n2, n3, n4 = depth
            self.b0, self.b1, self.b2 = Conv(3, w0, 3, 2), Conv(w0, w1, 3, 2), C2f(w1, w1, n1, True)
            self.b3, self.b4 = Conv(w1, w2, 3, 2), C2f(w2, w2, n2, True)
            self.b5, self.b6 = Conv(w2, w3, 3, 2), C2f(w3, w3, n3, True)
            self.b7, self.b8, self.b9 = Conv(w3, w4, 3, 2), C2f(w4, w4, n4, True), SPPF(w4, w4)
            self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
            self.h12, self.h15 = C2f(w4 + w3, w3, 1), C2f(w3 + w2, w2, 1)
            self.h16, self.h18 = Conv(w2, w2, 3, 2), C2f(w2 + w3, w3, 1)
            self.h19, self.h21 = Conv(w3, w3, 3, 2), C2f(w3 + w4, w4, 1)
            self.detect = Detect(nc, (w2, w3, w4), image_size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
            p4 = self.b6(self.b5(p3))
            p5 = self.b9(self.b8(self.b7(p4)))
            t4 = self.h12(torch.cat((self.up(p5), p4), 1))
            o3 = self.h15(torch.cat((self.up(t4), p3), 1))
            o4 = self.h18(torch.cat((self.h16(o3), t4), 1))
            o5 = self.h21(torch.cat((self.h19(o4), p5), 1))
            return self.detect([o3, o4, o5])

    # --- MobileNetV3 -----------------------------------------------------------------------------
    class SqueezeExcitation(nn.Module):
        def __init__(self, c: int, squeeze: int):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
            self.relu, self.scale_activation = nn.ReLU(), nn.Hardsigmoid()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = self.scale_activation(self.fc2(self.relu(self.fc1(self.avgpool(x)))))
            return s * x

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, stride: int):
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers: list[nn.Module] = []
            if exp != cin:
                layers.append(conv_bn(cin, exp, 1, act=act))
            layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
            if se:
                layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4)))
            layers.append(conv_bn(exp, cout, 1, act=None))
            self.block = nn.Sequential(*layers)
            self.use_res = stride == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.block(x)
            return y + x if self.use_res else y

    class MobileNetV3(nn.Module):
        def __init__(self, width_mult: float, num_classes: int):
            super().__init__()
            cin = _make_divisible(16 * width_mult)
            layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.Hardswish)]
            for k, exp, cout, se, hs, stride in _MNV3_LARGE:
                exp, cout = _make_divisible(exp * width_mult), _make_divisible(cout * width_mult)
                layers.append(InvertedResidual(cin, k, exp, cout, se, hs, stride))
                cin = cout
            last = 6 * cin
            layers.append(conv_bn(cin, last, 1, act=nn.Hardswish))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(last, 1280), nn.Hardswish(), nn.Dropout(0.2),
                                            nn.Linear(1280, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    # --- RegNetY (torchvision's ResBottleneckBlock with SE, SimpleStemIN) ---------------------
    class SqueezeExcite(nn.Module):
        def __init__(self, c: int, squeeze: int):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))

    class RegNetBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, group_width: int, se_ratio: float):
            super().__init__()
            self.f = nn.Sequential(conv_bn(cin, cout, 1),
                                   conv_bn(cout, cout, 3, stride, groups=cout // group_width),
                                   SqueezeExcite(cout, round(se_ratio * cin)),
                                   conv_bn(cout, cout, 1, act=None))
            self.proj = (conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout
                         else nn.Identity())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.proj(x) + self.f(x))

    class RegNetY(nn.Module):
        def __init__(self, widths: Sequence[int], depths: Sequence[int], group_width: int,
                     num_classes: int):
            super().__init__()
            layers: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
            cin = 32
            for w, d in zip(widths, depths):
                for i in range(d):
                    layers.append(RegNetBlock(cin, w, 2 if i == 0 else 1, group_width, 0.25))
                    cin = w
            self.trunk = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.trunk(x), 1), 1))

    # --- sequence models -------------------------------------------------------------------------
    class ConvBiLSTM(nn.Module):
        def __init__(self, features: int, channels: int, hidden: int, num_tags: int):
            super().__init__()
            self.convs = nn.Sequential(nn.Conv1d(features, channels, 5, padding=2), nn.ReLU(),
                                       nn.Conv1d(channels, channels, 5, padding=2), nn.ReLU())
            self.lstm = nn.LSTM(channels, hidden, batch_first=True, bidirectional=True)
            self.out = nn.Linear(2 * hidden, num_tags)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.lstm(self.convs(x).transpose(1, 2))  # (N, T, C): batch first
            return self.out(y)

    class StreamGRU(nn.Module):
        def __init__(self, features: int, hidden: int, cell: str):
            super().__init__()
            self.pre = nn.Sequential(nn.Linear(features, features), nn.ReLU())
            self.cell = cell
            self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(features, hidden)
            self.out = nn.Linear(hidden, 1)

        def forward(self, x: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y, new = self.rnn(self.pre(x), state[0] if self.cell == "gru" else state)
            prob = torch.sigmoid(self.out(y))
            return (prob, new) if self.cell == "gru" else (prob, *new)

    return types.SimpleNamespace(DBNet=DBNet, CRNN=CRNN, YOLOv8=YOLOv8, MobileNetV3=MobileNetV3,
                                 RegNetY=RegNetY, ConvBiLSTM=ConvBiLSTM, StreamGRU=StreamGRU)


def _init_weights(module: Any, seed: int) -> None:
    """Seeded weights: He-normal convolutions and linear layers, uniform LSTM/GRU weights, random
    batch norm state (every parameter but the DFL's fixed ``arange`` is drawn from ``seed``)."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
                if m.weight.requires_grad:  # the DFL's arange weights stay
                    fan_in = m.weight[0].numel() if not isinstance(m, nn.ConvTranspose2d) \
                        else m.weight.shape[0] * m.weight[0, 0].numel() // max(1, m.stride[0] ** 2)
                    m.weight.normal_(0.0, math.sqrt(2.0 / fan_in), generator=gen)
                if m.bias is not None:
                    m.bias.uniform_(-0.1, 0.1, generator=gen)
            elif isinstance(m, nn.Linear):  # He-normal: logits with some spread
                m.weight.normal_(0.0, math.sqrt(2.0 / m.weight.shape[1]), generator=gen)
                m.bias.uniform_(-0.1, 0.1, generator=gen)
            elif isinstance(m, (nn.LSTM, nn.GRU)):  # 2.5 x PyTorch's default range: trained
                bound = 2.5 / math.sqrt(m.hidden_size)  # recurrences are not that timid
                for p in m.parameters():
                    p.uniform_(-bound, bound, generator=gen)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.2, 0.2, generator=gen)
                m.running_mean.normal_(0.0, 0.2, generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)


def torch_model(name: str, seed: int = 0, **kwargs: Any) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    """The PyTorch module of a model in eval mode, example inputs and its output names.

    Parameters
    ----------
    name : str
        One of ``dbnet_det``, ``crnn_rec``, ``yolov8n_det``, ``mobilenet_v3``, ``conv1d_bilstm``,
        ``tiny_gru_stream``.
    seed : int
        Seed of the weights and the example inputs.
    **kwargs
        The builder's size arguments (see each builder).

    Returns
    -------
    tuple
        ``(module, {input name: float32 array}, output names)``.
    """
    import torch

    with torch.random.fork_rng():  # the modules' default init leaves the caller's generator alone
        module, inputs, outputs = _SPECS[name](**kwargs)
    _init_weights(module, seed)
    module.eval()
    rng = np.random.default_rng(seed)
    feeds = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in inputs.items()}
    return module, feeds, outputs


def export_torch(module: Any, inputs: dict[str, np.ndarray], output_names: Sequence[str]) -> onnx.ModelProto:
    """``module`` exported by PyTorch's TorchScript-based exporter at opset 17, as a checked model.

    Parameters
    ----------
    module : torch.nn.Module
        The module, in eval mode.
    inputs : dict of str to numpy.ndarray
        The example inputs (their shapes become the model's static input shapes), by name.
    output_names : sequence of str
        Names of the graph outputs.

    Returns
    -------
    onnx.ModelProto
        The exported model.
    """
    import torch

    args = tuple(torch.from_numpy(v) for v in inputs.values())
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=OPSET,
                          input_names=list(inputs), output_names=list(output_names))
    model = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(model)
    return model


def reference_outputs(module: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The PyTorch module's own outputs on ``inputs`` (float32 arrays, in output order)."""
    import torch

    with torch.no_grad():
        out = module(*(torch.from_numpy(v) for v in inputs.values()))
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in out]


def _export(name: str, seed: int, **kwargs: Any) -> onnx.ModelProto:
    return export_torch(*torch_model(name, seed, **kwargs))


# --- model specifications: (module, {input: shape}, output names) --------------------------------
def _dbnet_spec(image_size: int = 640, widths: Sequence[int] = (16, 32, 64, 128),
                inner: int = 96) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    return _nets().DBNet(widths, inner), {"input": (1, 3, image_size, image_size)}, ["maps"]


def _crnn_spec(height: int = 32, width: int = 320, widths: Sequence[int] = (32, 64, 128, 256),
               hidden: int = 128, num_classes: int = 97) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    if height != 32:
        raise ValueError(f"crnn_rec pools a height of 32 to 1, not {height}")
    return _nets().CRNN(widths, hidden, num_classes), {"input": (1, 3, height, width)}, ["probs"]


def _yolov8_spec(image_size: int = 640, width: Sequence[int] = (16, 32, 64, 128, 256),
                 depth: Sequence[int] = (1, 2, 2, 1), num_classes: int = 80
                 ) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    return (_nets().YOLOv8(width, depth, num_classes, image_size),
            {"images": (1, 3, image_size, image_size)}, ["output0"])


def _mobilenet_v3_spec(image_size: int = 224, width_mult: float = 1.0, num_classes: int = 1000
                       ) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    return (_nets().MobileNetV3(width_mult, num_classes), {"input": (1, 3, image_size, image_size)},
            ["logits"])


def _regnet_y_spec(image_size: int = 224, widths: Sequence[int] = (48, 104, 208, 440),
                   depths: Sequence[int] = (1, 3, 6, 6), group_width: int = 8,
                   num_classes: int = 1000) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    return (_nets().RegNetY(widths, depths, group_width, num_classes),
            {"input": (1, 3, image_size, image_size)}, ["logits"])


def _conv1d_bilstm_spec(features: int = 80, steps: int = 200, channels: int = 256, hidden: int = 128,
                        num_tags: int = 40) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    return (_nets().ConvBiLSTM(features, channels, hidden, num_tags), {"features": (1, features, steps)},
            ["tags"])


def _tiny_gru_spec(features: int = 64, hidden: int = 128, cell: str = "gru"
                   ) -> tuple[Any, dict[str, tuple[int, ...]], list[str]]:
    if cell not in ("gru", "lstm"):
        raise ValueError(f"tiny_gru_stream cell must be 'gru' or 'lstm', not {cell!r}")
    inputs = {"x": (1, 1, features), "h": (1, 1, hidden)}
    outputs = ["prob", "h_out"]
    if cell == "lstm":
        inputs["c"], outputs = (1, 1, hidden), [*outputs, "c_out"]
    return _nets().StreamGRU(features, hidden, cell), inputs, outputs


_SPECS = {"dbnet_det": _dbnet_spec, "crnn_rec": _crnn_spec, "yolov8n_det": _yolov8_spec,
          "mobilenet_v3": _mobilenet_v3_spec, "regnet_y_400mf": _regnet_y_spec,
          "conv1d_bilstm": _conv1d_bilstm_spec,
          "tiny_gru_stream": _tiny_gru_spec}


# --- builders: the ONNX models -------------------------------------------------------------------
def dbnet_det(image_size: int = 640, widths: Sequence[int] = (16, 32, 64, 128), inner: int = 96,
              seed: int = 0) -> onnx.ModelProto:
    """DBNet text detector; ``image_size`` must be a multiple of 32. Output ``maps`` 1x1xHxW."""
    return _export("dbnet_det", seed, image_size=image_size, widths=tuple(widths), inner=inner)


def crnn_rec(width: int = 320, widths: Sequence[int] = (32, 64, 128, 256), hidden: int = 128,
             num_classes: int = 97, seed: int = 0) -> onnx.ModelProto:
    """CRNN text recognizer on a 32 x ``width`` crop; output ``probs`` 1 x width/4 x classes."""
    return _export("crnn_rec", seed, width=width, widths=tuple(widths), hidden=hidden,
                   num_classes=num_classes)


def yolov8n_det(image_size: int = 640, width: Sequence[int] = (16, 32, 64, 128, 256),
                depth: Sequence[int] = (1, 2, 2, 1), num_classes: int = 80, seed: int = 0) -> onnx.ModelProto:
    """YOLOv8n detector; output ``output0`` 1 x (4 + classes) x anchors (boxes xywh, then scores)."""
    return _export("yolov8n_det", seed, image_size=image_size, width=tuple(width), depth=tuple(depth),
                   num_classes=num_classes)


def mobilenet_v3(image_size: int = 224, width_mult: float = 1.0, num_classes: int = 1000,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV3-Large classifier; output ``logits`` 1 x classes."""
    return _export("mobilenet_v3", seed, image_size=image_size, width_mult=width_mult,
                   num_classes=num_classes)


def regnet_y_400mf(image_size: int = 224, widths: Sequence[int] = (48, 104, 208, 440),
                   depths: Sequence[int] = (1, 3, 6, 6), group_width: int = 8,
                   num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """RegNetY-400MF classifier (stage widths and depths as torchvision's); output ``logits``."""
    return _export("regnet_y_400mf", seed, image_size=image_size, widths=tuple(widths),
                   depths=tuple(depths), group_width=group_width, num_classes=num_classes)


def conv1d_bilstm(steps: int = 200, features: int = 80, channels: int = 256, hidden: int = 128,
                  num_tags: int = 40, seed: int = 0) -> onnx.ModelProto:
    """Conv1d + BiLSTM tagger on ``features`` x ``steps``; output ``tags`` 1 x steps x num_tags."""
    return _export("conv1d_bilstm", seed, features=features, steps=steps, channels=channels,
                   hidden=hidden, num_tags=num_tags)


def tiny_gru_stream(features: int = 64, hidden: int = 128, cell: str = "gru",
                    seed: int = 0) -> onnx.ModelProto:
    """One frame of a streaming GRU (or LSTM) model: inputs ``x``, ``h`` (and ``c``); outputs
    ``prob``, ``h_out`` (and ``c_out``)."""
    return _export("tiny_gru_stream", seed, features=features, hidden=hidden, cell=cell)
