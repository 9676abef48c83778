"""``relay.quantize.quantize``: ``qconfig`` (a configuration context) and ``quantize``.

:class:`QConfig` holds TVM's fields with TVM's defaults and is entered with ``with``;
:func:`quantize` (and the pass builders ``partition``/``annotate``/``realize``) raise
:class:`~kiln.relay.quantize._annotate.QuantizeUnsupportedError`.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar

from kiln.relay.quantize._annotate import QuantizeUnsupportedError

__all__ = ["QConfig", "annotate", "calibrate", "current_qconfig", "partition",
           "prerequisite_optimize", "qconfig", "quantize", "realize"]


class QConfig:
    """TVM's quantization configuration; unknown fields are refused.

    Parameters
    ----------
    **fields
        Overrides of :attr:`DEFAULTS` (``nbit_input``, ``global_scale``, ``skip_conv_layers``, ...).
    """

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "nbit_input": 8, "nbit_weight": 8, "nbit_activation": 32, "dtype_input": "int8",
        "dtype_weight": "int8", "dtype_activation": "int32", "calibrate_mode": "global_scale",
        "global_scale": 8.0, "weight_scale": "power2", "skip_dense_layer": True,
        "skip_conv_layers": [0], "do_simulation": False, "round_for_shift": True,
        "debug_enabled_ops": None, "rounding": "UPWARD", "calibrate_chunk_by": -1,
        "partition_conversions": "disabled",
    }
    _stack: ClassVar[list[QConfig]] = []

    def __init__(self, **fields: Any):
        unknown = sorted(set(fields) - set(self.DEFAULTS))
        if unknown:
            raise QuantizeUnsupportedError(f"qconfig: unknown field(s) {unknown}")
        self._fields = {**self.DEFAULTS, **fields}

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("_fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(f"QConfig has no field {name!r}")

    def __enter__(self) -> QConfig:
        QConfig._stack.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        QConfig._stack.pop()

    def __repr__(self) -> str:
        return "qconfig(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"


def qconfig(**fields: Any) -> QConfig:
    """A :class:`QConfig` with ``fields`` overriding TVM's defaults (enter it with ``with``)."""
    return QConfig(**fields)


def current_qconfig() -> QConfig:
    """The innermost entered :class:`QConfig`, else the defaults."""
    return QConfig._stack[-1] if QConfig._stack else QConfig()


def _unsupported(what: str) -> QuantizeUnsupportedError:
    return QuantizeUnsupportedError(
        f"relay.quantize.{what}: Kiln does not calibrate and quantize float models; import a "
        "quantized model (TFLite int8, ONNX QLinear/QDQ) or build relay.qnn ops instead")


def quantize(mod: Any, params: Any = None, dataset: Any = None) -> Any:
    """TVM's automatic quantization: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("quantize")


def partition() -> Any:
    """TVM's quantization partition pass: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("partition")


def annotate() -> Any:
    """TVM's quantization annotate pass: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("annotate")


def realize() -> Any:
    """TVM's quantization realize pass: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("realize")


def calibrate(dataset: Any = None) -> Any:
    """TVM's calibration pass: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("calibrate")


def prerequisite_optimize(mod: Any, params: Any = None) -> Any:
    """TVM's pre-quantization optimization: raises :class:`QuantizeUnsupportedError`."""
    raise _unsupported("prerequisite_optimize")
