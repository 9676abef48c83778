"""Pass instruments (TVM's ``tvm.instrument`` / ``tvm.ir.instrument``) and the ``PrintIR`` pass.

:func:`pass_instrument` turns a plain class with any of the hooks ``enter_pass_ctx``,
``exit_pass_ctx``, ``should_run``, ``run_before_pass``, ``run_after_pass`` into a
:class:`~kiln.transform.pass_infra.PassInstrument`, as TVM's decorator does; the hooks it does not
define keep the base behaviour (run every pass, do nothing). :class:`PrintBeforeAll` and
:class:`PrintAfterAll` print the module around every pass; :func:`PrintIR` is a pass that prints
the module it is given and returns it unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from kiln.ir.module import IRModule
from kiln.transform.pass_infra import (
    ModulePass,
    PassContext,
    PassInfo,
    PassInstrument,
    PassTimingInstrument,
)

__all__ = ["PassInstrument", "PassPrintingInstrument", "PassTimingInstrument", "PrintAfterAll",
           "PrintBeforeAll", "PrintIR", "pass_instrument"]

_log = logging.getLogger("kiln.transform")


def pass_instrument(pi_cls: type | None = None, name: str | None = None) -> Any:
    """Make a class of pass hooks a :class:`PassInstrument` (``@pass_instrument`` or ``(name=...)``).

    Parameters
    ----------
    pi_cls : type, optional
        The class; its instances become instruments usable in ``PassContext(instruments=[...])``.
    name : str, optional
        The instrument's name (the class name by default).
    """
    def wrap(cls: type) -> type:
        if issubclass(cls, PassInstrument):
            return cls
        inst_name = name or cls.__name__
        wrapped = type(cls.__name__, (cls, PassInstrument), {
            "__doc__": cls.__doc__, "__module__": cls.__module__, "name": inst_name,
        })
        return wrapped

    return wrap if pi_cls is None else wrap(pi_cls)


class PassPrintingInstrument(PassInstrument):
    """Print the module before the passes named in ``print_before_pass_names`` and after those in
    ``print_after_pass_names``."""

    def __init__(self, print_before_pass_names: list[str] | None = None,
                 print_after_pass_names: list[str] | None = None) -> None:
        self.print_before = set(print_before_pass_names or ())
        self.print_after = set(print_after_pass_names or ())

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Print ``mod`` when ``info.name`` is listed."""
        if info.name in self.print_before:
            print(f"Print IR before: {info.name}\n{mod}\n\n")

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Print ``mod`` when ``info.name`` is listed."""
        if info.name in self.print_after:
            print(f"Print IR after: {info.name}\n{mod}\n\n")


class PrintBeforeAll(PassInstrument):
    """Print the module before every pass."""

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Print ``mod`` with the pass's name."""
        print(f"Before Running Pass: {info.name}\n{mod}\n")


class PrintAfterAll(PassInstrument):
    """Print the module after every pass."""

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Print ``mod`` with the pass's name."""
        print(f"After Running Pass: {info.name}\n{mod}\n")


def PrintIR(header: str = "", show_meta_data: bool = False) -> ModulePass:
    """A pass that prints the module it is given (after ``header``) and returns it unchanged.

    Parameters
    ----------
    header : str
        A line printed before the module.
    show_meta_data : bool
        Accepted for TVM compatibility (Kiln prints constants inline).
    """
    def print_ir(mod: IRModule, ctx: PassContext) -> IRModule:
        print(f"PrintIR({header}):\n{mod}")
        return mod

    return ModulePass(print_ir, PassInfo(0, "PrintIR"))
