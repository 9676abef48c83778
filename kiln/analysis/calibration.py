"""Calibration data of partitioned modules (TVM's ``relay.analysis.get_calibration_data``).

External compilers that quantize need the values flowing into and out of each region they were
given. :func:`get_calibration_data` collects them in **one execution** of the network:

1. :func:`get_calibrate_module` copies the module and makes ``main`` return, for every call of a
   ``Compiler`` function (in execution order), the call's arguments then its outputs, as one flat
   tuple; those functions get ``Compiler=None, Inline=1`` so the build inlines them and Kiln
   compiles the whole network itself;
2. :func:`get_calibrate_output_map` says where each function's values lie in that tuple:
   ``{GlobalVar: [offset, n_inputs, n_outputs]}``;
3. the calibrate module is inlined, built once and run once with the graph executor, and the flat
   outputs are split with the map.

Limits (as TVM's, each violation is a :class:`CalibrationError` naming the limit and where):

1. no control flow: ``main`` and the functions it calls contain no ``If`` (nor ``Let``);
2. the inputs of a ``Compiler`` function are tensors, not tuples (its outputs may be a tuple);
3. top-level functions only: ``Compiler`` functions are global functions called from ``main``,
   not function literals and not calls from other functions;
4. each ``Compiler`` function is called once.

Only functions with a ``Compiler`` attribute are collected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.expr import Call, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.printer import format_type
from kiln.ir.types import TupleType
from kiln.ir.visitor import post_order
from kiln.runtime.ndarray import NDArray
from kiln.transform.infer_type import infer_type
from kiln.transform.inline import inline

__all__ = [
    "CalibrationError",
    "check_calibration_limits",
    "get_calibrate_module",
    "get_calibrate_output_map",
    "get_calibration_data",
]


class CalibrationError(KilnError):
    """The module breaks one of the documented limits of calibration-data collection."""


def _compiler(fn: Function) -> str | None:
    value = fn.attrs.get("Compiler")
    return value if isinstance(value, str) and value else None


def _main(mod: IRModule) -> tuple[GlobalVar, Function]:
    if "main" not in mod:
        raise CalibrationError("get_calibration_data: the module has no @main function")
    gv = mod.get_global_var("main")
    return gv, mod[gv]


def _callee_name(call: Call) -> str:
    assert isinstance(call.op, GlobalVar)
    return call.op.name_hint


def _calls_in_order(fn: Function) -> list[Call]:
    """Calls of global functions in ``fn``'s body, children first (execution order)."""
    return [n for n in post_order(fn.body, into_functions=False)
            if isinstance(n, Call) and isinstance(n.op, GlobalVar)]


def _external_calls(mod: IRModule) -> list[tuple[Call, Function]]:
    """``(call, callee)`` for every call of a ``Compiler`` function in ``main``, in order."""
    _, main = _main(mod)
    out = []
    for call in _calls_in_order(main):
        assert isinstance(call.op, GlobalVar)
        if call.op.name_hint not in mod:
            raise CalibrationError(f"get_calibration_data: @main calls @{call.op.name_hint}, "
                                   "which the module does not define")
        callee = mod[call.op.name_hint]
        if _compiler(callee) is not None:
            out.append((call, callee))
    return out


def check_calibration_limits(mod: IRModule) -> None:
    """Raise :class:`CalibrationError` if ``mod`` breaks a limit of calibration collection.

    Parameters
    ----------
    mod : IRModule
        A typed module whose ``main`` calls ``Compiler`` functions.

    Raises
    ------
    CalibrationError
        Naming the limit (1 control flow, 2 tuple inputs, 3 top-level functions only, 4 one call
        per function) and the function and node involved.
    """
    _, main = _main(mod)
    called = [_callee_name(c) for c in _calls_in_order(main)]
    for name in dict.fromkeys(["main", *(n for n in called if n in mod)]):
        for node in post_order(mod[name]):
            if isinstance(node, (If, Let)):
                kind = "an If expression" if isinstance(node, If) else "a Let binding"
                raise CalibrationError(
                    f"get_calibration_data: limit 1 (no control flow) is violated: @{name} "
                    f"contains {kind}; the graph executor that collects calibration data runs "
                    "dataflow graphs only")
    for node in post_order(main.body):
        if isinstance(node, Function) and _compiler(node) is not None:
            raise CalibrationError(
                f"get_calibration_data: limit 3 (top-level functions only) is violated: @main "
                f"holds a function literal with Compiler={_compiler(node)!r}; only global "
                "functions called from @main are collected (PartitionGraph lifts regions into "
                "global functions)")
    for gv, fn in mod.items():
        if gv.name_hint == "main":
            continue
        for call in _calls_in_order(fn):
            name = _callee_name(call)
            if name in mod and _compiler(mod[name]) is not None:
                raise CalibrationError(
                    f"get_calibration_data: limit 3 (top-level functions only) is violated: "
                    f"@{name} (Compiler={_compiler(mod[name])!r}) is called from @{gv.name_hint}, "
                    "not from @main; nested calls are not collected")
    seen: dict[str, int] = {}
    for call, callee in _external_calls(mod):
        name = _callee_name(call)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            raise CalibrationError(
                f"get_calibration_data: limit 4 (each function is called once) is violated: "
                f"@main calls @{name} more than once; its calibration data would be ambiguous")
        for p in callee.params:
            ty = p.type_annotation if p.type_annotation is not None else p.checked_type
            if isinstance(ty, TupleType):
                raise CalibrationError(
                    f"get_calibration_data: limit 2 (function inputs cannot be tuples) is "
                    f"violated: parameter %{p.name_hint} of @{name} has type {format_type(ty)}")


def _num_outputs(call: Call) -> int:
    ty = call.checked_type
    return len(ty.fields) if isinstance(ty, TupleType) else 1


def get_calibrate_output_map(mod: IRModule) -> dict[GlobalVar, list[int]]:
    """Where each ``Compiler`` function's values lie in the calibrate module's output tuple.

    Parameters
    ----------
    mod : IRModule
        The partitioned module (not modified).

    Returns
    -------
    dict of GlobalVar to [offset, n_inputs, n_outputs]
        In the order ``main`` calls them: the offset of the function's first argument in the
        flat output, the number of arguments, and the number of outputs (fields of a tuple
        result). TVM counts the outputs of a function whose body is a ``Tuple`` node only, which
        disagrees with the calibrate module when a function returns a tuple-typed call (such as
        ``nn.batch_norm``); Kiln counts the fields of the result type, so the two always agree.

    Examples
    --------
    >>> get_calibrate_output_map(mod)  # doctest: +SKIP
    {I.GlobalVar("g0"): [0, 2, 2], I.GlobalVar("g1"): [4, 2, 1]}
    """
    mod = infer_type(mod)
    check_calibration_limits(mod)
    out: dict[GlobalVar, list[int]] = {}
    offset = 0
    for call, _ in _external_calls(mod):
        assert isinstance(call.op, GlobalVar)
        n_in, n_out = len(call.args), _num_outputs(call)
        out[call.op] = [offset, n_in, n_out]
        offset += n_in + n_out
    return out


def _flatten_outputs(values: list[Expr]) -> Tuple:
    """One flat tuple: tuple-typed calls are replaced by projections of each field."""
    fields: list[Expr] = []
    for value in values:
        ty = value.checked_type
        if isinstance(ty, TupleType):
            fields.extend(TupleGetItem(value, i) for i in range(len(ty.fields)))
        else:
            fields.append(value)
    return Tuple(fields)


def get_calibrate_module(mod: IRModule) -> IRModule:
    """The module whose ``main`` returns every ``Compiler`` call's inputs and outputs.

    Parameters
    ----------
    mod : IRModule
        The partitioned module (not modified; it is type-checked if needed).

    Returns
    -------
    IRModule
        A copy in which ``main`` returns the flat tuple ``(inputs of the first call, its
        outputs, inputs of the second call, ...)`` and every ``Compiler`` function carries
        ``Compiler=None, Inline=1``. Like TVM's, the new ``main`` and the new projections are
        left untyped.

    Examples
    --------
    >>> get_calibrate_module(mod).show()  # doctest: +SKIP
    """
    typed = infer_type(mod)
    check_calibration_limits(typed)
    main_gv, main = _main(mod)
    # the input's own nodes: InferType above only filled in their (cached) types
    collected: list[Expr] = []
    for call in _calls_in_order(main):
        assert isinstance(call.op, GlobalVar)
        if _compiler(mod[call.op.name_hint]) is not None:
            collected.extend(call.args)
            collected.append(call)
    out = mod.copy()
    out[main_gv] = Function(main.params, _flatten_outputs(collected), None, attrs=main.attrs)
    for gv, fn in mod.items():
        if _compiler(fn) is not None:
            out[gv] = fn.with_attr("Inline", 1).with_attr("Compiler", None)
    return out


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, NDArray):
        return value.numpy()
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _run_once(mod: IRModule, data: Mapping[str, Any], target: Any) -> list[np.ndarray]:
    """Build ``mod`` and run its ``main`` once on ``data``; the flat outputs."""
    from kiln.build_module import build
    from kiln.runtime.graph_executor import GraphModule
    from kiln.runtime.ndarray import cpu
    from kiln.target import Target

    names = [p.name_hint for p in mod["main"].params]
    missing = [n for n in names if n not in data]
    unknown = sorted(set(data) - set(names))
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown input(s) {', '.join(unknown)}")
        raise CalibrationError(f"get_calibration_data: {'; '.join(parts)}; @main takes "
                               f"{', '.join(names) or 'no inputs'}")
    if target is None:
        target = Target.current() or "numpy"
    factory = build(mod, target=target)
    module = GraphModule(factory["default"](cpu()))
    for name in names:
        module.set_input(name, _as_array(data[name]))
    module.run()
    return [np.array(module.get_output(i).numpy()) for i in range(module.get_num_outputs())]


def get_calibration_data(mod: IRModule, data: Mapping[str, Any],
                         target: Any = None) -> dict[GlobalVar, dict[str, list[NDArray]]]:
    """The inputs and outputs of every ``Compiler`` function ``main`` calls, for ``data``.

    The network runs exactly once: the calibrate module (see :func:`get_calibrate_module`) is
    inlined, built and executed a single time, and its outputs are split per function.

    Parameters
    ----------
    mod : IRModule
        The partitioned module (not modified). See the module docstring for its limits.
    data : dict of str to array
        A value for every parameter of ``main`` (inputs and weights), by name.
    target : str or Target, optional
        Build target of that run (default: the current target, else ``"numpy"``).

    Returns
    -------
    dict of GlobalVar to dict
        ``{gv: {"inputs": [NDArray, ...], "outputs": [NDArray, ...]}}`` in call order.

    Raises
    ------
    CalibrationError
        A limit is violated, or inputs are missing or unknown.

    Examples
    --------
    >>> data = get_calibration_data(mod, {"x": x, "y": y, "z": z})  # doctest: +SKIP
    >>> data[g0]["outputs"][0].numpy()  # doctest: +SKIP
    """
    output_map = get_calibrate_output_map(mod)
    if not output_map:
        return {}
    values = _run_once(inline(get_calibrate_module(mod)), data, target)
    result: dict[GlobalVar, dict[str, list[NDArray]]] = {}
    for gv, (offset, n_in, n_out) in output_map.items():
        result[gv] = {
            "inputs": [NDArray(v) for v in values[offset:offset + n_in]],
            "outputs": [NDArray(v) for v in values[offset + n_in:offset + n_in + n_out]],
        }
    return result
