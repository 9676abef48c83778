"""``relay.testing``: ready-made networks and helpers for tests and benchmarks.

``relay.testing.resnet.get_workload(...)`` and ``relay.testing.mobilenet.get_workload(...)`` return
``(mod, params)`` built and named as TVM's test networks, with Xavier-initialised parameters;
``create_workload(net)`` does the same for any network function.
"""

from __future__ import annotations

from kiln.errors import KilnError
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.relay.testing import (
    byoc,
    dcgan,
    densenet,
    dqn,
    inception_v3,
    init,
    layers,
    lstm,
    mlp,
    mobilenet,
    resnet,
    squeezenet,
    temp_op_attr,
)
from kiln.relay.testing.init import create_workload
from kiln.transform.infer_type import infer_type
from kiln.transform.pass_infra import Pass

__all__ = ["byoc", "create_workload", "dcgan", "densenet", "dqn", "inception_v3", "init", "layers",
           "lstm", "mlp", "mobilenet", "resnet", "squeezenet",
           "run_infer_type", "run_opt_pass", "temp_op_attr"]


def run_opt_pass(expr: Expr, opt_pass: Pass, import_prelude: bool = False) -> Expr:
    """Run ``opt_pass`` on ``expr`` (wrapped in a type-checked module) as TVM's test helper does.

    Parameters
    ----------
    expr : Expr
        A function, or an expression of typed free variables.
    opt_pass : Pass
        The pass (or ``Sequential``) to run under the current ``PassContext``.
    import_prelude : bool
        Accepted for TVM compatibility; Kiln has no prelude, so it must be False.

    Returns
    -------
    Expr
        The transformed ``main`` function when ``expr`` was a function, else its body.
    """
    if not isinstance(opt_pass, Pass):
        raise KilnError(f"run_opt_pass: {opt_pass!r} is not a pass")
    if import_prelude:
        raise KilnError("run_opt_pass(import_prelude=True): Kiln has no relay prelude (ADTs)")
    mod = opt_pass(infer_type(IRModule.from_expr(expr)))
    main = mod["main"]
    return main if isinstance(expr, Function) else main.body


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
