"""PartitionGraph: lift each annotated region into a global function for its external compiler.

TVM's ``PartitionGraph``, in the same steps so names and signatures come out as TVM's:

1. a ``compiler_end`` on a tuple becomes a tuple of ``compiler_end`` s (no tuples of tuples);
2. ``"default"`` annotations are removed (those nodes stay with Kiln's pipeline);
3. every region becomes a global function ``<target>_<func>_<region id>`` whose parameters are
   ``%<target>_<id>_i<k>`` (one per distinct value entering it; constants are bound inside), whose
   result is its single output or a tuple of its outputs, with attributes ``Inline=1``,
   ``Compiler="<target>"``, ``global_symbol`` and ``Primitive=1``; the region is replaced by a call
   (and projections of it for several outputs); before it gets those attributes, a function
   registered as ``relay.ext.<target>.optimize`` (``kiln.register_func``) runs on it, as a
   module of one typed ``main``;
4. those functions are renamed ``tvmgen_<mod_name>_<name>`` (characters other than letters,
   digits and ``_`` become ``_``), which is also their ``global_symbol``: the kernel symbol the
   build gives the external codegen.

Examples
--------
>>> mod = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget(["kiln_c"])(mod)))  # doctest: +SKIP
>>> # def @tvmgen_default_kiln_c_main_0(%kiln_c_0_i0: ..., Inline=1, Compiler="kiln_c",
>>> #     global_symbol="tvmgen_default_kiln_c_main_0", Primitive=1) -> ...
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.visitor import rewrite
from kiln.runtime.func_registry import get_registered_func
from kiln.transform.annotated_regions import AnnotatedRegion, region_set
from kiln.transform.annotation import (
    DEFAULT_TARGET,
    CompilerAttrs,
    annotation_target,
    compiler_end,
    is_compiler_begin,
    is_compiler_end,
)
from kiln.transform.infer_type import InferType, infer_type
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo, Sequential

__all__ = ["PartitionGraph", "mangle_name", "partition_graph"]


def mangle_name(mod_name: str, name: str) -> str:
    """``tvmgen_<mod_name>_<name>`` with every character but letters, digits and ``_`` as ``_``."""
    prefix = f"tvmgen_{mod_name}" if mod_name else "tvmgen"
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{prefix}_{name}")


def _map_functions(mod: IRModule, fn_rewrite: Callable[[Expr, Expr], Expr | None]) -> IRModule:
    out = mod.copy()
    for gv, fn in mod.items():
        body = rewrite(fn.body, fn_rewrite)
        if body is not fn.body:
            out[gv] = Function(fn.params, body, fn.ret_type, attrs=fn.attrs)
    return infer_type(out)


def flatten_tuple_outputs(mod: IRModule) -> IRModule:
    """``compiler_end(tuple)`` -> ``tuple(compiler_end(f) for each field)`` in every function."""

    def flatten(new: Expr, old: Expr) -> Expr | None:
        if is_compiler_end(new) and isinstance(new.args[0], Tuple):
            target = annotation_target(new)
            return Tuple([compiler_end(f, target) for f in new.args[0].fields])
        return None

    return _map_functions(mod, flatten)


def remove_default_annotations(mod: IRModule) -> IRModule:
    """Drop the ``"default"`` annotations of every function."""

    def remove(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call) and isinstance(new.attrs, CompilerAttrs) \
                and new.attrs.compiler == DEFAULT_TARGET:
            return new.args[0]
        return None

    return _map_functions(mod, remove)


@dataclass
class _RegionFunction:
    """What is known of a region's function while it is built (TVM's RegionFuncMetadata)."""

    call: Call | None = None
    args: list[tuple[Var, Expr]] = field(default_factory=list)
    inputs: dict[int, Var] = field(default_factory=dict)  # id(value entering) -> parameter
    outputs: dict[int, Expr] = field(default_factory=dict)  # id(region output) -> its value


def _bind_constants(params: list[Var], body: Expr, args: list[Expr]) -> tuple[list[Var], Expr, list[Expr]]:
    """Substitute constant (or all-constant tuple) arguments into the body."""
    memo: dict[int, Expr] = {}
    kept_params: list[Var] = []
    kept_args: list[Expr] = []
    for p, a in zip(params, args):
        if isinstance(a, Constant) or (isinstance(a, Tuple) and
                                       all(isinstance(f, Constant) for f in a.fields)):
            memo[id(p)] = a
        else:
            kept_params.append(p)
            kept_args.append(a)
    if memo:
        body = rewrite(body, lambda new, old: None, memo=memo)
    return kept_params, body, kept_args


class _Partitioner:
    """TVM's ``Partitioner``: one pass over each function, creating region functions."""

    def __init__(self, mod: IRModule, bind_constants: bool) -> None:
        self.mod = mod
        self.bind_constants = bind_constants
        self.regions = {gv.name_hint: region_set(fn, gv.name_hint) for gv, fn in mod.items()}
        self.meta: dict[int, _RegionFunction] = {}
        self.memo: dict[int, Expr] = {}

    def region_of(self, expr: Expr) -> AnnotatedRegion:
        for regions in self.regions.values():
            region = regions.get(expr)
            if region is not None:
                return region
        raise AssertionError(f"{expr._short()} is in no annotated region")

    def info(self, region: AnnotatedRegion) -> _RegionFunction:
        return self.meta.setdefault(id(region), _RegionFunction())

    def visit(self, expr: Expr) -> Expr:
        return rewrite(expr, self.rewrite_node, memo=self.memo)

    def rewrite_node(self, new: Expr, old: Expr) -> Expr | None:
        if not (isinstance(old, Call) and isinstance(old.attrs, CompilerAttrs)):
            return None
        assert isinstance(new, Call)
        if is_compiler_begin(old):
            return self.region_input(old, new)
        assert is_compiler_end(old)
        region = self.region_of(old)
        info = self.info(region)
        if info.call is None:
            self.create_function(region, old)
        return info.outputs[id(old.args[0])]

    def region_input(self, begin: Call, new: Call) -> Var:
        parent = begin.args[0]
        while is_compiler_begin(parent) or is_compiler_end(parent):
            parent = parent.args[0]
        region = self.region_of(begin)
        info = self.info(region)
        if id(parent) in info.inputs:
            return info.inputs[id(parent)]
        index = next(i for i, b in enumerate(region.ins) if b is begin)
        var = Var(f"{region.target}_{region.id}_i{index}", begin.checked_type)
        info.args.append((var, new.args[0]))
        info.inputs[id(parent)] = var
        return var

    def create_function(self, region: AnnotatedRegion, end: Call) -> None:
        fields: list[Expr] = []
        index_of: dict[int, int] = {}
        outputs: list[Expr] = []
        for out in region.outs:
            ret = out.args[0]
            if id(ret) not in index_of:
                index_of[id(ret)] = len(fields)
                outputs.append(ret)
                fields.append(self.visit(ret))
        call = self.region_call(region, fields, end)
        info = self.info(region)
        if len(outputs) == 1:
            info.outputs[id(outputs[0])] = call
        else:
            for ret in outputs:
                info.outputs[id(ret)] = TupleGetItem(call, index_of[id(ret)])

    def region_call(self, region: AnnotatedRegion, fields: list[Expr], end: Call) -> Call:
        info = self.info(region)
        params = [v for v, _ in info.args]
        args = [a for _, a in info.args]
        body = fields[0] if len(fields) == 1 else Tuple(fields)
        if self.bind_constants:
            params, body, args = _bind_constants(params, body, args)
        # a tuple result gets its type from InferType, as in TVM
        ret_type = end.args[0].checked_type if len(fields) == 1 else None
        optimize = get_registered_func(f"relay.ext.{region.target}.optimize")
        if optimize is not None:  # the compiler's own passes, before the attributes (TVM)
            opt = optimize(infer_type(IRModule.from_expr(Function(params, body, ret_type))))
            params, body, ret_type = list(opt["main"].params), opt["main"].body, opt["main"].ret_type
        name = region.name
        fn = Function(params, body, ret_type, attrs={
            "Inline": 1, "Compiler": region.target, "global_symbol": name, "Primitive": 1})
        gv = GlobalVar(_fresh_name(self.mod, name))
        self.mod[gv] = fn
        call = Call(gv, args)
        info.call = call
        return call

    def run(self) -> IRModule:
        for gv, fn in list(self.mod.items()):
            body = self.visit(fn.body)
            if body is not fn.body:
                self.mod[gv] = Function(fn.params, body, fn.ret_type, attrs=fn.attrs)
        return infer_type(self.mod)


def _fresh_name(mod: IRModule, name: str) -> str:
    if name not in mod:
        return name
    k = 1
    while f"{name}_{k}" in mod:
        k += 1
    return f"{name}_{k}"


def mangle_external_functions(mod: IRModule, mod_name: str) -> IRModule:
    """Rename every ``Compiler`` function to ``tvmgen_<mod_name>_<name>`` (also its symbol)."""
    renamed = {gv.name_hint: GlobalVar(mangle_name(mod_name, gv.name_hint))
               for gv, fn in mod.items() if fn.attrs.get("Compiler")}
    if not renamed:
        return mod

    def rename(new: Expr, old: Expr) -> Expr | None:
        if isinstance(new, Call) and isinstance(new.op, GlobalVar) and new.op.name_hint in renamed:
            return Call(renamed[new.op.name_hint], new.args, new.attrs, source_names=new.source_names)
        return None

    out = IRModule(attrs=mod.attrs)
    for gv, fn in mod.items():
        body = rewrite(fn.body, rename)
        if gv.name_hint in renamed:
            new_gv = renamed[gv.name_hint]
            attrs = fn.attrs.with_attr("global_symbol", new_gv.name_hint)
            out[new_gv] = Function(fn.params, body, fn.ret_type, attrs=attrs)
        else:
            out[gv] = fn if body is fn.body else Function(fn.params, body, fn.ret_type, attrs=fn.attrs)
    return out


def partition_graph(mod: IRModule, mod_name: str = "default", bind_constants: bool = True) -> IRModule:
    """Lift the annotated regions of ``mod`` (not modified) into external functions.

    Parameters
    ----------
    mod : IRModule
        A module annotated by ``AnnotateTarget`` (and usually ``MergeCompilerRegions``).
    mod_name : str
        Module name in the functions' names (``tvmgen_<mod_name>_...``).
    bind_constants : bool
        Bind constants entering a region inside its function instead of passing them in.

    Returns
    -------
    IRModule
        The partitioned, typed module.
    """
    out = remove_default_annotations(flatten_tuple_outputs(infer_type(mod)))
    out = _Partitioner(out.copy(), bind_constants).run()
    return infer_type(mangle_external_functions(out, mod_name))


def PartitionGraph(mod_name: str = "default", bind_constants: bool = True) -> Sequential:
    """The pass lifting annotated regions into ``Compiler`` functions (then InferType).

    Parameters
    ----------
    mod_name : str
        Module name in the functions' names and symbols (``tvmgen_<mod_name>_<target>_...``).
    bind_constants : bool
        Bind constants (weights) entering a region inside its function, so the external codegen
        sees them (default, as TVM); otherwise they are passed in as arguments.

    Returns
    -------
    Sequential
        ``PartitionGraph`` followed by ``InferType``.

    Examples
    --------
    >>> mod = PartitionGraph()(mod)  # doctest: +SKIP
    """

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        return partition_graph(mod, mod_name, bind_constants)

    return Sequential([ModulePass(run, PassInfo(0, "PartitionGraph")), InferType()],
                      name="PartitionGraph")
