"""``relay.build``, ``relay.optimize`` and ``relay.create_executor``.

The build is: bind the params by name, run the optimisation pipeline (:func:`build_pipeline`)
under the current :class:`~kiln.transform.PassContext`, lower the fused ``main`` with graph codegen
(graph JSON, memory plan, params ``p0, p1, ...``), and make the kernel library for the target:
``numpy`` gives a :class:`~kiln.codegen.numpy_library.NumpyLibrary` running the fused functions with
the reference kernels; ``c`` and ``llvm ...`` compile C with ``kiln.codegen.build_native``; ``cuda``
compiles CUDA kernels with :func:`kiln.codegen.cuda.build_cuda`. The
result is a :class:`~kiln.runtime.factory.GraphExecutorFactoryModule`, which also unpacks as
``graph_json, lib, params`` like NNVM's build.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln import build_cache
from kiln.codegen.external import lower_external
from kiln.codegen.graph_codegen import LoweredGraph, graph_codegen, with_kernel_flops
from kiln.errors import KilnError
from kiln.interpreter import Interpreter
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType, Type
from kiln.op.dyn import SpecializedImportAttrs, ValueSpecializationError, specialized_import_call
from kiln.runtime.container import ADT
from kiln.runtime.export import default_metadata
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.module import Module
from kiln.runtime.ndarray import Device, NDArray, cpu
from kiln.runtime.vm import Executable
from kiln.target import Target, TargetError
from kiln.transform import InferType, ModulePass, Pass, PassContext, PassInfo, Sequential
from kiln.transform.alter_batch_matmul import AlterBatchMatmul
from kiln.transform.alter_op_layout import AlterOpLayout
from kiln.transform.bind_params import bind_params_by_name
from kiln.transform.canonicalize_ops import CanonicalizeOps
from kiln.transform.eliminate_common_subexpr import EliminateCommonSubexpr
from kiln.transform.fold_constant import FoldConstant
from kiln.transform.fold_scale_axis import FoldScaleAxis
from kiln.transform.fuse_ops import FuseOps
from kiln.transform.fuse_patterns import FuseLayerNorm, PadSoftmaxRows
from kiln.transform.inline import RemoveUnusedFunctions, inline
from kiln.transform.legalize_conv import LegalizeConv
from kiln.transform.qnn_canonicalize import QnnCanonicalizeOps, module_has_qnn
from kiln.transform.simplify_expr import SimplifyExpr
from kiln.transform.simplify_inference import SimplifyInference

__all__ = [
    "Executor",
    "compile_vm",
    "bind_params_by_name",
    "build",
    "build_pipeline",
    "create_executor",
    "lower_to_graph",
    "optimize",
]


# TVM's build calls Inline directly, whatever the opt level; relay.transform.Inline() has level 1.
_BUILD_INLINE = ModulePass(lambda mod, ctx: inline(mod), PassInfo(0, "Inline"))


def build_pipeline(target: Target | None = None) -> list[Pass]:
    """The passes ``relay.build`` runs, in order (TVM's ``GetPassPrefix`` plus fusion).

    Each runs when the PassContext enables it: its opt level (in brackets) is at most the
    context's ``opt_level``, or it is in ``required_pass``, and it is not in ``disabled_pass``.

    Parameters
    ----------
    target : Target, optional
        The build's target (default: the current one). Native targets (``c``, ``llvm``) also get
        FuseLayerNorm (a layer norm spelled out in arithmetic becomes one row-wise kernel),
        PadSoftmaxRows (attention over a token count that is not a multiple of the vector width
        keeps its padded columns through the softmax), AlterOpLayout (blocked convolutions,
        packed dense) and the FoldConstant that packs their weights; the ``numpy`` target keeps
        plain layouts and TVM's pass list.

    Returns
    -------
    list of Pass
        The pipeline.
    """
    target = target or Target.current()
    native = target is not None and target.is_native
    return [
        _BUILD_INLINE,  # [0] substitute global functions marked Inline=1 (at every level, as TVM)
        RemoveUnusedFunctions(),  # [1] keep only what main reaches
        SimplifyInference(),  # [0] batch_norm, dropout, layer/instance/group norm -> arithmetic
        EliminateCommonSubexpr(),  # [3] compute repeated expressions once
        FoldConstant(),  # [2] precompute everything that depends only on (bound) params
        # [3] conv1d, conv{1,2}d_transpose -> conv2d (phases), epilogues moved onto the conv2d
        *([LegalizeConv()] if native else []),
        FoldScaleAxis(),  # [3] fold per-channel multiplies into conv/dense weights
        *([FuseLayerNorm()] if native else []),  # [1] spelled-out layer norms -> nn.layer_norm
        *([PadSoftmaxRows()] if native else []),  # [3] attention rows padded to whole vectors
        SimplifyExpr(),  # [0] identities, reshape/transpose chains, casts, x/sqrt -> x*rsqrt
        CanonicalizeOps(),  # [3] bias_add -> add of an expanded bias
        FoldConstant(),  # [2] fold what the rewrites above exposed (expanded biases, ...)
        *([
            AlterOpLayout(),  # [3] conv2d -> NCHW{c} conv2d_NCHWc, dense -> dense_pack (C target)
            AlterBatchMatmul(),  # [3] batch_matmul: explicit B transpose, N padded to vectors
            FoldConstant(),  # [2] pack the weights (and per-channel constants) at build time
        ] if native else []),
        FuseOps(),  # [0] primitive functions; how much fuses depends on opt_level
        InferType(),  # [0] types of the fused functions
    ]


def _as_module(mod: IRModule | Function, params: Mapping[str, Any] | None, what: str) -> IRModule:
    if isinstance(mod, Function):
        warnings.warn(f"{what}: pass an IRModule; passing a relay.Function is deprecated",
                      DeprecationWarning, stacklevel=3)
        return IRModule.from_expr(bind_params_by_name(mod, params) if params else mod)
    if not isinstance(mod, IRModule):
        raise TypeError(f"{what}: expected an IRModule, got {type(mod).__name__}")
    return mod


def _resolve_target(target: Any) -> Target:
    if target is None:
        current = Target.current()
        if current is None:
            raise TargetError("relay.build: no target given; pass target='c' (or 'llvm', 'numpy') "
                              "or build inside `with Target(...)`")
        return current
    if isinstance(target, Mapping) and "kind" not in target:
        if len(target) != 1:
            raise TargetError(f"Kiln builds for one CPU target, got {dict(target)}")
        target = next(iter(target.values()))
    return Target(target)


def _optimize(mod: IRModule, target: Target, params: Mapping[str, Any] | None) -> IRModule:
    """Bind ``params`` and run :func:`build_pipeline` (the input module is not changed)."""
    if params:
        mod = mod.with_function("main", bind_params_by_name(mod["main"], params))
    if module_has_qnn(mod):  # qnn.* -> plain ops first (TVM's qnn Legalize + CanonicalizeOps)
        mod = QnnCanonicalizeOps()(mod)
    with target:
        return Sequential(build_pipeline(target), name="relay.build")(mod)


def _unbound_params(main: Function, params: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """The given params whose names are still inputs of ``main``."""
    names = {p.name_hint for p in main.params}
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
            for k, v in (params or {}).items() if k in names}


def optimize(mod: IRModule | Function, target: Any = None,
             params: Mapping[str, Any] | None = None) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Run the build's optimisation pipeline without generating code.

    Parameters
    ----------
    mod : IRModule
        The module (not modified).
    target : str or Target, optional
        The target (default: the current one, else ``"c"``).
    params : dict of str to array, optional
        Weights bound to ``main``'s parameters by name (and folded).

    Returns
    -------
    (IRModule, dict)
        The optimised, fused module (bound params are constants in it), and the given params
        it still takes as inputs.
    """
    mod = _as_module(mod, params, "relay.optimize")
    tgt = Target(target) if target is not None else (Target.current() or Target("c"))
    out = _optimize(mod, tgt, params)
    return out, _unbound_params(out["main"], params)


def lower_to_graph(mod: IRModule, target: Target, params: Mapping[str, Any] | None,
                   mod_name: str = "default") -> tuple[LoweredGraph, list[Module]]:
    """What ``relay.build`` compiles: the optimised ``main`` lowered by graph codegen.

    Runs :func:`build_pipeline` (under the current PassContext), compiles the external
    (``Compiler=...``) functions and lowers ``main``; ``extract_tasks`` uses it to see exactly the
    fused functions a build would compile.

    Returns
    -------
    (LoweredGraph, list of Module)
        The graph, its params and fused functions by kernel name; the external libraries.
    """
    optimized = _optimize(mod, target, params)
    main, external_libs = lower_external(optimized)
    # output names (the ONNX importer sets them) survive the passes as a module attribute
    names = optimized.attrs.get("output_names", mod.attrs.get("output_names"))
    return graph_codegen(main, mod_name, output_names=names), list(external_libs)


def _make_library(lowered: LoweredGraph, target: Target) -> tuple[Module, dict[str, Any] | None]:
    """The kernel library, and the tuning coverage when a dispatch context (tuning log) is on."""
    if target.is_native or target.is_cuda:
        from kiln import progress
        from kiln.te.dispatch import TuningLookup

        tuning = TuningLookup.from_context(target)
        if target.is_cuda:
            from kiln.codegen.cuda import build_cuda

            lib: Module = build_cuda(lowered.functions, target, schedule_lookup=tuning)
        else:
            if TYPE_CHECKING:  # kiln.codegen.__getattr__ (lazy) is typed `-> object`
                from kiln.codegen.native import build_native
            else:  # looked up through kiln.codegen at run time (tests replace it there)
                from kiln.codegen import build_native
            lib = build_native(lowered.functions, target, schedule_lookup=tuning) \
                if tuning is not None else build_native(lowered.functions, target)
        if tuning is None:
            return lib, None
        progress.current().message(tuning.report())
        return lib, tuning.summary()
    from kiln.codegen.numpy_library import NumpyLibrary

    return NumpyLibrary(lowered.functions), None


def build(
    ir_mod: IRModule | Function,
    target: Any = None,
    target_host: Any = None,
    executor: Any = None,
    runtime: Any = None,
    workspace_memory_pools: Any = None,
    constant_memory_pools: Any = None,
    params: Mapping[str, Any] | None = None,
    mod_name: str = "default",
) -> GraphExecutorFactoryModule:
    """Compile a module for the graph executor (TVM's ``relay.build``).

    Parameters
    ----------
    ir_mod : IRModule
        The module to build (not modified); its ``main`` is the graph. ``ir_mod.attrs
        ["output_names"]`` (set by ``from_onnx``: one name per output) names the outputs in the
        graph JSON, the exported metadata and ``GraphModule.get_output(name)``; without it they
        are ``output_0``, ``output_1``, ...
    target : str, dict or Target
        ``"c"``, ``"llvm"`` / ``"llvm -mcpu=..."`` (aliases of the C backend), ``"cuda"`` /
        ``"cuda -arch=sm_90"`` (CUDA kernels, run with an executor on ``kiln.cuda()``), or
        ``"numpy"`` (reference kernels, no compiler); default: the current target.
    target_host : str or Target, optional
        Accepted for TVM compatibility (CPU targets are their own host).
    executor : optional
        ``None``, ``"graph"`` or an object named ``"graph"`` (Kiln has only the graph executor).
    runtime : optional
        Accepted for TVM compatibility (Kiln has one runtime).
    workspace_memory_pools, constant_memory_pools : optional
        Accepted for TVM compatibility (AOT-only features); must be None.
    params : dict of str to array, optional
        Weights bound to ``main``'s parameters by name; they are folded into constants and the
        ones still needed come back as params ``p0, p1, ...``.
    mod_name : str
        Module name: kernels are ``tvmgen_<mod_name>_fused_...`` and ``factory[mod_name](dev)``
        creates executors.

    Returns
    -------
    GraphExecutorFactoryModule
        Graph JSON, kernel library and params (also ``graph, lib, params = relay.build(...)``).

    Notes
    -----
    Inside ``with auto_scheduler.ApplyHistoryBest(log):`` (any dispatch context of
    :mod:`kiln.te.dispatch`) a C build asks the context for each fused function's tuned schedule
    (by the workload key of its DAG), logs the coverage line (``tuning log: 17/20 tasks applied;
    default schedule for: ...``) on the ``kiln.auto_scheduler`` logger and stores it, with the
    lists of functions, as ``metadata["tuning"]``.

    Examples
    --------
    >>> with PassContext(opt_level=3):  # doctest: +SKIP
    ...     lib = relay.build(mod, target="numpy", params=params)
    >>> m = graph_executor.GraphModule(lib["default"](kiln.cpu()))  # doctest: +SKIP
    """
    if workspace_memory_pools is not None or constant_memory_pools is not None:
        raise KilnError("relay.build: memory pools are an AOT-executor feature Kiln does not have")
    kind = getattr(executor, "name", executor)
    if kind not in (None, "graph"):
        raise KilnError(f"relay.build: Kiln builds for the graph executor, not {kind!r}")
    mod = _as_module(ir_mod, params, "relay.build")
    deferred = specialized_import_call(mod["main"])
    if deferred is not None:
        deciding = deferred[1]
        raise ValueSpecializationError(
            f"relay.build: main is {deciding.model.label}, whose shapes depend on the values "
            f"of input(s) {', '.join(map(repr, deciding.value_inputs))}; a graph executor has static "
            "shapes: bind them at import (from_onnx(..., const_inputs=...)) or run the module with "
            "relay.create_executor('vm', mod=mod).evaluate(), which compiles it per value")
    tgt = _resolve_target(target)
    if target_host is not None:
        tgt = Target(tgt, host=target_host)
    key = build_cache.build_key(mod, params, tgt, mod_name)
    return build_cache.cached_build(lambda: _build(mod, tgt, params, mod_name), key, mod)


def _build(mod: IRModule, tgt: Target, params: Mapping[str, Any] | None,
           mod_name: str) -> GraphExecutorFactoryModule:
    """:func:`build` itself: the passes, graph codegen and the kernel library."""
    ctx = PassContext.current()
    first_pass = len(ctx.history)
    lowered, external_libs = lower_to_graph(mod, tgt, params, mod_name)
    lib, tuning = _make_library(lowered, tgt)
    lowered = with_kernel_flops(lowered, getattr(lib, "kernel_flops", {}))
    for external in external_libs:
        lib.import_module(external)
    report = lowered.memory_plan.report()
    metadata = default_metadata(lowered.graph, lowered.params, {
        "target": str(tgt),
        "opt_level": ctx.opt_level,
        "mod_name": mod_name,
        "passes": ctx.history[first_pass:],
        "memory_plan": {"planned_bytes": report.planned_bytes,
                        "unplanned_bytes": report.unplanned_bytes,
                        "num_storage": report.num_storage,
                        "intermediate_planned_bytes": report.intermediate_planned_bytes,
                        "intermediate_unplanned_bytes": report.intermediate_unplanned_bytes},
        **({"tuning": tuning} if tuning is not None else {}),
    })
    return GraphExecutorFactoryModule(lowered.graph_json, lib, lowered.params, mod_name, metadata,
                                      ir_mod=mod)


# --- executors ---------------------------------------------------------------------------------

#: Builds of a value-specialized module an executor keeps (least recently used dropped first).
MAX_SPECIALIZATIONS = 32

def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, NDArray):
        return value.numpy()
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _wrap(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_wrap(v) for v in value]
    return NDArray(value)


def _unflatten(flat: list[NDArray], ty: Type) -> Any:
    if isinstance(ty, TupleType):
        return [_unflatten(flat, f) for f in ty.fields]
    assert isinstance(ty, TensorType)
    return flat.pop(0)


class Executor:
    """Evaluates relay programs (TVM's ``relay.create_executor`` result).

    Parameters
    ----------
    kind : str
        ``"debug"`` (reference interpreter), ``"graph"`` or ``"vm"`` (both build with
        ``relay.build`` and run the graph executor: Kiln compiles static graphs only).
    mod : IRModule
        The module.
    device : Device
        The CPU.
    target : str or Target
        Target of the graph build (ignored by ``"debug"``).
    """

    def __init__(self, kind: str, mod: IRModule, device: Device, target: Target):
        self.kind = kind
        self.mod = mod
        self.device = device
        self.target = target

    def evaluate(self, expr: Expr | None = None, binds: Mapping[Any, Any] | None = None) -> Any:
        """A callable running ``main`` (or ``expr``); a value when ``expr`` is a closed expression.

        Parameters
        ----------
        expr : Expr, optional
            A function or global variable to make callable, or an expression to evaluate now.
        binds : mapping, optional
            Not supported (bind free variables with ``relay.bind`` first).

        Returns
        -------
        callable or value
            ``f(*args, **kwargs)`` returning NDArrays (lists for tuple results).
        """
        if binds:
            raise KilnError("Executor.evaluate: binds are not supported; substitute the variables "
                            "into the expression instead")
        if expr is None:
            return self._make(self.mod)
        if isinstance(expr, GlobalVar):
            return self._make(self.mod.with_function("main", self.mod[expr]))
        if isinstance(expr, Function):
            return self._make(self.mod.with_function("main", expr))
        return self._make(self.mod.with_function("main", Function([], expr)))()

    def _make(self, mod: IRModule) -> Callable[..., Any]:
        return self._make_typed(InferType()(mod))

    def _make_typed(self, mod: IRModule) -> Callable[..., Any]:
        main = mod["main"]
        deferred = specialized_import_call(main)
        if deferred is not None:
            return self._specialized(main, *deferred)
        return self._interpreted(mod) if self.kind == "debug" else self._graph(mod, main)

    def _specialized(self, main: Function, call: Call, attrs: SpecializedImportAttrs
                     ) -> Callable[..., Any]:
        """Run a ``dyn.specialized_import``: import the model again for the values of the inputs
        that decide its shapes, and build (or interpret) that static module, once per distinct set
        of those values (the last :data:`MAX_SPECIALIZATIONS` builds are kept)."""
        bound = frozenset(attrs.value_inputs)
        cache: OrderedDict[tuple[Any, ...], tuple[Callable[..., Any], frozenset[str]]] = OrderedDict()

        def key(named: Mapping[str, np.ndarray], names: frozenset[str]) -> tuple[Any, ...]:
            return tuple((n, named[n].dtype.str, named[n].shape, named[n].tobytes())
                         for n in sorted(names))

        def run(*args: Any, **kwargs: Any) -> Any:
            nonlocal bound
            values = dict(zip([id(p) for p in main.params],
                              [_as_numpy(v) for v in self._arguments(main, args, kwargs)]))
            named = {name: values[id(arg)] if isinstance(arg, Var) else np.asarray(arg.value)
                     for name, arg in zip(attrs.input_names, call.args)
                     if isinstance(arg, (Var, Constant))}
            if len(named) != len(call.args):
                raise ValueSpecializationError(f"{attrs.model.label}: its arguments must be "
                                               "main's parameters or constants")
            k = key(named, bound)
            hit = cache.get(k)
            if hit is not None:
                cache.move_to_end(k)
            else:
                mod, used = attrs.model.specialize(named, bound)
                mod = InferType()(mod)
                declared = call.checked_type  # type: ignore[attr-defined]
                got = mod["main"].checked_type.ret_type  # type: ignore[attr-defined]
                if got != declared:
                    raise ValueSpecializationError(
                        f"{attrs.model.label} declares output type {declared}, but for these values "
                        f"of {', '.join(sorted(used))} it computes {got}")
                bound = bound | used
                hit = (self._make_typed(mod), used)
                cache[key(named, bound)] = hit
                while len(cache) > MAX_SPECIALIZATIONS:
                    cache.popitem(last=False)  # the least recently used build
            fn, used = hit
            return fn(**{n: v for n, v in named.items() if n not in used})

        return run

    @staticmethod
    def _arguments(main: Function, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        names = [p.name_hint for p in main.params]
        values = list(args)
        for i, name in enumerate(names):
            if i < len(args):
                if name in kwargs:
                    raise KilnError(f"argument {name!r} given both by position ({i}) and by name")
            elif name in kwargs:
                values.append(kwargs[name])
            else:
                raise KilnError(f"missing argument {name!r}: the function takes "
                                f"{', '.join(names) or 'no arguments'}")
        unknown = set(kwargs) - set(names)
        if unknown:
            raise KilnError(f"unknown argument(s) {', '.join(sorted(unknown))}; the function takes "
                            f"{', '.join(names) or 'no arguments'}")
        return values

    def _interpreted(self, mod: IRModule) -> Callable[..., Any]:
        interp = Interpreter(mod)
        main = mod["main"]

        def run(*args: Any, **kwargs: Any) -> Any:
            values = self._arguments(main, args, kwargs)
            return _wrap(interp.run([_as_numpy(v) for v in values]))

        return run

    def _graph(self, mod: IRModule, main: Function) -> Callable[..., Any]:
        factory = build(mod, target=self.target)
        module = GraphModule(factory["default"](self.device))
        ret_type = main.checked_type.ret_type  # type: ignore[attr-defined]

        def run(*args: Any, **kwargs: Any) -> Any:
            for i, value in enumerate(self._arguments(main, args, kwargs)):
                module.set_input(i, _as_numpy(value))
            module.run()
            outputs = [NDArray(module.get_output(i)) for i in range(module.get_num_outputs())]
            return _unflatten(outputs, ret_type)

        return run


def create_executor(kind: str = "debug", mod: IRModule | None = None, device: Device | None = None,
                    target: Any = "numpy", params: Mapping[str, Any] | None = None) -> Executor:
    """An executor for ``mod`` (TVM's ``relay.create_executor``).

    Parameters
    ----------
    kind : str
        ``"debug"`` (the reference interpreter), ``"graph"`` or ``"vm"`` (graph build + run).
    mod : IRModule, optional
        The module (default: an empty one, for ``evaluate(expr)``).
    device : Device, optional
        The CPU (default ``kiln.cpu()``).
    target : str or Target
        Build target of the graph executor (default ``"numpy"``).
    params : dict of str to array, optional
        Values bound to ``main``'s parameters by name.

    Returns
    -------
    Executor
        Call ``.evaluate()`` to get a function.

    Examples
    --------
    >>> f = relay.create_executor("graph", mod=mod).evaluate()  # doctest: +SKIP
    >>> y = f(x_value).numpy()  # doctest: +SKIP
    """
    if kind not in ("debug", "graph", "vm"):
        raise KilnError(f"unknown executor kind {kind!r}: Kiln has 'debug', 'graph' and 'vm'")
    mod = mod if mod is not None else IRModule()
    if params:
        mod = mod.with_function("main", bind_params_by_name(mod["main"], params))
    return Executor(kind, mod, device or cpu(), Target(target))


# --- the VM ----------------------------------------------------------------------------------

def _structure(ty: Type) -> Any:
    return [_structure(f) for f in ty.fields] if isinstance(ty, TupleType) else None


class _SpecializedExecutable(Executable):
    """A VM executable of a value-specialized module: built per set of deciding values when run."""

    def __init__(self, mod: IRModule, target: Target):
        super().__init__("", Module(), {})
        self.mod = mod
        self.target = target

    def save(self) -> tuple[bytearray, Module]:
        deciding = specialized_import_call(self.mod["main"])
        label = deciding[1].model.label if deciding else "main"
        raise ValueSpecializationError(f"Executable.save: {label} is compiled per value of the "
                                       "inputs that decide its shapes, so it has no static code "
                                       "to save; bind them at import (const_inputs=) to save one")

    def runner(self, device: Device) -> Callable[..., Any]:
        run = Executor("vm", self.mod, device, self.target).evaluate()

        def regrouped(*args: Any, **kwargs: Any) -> Any:
            out = run(*args, **kwargs)
            return ADT(out) if isinstance(out, list) else out

        return regrouped


def compile_vm(mod: IRModule | Function, target: Any = None, target_host: Any = None,
               params: Mapping[str, Any] | None = None) -> Executable:
    """Compile ``mod`` for the VM (TVM's ``relay.vm.compile``).

    Kiln's VM runs static graphs, so this is :func:`build` packed as a VM :class:`Executable`;
    a module whose shapes depend on input values (``dyn.specialized_import``) gives an
    executable that imports and builds it again for each set of those values when run.

    Parameters
    ----------
    mod : IRModule or Function
        The program; ``main`` is run.
    target : str or Target, optional
        The CPU target (default: the current one).
    target_host : optional
        Accepted for TVM compatibility.
    params : dict of str to array, optional
        Values bound to ``main``'s parameters by name.

    Returns
    -------
    Executable
        Run it with ``kiln.runtime.vm.VirtualMachine(exe, kiln.cpu())``.
    """
    mod = _as_module(mod, None, "relay.vm.compile")
    if params:
        mod = mod.with_function("main", bind_params_by_name(mod["main"], params))
    mod = InferType()(mod)
    if specialized_import_call(mod["main"]) is not None:
        return _SpecializedExecutable(mod, _resolve_target(target))
    factory = build(mod, target=target, target_host=target_host)
    return Executable(factory.get_graph_json(), factory.get_lib(), factory.get_params(),
                      _structure(mod["main"].checked_type.ret_type))  # type: ignore[attr-defined]
