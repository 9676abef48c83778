"""save_param_dict returns a bytearray (as TVM's); the *_to_file / *_from_file pair round-trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import kiln


def test_save_param_dict_is_a_bytearray() -> None:
    blob = kiln.runtime.save_param_dict({"x": np.arange(3, dtype="float32")})
    assert type(blob) is bytearray
    assert kiln.relay.load_param_dict(blob)["x"].numpy().tolist() == [0, 1, 2]


def test_param_dict_file_round_trip(tmp_path: Path) -> None:
    p = np.random.default_rng(0).standard_normal(10)
    kiln.runtime.save_param_dict_to_file({"x": p}, str(tmp_path / "p.params"))
    loaded = kiln.runtime.load_param_dict_from_file(str(tmp_path / "p.params"))
    np.testing.assert_equal(loaded["x"].numpy(), p)
