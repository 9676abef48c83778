"""Whole PyTorch models, written here with random weights (no downloads), imported by Kiln,
compiled and compared with PyTorch eager (rtol 1e-4, atol 1e-5 times the output's magnitude).

A ResNet-18-style CNN (basic blocks, in-place ReLU and residual ``+=``), a MobileNetV2-style net
(inverted residuals, ReLU6, depthwise convolutions), a transformer encoder
(``nn.TransformerEncoderLayer``, batch_first), LSTM and GRU taggers and a YOLO-style detection
head (lateral convs, nearest upsampling, concat, strided slicing, sigmoid/exp decoding). The
default run imports each through ``torch.export`` (the GRU tagger through ``torch.jit.trace``);
``--runslow`` adds the TorchScript imports of the rest and a full-width ResNet at 224x224.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tests.frontend.test_pytorch import check, r, ri  # noqa: E402


def _randomize_bn(model: nn.Module) -> nn.Module:
    """Non-trivial batch-norm statistics, so inference batch norm is really tested."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return model.eval()


# --- ResNet-18 style -------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        chans = [width, width * 2, width * 4, width * 8]
        layers = []
        cin = width
        for i, c in enumerate(chans):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, c, stride), BasicBlock(c, c, 1)))
            cin = c
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.mark.parametrize("entry", ["export", pytest.param("script", marks=pytest.mark.slow)])
def test_resnet18_style(entry: str) -> None:
    torch.manual_seed(0)
    check(_randomize_bn(ResNet18()), [r(1, 3, 32, 32)], entry)


@pytest.mark.slow
def test_resnet18_full_width_224() -> None:
    torch.manual_seed(0)
    check(_randomize_bn(ResNet18(width=64, classes=1000)), [r(1, 3, 224, 224)], "export")


# --- MobileNetV2 style -----------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        cfg = [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 24, 1, 2)]
        layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                   nn.ReLU6(inplace=True)]
        cin = 8
        for t, c, n, s in cfg:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


@pytest.mark.parametrize("entry", ["export", pytest.param("script", marks=pytest.mark.slow)])
def test_mobilenet_v2_style(entry: str) -> None:
    torch.manual_seed(0)
    check(_randomize_bn(MobileNetV2()), [r(1, 3, 32, 32)], entry)


# --- transformer encoder ---------------------------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self, vocab: int = 20, d: int = 16, classes: int = 3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 6, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.1, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.emb(tokens) + self.pos)
        return self.head(h.mean(1))


@pytest.mark.parametrize("entry", ["export", pytest.param("script", marks=pytest.mark.slow)])
def test_transformer_encoder(entry: str) -> None:
    torch.manual_seed(0)
    check(Encoder().eval(), [ri(20, 2, 6)], entry)


def test_transformer_encoder_layer_fast_path_module() -> None:
    """A bare TransformerEncoderLayer in eval mode (the module eager runs on its fast path)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=True).eval()
    check(layer, [r(2, 5, 16)], "export")


# --- recurrent taggers -----------------------------------------------------------------------------
class LSTMTagger(nn.Module):
    def __init__(self, vocab: int = 30, emb: int = 8, hidden: int = 8, tags: int = 5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.emb(tokens))
        return F.log_softmax(self.out(h), dim=-1)


class GRUTagger(nn.Module):
    def __init__(self, vocab: int = 30, emb: int = 8, hidden: int = 8, tags: int = 5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, tags)

    def forward(self, tokens: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, hn = self.gru(self.emb(tokens), h0)
        return self.out(h), hn


@pytest.mark.parametrize("entry", ["export", pytest.param("script", marks=pytest.mark.slow)])
def test_lstm_tagger(entry: str) -> None:
    torch.manual_seed(0)
    check(LSTMTagger().eval(), [ri(30, 2, 6)], entry)


@pytest.mark.parametrize("entry", ["script", pytest.param("export", marks=pytest.mark.slow)])
def test_gru_tagger(entry: str) -> None:
    torch.manual_seed(0)
    check(GRUTagger().eval(), [ri(30, 2, 6), r(1, 2, 8)], entry)


# --- detection head --------------------------------------------------------------------------------
class DetectionHead(nn.Module):
    """A two-level FPN with a YOLO-style decoder: (N, boxes, 5 + classes)."""

    def __init__(self, classes: int = 3, anchors: int = 2):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.c2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU())
        self.lat1, self.lat2 = nn.Conv2d(8, 8, 1), nn.Conv2d(16, 8, 1)
        self.pred = nn.Conv2d(16, anchors * (5 + classes), 1)
        self.na, self.no = anchors, 5 + classes
        self.register_buffer("anchor_wh", torch.tensor([[1.0, 2.0], [2.5, 1.5]]).view(1, anchors, 1, 1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f1 = self.c1(x)
        f2 = self.c2(f1)
        up = F.interpolate(self.lat2(f2), scale_factor=2, mode="nearest")
        p = self.pred(torch.cat([self.lat1(f1), up], 1))
        n, _, h, w = p.shape
        p = p.view(n, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).contiguous()
        gy = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1, 1).expand(1, 1, h, w, 1)
        gx = torch.arange(w, dtype=torch.float32).view(1, 1, 1, w, 1).expand(1, 1, h, w, 1)
        grid = torch.cat([gx, gy], -1)
        xy = (torch.sigmoid(p[..., 0:2]) * 2 - 0.5 + grid) * 4.0
        wh = torch.exp(p[..., 2:4].clamp(max=4.0)) * self.anchor_wh
        conf = torch.sigmoid(p[..., 4:])
        boxes = torch.cat([xy, wh, conf], -1).view(n, -1, self.no)
        return boxes[:, ::2]


@pytest.mark.parametrize("entry", ["export", pytest.param("script", marks=pytest.mark.slow)])
def test_detection_head(entry: str) -> None:
    torch.manual_seed(0)
    check(_randomize_bn(DetectionHead()), [r(1, 3, 32, 32)], entry)


