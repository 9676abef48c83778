"""MergeComposite: wrap the matches of named patterns in composite functions (TVM's pass).

Each ``(name, pattern[, check])`` entry of the table is applied in order with the dataflow
pattern partitioner (:func:`kiln.transform.dataflow_pattern.partition`): every match not rejected
by ``check`` becomes a call of a function with attributes ``PartitionedFromPattern`` (the matched
ops) and ``Composite=name``. A later entry never matches inside an earlier entry's functions.
External codegens (``AnnotateTarget``/``PartitionGraph``) then take composite functions whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.transform.dataflow_pattern import DFPattern, PatternError, _partition
from kiln.transform.infer_type import infer_type
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo

__all__ = ["MergeComposite", "merge_composite"]

PatternEntry = tuple[str, DFPattern, Callable[[Expr], bool]]


def _entries(pattern_table: Sequence[Sequence[Any]]) -> list[PatternEntry]:
    out: list[PatternEntry] = []
    for entry in pattern_table:
        if len(entry) not in (2, 3) or not isinstance(entry[1], DFPattern):
            raise PatternError(f"MergeComposite: a pattern table entry is (name, pattern) or "
                               f"(name, pattern, check), got {entry!r}")
        check = entry[2] if len(entry) == 3 else (lambda expr: True)
        out.append((str(entry[0]), entry[1], check))
    return out


def _typed(fn: Function, mod: IRModule) -> Function:
    tmp = IRModule(dict(mod.functions))
    name = "main" if "main" in tmp else "_merge_composite"
    tmp[name] = fn
    out = infer_type(tmp)[name]
    assert isinstance(out, Function)
    return out


def merge_composite(fn: Function, pattern_table: Sequence[Sequence[Any]],
                    mod: IRModule | None = None) -> Function:
    """Wrap the matches of each table entry in ``fn`` in composite functions.

    Parameters
    ----------
    fn : Function
        A typed function (not modified).
    pattern_table : sequence
        ``(name, pattern)`` or ``(name, pattern, check)`` entries, applied in order.
    mod : IRModule, optional
        The module, to type calls of global functions.

    Returns
    -------
    Function
        The typed function with composite calls. The new functions' parameters carry the types
        of their arguments (what TVM's InferType writes into unannotated parameters).
    """
    mod = mod if mod is not None else IRModule()
    out = fn
    for name, pattern, check in _entries(pattern_table):
        part = _partition(pattern, out, {"Composite": name}, check, typed_params=True)
        assert isinstance(part, Function)
        if part is not out:
            out = _typed(part, mod)
    return out


def MergeComposite(pattern_table: Sequence[Sequence[Any]]) -> FunctionPass:
    """The pass merging pattern matches into composite functions (``relay.transform``).

    Parameters
    ----------
    pattern_table : sequence
        ``(name, pattern)`` or ``(name, pattern, check)``; ``check(matched_root) -> bool``.
    """
    entries = _entries(pattern_table)

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        return merge_composite(fn, entries, mod)

    return FunctionPass(run, PassInfo(0, "MergeComposite"))
