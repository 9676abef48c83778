"""Parameter initialisation of the test networks (``tvm.relay.testing.init``).

The rules are TVM's, chosen by the parameter's name suffix: ``*weight`` is drawn by the
initializer (Xavier: uniform in ``[-s, s]`` with ``s = sqrt(magnitude / fan)``), ``*bias``,
``*beta`` and ``*mean`` are 0, ``*gamma`` and ``*var`` are 1 (so batch-norm variances are
positive). Draws come from ``numpy.random.RandomState(seed)`` in parameter order, which is the
stream TVM draws from after ``np.random.seed(seed)``: the same network gets the same weights.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from kiln.errors import KilnError, KilnTypeError
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, np_dtype
from kiln.runtime.ndarray import NDArray, array
from kiln.transform.infer_type import infer_type

__all__ = ["Constant", "Initializer", "Xavier", "create_workload"]


class Initializer(ABC):
    """Base class of initializers: fills an array according to its parameter name.

    Parameters
    ----------
    seed : int
        Seed of the random stream used by :meth:`_init_weight`.
    """

    def __init__(self, seed: int = 0):
        self.rng = np.random.RandomState(seed)

    def reseed(self, seed: int) -> None:
        """Restart the random stream.

        Parameters
        ----------
        seed : int
            The new seed.
        """
        self.rng = np.random.RandomState(seed)

    def __call__(self, desc: str, arr: np.ndarray) -> None:
        """Fill ``arr`` in place for the parameter named ``desc``.

        Parameters
        ----------
        desc : str
            Parameter name; its suffix selects the rule.
        arr : numpy.ndarray
            The array to fill.
        """
        if desc.endswith("weight"):
            self._init_weight(desc, arr)
        elif desc.endswith(("bias", "beta", "mean")):
            arr[...] = 0.0
        elif desc.endswith(("gamma", "var")):
            arr[...] = 1.0
        else:
            raise KilnError(f"no initialization rule for parameter {desc!r}: names must end in "
                            "weight, bias, gamma, beta, mean or var")

    @abstractmethod
    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        """Fill the weight ``name`` in place (each initializer's own rule)."""


class Xavier(Initializer):
    """Xavier/Glorot uniform initialization of weights, as TVM's (and MXNet's) ``Xavier``.

    Parameters
    ----------
    rnd_type : str
        Only ``"uniform"``.
    factor_type : str
        ``"avg"`` (mean of fan-in and fan-out), ``"in"`` or ``"out"``.
    magnitude : float
        Scale: values lie in ``[-sqrt(magnitude / factor), sqrt(magnitude / factor)]``.
    seed : int
        Seed of the random stream.
    """

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg", magnitude: float = 3,
                 seed: int = 0):
        super().__init__(seed)
        if rnd_type != "uniform":
            raise KilnError(f"unknown random type {rnd_type!r}; only 'uniform' is supported")
        if factor_type not in ("avg", "in", "out"):
            raise KilnError(f"incorrect factor type {factor_type!r}; expected avg, in or out")
        self.rnd_type = rnd_type
        self.factor_type = factor_type
        self.magnitude = float(magnitude)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        shape = arr.shape
        if len(shape) < 2:
            raise KilnError(f"Xavier initializer needs a weight of rank >= 2; {name} has shape "
                            f"{shape}")
        hw_scale = float(np.prod(shape[2:])) if len(shape) > 2 else 1.0
        fan_in, fan_out = shape[1] * hw_scale, shape[0] * hw_scale
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        if "depthwise" in name:  # TVM's special case: depthwise kernels have little connectivity
            factor = hw_scale
        scale = np.sqrt(self.magnitude / factor)
        arr[...] = self.rng.uniform(-scale, scale, size=shape)


class Constant(Initializer):
    """Weights set to ``1 / size`` (each weight tensor sums to 1)."""

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 1.0 / arr.size


def create_workload(net: Expr,
                    initializer: Initializer | Callable[[str, np.ndarray], None] | None = None,
                    seed: int = 0) -> tuple[IRModule, dict[str, NDArray]]:
    """Wrap a network in a module and initialize every parameter except ``data``.

    Parameters
    ----------
    net : Expr
        The network: a function, or an expression (a function of its free variables).
    initializer : Initializer or callable, optional
        Default: :class:`Xavier`; a plain ``f(name, array)`` fills ``array`` in place.
    seed : int
        Seed of the random stream.

    Returns
    -------
    mod : IRModule
        The type-checked module.
    params : dict of str to NDArray
        Initial values, by parameter name.

    Examples
    --------
    >>> mod, params = create_workload(net)
    """
    if not isinstance(net, Expr):
        raise KilnTypeError(f"create_workload takes a relay expression, got {type(net).__name__}")
    mod = infer_type(IRModule.from_expr(net))  # an expression: a function of its free variables
    initializer = initializer if initializer is not None else Xavier()
    if isinstance(initializer, Initializer):  # a plain callable(name, array) works too (TVM)
        initializer.reseed(seed)
    params: dict[str, NDArray] = {}
    for p in mod["main"].params:
        if p.name_hint == "data":
            continue
        ty = p.checked_type
        assert isinstance(ty, TensorType)
        value = np.zeros(ty.shape, dtype=np_dtype(ty.dtype))
        initializer(p.name_hint, value)
        params[p.name_hint] = array(value)
    return mod, params
