"""``relay.testing``: ready-made networks and helpers for tests and benchmarks.

``relay.testing.resnet.get_workload(...)`` and ``relay.testing.mobilenet.get_workload(...)`` return
``(mod, params)`` built and named as TVM's test networks, with Xavier-initialised parameters;
``create_workload(net)`` does the same for any network function.
"""

from __future__ import annotations

from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.relay.testing import init, layers, mobilenet, resnet
from kiln.relay.testing.init import create_workload
from kiln.transform.infer_type import infer_type

__all__ = ["create_workload", "init", "layers", "mobilenet", "resnet", "run_infer_type"]


def run_infer_type(expr: Expr) -> Expr:
    """Type-check ``expr`` (wrapped in a module) and return it with its types filled in.

    Parameters
    ----------
    expr : Expr
        A function or an expression of typed free variables.

    Returns
    -------
    Expr
        The typed expression (``checked_type`` is set).
    """
    mod = infer_type(IRModule.from_expr(expr))
    main = mod["main"]
    return main if isinstance(expr, Function) else main.body
