"""kiln.testing.tutorial_data: the tutorials' downloads, built locally."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from kiln.testing.tutorial_data import download_testdata


def test_super_resolution_model_runs_in_onnxruntime(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.chdir(tmp_path)
    path = download_testdata("https://example.invalid/sr.onnx", "super_resolution.onnx", module="onnx")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 1, 224, 224), dtype=np.float32)
    (out,) = sess.run(None, {"1": x})
    assert out.shape == (1, 1, 672, 672)


def test_image_and_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    img = Image.open(download_testdata("u", "cat.png", module="data"))
    assert img.size == (256, 256) and img.mode == "RGB"
    keys = Path(download_testdata("u", "imagenet_classes.txt")).read_text().split()
    synsets = Path(download_testdata("u", "imagenet_synsets.txt")).read_text().splitlines()
    assert len(keys) == 1000 and all(line.split(" ")[0] in keys for line in synsets)
    with pytest.raises(FileNotFoundError, match="no local stand-in"):
        download_testdata("u", "resnet.pth")
