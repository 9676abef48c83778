"""Pass infrastructure: PassContext, module and function passes, Sequential, instruments.

A pass is a callable ``IRModule -> IRModule`` that never mutates its input. Passes carry a
:class:`PassInfo` (name, minimum opt level, required passes); :class:`Sequential` runs those enabled
by the current :class:`PassContext`: ``opt_level`` at or above the pass's, plus ``required_pass``,
minus ``disabled_pass``. Instruments see every pass run (timing, IR dumps, verification). A failing
pass raises :class:`~kiln.errors.PassError` naming it and the passes that ran before it.
"""

from __future__ import annotations

import abc
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kiln import progress
from kiln.config import settings
from kiln.errors import KilnError, PassError
from kiln.ir.expr import Function
from kiln.ir.module import IRModule

__all__ = [
    "DumpIR",
    "FunctionPass",
    "ModulePass",
    "Pass",
    "PassContext",
    "PassInfo",
    "PassInstrument",
    "PassTimingInstrument",
    "Sequential",
    "function_pass",
    "module_pass",
]


@dataclass(frozen=True)
class PassInfo:
    """Name, minimum opt level and prerequisites of a pass."""

    opt_level: int
    name: str
    required: tuple[str, ...] = ()
    traceable: bool = False


class PassInstrument:
    """Hooks around every pass run under a :class:`PassContext` (TVM's ``PassInstrument``)."""

    def enter_pass_ctx(self) -> None:
        """Called when the context is entered."""

    def exit_pass_ctx(self) -> None:
        """Called when the context is left."""

    def should_run(self, mod: IRModule, info: PassInfo) -> bool:
        """Return False to skip the pass."""
        return True

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Called before a pass runs."""

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Called after a pass ran, with its result."""


class PassContext:
    """Configuration of the passes run inside a ``with`` block.

    Parameters
    ----------
    opt_level : int
        Passes whose minimum level is above this are skipped (default 2).
    required_pass : iterable of str
        Passes run whatever their level.
    disabled_pass : iterable of str
        Passes never run.
    config : dict
        Free-form options (e.g. ``{"relay.FuseOps.max_depth": 8}``).
    instruments : sequence of PassInstrument
        Hooks called around every pass.
    trace : ignored
        Accepted for TVM compatibility.

    Examples
    --------
    >>> with PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
    ...     lib = relay.build(mod, target="c", params=params)  # doctest: +SKIP
    """

    _stack: ClassVar[list[PassContext]] = []

    def __init__(
        self,
        opt_level: int = 2,
        required_pass: Iterable[str] | None = None,
        disabled_pass: Iterable[str] | None = None,
        trace: Any = None,
        config: dict[str, Any] | None = None,
        instruments: Sequence[PassInstrument] | None = None,
    ):
        self.opt_level = int(opt_level)
        self.required_pass = set(required_pass or ())
        self.disabled_pass = set(disabled_pass or ())
        self.config = dict(config or {})
        self.instruments = list(instruments or ())
        self.history: list[str] = []
        self._sequential_depth = 0  # Sequential passes running (progress reports the outermost)

    def __enter__(self) -> PassContext:
        self._enter_instruments()
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._exit_instruments()
        finally:
            PassContext._stack.pop()

    def _enter_instruments(self) -> None:
        """``enter_pass_ctx`` of each instrument; when one raises, those already entered exit, the
        instruments are cleared (disabled) and the error propagates (TVM's semantics)."""
        entered: list[PassInstrument] = []
        try:
            for inst in self.instruments:
                inst.enter_pass_ctx()
                entered.append(inst)
        except BaseException:
            self.instruments = []
            for inst in entered:
                inst.exit_pass_ctx()
            raise

    def _exit_instruments(self) -> None:
        """``exit_pass_ctx`` of each instrument; when one raises, the instruments are cleared (the
        ones after it do not exit) and the error propagates (TVM's semantics)."""
        try:
            for inst in self.instruments:
                inst.exit_pass_ctx()
        except BaseException:
            self.instruments = []
            raise

    @staticmethod
    def current() -> PassContext:
        """The innermost active context (a default one when none is active)."""
        if not PassContext._stack:
            PassContext._stack.append(PassContext())
        return PassContext._stack[-1]

    def pass_enabled(self, info: PassInfo) -> bool:
        """Whether a pass with this info runs under this context."""
        if info.name in self.disabled_pass:
            return False
        if info.name in self.required_pass:
            return True
        return info.opt_level <= self.opt_level

    def override_instruments(self, instruments: Sequence[PassInstrument]) -> None:
        """Replace the instruments: the old ones exit, the new ones enter (errors as in ``with``)."""
        self._exit_instruments()
        self.instruments = list(instruments)
        self._enter_instruments()


class Pass(abc.ABC):
    """Base class of passes: ``pass_(mod)`` runs it under the current context."""

    info: PassInfo

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise TypeError(f"pass {self.info.name} takes an IRModule, got {type(mod).__name__}")
        ctx = PassContext.current()
        for inst in ctx.instruments:
            if not inst.should_run(mod, self.info):
                return mod
        for inst in ctx.instruments:
            inst.run_before_pass(mod, self.info)
        try:
            out = self.transform_module(mod, ctx)
        except PassError:
            raise
        except KilnError as e:
            if not isinstance(self, Sequential) and e.args and isinstance(e.args[0], str):
                e.args = (f"{e.args[0]}\n  (in pass {self.info.name}; passes run before it: "
                          f"{', '.join(ctx.history[-8:]) or 'none'})", *e.args[1:])
            raise
        except Exception as e:
            before = ", ".join(ctx.history[-8:]) or "none"
            kind = type(e).__name__
            raise PassError(f"pass {self.info.name} failed ({kind}: {e}); passes run before it: "
                            f"{before}") from e
        if not isinstance(self, Sequential):
            ctx.history.append(self.info.name)
            if settings.verify_passes:
                from kiln.transform.verify import verify_module

                verify_module(out, after=self.info.name)
        for inst in ctx.instruments:
            inst.run_after_pass(out, self.info)
        return out

    @abc.abstractmethod
    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        """Apply the pass (subclasses implement this)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.name}, opt_level={self.info.opt_level})"


class ModulePass(Pass):
    """A pass given as a function ``(mod, ctx) -> mod``."""

    def __init__(self, func: Callable[[IRModule, PassContext], IRModule], info: PassInfo):
        self.func = func
        self.info = info

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = self.func(mod, ctx)
        if out is mod:
            out = mod.copy()
        return out


class FunctionPass(Pass):
    """A pass given as a function ``(func, mod, ctx) -> func`` applied to every function.

    Functions handed to an external compiler (``Compiler`` attribute) are left alone, as in TVM.
    """

    def __init__(self, func: Callable[[Function, IRModule, PassContext], Function], info: PassInfo):
        self.func = func
        self.info = info

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        for gv, fn in mod.items():
            if fn.attrs.get("Compiler") or fn.attrs.get("SkipOptimization"):
                continue
            out[gv] = self.func(fn, mod, ctx)
        return out


class Sequential(Pass):
    """Run passes in order, skipping those the current context disables.

    Parameters
    ----------
    passes : sequence of Pass
        The passes.
    opt_level : int
        Minimum opt level of the whole sequence.
    name : str
        Its name.
    required : sequence of str
        Names of passes it requires.
    """

    def __init__(
        self,
        passes: Sequence[Pass] | None = None,
        opt_level: int = 0,
        name: str = "sequential",
        required: Sequence[str] | None = None,
    ):
        self.passes = list(passes or ())
        self.info = PassInfo(opt_level, name, tuple(required or ()))

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        enabled = [p for p in self.passes if ctx.pass_enabled(p.info)]
        if ctx._sequential_depth:  # progress shows the outermost sequence only
            for p in enabled:
                mod = p(_run_required(p, mod))
            return mod
        ctx._sequential_depth += 1
        try:
            with progress.stage("passes", total=len(enabled), unit="passes") as st:
                for i, p in enumerate(enabled):
                    st.update(i, p.info.name)
                    mod = p(_run_required(p, mod))
                st.update(len(enabled))
        finally:
            ctx._sequential_depth -= 1
        return mod


def _run_required(p: Pass, mod: IRModule) -> IRModule:
    """Run the passes that ``p`` requires (``PassInfo.required``, e.g. ``InferType``) on ``mod``
    first, as TVM's ``Sequential`` does."""
    if not p.info.required:
        return mod
    import kiln.transform as passes

    for name in p.info.required:
        if name == "InferType" and all(fn.has_type for fn in mod.functions.values()):
            continue  # every function is typed already: InferType would add nothing
        make = getattr(passes, name, None)
        if make is None:
            raise PassError(f"pass {p.info.name} requires pass {name!r}, which Kiln does not have")
        mod = make()(mod)
    return mod


def _make_pass_decorator(kind: type) -> Callable[..., Any]:
    def decorator(
        pass_func: Callable[..., Any] | None = None,
        opt_level: int | None = None,
        name: str | None = None,
        required: Sequence[str] | None = None,
        traceable: bool = False,
    ) -> Any:
        if opt_level is None:
            raise ValueError("opt_level is required")

        def create(func: Any) -> Any:
            pass_name = name or str(getattr(func, "__name__", type(func).__name__))
            info = PassInfo(opt_level, pass_name, tuple(required or ()), traceable)
            if isinstance(func, type):  # a class with transform_module / transform_function

                @functools.wraps(func, updated=())
                def make(*args: Any, **kwargs: Any) -> Pass:
                    inst = func(*args, **kwargs)
                    method = "transform_module" if kind is ModulePass else "transform_function"
                    return kind(getattr(inst, method), info)

                return make
            return kind(func, info)

        return create(pass_func) if pass_func is not None else create

    return decorator


module_pass = _make_pass_decorator(ModulePass)
module_pass.__doc__ = "Decorate ``(mod, ctx) -> mod`` (or a class) to make a module pass."
function_pass = _make_pass_decorator(FunctionPass)
function_pass.__doc__ = "Decorate ``(func, mod, ctx) -> func`` (or a class) to make a function pass."


@dataclass
class PassTimingInstrument(PassInstrument):
    """Times every pass; ``render()`` prints a table (also TVM's ``PassTimingInstrument``)."""

    timings: list[tuple[str, float]] = field(default_factory=list)
    _start: list[tuple[float, int]] = field(default_factory=list)
    _composite: set[int] = field(default_factory=set)  # indices of passes that ran other passes

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        self._start.append((time.perf_counter(), len(self.timings)))

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        start, first = self._start.pop()
        if len(self.timings) > first:
            self._composite.add(len(self.timings))
        self.timings.append((info.name, time.perf_counter() - start))

    def render(self) -> str:
        """The timings as text, one pass a line, in run order (a sequence after its passes)."""
        lines = [f"{name:<32} {sec * 1e3:10.3f} ms" for name, sec in self.timings]
        total = sum(s for i, (_, s) in enumerate(self.timings) if i not in self._composite)
        return "\n".join([*lines, f"{'total (leaf passes)':<32} {total * 1e3:10.3f} ms"])


@dataclass
class DumpIR(PassInstrument):
    """Writes the module's text after every pass to ``<directory>/<NN>_<pass>.txt``."""

    directory: str | Path
    _count: int = 0

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        path = Path(self.directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"{self._count:03d}_{info.name}.txt").write_text(mod.astext())
        self._count += 1

