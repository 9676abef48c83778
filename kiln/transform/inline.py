"""Module-level passes over global functions: Inline and RemoveUnusedFunctions.

``Inline`` substitutes the body of every global function marked ``Inline=1`` at its call sites
(callees first, so chains of inlinable functions collapse) and drops those functions once nothing
calls them; functions handed to an external compiler (``Compiler`` attribute) are called, never
inlined. ``RemoveUnusedFunctions`` keeps only the functions reachable from the entry functions.
"""

from __future__ import annotations

from collections.abc import Iterable

from kiln.ir.expr import Call, Expr, Function, GlobalVar
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order, rewrite
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo

__all__ = ["Inline", "RemoveUnusedFunctions", "bind_function", "called_globals", "inline",
           "remove_unused_functions"]


def called_globals(fn: Function) -> list[str]:
    """Names of the global functions ``fn`` refers to, in first-use order."""
    seen: dict[str, None] = {}
    for node in post_order(fn):
        callee = node.op if isinstance(node, Call) else node
        if isinstance(callee, GlobalVar):
            seen.setdefault(callee.name_hint, None)
    return list(seen)


def bind_function(fn: Function, args: Iterable[Expr]) -> Expr:
    """The body of ``fn`` with its parameters replaced by ``args`` (a fresh copy of the body).

    Rebuilt nodes keep their types where the arguments have the parameters' types (see
    :func:`kiln.ir.visitor.rebuild`), so an inlined module prints like TVM's.
    """
    memo: dict[int, Expr] = {id(p): a for p, a in zip(fn.params, args)}
    return rewrite(fn.body, lambda new, old: None, memo=memo)


def _can_inline(mod: IRModule, name: str) -> bool:
    fn = mod[name]
    return bool(fn.attrs.get("Inline")) and not fn.attrs.get("Compiler")


def _topological(mod: IRModule) -> list[str]:
    """Global function names, callees before callers (cycles keep their module order)."""
    order: list[str] = []
    state: dict[str, int] = {}
    for root in (gv.name_hint for gv in mod.get_global_vars()):
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            name, done = stack.pop()
            if done:
                state[name] = 2
                order.append(name)
                continue
            if state.get(name):
                continue
            state[name] = 1
            stack.append((name, True))
            stack.extend((c, False) for c in called_globals(mod[name]) if c in mod and not state.get(c))
    return order


def _inline_calls(mod: IRModule, name: str, inlinable: set[str]) -> Function:
    """Function ``name`` of ``mod`` with its calls of ``inlinable`` functions substituted."""

    def substitute(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call) and isinstance(new.op, GlobalVar) and new.op.name_hint in inlinable:
            return bind_function(mod[new.op.name_hint], new.args)
        return None

    out = rewrite(mod[name], substitute, into_functions=False)
    assert isinstance(out, Function)
    return out


def inline(mod: IRModule) -> IRModule:
    """A copy of ``mod`` with the ``Inline=1`` functions substituted at their call sites."""
    out = mod.copy()
    inlinable = {gv.name_hint for gv in mod.get_global_vars() if _can_inline(mod, gv.name_hint)}
    if not inlinable:
        return out
    for name in _topological(mod):
        out[name] = _inline_calls(out, name, inlinable - {name})
    used = {c for gv in out.get_global_vars() for c in called_globals(out[gv])}
    for name in inlinable - used:
        if name != "main":
            out.remove(name)
    return out


def remove_unused_functions(mod: IRModule, entry_functions: Iterable[str] = ("main",)) -> IRModule:
    """A copy of ``mod`` without the functions unreachable from ``entry_functions``."""
    keep: set[str] = set()
    stack = [name for name in entry_functions if name in mod]
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        stack.extend(c for c in called_globals(mod[name]) if c in mod)
    out = mod.copy()
    for gv in mod.get_global_vars():
        if gv.name_hint not in keep:
            out.remove(gv)
    return out


def Inline() -> ModulePass:
    """The pass inlining global functions marked ``Inline=1`` (opt level 1)."""
    return ModulePass(lambda mod, ctx: inline(mod), PassInfo(1, "Inline"))


def RemoveUnusedFunctions(entry_functions: Iterable[str] | None = None) -> ModulePass:
    """The pass removing functions not reachable from ``entry_functions`` (default ``main``).

    Parameters
    ----------
    entry_functions : iterable of str, optional
        Names of the functions to keep with everything they call.
    """
    entries = tuple(entry_functions or ("main",))

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        return remove_unused_functions(mod, entries)

    return ModulePass(run, PassInfo(1, "RemoveUnusedFunctions"))
