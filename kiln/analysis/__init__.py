"""Analyses of whole modules: calibration data of partitioned modules (``get_calibration_data``)."""

from kiln.analysis.calibration import (
    CalibrationError,
    check_calibration_limits,
    get_calibrate_module,
    get_calibrate_output_map,
    get_calibration_data,
)

__all__ = [
    "CalibrationError",
    "check_calibration_limits",
    "get_calibrate_module",
    "get_calibrate_output_map",
    "get_calibration_data",
]
