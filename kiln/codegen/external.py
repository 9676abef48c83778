"""External codegens: compile the ``Compiler=<name>`` functions ``PartitionGraph`` made.

The build hands each external function to the codegen registered for its compiler
(:func:`register_codegen`); the codegen returns a kernel library whose kernels are named by the
functions' ``global_symbol`` and follow the usual kernel ABI (inputs, then outputs, written in
place). The build imports those libraries into the main one, and the graph calls them like any
fused kernel. :func:`lower_external` is the build's side of that contract.

Kiln ships one real external codegen, :func:`c_codegen` (targets ``kiln_c`` and ``ccompiler``):
each partitioned function becomes one C function, written op by op from a table of C templates
(float32 tensors; the ops and attributes :mod:`kiln.codegen.external_kiln_c` declares), compiled
as its own shared library with its own flags (``-O2 -ffp-contract=off``, reductions accumulated in
double) apart from the main C build. Constants the partition bound into a function (weights) are
not pasted into the C source: the library keeps them and passes them after the outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from kiln.errors import CompileError
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order, rewrite
from kiln.runtime.module import Kernel, KernelLibrary, Signature, check_args
from kiln.transform.external_target import UNAVAILABLE_TARGETS
from kiln.transform.infer_type import infer_expr_type

if TYPE_CHECKING:
    from kiln.runtime.native import PlanEntry

__all__ = [
    "EXTERNAL_C_FLAGS",
    "ExternalCodegen",
    "ExternalLibrary",
    "build_external",
    "c_codegen",
    "c_source",
    "external_functions",
    "lower_external",
    "register_codegen",
    "registered_codegens",
]

# Flags of the separately built region libraries (appended to the compiler driver's base flags).
EXTERNAL_C_FLAGS: tuple[str, ...] = ("-O2", "-ffp-contract=off")

ExternalCodegen = Callable[[Mapping[str, Function]], KernelLibrary]
_CODEGENS: dict[str, ExternalCodegen] = {}


def register_codegen(compiler: str, codegen: ExternalCodegen, override: bool = False) -> None:
    """Register the codegen of external compiler ``compiler``.

    Parameters
    ----------
    compiler : str
        The ``Compiler`` attribute value it handles.
    codegen : callable
        ``codegen({global_symbol: Function}) -> KernelLibrary``.
    override : bool
        Replace an existing registration instead of failing.
    """
    if compiler in _CODEGENS and not override:
        raise CompileError(f"an external codegen for {compiler!r} is already registered")
    _CODEGENS[compiler] = codegen


def _load_kiln_c() -> None:
    # Kiln's own target (its C templates and codegens) registers into this module's tables; it
    # imports this module, so it is loaded on first use (``import kiln`` loads it too).
    from kiln.codegen import external_kiln_c  # noqa: F401


def registered_codegens() -> list[str]:
    """Names of the compilers with a registered external codegen (Kiln's own included)."""
    _load_kiln_c()
    return sorted(_CODEGENS)


def build_external(functions: Mapping[str, Function], compiler: str) -> KernelLibrary:
    """Compile the external functions of one compiler into a kernel library.

    Parameters
    ----------
    functions : dict of str to Function
        The typed functions by kernel symbol (their ``global_symbol``).
    compiler : str
        Their ``Compiler`` attribute.

    Returns
    -------
    KernelLibrary
        One kernel per function, named by its symbol (inputs, then outputs).

    Raises
    ------
    CompileError
        No codegen for ``compiler`` (for TVM's ``dnnl`` and the like: not available in Kiln), or
        the codegen failed.
    """
    known = ", ".join(registered_codegens()) or "none"
    codegen = _CODEGENS.get(compiler)
    if codegen is None:
        if compiler in UNAVAILABLE_TARGETS:
            raise CompileError(f"external codegen {compiler!r} is not available in Kiln "
                               f"({UNAVAILABLE_TARGETS[compiler]}); Kiln's codegens: {known}")
        raise CompileError(f"no external codegen is registered for Compiler={compiler!r} "
                           f"(functions {', '.join(functions)}); Kiln's codegens: {known}")
    return codegen(functions)


def _called_external(mod: IRModule) -> dict[str, Function]:
    """The ``Compiler`` functions ``main`` calls, by global name, in call order."""
    out: dict[str, Function] = {}
    for node in post_order(mod["main"].body, into_functions=False):
        if isinstance(node, Call) and isinstance(node.op, GlobalVar) and node.op.name_hint in mod:
            fn = mod[node.op.name_hint]
            compiler = fn.attrs.get("Compiler")
            if isinstance(compiler, str) and compiler:
                out[node.op.name_hint] = fn
    return out


def external_functions(mod: IRModule) -> dict[str, dict[str, Function]]:
    """``{compiler: {global_symbol: Function}}`` for the ``Compiler`` functions ``main`` calls."""
    out: dict[str, dict[str, Function]] = {}
    for name, fn in _called_external(mod).items():
        symbol = str(fn.attrs.get("global_symbol") or name)
        out.setdefault(str(fn.attrs["Compiler"]), {})[symbol] = fn
    return out


def _outline_inline_external(mod: IRModule) -> IRModule:
    """``mod`` with each ``Compiler`` function literal that ``main`` calls made a global function
    named by its ``global_symbol`` (TVM's build takes external functions inline or global)."""
    found: dict[str, Function] = {}

    def outline(new: Expr, old: Expr) -> Expr | None:
        if not (isinstance(new, Call) and isinstance(new.op, Function)):
            return None
        compiler = new.op.attrs.get("Compiler")
        if not (isinstance(compiler, str) and compiler):
            return None
        symbol = str(new.op.attrs.get("global_symbol") or f"{compiler}_{len(found)}")
        if symbol in mod or (symbol in found and found[symbol] is not new.op):
            raise CompileError(f"external function symbol {symbol!r} (Compiler={compiler!r}) names "
                               "two different functions")
        found[symbol] = new.op
        out = Call(GlobalVar(symbol), new.args, new.attrs, source_names=new.source_names)
        if old.has_type:
            out._set_checked_type(old.checked_type)
        return out

    main = rewrite(mod["main"], outline, into_functions=False)
    if not found:
        return mod
    out = mod.copy()
    for symbol, fn in found.items():
        out[symbol] = fn
    out["main"] = main
    return out


def lower_external(mod: IRModule) -> tuple[Function, list[KernelLibrary]]:
    """Compile the external functions ``main`` calls; the build's hook.

    Parameters
    ----------
    mod : IRModule
        The optimised, typed module (``main`` fused, external functions still global).

    Returns
    -------
    main : Function
        ``main`` with every call ``@f(args)`` of an external function replaced by a call of
        ``f`` as a literal (it keeps ``Compiler``, ``global_symbol`` and ``Primitive=1``): graph
        codegen emits one node per such call, its ``func_name`` being the ``global_symbol``.
    libraries : list of KernelLibrary
        One library per compiler; the build imports them into the main library.
    """
    mod = _outline_inline_external(mod)
    # Constants a region uses become extra parameters, passed by main: graph codegen then lifts
    # them into the build's params like any weight, and the region kernels hold no data (so the
    # whole build exports as one library).
    literal: dict[str, tuple[Function, list[Constant]]] = {
        name: _lift_constants(fn) for name, fn in _called_external(mod).items()}
    lifted = mod.copy()
    for name, (fn, _) in literal.items():
        lifted[name] = fn
    libraries = [build_external(functions, compiler)
                 for compiler, functions in external_functions(lifted).items()]

    def inline_callee(new: Expr, old: Expr) -> Expr | None:
        out = new
        if isinstance(new, Call) and isinstance(new.op, GlobalVar) and new.op.name_hint in literal:
            fn, constants = literal[new.op.name_hint]
            out = Call(fn, [*new.args, *constants], new.attrs, source_names=new.source_names)
        if out is not old and not out.has_type and old.has_type:
            out._set_checked_type(old.checked_type)  # same value, same type
        return out

    main = rewrite(mod["main"], inline_callee, into_functions=False)
    assert isinstance(main, Function)
    return main, libraries


def _lift_constants(fn: Function) -> tuple[Function, list[Constant]]:
    """``fn`` with each distinct constant replaced by a new trailing parameter, and the constants."""
    constants: list[Constant] = []
    params: list[Var] = []
    memo: dict[int, Expr] = {}
    for node in post_order(fn.body, into_functions=False):
        if isinstance(node, Constant) and id(node) not in memo:
            var = Var(f"{fn.attrs.get('global_symbol', 'region')}_const_{len(constants)}",
                      node.tensor_type)
            memo[id(node)] = var
            constants.append(node)
            params.append(var)
    if not constants:
        return fn, []
    body = rewrite(fn.body, lambda new, old: None, memo=memo, into_functions=False)
    out = Function([*fn.params, *params], body, fn.ret_type, attrs=fn.attrs)
    infer_expr_type(out)
    return out, constants


# --- the library and its kernels ---------------------------------------------------------------

def _flat_types(ty: Type, where: str) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f, where)]
    if isinstance(ty, TensorType):
        return [ty]
    raise CompileError(f"{where}: cannot pass a value of type {ty} to an external kernel")


@dataclass
class _KernelInfo:
    signature: Signature
    constants: tuple[np.ndarray, ...]


class _ExternalKernel(Kernel):
    """A region kernel: the graph's arrays, then the constants the library holds."""

    def __init__(self, name: str, native: Kernel, info: _KernelInfo) -> None:
        super().__init__(name)
        self.native = native
        self.info = info

    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        check_args(self.name, arrays, self.info.signature)
        return self.native.bind([*arrays, *self.info.constants])

    def plan_entry(self, arrays: Sequence[np.ndarray]) -> PlanEntry | None:
        """The region kernel bound to ``arrays`` (and its constants) as a run-plan step, or None
        when its code is not a compiled kernel."""
        from kiln.runtime.native import NativeKernel

        check_args(self.name, arrays, self.info.signature)
        if not isinstance(self.native, NativeKernel):
            return None
        return self.native.plan_entry([*arrays, *self.info.constants])


class ExternalLibrary(KernelLibrary):
    """Region kernels compiled by an external codegen, with the constants they need.

    Parameters
    ----------
    compiler : str
        The external compiler that built it.
    native : KernelLibrary
        The compiled code.
    kernels : dict of str to (signature, constants)
        Per symbol, the (shape, dtype) of its inputs and outputs and its bound constants.
    """

    type_key = "external"

    def __init__(self, compiler: str, native: KernelLibrary,
                 kernels: Mapping[str, tuple[Signature, Sequence[np.ndarray]]]) -> None:
        super().__init__()
        self.compiler = compiler
        self.native = native
        self.infos = {name: _KernelInfo(sig, tuple(np.ascontiguousarray(c) for c in consts))
                      for name, (sig, consts) in kernels.items()}

    def kernel(self, name: str) -> Kernel | None:
        """The region kernel ``name`` (a function's ``global_symbol``), or None."""
        info = self.infos.get(name)
        native = self.native.kernel(name) if info is not None else None
        return None if native is None or info is None else _ExternalKernel(name, native, info)

    def __repr__(self) -> str:
        return f"ExternalLibrary({self.compiler}: {', '.join(self.infos)})"


# --- C code for one region ---------------------------------------------------------------------

@dataclass(frozen=True)
class Buf:
    """A tensor in the generated C: a pointer expression and its type."""

    name: str
    ty: TensorType

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.ty.shape)


CEmitter = Callable[[Call, list[Buf], list[Buf]], list[str]]
_C_EMITTERS: dict[str, CEmitter] = {}


def c_emitter(*op_names: str) -> Callable[[CEmitter], CEmitter]:
    """Register the C template of operators (see :mod:`kiln.codegen.external_kiln_c`).

    The template gets the call, its input buffers and its output buffers, and returns C
    statements (without indentation) computing the outputs.
    """

    def wrap(fn: CEmitter) -> CEmitter:
        for name in op_names:
            _C_EMITTERS[name] = fn
        return fn

    return wrap


def _float_type(ty: Type, where: str) -> TensorType:
    if not isinstance(ty, TensorType) or ty.dtype != "float32":
        raise CompileError(f"{where}: the C region codegen handles float32 tensors, got {ty}")
    return ty


class _RegionWriter:
    """Writes the C function of one region, node by node in execution order."""

    def __init__(self, symbol: str, fn: Function) -> None:
        self.symbol = symbol
        self.fn = fn
        self.bufs: dict[int, list[Buf]] = {}
        self.constants: list[np.ndarray] = []
        self.temps: list[Buf] = []
        self.lines: list[str] = []
        self.keep: list[Expr] = []

    def arg(self, index: int, ty: TensorType, const: bool) -> Buf:
        qual = "const float*" if const else "float*"
        return Buf(f"(({qual})args[{index}])", ty)

    def write(self) -> tuple[str, Signature, list[np.ndarray]]:
        where = f"external function {self.symbol}"
        in_types: list[TensorType] = []
        for p in self.fn.params:  # tuple parameters arrive flattened, as the graph passes them
            what = f"{where}: parameter %{p.name_hint}"
            flat = [_float_type(t, what) for t in _flat_types(p.checked_type, what)]
            self.bufs[id(p)] = [self.arg(len(in_types) + k, t, True) for k, t in enumerate(flat)]
            in_types.extend(flat)
        out_exprs = list(self.fn.body.fields) if isinstance(self.fn.body, Tuple) else [self.fn.body]
        out_types = [_float_type(t, f"{where}: result") for e in out_exprs
                     for t in _flat_types(e.checked_type, where)]
        outputs = [self.arg(len(in_types) + k, t, False) for k, t in enumerate(out_types)]
        direct = self.direct_outputs(out_exprs, outputs)
        constant_base = len(in_types) + len(out_types)
        for node in post_order(self.fn.body, into_functions=False):
            self.keep.append(node)
            if isinstance(node, Constant):
                ty = _float_type(node.checked_type, f"{where}: constant")
                self.bufs[id(node)] = [self.arg(constant_base + len(self.constants), ty, True)]
                self.constants.append(node.value)
            elif isinstance(node, Tuple):
                self.bufs[id(node)] = [b for f in node.fields for b in self.bufs[id(f)]]
            elif isinstance(node, TupleGetItem):
                self.bufs[id(node)] = [self.bufs[id(node.tuple_value)][node.index]]
            elif isinstance(node, Call):
                self.call(node, direct.get(id(node)), where)
            elif not isinstance(node, (Var, Op)):
                raise CompileError(f"{where}: cannot generate C for {type(node).__name__} nodes")
        copies = [b for e in out_exprs for b in self.bufs[id(e)]]
        for dst, src in zip(outputs, copies):
            if src.name != dst.name:
                self.lines.append(f"memcpy({dst.name}, {src.name}, {dst.size}u * sizeof(float));")
        signature = tuple((t.shape, t.dtype) for t in in_types + out_types)
        return self.source(), signature, self.constants

    def direct_outputs(self, out_exprs: list[Expr], outputs: list[Buf]) -> dict[int, list[Buf]]:
        """Calls whose whole result is a function output write straight into the output."""
        direct: dict[int, list[Buf]] = {}
        k = 0
        for e in out_exprs:
            n = len(_flat_types(e.checked_type, self.symbol))
            if isinstance(e, Call) and id(e) not in direct:
                direct[id(e)] = outputs[k:k + n]
            k += n
        return direct

    def call(self, call: Call, into: list[Buf] | None, where: str) -> None:
        if not isinstance(call.op, Op) or call.op.name not in _C_EMITTERS:
            raise CompileError(f"{where}: no C template for {call._short()}")
        ins = [b for a in call.args for b in self.bufs[id(a)]]
        outs = into
        if outs is None:
            outs = []
            for t in _flat_types(call.checked_type, where):
                buf = Buf(f"t{len(self.temps)}", _float_type(t, f"{where}: {call._short()}"))
                self.temps.append(buf)
                outs.append(buf)
        self.lines.append(f"/* {call.op.name} -> {', '.join(str(b.ty.shape) for b in outs)} */")
        self.lines.extend(_C_EMITTERS[call.op.name](call, ins, outs))
        self.bufs[id(call)] = outs

    def source(self) -> str:
        head = [f"int32_t {self.symbol}(void** args) {{"]
        alloc = [f"  float* {t.name} = (float*)malloc({max(t.size, 1)}u * sizeof(float));"
                 for t in self.temps]
        check = " || ".join(f"!{t.name}" for t in self.temps) or "0"
        body = ["  int32_t rc = 0;", f"  if ({check}) {{", "    rc = -1;", "  } else {"]
        body += ["    " + line for line in "\n".join(self.lines).splitlines()]
        body += ["  }"] + [f"  free({t.name});" for t in self.temps] + ["  return rc;", "}"]
        return "\n".join(head + alloc + body)


_C_PRELUDE = """/* Generated by Kiln's external C codegen: one function per partitioned region. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
"""


def c_source(functions: Mapping[str, Function]) -> tuple[str, dict[str, tuple[Signature, list[np.ndarray]]]]:
    """The C source of the region functions, with each kernel's signature and constants.

    Parameters
    ----------
    functions : dict of str to Function
        Typed region functions by symbol.

    Returns
    -------
    (str, dict)
        The source, and per symbol its (signature, constants).
    """
    _load_kiln_c()
    parts = [_C_PRELUDE]
    kernels: dict[str, tuple[Signature, list[np.ndarray]]] = {}
    for symbol, fn in functions.items():
        if not symbol.isidentifier():
            raise CompileError(f"external function symbol {symbol!r} is not a C identifier")
        text, signature, constants = _RegionWriter(symbol, fn).write()
        parts.append(text)
        kernels[symbol] = (signature, constants)
    return "\n\n".join(parts) + "\n", kernels


def c_codegen(functions: Mapping[str, Function], compiler: str = "kiln_c") -> ExternalLibrary:
    """Kiln's external C codegen: the region functions as one separately compiled library.

    Parameters
    ----------
    functions : dict of str to Function
        Typed region functions by symbol.
    compiler : str
        The compiler name recorded on the library.

    Returns
    -------
    ExternalLibrary
        The compiled kernels (built with :data:`EXTERNAL_C_FLAGS`, cached by content).
    """
    from kiln.codegen.compiler import compile_cached
    from kiln.runtime.native import NativeLibrary

    source, kernels = c_source(functions)
    so = compile_cached(source, f"{compiler}_regions", EXTERNAL_C_FLAGS)
    native = NativeLibrary(so, sources=[so.with_suffix(".c")])
    return ExternalLibrary(compiler, native, kernels)

