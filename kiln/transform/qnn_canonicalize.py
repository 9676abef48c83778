"""QnnCanonicalizeOps: lower ``qnn.*`` calls to plain operators (TVM's ``relay.qnn.transform``
``CanonicalizeOps``; ``Legalize`` is the same lowering here).

Each ``qnn`` call is replaced, children first, by the plain-operator computation of
:func:`kiln.op.qnn_lower.lower_qnn`, so the result builds with every target.
"""

from __future__ import annotations

from kiln.ir.expr import Call, Expr, Function, Op
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order, rewrite
from kiln.op.qnn_lower import lower_qnn
from kiln.transform.infer_type import infer_type
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo
from kiln.transform.rewrite import ensure_types

__all__ = ["QnnCanonicalizeOps", "QnnLegalize", "module_has_qnn", "qnn_canonicalize"]


def _lower(new: Expr, old: Expr) -> Expr | None:
    if not (isinstance(new, Call) and isinstance(new.op, Op) and new.op.name.startswith("qnn.")):
        return None
    ensure_types(new)
    out = lower_qnn(new)
    if out is not None:
        ensure_types(out)
    return out


def module_has_qnn(mod: IRModule) -> bool:
    """Whether a function of ``mod`` calls a ``qnn.*`` operator."""
    return any(isinstance(n, Call) and isinstance(n.op, Op) and n.op.name.startswith("qnn.")
               for _, fn in mod.items() for n in post_order(fn))


def qnn_canonicalize(fn: Function) -> Function:
    """``fn`` (typed; not modified) with every ``qnn.*`` call lowered to plain operators."""
    out = rewrite(fn, _lower)
    assert isinstance(out, Function)
    return out


def _pass(name: str) -> ModulePass:
    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        if not module_has_qnn(mod):
            return mod  # nothing to lower: no re-typing
        typed = infer_type(mod)
        out = typed.copy()
        for gv, fn in typed.items():
            out[gv] = qnn_canonicalize(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(0, name, ("InferType",)))


def QnnCanonicalizeOps() -> ModulePass:
    """Lower ``qnn.*`` calls to plain operators (TVM's ``relay.qnn.transform.CanonicalizeOps``)."""
    return _pass("QnnCanonicalizeOps")


def QnnLegalize() -> ModulePass:
    """TVM's ``relay.qnn.transform.Legalize``: here the same lowering as
    :func:`QnnCanonicalizeOps` (Kiln has no target-specific qnn rewrites)."""
    return _pass("QnnLegalize")
