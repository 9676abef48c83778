"""kiln.contrib.download: cached test data is returned without fetching."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.config import settings
from kiln.contrib import download
from kiln.errors import KilnError


def test_download_testdata_returns_the_cached_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    cached = tmp_path / "testdata" / "onnx" / "model.onnx"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"model")
    path = download.download_testdata("http://127.0.0.1:9/never-fetched", "model.onnx", module="onnx")
    assert Path(path) == cached and Path(path).read_bytes() == b"model"


def test_download_failure_names_the_url(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="127.0.0.1:9/x"):
        download.download("http://127.0.0.1:9/x", tmp_path / "x", retries=1)
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.part").exists()
