"""``relay.analysis``: graph analyses (free variables, calibration data, ...)."""

from __future__ import annotations

from typing import Any

from kiln.ir.analysis import all_vars, bound_vars, free_vars
from kiln.ir.visitor import post_order_visit

__all__ = ["all_vars", "bound_vars", "free_vars", "get_calibration_data", "post_order_visit"]


def __getattr__(name: str) -> Any:
    if name in ("get_calibration_data", "_ffi_api"):
        from kiln.analysis import calibration

        return calibration.get_calibration_data if name == "get_calibration_data" else calibration
    raise AttributeError(f"module 'kiln.relay.analysis' has no attribute {name!r}")
