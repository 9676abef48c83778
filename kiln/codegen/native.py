"""``build_native``: fused relay functions to one compiled library of C kernels.

For each fused function (a ``Function`` with ``Primitive=1``) the op calls in its body are
turned into one tensor-expression DAG with every operator's ``OpDef.compute``; the DAG is
scheduled (a tuned schedule when ``schedule_lookup`` supplies one, otherwise a schedule template
of :mod:`kiln.te.templates` when the DAG is a known pattern (convolutions, pooling, dense, ...),
otherwise :func:`~kiln.te.default_schedule.default_schedule`: injective producers inlined, outer
loops parallel, inner loops vectorized), lowered to loop IR and printed as a C kernel named after
the function. All kernels of a module go into one translation unit (several, compiled in parallel
and linked into one library, for large modules) built by :mod:`kiln.codegen.compiler`'s cache.

Kernel arguments are the function's parameters (tuple-typed parameters flattened field by field)
followed by its outputs (a tuple result gives several). Ops whose argument is a tuple
(``concatenate``) receive the tuple's tensors one after another in ``inputs``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import shlex
import subprocess
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from kiln import progress
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.c_runtime import runtime_unit
from kiln.config import settings, usable_cpus
from kiln.errors import CompileError
from kiln.ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order
from kiln.target import Target, native_vector_bytes
from kiln.te import expr as E
from kiln.te.dag import ComputeDAG
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_ir import PrimFunc
from kiln.te.lower import lower
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.tensor import PlaceholderOp, Tensor, compute, placeholder

__all__ = [
    "COMPILE_FLAGS",
    "FunctionDAG",
    "build_native",
    "detect_vector_bytes",
    "float16_supported",
    "function_to_dag",
    "compile_module",
    "lower_fused",
    "generate_module_sources",
    "target_compile_flags",
]

# Extra compile flags for generated kernels: fused multiply-add contraction (faster, and at
# least as accurate), and no errno from libm (lets GCC inline sqrt and friends). No fast-math.
COMPILE_FLAGS: tuple[str, ...] = ("-ffp-contract=fast", "-fno-math-errno")
# A module's kernels go into translation units of at most this many kernels and about
# UNIT_BYTES of kernel C each: GCC compiles them in parallel, each while Python generates the
# next (ResNet-50's 750 KB of C in one unit took GCC 2.3 s on one core).
KERNELS_PER_CHUNK = 48
UNIT_BYTES = 128 << 10

ScheduleLookup = Callable[[ComputeDAG, str], Any]


def detect_vector_bytes(target: Any = None) -> int:
    """Vector register bytes of ``target`` (default: ``-march=native``, this machine): 64 with
    AVX-512F, 32 with AVX, else 16; ``-vector-width`` of the target wins."""
    if target is None:
        return native_vector_bytes()
    return Target(target).vector_width("int8")


def target_compile_flags(target: Any = None) -> tuple[str, ...]:
    """Compile flags of generated kernels for ``target`` (default: this machine):
    :data:`COMPILE_FLAGS` then the target's instruction-set flags (:meth:`Target.isa`)."""
    tgt = _resolve_target(target)
    return (*COMPILE_FLAGS, *tgt.isa().flags)


def _resolve_target(target: Any) -> Target:
    if target is not None:
        return Target(target)
    return Target.current() or Target("c")


@functools.cache
def _float16_for(cc: str) -> bool:
    snippet = "_Float16 kiln_probe(_Float16 a, _Float16 b) { return a * b; }\n"
    try:
        proc = subprocess.run([*shlex.split(cc), "-march=native", "-std=c99", "-x", "c", "-c",
                               "-o", "/dev/null", "-"], input=snippet, capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: CC does not parse
        return False
    return proc.returncode == 0


def float16_supported() -> bool:
    """Whether the C compiler has ``_Float16`` (float16 kernels need it)."""
    return _float16_for(settings.cc)


class FunctionDAG:
    """A fused function as a DAG: its tensors, kernel arguments and provenance."""

    def __init__(self, dag: ComputeDAG, args: list[Tensor], ops: list[str], sources: list[str]):
        self.dag = dag
        self.args = args
        self.ops = ops
        self.source_names = sources


def _placeholders(ty: Type, names: list[str]) -> list[Tensor]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _placeholders(f, names)]
    if not isinstance(ty, TensorType):
        raise CompileError(f"a fused function parameter has type {ty}; the C target takes tensors")
    name = f"p{len(names)}"
    names.append(name)
    return [placeholder(ty.shape, ty.dtype, name)]


def _param_type(p: Var) -> Type:
    if p.has_type:
        return p.checked_type
    if p.type_annotation is not None:
        return p.type_annotation
    raise CompileError(f"parameter {p.name_hint} of a fused function has no type; run InferType")


def _constant(c: Constant, index: int) -> Tensor:
    value = np.asarray(c.value)
    dtype = c.tensor_type.dtype
    if value.ndim == 0:
        scalar = value.item()
        return compute((), lambda: E.const(scalar, dtype), name=f"T_const{index}", tag="injective")
    op = PlaceholderOp(f"c{index}", value.shape, dtype, attrs={"value": value})
    return op.output(0)


def _flat(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    return [t for v in value for t in _flat(v)]


def function_to_dag(func: Function, name: str = "kernel") -> FunctionDAG:
    """The tensor-expression DAG of a fused function (see the module docstring).

    Raises
    ------
    CompileError
        An operator has no ``compute``, or its compute returns the wrong shapes or dtypes.
    """
    from kiln.op.registry import get_op_def

    names: list[str] = []
    values: dict[int, Any] = {}
    args: list[Tensor] = []
    for p in func.params:
        ty = _param_type(p)
        ts = _placeholders(ty, names)
        values[id(p)] = ts if isinstance(ty, TupleType) else ts[0]
        args += ts
    ops: list[str] = []
    sources: list[str] = []
    n_const = 0
    for node in post_order(func.body, into_functions=False):
        if id(node) in values or isinstance(node, Op):
            continue
        if isinstance(node, Constant):
            values[id(node)] = _constant(node, n_const)
            n_const += 1
        elif isinstance(node, Tuple):
            values[id(node)] = [values[id(f)] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            values[id(node)] = values[id(node.tuple_value)][node.index]
        elif isinstance(node, Call):
            values[id(node)] = _call_compute(node, values, name, get_op_def)
            op_name = node.op.name if isinstance(node.op, Op) else str(node.op)
            ops.append(op_name)
            sources += [s for s in node.source_names if s not in sources]
        elif not isinstance(node, Var):
            raise CompileError(f"fused function {name}: cannot generate code for a "
                               f"{type(node).__name__} node")
    outs = _flat(values[id(func.body)])
    final: list[Tensor] = []
    for t in outs:
        if isinstance(t.op, PlaceholderOp) or any(t == o for o in final):
            src = t
            t = compute(src.shape, lambda *i, s=src: s(*i), name="T_copy", tag="injective")
        final.append(t)
    dag = ComputeDAG(args + final)
    return FunctionDAG(dag, args + final, ops, sources)


def _call_compute(call: Call, values: dict[int, Any], func_name: str,
                  get_op_def: Callable[[str], Any]) -> Any:
    op = call.op
    if not isinstance(op, Op):
        raise CompileError(f"fused function {func_name} calls {op}; only operators can be compiled")
    op_def = get_op_def(op.name)
    where = f" (source nodes: {', '.join(call.source_names)})" if call.source_names else ""
    if op_def.compute is None:
        raise CompileError(f"operator {op.name}{where} has no tensor-expression compute, so the C "
                           f"target cannot build fused function {func_name}; use target "
                           "'numpy' or add a compute to the operator")
    inputs: list[Tensor] = []
    for a in call.args:
        inputs += _flat(values[id(a)])
    out_type = call.checked_type if call.has_type else None
    if out_type is None:
        raise CompileError(f"operator {op.name}{where} in {func_name} is not typed; run InferType")
    try:
        result = op_def.compute(inputs, call.attrs, out_type)
    except CompileError:
        raise
    except Exception as err:  # an op's compute failing is a build error naming the op
        shapes = ", ".join(f"{t.dtype}{list(t.shape)}" for t in inputs)
        raise CompileError(f"compute of {op.name}{where} failed on inputs {shapes}: "
                           f"{type(err).__name__}: {err}") from err
    _check_result(op.name + where, result, out_type)
    return result


def _check_result(what: str, result: Any, out_type: Type) -> None:
    expected = list(out_type.fields) if isinstance(out_type, TupleType) else [out_type]
    got = _flat(result)
    if len(got) != len(expected):
        raise CompileError(f"compute of {what} returned {len(got)} tensor(s), its type has "
                           f"{len(expected)}")
    for t, ty in zip(got, expected):
        assert isinstance(ty, TensorType)
        if tuple(t.shape) != tuple(ty.shape) or t.dtype != ty.dtype:
            raise CompileError(f"compute of {what} returned {t.dtype}{list(t.shape)}, expected "
                               f"{ty.dtype}{list(ty.shape)}")


# Names the generated translation unit already uses (C library, libm, pthreads, Kiln's prelude).
_RESERVED = {
    "clock_gettime", "sysconf", "memcpy", "sigfillset",
    "abs", "abort", "calloc", "exit", "free", "main", "malloc", "realloc", "div", "ldiv",
    "copysign", "copysignf", "fmax", "fmin", "fmaxf", "fminf", "nan", "nanf", "hypot", "cbrt",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "tanh", "erf", "erfc",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "fabs", "floor", "ceil", "trunc", "round", "nearbyint", "rint", "pow", "atan2", "fmod",
    "isnan", "isinf", "isfinite", "signbit", "lround", "lrint", "frexp", "ldexp", "modf",
}


def _check_kernel_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise CompileError(f"kernel name {name!r} is not a C identifier")
    base = name[:-1] if name.endswith(("f", "l")) and name[:-1] in _RESERVED else name
    if base in _RESERVED or name.startswith(("kiln_", "omp_", "__", "pthread_", "sched_")) \
            or "__par" in name:  # <kernel>__par<k> are the chunk functions of parallel loops
        raise CompileError(f"kernel name {name!r} clashes with a C library or Kiln runtime name; "
                           "choose another func_name")


def lower_function(name: str, func: Function, vector_bytes: int, num_threads: int,
                   schedule_lookup: ScheduleLookup | None = None) -> PrimFunc:
    """The loop IR of one fused function for the CPU (tuned schedule if found, else a template's
    schedule for a known pattern (:mod:`kiln.te.templates`), else the default schedule)."""
    def untuned(dag: ComputeDAG) -> Any:
        steps = apply_template(dag, TargetInfo(vector_bytes, num_threads))
        return steps if steps is not None else default_schedule(dag, vector_bytes, num_threads)

    return lower_fused(name, func, untuned, schedule_lookup)


def lower_fused(name: str, func: Function, untuned: Callable[[ComputeDAG], Any],
                schedule_lookup: ScheduleLookup | None = None) -> PrimFunc:
    """The loop IR of one fused function: its tuned schedule when ``schedule_lookup`` has one,
    else ``untuned(dag)`` (the target's templates and default schedule).

    A tuned schedule that fails to replay or lower is reported with a warning naming the
    function, and through ``schedule_lookup.replay_failed(dag, name, reason)`` when the lookup
    has that method; the function then gets the schedule it would have had untuned."""
    _check_kernel_name(name)
    fdag = function_to_dag(func, name)
    attrs = {"fused_ops": fdag.ops, "source_names": fdag.source_names, "flops": fdag.dag.flop_ct}
    steps = schedule_lookup(fdag.dag, name) if schedule_lookup is not None else None
    if steps is not None:
        try:
            return lower(fdag.dag, steps, args=fdag.args, name=name, attrs=attrs)
        except Exception as err:  # a tuned record that does not replay: default schedule instead
            reason = f"{type(err).__name__}: {err}"
            warnings.warn(f"tuning log: the tuned schedule of {name} (workload key "
                          f"{fdag.dag.workload_key()}) does not replay ({reason}); using the "
                          "default schedule", stacklevel=2)
            replay_failed = getattr(schedule_lookup, "replay_failed", None)
            if replay_failed is not None:
                replay_failed(fdag.dag, name, reason)
    return lower(fdag.dag, untuned(fdag.dag), args=fdag.args, name=name, attrs=attrs)


def iter_module_sources(prims: Sequence[PrimFunc], vector_bytes: int
                        ) -> Iterator[tuple[str, int]]:
    """C translation units for the kernels, each as soon as it is full (at most
    :data:`KERNELS_PER_CHUNK` kernels and about :data:`UNIT_BYTES` of kernel C), with the
    number of kernels in it. They declare the runtime, which :func:`build_native` links in
    (:func:`runtime_object`)."""
    unit, bodies, size = CCodegen(vector_bytes), [], 0
    for prim in prims:
        cg = CCodegen(vector_bytes)
        bodies.append(cg.function(prim))
        unit.absorb(cg)
        size += len(bodies[-1])
        if len(bodies) >= KERNELS_PER_CHUNK or size >= UNIT_BYTES:
            yield unit.unit(bodies), len(bodies)
            unit, bodies, size = CCodegen(vector_bytes), [], 0
    if bodies or not prims:
        yield unit.unit(bodies), len(bodies)


def generate_module_sources(prims: Sequence[PrimFunc], vector_bytes: int) -> list[str]:
    """The translation units of :func:`iter_module_sources`."""
    return [source for source, _ in iter_module_sources(prims, vector_bytes)]


def compile_module(source: str, name_hint: str = "kernels", flags: Sequence[str] = COMPILE_FLAGS) -> Path:
    """A shared library of one translation unit of :meth:`CCodegen.module <kiln.codegen.c_codegen.
    CCodegen.module>` linked with the runtime (both from the compile cache when built before)."""
    from kiln.codegen.compiler import compile_cached

    return compile_cached(source, name_hint, flags=flags, objects=[runtime_object(flags)])


def runtime_object(flags: Sequence[str]) -> Path:
    """The C runtime (:func:`~kiln.codegen.c_runtime.runtime_unit`) compiled with ``flags``, once
    per compiler and flags: its ``.o`` in the compile cache, with its ``.c`` beside it."""
    from kiln.codegen.compiler import compile_cached

    return compile_cached(runtime_unit(), "kiln_runtime", flags=flags).with_suffix(".o")


def build_native(functions: Mapping[str, Function], target: Any = None, *,
                 schedule_lookup: ScheduleLookup | None = None) -> Any:
    """Compile fused functions into a :class:`~kiln.runtime.native.NativeLibrary`.

    Parameters
    ----------
    functions : mapping of str to Function
        Kernel name (the graph JSON ``func_name``) to fused primitive function.
    target : Target or str, optional
        The C target (``"c"``, ``"llvm ..."``; default: the current target, else ``"c"``). Its
        instruction set (:meth:`~kiln.target.Target.isa`: ``-mcpu``, ``-mattr``, else this
        machine) sets the vector width the schedules use, the compiler flags, and the CPU
        features the library records as required.
    schedule_lookup : callable, optional
        ``schedule_lookup(dag, func_name) -> State | list[Step] | None``: a tuned schedule for a
        function's DAG, or None to use the default schedule.

    Returns
    -------
    NativeLibrary
        One library exporting every kernel and ``kiln_set_num_threads``.
    """
    from kiln.codegen.compiler import compile_cached, compile_shared
    from kiln.runtime.native import NativeLibrary

    tgt = _resolve_target(target)
    isa = tgt.isa()
    vector_bytes = tgt.vector_width("int8")
    flags = (*COMPILE_FLAGS, *isa.flags)
    threads = max(1, settings.num_threads)
    # the runtime compiles (once per compiler and flags) while Python lowers the kernels
    background = ThreadPoolExecutor(max_workers=1)
    runtime_job = background.submit(runtime_object, flags)
    background.shutdown(wait=False)
    prims: list[PrimFunc] = []
    with progress.stage("lowering", total=len(functions), unit="distinct kernels") as st:
        for name, fn in functions.items():
            prims.append(lower_function(name, fn, vector_bytes, threads, schedule_lookup))
            st.advance()
    signatures = {p.name: tuple((tuple(b.shape), b.dtype) for b in p.params) for p in prims}
    hint = "kernels" if len(prims) != 1 else prims[0].name
    with progress.stage("compiling C", total=len(prims), unit="distinct kernels") as st, \
            ThreadPoolExecutor(max_workers=usable_cpus()) as pool:
        def compile_unit(source: str, kernels: int) -> Path:
            obj = compile_cached(source, f"{hint}_part", flags=flags, link=False)
            st.advance(kernels)
            return obj

        units = iter_module_sources(prims, vector_bytes)
        first = next(units)
        second = next(units, None)
        if second is None:  # one unit: one library, linked with the runtime
            out = compile_cached(first[0], hint, flags=flags, objects=[runtime_job.result()])
            st.advance(first[1])
        else:  # each unit compiles (a worker waits on the compiler) while the next is generated
            jobs = [pool.submit(compile_unit, *unit) for unit in itertools.chain([first, second],
                                                                                 units)]
            parts = [job.result() for job in jobs]
    runtime = runtime_job.result()
    if second is None:
        objects = [out, runtime]
    else:
        objects = [*parts, runtime]
        key = hashlib.sha256("\0".join(map(str, objects)).encode()).hexdigest()[:24]
        out = Path(settings.cache_dir) / "compile" / f"{hint}-{key}.so"
        if not out.is_file():
            compile_shared(objects, out, extra_flags=flags)
    lib = NativeLibrary(out, sources=[p.with_suffix(".c") for p in objects], signatures=signatures,
                        isa_features=isa.features, compile_flags=flags)
    lib.functions = dict(functions)  # provenance for the debugger (kiln.debug.compare)
    lib.kernel_flops = {p.name: float(p.attrs.get("flops", -1)) for p in prims}  # its profile
    return lib
