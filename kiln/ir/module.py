"""IRModule: the unit passes transform and the build compiles.

A module maps :class:`GlobalVar` names to :class:`Function` s, with ``"main"`` the entry point. Like
TVM's, ``mod[gv] = f`` adds or replaces a function in place; passes never do that to their input and
return a new module instead (:meth:`IRModule.copy`, :meth:`IRModule.with_function`).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, GlobalVar

__all__ = ["IRModule"]

# the functions a module starts with, keyed by GlobalVar or by name (dicts are invariant in the key)
FunctionMap = Mapping[GlobalVar, Function] | Mapping[str, Function] | Mapping[GlobalVar | str, Function]


class IRModule:
    """A collection of global functions.

    Parameters
    ----------
    functions : mapping of GlobalVar or str to Function, optional
        Initial functions.
    attrs : mapping, optional
        Module attributes.

    Examples
    --------
    >>> mod = IRModule()
    >>> mod["main"] = relay.Function([x], relay.nn.relu(x))  # doctest: +SKIP
    """

    def __init__(
        self,
        functions: FunctionMap | None = None,
        type_definitions: Any = None,
        attrs: Mapping[str, Any] | None = None,
    ):
        self._funcs: dict[GlobalVar, Function] = {}
        self.attrs: dict[str, Any] = dict(attrs or {})
        for key, fn in (functions or {}).items():
            self[key] = fn

    # --- access ----------------------------------------------------------------------------
    @property
    def functions(self) -> dict[GlobalVar, Function]:
        """The functions, keyed by GlobalVar (a copy: change the module with ``mod[gv] = f``)."""
        return dict(self._funcs)

    def items(self) -> ItemsView[GlobalVar, Function]:
        """``(GlobalVar, Function)`` pairs."""
        return self._funcs.items()

    def get_global_var(self, name: str) -> GlobalVar:
        """The GlobalVar called ``name``."""
        for gv in self._funcs:
            if gv.name_hint == name:
                return gv
        raise KeyError(f"the module has no function named {name!r}; it has "
                       f"{', '.join(g.name_hint for g in self._funcs) or 'none'}")

    def get_global_vars(self) -> list[GlobalVar]:
        """All GlobalVars, in insertion order."""
        return list(self._funcs)

    def __getitem__(self, key: GlobalVar | str) -> Function:
        gv = self.get_global_var(key) if isinstance(key, str) else key
        try:
            return self._funcs[gv]
        except KeyError:
            raise KeyError(f"the module has no function {gv.name_hint!r}") from None

    def __setitem__(self, key: GlobalVar | str, fn: Expr) -> None:
        if not isinstance(fn, Function):
            raise TypeError(f"a module holds functions, not {type(fn).__name__}")
        if isinstance(key, str):
            key = self._existing(key) or GlobalVar(key)
        else:
            existing = self._existing(key.name_hint)
            if existing is not None and existing is not key:
                del self._funcs[existing]
        self._funcs[key] = fn

    def _existing(self, name: str) -> GlobalVar | None:
        for gv in self._funcs:
            if gv.name_hint == name:
                return gv
        return None

    def __contains__(self, key: GlobalVar | str) -> bool:
        name = key if isinstance(key, str) else key.name_hint
        return self._existing(name) is not None

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self._funcs)

    def __len__(self) -> int:
        return len(self._funcs)

    def update_func(self, gv: GlobalVar, fn: Function) -> None:
        """Replace or add one function (TVM's ``IRModule.update_func``)."""
        self[gv] = fn

    def remove(self, key: GlobalVar | str) -> None:
        """Drop a function."""
        gv = self.get_global_var(key) if isinstance(key, str) else key
        del self._funcs[gv]

    def import_from_std(self, file_to_import: str) -> None:
        """Import one of relay's standard-library files (TVM's ``IRModule.import_from_std``).

        ``core.rly`` only declares the extern type ``Storage`` (which Kiln's ``memory.*`` ops use
        directly), so importing it adds no function. ``prelude.rly`` and others define algebraic
        data types, which Kiln's IR does not have: importing them raises ``NotImplementedError``.
        """
        if file_to_import == "core.rly":
            return
        raise NotImplementedError(
            f"IRModule.import_from_std({file_to_import!r}): relay's ADT standard library (List, "
            "Option, Tree, ...) is not supported by Kiln (no algebraic data types)")

    # --- building new modules --------------------------------------------------------------
    def copy(self) -> IRModule:
        """A shallow copy: same function objects, separate mapping."""
        new = IRModule(attrs=self.attrs)
        new._funcs = dict(self._funcs)
        return new

    def with_attr(self, attr_key: str, attr_value: Any) -> IRModule:
        """A copy with module attribute ``attr_key`` set to ``attr_value`` (TVM's ``with_attr``)."""
        new = self.copy()
        new.attrs[attr_key] = attr_value
        return new

    def get_attr(self, attr_key: str) -> Any:
        """The module attribute ``attr_key``, or None."""
        return self.attrs.get(attr_key)

    def with_function(self, key: GlobalVar | str, fn: Function) -> IRModule:
        """A copy with one function added or replaced."""
        new = self.copy()
        new[key] = fn
        return new

    @staticmethod
    def from_expr(
        expr: Expr,
        functions: FunctionMap | None = None,
        type_defs: Any = None,
    ) -> IRModule:
        """A module whose ``main`` is ``expr`` (wrapped in a function of its free variables)."""
        mod = IRModule(functions)
        if not isinstance(expr, Function):
            expr = Function(free_vars(expr), expr)
        mod["main"] = expr
        return mod

    # --- text ------------------------------------------------------------------------------
    def astext(self, show_meta_data: bool = True, annotate: Any = None) -> str:
        """The module in relay's text form (with the ``#[metadata]`` section, as TVM's)."""
        from kiln.ir.printer import astext

        return astext(self, show_meta_data=show_meta_data, annotate=annotate)

    def __str__(self) -> str:
        return self.astext(show_meta_data=False)

    def show(self) -> None:
        """Print the module's text form."""
        print(self.astext(show_meta_data=False))

    def __repr__(self) -> str:
        return f"IRModule({', '.join('@' + g.name_hint for g in self._funcs)})"
