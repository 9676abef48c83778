"""The IR verifier run after every pass in tests (``settings.verify_passes``).

Checks that a module is well formed (every variable bound exactly once and used only in its
scope, every call of a registered op or an existing global function) and that it type-checks.
"""

from __future__ import annotations

from kiln.errors import KilnError, PassError
from kiln.ir.expr import Call, Function, GlobalVar, Let, Op, Var
from kiln.ir.module import IRModule
from kiln.ir.visitor import children, post_order
from kiln.op.registry import get_op_def

__all__ = ["verify_module", "well_formed_errors"]


def well_formed_errors(mod: IRModule) -> list[str]:
    """Problems that make ``mod`` ill-formed (empty when it is fine)."""
    problems: list[str] = []
    binder: dict[int, str] = {}
    for gv, fn in mod.items():
        where = f"@{gv.name_hint}"
        scopes: dict[int, set[int]] = {}  # id(function) -> ids of the vars it may use
        for node in post_order(fn):
            if isinstance(node, Function):
                for p in node.params:
                    if id(p) in binder:
                        problems.append(f"{where}: %{p.name_hint} is bound twice "
                                        f"({binder[id(p)]} and a function here)")
                    binder[id(p)] = where
            elif isinstance(node, Let):
                binder[id(node.var)] = where
            elif isinstance(node, Call):
                if isinstance(node.op, Op):
                    try:
                        get_op_def(node.op.name)
                    except KeyError:
                        problems.append(f"{where}: call of unregistered op {node.op.name}")
                elif isinstance(node.op, GlobalVar) and node.op.name_hint not in mod:
                    problems.append(f"{where}: call of undefined function @{node.op.name_hint}")
        # variables used inside a function must be its params, lets, or (nested) outer params
        _check_scopes(fn, where, problems, scopes)
    return problems


def _check_scopes(fn: Function, where: str, problems: list[str], scopes: dict[int, set[int]]) -> None:
    stack: list[tuple[object, frozenset[int]]] = [(fn, frozenset())]
    seen: set[tuple[int, frozenset[int]]] = set()
    lets = {id(n.var) for n in post_order(fn) if isinstance(n, Let)}
    while stack:
        node, visible = stack.pop()
        key = (id(node), visible)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(node, Function):
            visible = visible | {id(p) for p in node.params}
            stack.append((node.body, visible))
            continue
        if isinstance(node, Var):
            if id(node) not in visible and id(node) not in lets:
                problems.append(f"{where}: %{node.name_hint} is used outside the function "
                                "that binds it (a free variable)")
            continue
        for c in children(node):  # type: ignore[arg-type]
            stack.append((c, visible))


def verify_module(mod: IRModule, after: str = "?") -> None:
    """Raise :class:`~kiln.errors.PassError` if ``mod`` is ill-formed or does not type-check."""
    from kiln.transform.infer_type import check_types

    problems = well_formed_errors(mod)
    if problems:
        raise PassError(f"IR verification failed after pass {after}:\n  " + "\n  ".join(problems))
    try:
        check_types(mod)
    except KilnError as e:
        raise PassError(f"IR verification failed after pass {after}: it does not type-check: "
                        f"{e}") from e
