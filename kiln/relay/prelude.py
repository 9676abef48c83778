"""``relay.prelude``: relay's standard library of algebraic data types (List, Option, Tree,
tensor arrays).

Kiln's IR has no algebraic data types, so the prelude cannot be loaded: constructing
:class:`Prelude` (or the tensor-array helpers built on it) raises ``NotImplementedError`` naming
the reason, instead of failing later on a missing constructor.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Prelude", "StaticTensorArrayOps", "TensorArrayOps"]

_WHY = ("relay's prelude defines algebraic data types (List, Option, Tree, tensor arrays), which "
        "Kiln's IR does not have")


class Prelude:
    """TVM's ``Prelude(mod)``: not available in Kiln (no algebraic data types)."""

    def __init__(self, mod: Any = None) -> None:
        raise NotImplementedError(f"relay.prelude.Prelude: {_WHY}")


class TensorArrayOps:
    """TVM's dynamic tensor-array operations: not available in Kiln."""

    def __init__(self, prelude: Any = None, dtype: str = "float32") -> None:
        raise NotImplementedError(f"relay.prelude.TensorArrayOps: {_WHY}")


class StaticTensorArrayOps:
    """TVM's static tensor-array operations: not available in Kiln."""

    def __init__(self, prelude: Any = None, dtype: str = "float32", shape: Any = None,
                 batch_dim: Any = None) -> None:
        raise NotImplementedError(f"relay.prelude.StaticTensorArrayOps: {_WHY}")
