"""Run the ONNX project's node conformance tests through Kiln (or onnxruntime, for a baseline).

The ONNX package ships one small model per operator behaviour (``onnx.backend.test``): a one-node
graph (sometimes its function-expanded form) with inputs and expected outputs computed by ONNX's
reference implementation. This module runs every case through ``from_onnx`` and the reference
interpreter, compares every output with the suite's own tolerances, and classifies each failure:

=================  =============================================================
status             meaning
=================  =============================================================
``pass``           every output matches (shape, dtype and values)
``skipped``        the case uses a type Kiln does not have, or a training op
``unsupported``    import raised :class:`~kiln.errors.UnsupportedOpError`
``import_error``   import raised any other error
``runtime_error``  the imported module failed to run
``wrong_result``   an output differs in shape, dtype or values
``timeout``        the case ran past its time limit
=================  =============================================================

``scripts/onnx_conformance.py`` runs the suite and writes ``docs/onnx_coverage.md``;
``tests/frontend/test_onnx_conformance.py`` keeps the pass count from regressing.
"""

from __future__ import annotations

import contextlib
import signal
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import onnx

from kiln.runtime.dtype import NARROW_FLOATS

__all__ = [
    "STATUSES",
    "CaseResult",
    "case_operator",
    "case_ops",
    "compare_outputs",
    "coverage_markdown",
    "interpret",
    "load_cases",
    "run_case",
    "run_suite",
    "run_suite_compiled",
    "skip_reason",
]

STATUSES = ("pass", "skipped", "unsupported", "import_error", "runtime_error", "wrong_result", "timeout")

# ONNX element types Kiln has no dtype for.
_UNSUPPORTED_TYPES: dict[int, str] = {  # TensorProto.DataType (an int) -> name
    onnx.TensorProto.STRING: "string",
    onnx.TensorProto.COMPLEX64: "complex64",
    onnx.TensorProto.COMPLEX128: "complex128",
}
for _name in ("FLOAT8E8M0",):
    if hasattr(onnx.TensorProto, _name):
        _UNSUPPORTED_TYPES[getattr(onnx.TensorProto, _name)] = _name.lower()

_TRAINING_DOMAINS = ("ai.onnx.preview.training",)


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one conformance case.

    Attributes
    ----------
    name : str
        The case name (``test_conv_with_strides_padding``).
    ops : tuple of str
        The operator types the model uses (domain-qualified outside the default domain).
    status : str
        One of :data:`STATUSES`.
    message : str
        Why it did not pass (first line of the error), empty on success.
    seconds : float
        Wall time of import plus run.
    bound : tuple of str
        Graph inputs the case binds with ``const_inputs=`` because they decide shapes or
        control flow (their values come from the case's data).
    """

    name: str
    ops: tuple[str, ...]
    status: str
    message: str = ""
    seconds: float = 0.0
    bound: tuple[str, ...] = ()


class _CaseTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread only; elsewhere no limit applies)."""
    try:
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _raise_timeout(signum: int, frame: Any) -> None:
    raise _CaseTimeout()


def load_cases(pattern: str | None = None) -> list[Any]:
    """The ONNX node test cases (``onnx.backend.test`` TestCase objects), sorted by name.

    Parameters
    ----------
    pattern : str, optional
        Keep only cases whose name contains this substring.
    """
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    if pattern:
        cases = [c for c in cases if pattern in c.name]
    return sorted(cases, key=lambda c: c.name)


def _walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _walk_graphs(g)


def case_ops(model: onnx.ModelProto) -> tuple[str, ...]:
    """Operator types of ``model``'s main graph, domain-qualified outside the default domain."""
    ops: list[str] = []
    for node in model.graph.node:
        name = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        if name not in ops:
            ops.append(name)
    return tuple(ops)


def _type_problem(tp: onnx.TypeProto) -> str | None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return _UNSUPPORTED_TYPES.get(tp.tensor_type.elem_type)
    if kind == "sparse_tensor_type":
        return "sparse tensors"
    if kind in ("sequence_type", "optional_type", "map_type"):
        return kind.replace("_type", "")
    return None


def skip_reason(model: onnx.ModelProto) -> str | None:
    """Why Kiln cannot take this case at all (a type it lacks, a training op), or None."""
    for graph in _walk_graphs(model.graph):
        for node in graph.node:
            if node.domain in _TRAINING_DOMAINS:
                return f"training op {node.op_type}"
            for attr in node.attribute:
                is_to = attr.name == "to" and attr.type == onnx.AttributeProto.INT
                if is_to and attr.i in _UNSUPPORTED_TYPES:
                    return f"uses {_UNSUPPORTED_TYPES[attr.i]}"
                if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _UNSUPPORTED_TYPES:
                    return f"uses {_UNSUPPORTED_TYPES[attr.t.data_type]}"
        io = [*graph.input, *graph.output] if graph is model.graph else []
        inner = [*graph.value_info] if graph is model.graph else \
            [*graph.input, *graph.output, *graph.value_info]
        for where, values in (("as a graph input or output", io), ("inside", inner)):
            for vi in values:
                problem = _type_problem(vi.type)
                # a sequence inside the model is a static tuple; only its I/O must be tensors
                if problem and not (where == "inside" and problem in ("sequence", "optional", "map")):
                    return f"uses {problem} {where}"
        for init in graph.initializer:
            if init.data_type in _UNSUPPORTED_TYPES:
                return f"uses {_UNSUPPORTED_TYPES[init.data_type]}"
    return None


def _as_array(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def compare_outputs(expected: Sequence[Any], actual: Sequence[Any], rtol: float, atol: float) -> str | None:
    """Compare outputs as the ONNX backend test runner does; a description of the first mismatch."""
    if len(actual) != len(expected):
        return f"{len(actual)} output(s), expected {len(expected)}"
    for i, (ref, out) in enumerate(zip(expected, actual)):
        problem = _compare_one(_as_array(ref), out, rtol, atol)
        if problem:
            return f"output {i}: {problem}"
    return None


def _compare_one(ref: Any, out: Any, rtol: float, atol: float) -> str | None:
    if isinstance(ref, (list, tuple)) or isinstance(out, (list, tuple)):
        if not isinstance(ref, (list, tuple)) or not isinstance(out, (list, tuple)):
            return f"got {type(out).__name__}, expected {type(ref).__name__}"
        if len(ref) != len(out):
            return f"sequence of {len(out)}, expected {len(ref)}"
        for j, (r, o) in enumerate(zip(ref, out)):
            problem = _compare_one(_as_array(r), o, rtol, atol)
            if problem:
                return f"item {j}: {problem}"
        return None
    if ref is None or out is None:
        return None if ref is None and out is None else f"got {out!r}, expected {ref!r}"
    ref, out = np.asarray(ref), np.asarray(out)
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        return None if np.array_equal(out, ref) else "values differ"
    if out.dtype != ref.dtype:
        return f"dtype {out.dtype}, expected {ref.dtype}"
    if out.dtype.name in NARROW_FLOATS:
        # bfloat16/float8 results may differ by a rounding step of the dtype: the test data
        # rounds after every node, Kiln after every operator (or once per fused kernel)
        eps = float(ml_dtypes.finfo(out.dtype).eps)
        out, ref = out.astype(np.float64), ref.astype(np.float64)
        finite = np.abs(ref[np.isfinite(ref)])
        rtol, atol = max(rtol, eps), max(atol, eps * float(finite.max() if finite.size else 0.0))
    try:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        detail = "; ".join(ln for ln in lines if ln.startswith(("Mismatched", "Max absolute")))
        return f"values differ ({detail or lines[-1]})"
    except TypeError as e:
        return f"values cannot be compared ({e})"
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    lines = text.splitlines()
    head = lines[0]
    if len(lines) > 1 and head.endswith(":"):
        head = head + " " + "; ".join(ln.strip() for ln in lines[1:4])
    return f"{type(e).__name__}: {head}"[:400]


def _graph_input_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


Execute = Callable[[Any, dict[str, Any], dict[str, np.ndarray]], list[Any]]


def interpret(mod: Any, params: dict[str, Any], feeds: dict[str, np.ndarray]) -> list[Any]:
    """Run an imported module with the reference interpreter; its outputs as a list."""
    from kiln.interpreter import evaluate

    result = evaluate(mod, feeds, params=params)
    return list(result) if isinstance(result, tuple) else [result]


def _run_kiln(model: onnx.ModelProto, inputs: list[np.ndarray], bound: list[str],
              execute: Execute) -> tuple[str, list[Any] | str]:
    """Import ``model`` and ``execute`` it; ``(stage, outputs)`` or ``(failing stage, message)``.

    Inputs that decide shapes or an ``If`` are bound as constants (and named in ``bound``), as a
    user passes ``const_inputs=`` for them.
    """
    from kiln.errors import UnsupportedOpError
    from kiln.frontend.onnx import from_onnx
    from kiln.op.dyn import specialized_import_call

    names = _graph_input_names(model)
    values = dict(zip(names, inputs))
    while True:
        shapes = {n: tuple(np.shape(values[n])) for n in names if n not in bound}
        try:
            mod, params = from_onnx(model, shape=shapes, const_inputs={n: values[n] for n in bound})
            deferred = specialized_import_call(mod["main"])
            if deferred is None:
                break
            deciding = deferred[1].value_inputs  # imported per value: bind them instead
            extra = [n for n in deciding if n not in bound and n in values]
            if not extra:
                return "import_error", f"shapes depend on the values of {', '.join(deciding)}"
            bound.extend(extra)
            continue
        except _CaseTimeout:
            raise
        except Exception as e:
            extra = [n for n in getattr(e, "inputs", None) or [] if n not in bound and n in values]
            if extra:
                bound.extend(extra)
                continue
            stage = "unsupported" if isinstance(e, UnsupportedOpError) else "import_error"
            return stage, _first_line(e)
    try:
        main_params = {p.name_hint for p in mod["main"].params}
        outputs = execute(mod, params, {k: v for k, v in values.items() if k in main_params})
    except _CaseTimeout:
        raise
    except Exception as e:
        return "runtime_error", _first_line(e)
    return "ran", outputs


def _run_onnxruntime(model: onnx.ModelProto, inputs: list[np.ndarray],
                     bound: list[str]) -> tuple[str, list[Any] | str]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:
        return "import_error", _first_line(e)
    try:
        feed = dict(zip([i.name for i in sess.get_inputs()], inputs))
        outputs = sess.run(None, feed)
    except Exception as e:
        return "runtime_error", _first_line(e)
    return "ran", list(outputs)


def run_case(case: Any, backend: str = "kiln", timeout: float = 20.0,
             execute: Execute | None = None) -> CaseResult:
    """Run one conformance case.

    Parameters
    ----------
    case : onnx.backend.test TestCase
        The case.
    backend : str
        ``"kiln"`` (import with ``from_onnx``, then ``execute``) or ``"onnxruntime"``.
    timeout : float
        Seconds before the case is stopped and reported as a timeout.
    execute : callable, optional
        ``execute(mod, params, feeds) -> outputs`` for Kiln; the reference interpreter
        (:func:`interpret`) by default. ``scripts/onnx_conformance.py --target`` passes one that
        builds with ``relay.build`` and runs the graph executor.

    Returns
    -------
    CaseResult
        The classified outcome.
    """
    model = case.model
    ops = case_ops(model)
    start = time.perf_counter()
    if backend == "kiln":
        reason = skip_reason(model)
        if reason:
            return CaseResult(case.name, ops, "skipped", reason)
        run_kiln = execute or interpret

        def run_with_kiln(m: onnx.ModelProto, feed: list[np.ndarray], bound: list[str]) -> tuple[str, Any]:
            return _run_kiln(m, feed, bound, run_kiln)

        runner: Callable[[onnx.ModelProto, list[np.ndarray], list[str]], tuple[str, Any]] = run_with_kiln
    else:
        runner = _run_onnxruntime
    status, message = "pass", ""
    bound: list[str] = []
    try:
        with _time_limit(timeout), np.errstate(all="ignore"):
            for inputs, expected in case.data_sets:
                feed = [_as_array(x) for x in inputs]
                stage, outputs = runner(model, feed, bound)
                if stage != "ran":
                    status, message = stage, str(outputs)
                    break
                assert isinstance(outputs, list)
                problem = compare_outputs(expected, outputs, case.rtol, case.atol)
                if problem:
                    status, message = "wrong_result", problem
                    break
    except _CaseTimeout:
        status, message = "timeout", f"ran past {timeout:g} s"
    except Exception as e:  # a harness-level surprise must not stop the suite
        tb = traceback.extract_tb(e.__traceback__)[-1]
        status, message = "runtime_error", f"{_first_line(e)} (at {tb.filename}:{tb.lineno})"
    return CaseResult(case.name, ops, status, message, time.perf_counter() - start, tuple(bound))


def run_suite(cases: Sequence[Any], backend: str = "kiln", timeout: float = 20.0,
              progress: Callable[[CaseResult], None] | None = None,
              execute: Execute | None = None) -> list[CaseResult]:
    """Run every case (see :func:`run_case`); ``progress(result)`` is called after each one."""
    results = []
    for case in cases:
        result = run_case(case, backend, timeout, execute)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def run_suite_compiled(cases: Sequence[Any], target: str = "c", group: int = 64,
                       timeout: float = 20.0,
                       progress: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run every case through ``relay.build``'s pipeline and compiled kernels, compiling in batches.

    Compiling each case on its own costs a C compiler run per case (about half an hour for the
    suite); instead each case is imported, optimized and graph-codegen'd with a unique module
    name (``tvmgen_c<index>_...``), the fused functions of ``group`` cases are compiled into one
    library, and every case then runs on the graph executor with that library. A library that
    fails to build is rebuilt case by case, so one bad kernel fails only its own case.

    Returns
    -------
    list of CaseResult
        Classified outcomes, in the order of ``cases``.
    """
    from kiln.build_module import _optimize
    from kiln.codegen.graph_codegen import graph_codegen
    if TYPE_CHECKING:  # kiln.codegen.__getattr__ (lazy) is typed `-> object`
        from kiln.codegen.native import build_native
    else:  # looked up through kiln.codegen at run time (tests replace it there)
        from kiln.codegen import build_native
    from kiln.runtime.factory import GraphExecutorFactoryModule
    from kiln.runtime.graph_executor import GraphModule
    from kiln.runtime.ndarray import cpu
    from kiln.target import Target
    from kiln.transform.pass_infra import PassContext

    tgt = Target(target)
    lowered: dict[str, Any] = {}  # case name -> LoweredGraph
    current: list[str] = [""]

    def lower(mod: Any, params: dict[str, Any], feeds: dict[str, np.ndarray]) -> list[Any]:
        name = current[0]
        if name not in lowered:
            with PassContext(opt_level=3):
                optimized = _optimize(mod, tgt, params)
            lowered[name] = graph_codegen(optimized["main"], f"c{len(lowered)}")
        return interpret(mod, params, feeds)  # also checks the import, as the reference path does

    first: dict[str, CaseResult] = {}
    for case in cases:
        current[0] = case.name
        first[case.name] = run_case(case, "kiln", timeout, lower)
    libraries: dict[str, Any] = {}
    names = [c.name for c in cases if c.name in lowered and first[c.name].status == "pass"]
    for start in range(0, len(names), group):
        chunk = names[start:start + group]
        try:
            lib = build_native({k: f for n in chunk for k, f in lowered[n].functions.items()}, tgt)
            libraries.update(dict.fromkeys(chunk, lib))
        except Exception:
            for n in chunk:
                try:
                    libraries[n] = build_native(lowered[n].functions, tgt)
                except Exception as e:
                    libraries[n] = e

    def execute(mod: Any, params: dict[str, Any], feeds: dict[str, np.ndarray]) -> list[Any]:
        name = current[0]
        lib = libraries[name]
        if isinstance(lib, Exception):
            raise lib
        graph = lowered[name]
        factory = GraphExecutorFactoryModule(graph.graph_json, lib, graph.params)
        module = GraphModule(factory["default"](cpu()))
        inputs = module.get_input_info()[0]
        for key, value in {**params, **feeds}.items():
            if key in inputs:
                module.set_input(key, value)
        module.run()
        return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]

    results = []
    for case in cases:
        current[0] = case.name
        result = first[case.name] if case.name not in libraries else run_case(case, "kiln", timeout,
                                                                                  execute)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


_CASE_ALIASES = {"sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
                 "basicconv": "Conv", "basicdeformconv": "DeformConv", "training": "Dropout",
                 "scan9": "Scan", "loop11": "Loop", "loop13": "Loop", "loop16": "Loop",
                 "simplernn": "RNN", "globalaveragepool": "GlobalAveragePool", "operator": "(operators)"}


def case_operator(name: str, ops: Sequence[str]) -> str:
    """The ONNX operator a case tests, from its name (``test_reduce_l1_...`` -> ``ReduceL1``)."""
    key = name.removeprefix("test_").replace("_", "").lower()
    candidates = {s.name.lower(): s.name for s in onnx.defs.get_all_schemas()}
    candidates.update({k: v for k, v in _CASE_ALIASES.items()})
    for ml in ("ai_onnx_ml_", "aionnxml"):
        if key.startswith(ml.replace("_", "")):
            key = key[len(ml.replace("_", "")):]
    best = max((k for k in candidates if key.startswith(k)), key=len, default=None)
    if best is not None:
        return candidates[best]
    return ops[0] if ops else "?"


def coverage_markdown(results: Sequence[CaseResult], baseline: dict[str, str] | None = None,
                      command: str = "python scripts/onnx_conformance.py") -> str:
    """The coverage page: totals per status, then per operator the cases passed and each failure.

    Parameters
    ----------
    results : sequence of CaseResult
        Kiln's results.
    baseline : dict of str to str, optional
        onnxruntime's status per case name, to compare against.
    command : str
        The command that regenerates the page.

    Returns
    -------
    str
        The Markdown text.
    """
    baseline = baseline or {}
    counts = Counter(r.status for r in results)
    ort_counts = Counter(baseline.get(r.name, "?") for r in results)
    lines = ["# ONNX operator coverage", "",
             f"Generated by `{command}` from the ONNX project's node conformance tests (onnx "
             f"{onnx.__version__}: {len(results)} cases; rtol/atol as the suite sets them, 1e-3/1e-7). "
             "Kiln imports each model with `from_onnx` and runs it with the reference interpreter; "
             "onnxruntime's results come from `--onnxruntime`.", "",
             "Inputs that decide shapes or control flow (a Reshape target, Slice bounds, an If "
             "condition given as a graph input) are bound with `from_onnx(..., const_inputs=...)` "
             "to the case's values, as a user of a static-shape compiler does; the cases that need "
             "it are listed at the end.", "", "## Totals", "",
             "| status | Kiln | onnxruntime |", "| --- | --- | --- |"]
    for status in STATUSES:
        ort = ort_counts.get(status, 0) if status not in ("skipped", "unsupported") else "-"
        lines.append(f"| {status} | {counts.get(status, 0)} | {ort if baseline else ''} |")
    lines.append(f"| total | {len(results)} | {len(baseline) or ''} |")
    if baseline:
        ort_pass = {n for n, st in baseline.items() if st == "pass"}
        both = sum(1 for r in results if r.status == "pass" and r.name in ort_pass)
        share = 100.0 * both / max(len(ort_pass), 1)
        lines += ["", f"onnxruntime passes {len(ort_pass)} of {len(baseline)} cases (its import and "
                      "runtime errors above are cases it rejects); Kiln passes "
                      f"{both} of those ({share:.1f}%) and {counts.get('pass', 0)} in all."]
    by_op: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        by_op[case_operator(r.name, r.ops)].append(r)
    missing = sorted(((sum(baseline.get(r.name) == "pass" and r.status != "pass" for r in rs), op)
                      for op, rs in by_op.items()), reverse=True)
    top = [f"{op} ({n})" for n, op in missing[:15] if n]
    if top:
        lines += ["", "Operators with the most cases onnxruntime passes and Kiln does not: "
                  + ", ".join(top) + "."]
    lines += ["", "## Per operator", "",
              "| operator | Kiln passes | cases | onnxruntime passes |", "| --- | --- | --- | --- |"]
    for op in sorted(by_op):
        rs = by_op[op]
        passed = sum(r.status == "pass" for r in rs)
        ort = "" if not baseline else str(sum(baseline.get(r.name) == "pass" for r in rs))
        lines.append(f"| {op} | {passed} | {len(rs)} | {ort} |")
    lines += ["", "## Failures", ""]
    for op in sorted(by_op):
        failed = [r for r in by_op[op] if r.status != "pass"]
        if not failed:
            continue
        lines += [f"### {op}", ""]
        for r in failed:
            ort = "" if not baseline else f" (onnxruntime: {baseline.get(r.name, '?')})"
            msg = r.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"- `{r.name}`: **{r.status}**{ort}: {msg}")
        lines.append("")
    bound = [r for r in results if r.bound]
    lines += ["## Cases imported with const_inputs", "",
              f"{len(bound)} cases bind graph inputs as constants ({sum(r.status == 'pass' for r in bound)} "
              "of them pass):", ""]
    lines += [f"- `{r.name}`: {', '.join(r.bound)}" for r in bound]
    return "\n".join(lines).rstrip() + "\n"
