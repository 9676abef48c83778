"""The operator table of the IR: operators by name and their attribute maps (TVM's ``OpRegistry``
and ``OpAttrMap``).

The IR layer holds the tables; the operator layer (:mod:`kiln.op`) fills them when it is imported,
as TVM's operator definitions register into ``tvm.ir``. ``import kiln`` imports every layer, so a
lookup always sees every operator; an unknown name is an :class:`~kiln.errors.UnknownOpError`
naming it.

* :func:`register_op_def` declares an operator: its :class:`~kiln.ir.expr.Op` node (one per name)
  and its definition (the operator layer's ``OpDef``: type relation, reference kernel, attrs
  class, ...), read back with :func:`op_definition` / ``Op.op_def``.
* :func:`register_op_attr` (``tvm.ir.register_op_attr``) sets a per-operator attribute; Kiln's only
  attributes are ``target.<compiler>``, the predicate saying whether an external compiler takes a
  call. :func:`op_attr_map` is every operator's value of one attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kiln.errors import ExternalTargetError, KilnError, KilnTypeError, UnknownOpError
from kiln.ir.expr import Call, Expr, Op

__all__ = [
    "OpDefinition",
    "call_op",
    "get_op",
    "get_op_attr",
    "op_attr_map",
    "op_definition",
    "op_definitions",
    "register_op_attr",
    "register_op_def",
    "register_type_relation",
    "set_op_attr",
    "set_type_relation",
    "unregister_op_def",
]


class OpDefinition(Protocol):
    """What the IR reads of an operator's definition (the operator layer's ``OpDef``)."""

    name: str
    attrs_type: type | None


_OPS: dict[str, Op] = {}
_DEFS: dict[str, Any] = {}
_ATTRS: dict[str, dict[str, Any]] = {}  # attribute key -> {op name: value}
_RELATIONS: dict[str, Callable[[list[Any], Any], Any]] = {}  # TVM's named relations: "Identity", ...


def register_op_def(definition: OpDefinition) -> Op:
    """Declare the operator ``definition.name``; returns its (unique) :class:`Op` node.

    Raises
    ------
    ValueError
        The name is already registered.
    """
    name = definition.name
    if name in _DEFS:
        raise ValueError(f"operator {name!r} is registered twice")
    _DEFS[name] = definition
    op = _OPS[name] = Op(name)
    return op


def unregister_op_def(name: str) -> None:
    """Remove operator ``name`` and its attributes (for tests that declare a temporary one)."""
    op_definition(name)
    del _DEFS[name], _OPS[name]
    for values in _ATTRS.values():
        values.pop(name, None)


def _unknown(name: str) -> UnknownOpError:
    return UnknownOpError(f"no operator named {name!r} is registered")


def get_op(name: str) -> Op:
    """The :class:`Op` node of operator ``name`` (``Op.get``)."""
    op = _OPS.get(name)
    if op is None:
        raise _unknown(name)
    return op


def op_definition(name: str) -> Any:
    """The definition registered for operator ``name`` (the operator layer's ``OpDef``)."""
    definition = _DEFS.get(name)
    if definition is None:
        raise _unknown(name)
    return definition


def op_definitions() -> dict[str, Any]:
    """Every registered operator's definition, by name."""
    return dict(_DEFS)


def register_type_relation(name: str, rel: Callable[[list[Any], Any], Any]) -> None:
    """Name a type relation (TVM's ``"Identity"``, ``"Broadcast"``) for :func:`set_type_relation`."""
    _RELATIONS[name] = rel


def set_type_relation(op_name: str, rel_name: str,
                      rel: Callable[[list[Any], Any], Any] | None = None) -> None:
    """Give operator ``op_name`` the type relation ``rel``, or the one named ``rel_name``
    (TVM's ``Op.add_type_rel``): ``rel(arg_types, attrs)`` returns the result type.

    Raises
    ------
    KilnTypeError
        (when the operator is type-checked) the relation returned no type.
    """
    if rel is None:
        if rel_name not in _RELATIONS:
            raise KilnError(f"add_type_rel({rel_name!r}) of {op_name}: no type relation of that "
                            f"name; Kiln names {', '.join(sorted(_RELATIONS))}, or pass a function")
        rel = _RELATIONS[rel_name]
    user_rel = rel

    def checked(arg_types: list[Any], attrs: Any) -> Any:
        out = user_rel(arg_types, attrs)
        if out is None:
            raise KilnTypeError(f"type relation {rel_name!r} of {op_name} returned no type")
        return out

    op_definition(op_name).type_rel = checked


def call_op(name: str, args: list[Expr], **attrs: Any) -> Call:
    """A call of operator ``name``, its attributes built with the operator's attrs class."""
    attrs_type = op_definition(name).attrs_type
    if attrs and attrs_type is None:
        raise TypeError(f"operator {name} takes no attributes, got {sorted(attrs)}")
    return Call(get_op(name), args, attrs_type(**attrs) if attrs_type is not None else None)


def set_op_attr(op_name: str, key: str, value: Any) -> None:
    """Set attribute ``key`` of operator ``op_name`` (replacing an earlier value); ``None``
    removes it."""
    get_op(op_name)
    if value is None:
        _ATTRS.get(key, {}).pop(op_name, None)
    else:
        _ATTRS.setdefault(key, {})[op_name] = value


def get_op_attr(op_name: str, key: str, default: Any = None) -> Any:
    """Attribute ``key`` of operator ``op_name``, or ``default`` when it has none."""
    return _ATTRS.get(key, {}).get(op_name, default)


def op_attr_map(key: str) -> dict[str, Any]:
    """``{op name: value}`` for every operator with attribute ``key`` (TVM's ``OpAttrMap``)."""
    return dict(_ATTRS.get(key, {}))


def register_op_attr(op_name: str, attr_key: str, value: Any = None,
                     level: int = 10) -> Callable[[Any], Any] | None:
    """Declare that an external target takes an operator (TVM's ``tvm.ir.register_op_attr``).

    Parameters
    ----------
    op_name : str
        The operator, e.g. ``"nn.conv2d"``.
    attr_key : str
        ``"target.<name>"``: the target that takes it. Other TVM operator attributes
        (strategies, layouts, ...) have no meaning in Kiln and are refused.
    value : callable or bool, optional
        ``value(call) -> bool`` deciding per call (TVM's older ``value(attrs, args)`` also
        works), or a constant; when omitted this is a decorator.
    level : int
        Accepted for TVM compatibility (priority of the registration).

    Returns
    -------
    callable or None
        The decorator when ``value`` is omitted.

    Raises
    ------
    ExternalTargetError
        ``attr_key`` is not ``target.<name>``.
    UnknownOpError
        No operator is called ``op_name``.

    Examples
    --------
    >>> @register_op_attr("nn.relu", "target.my_npu")  # doctest: +SKIP
    ... def _relu(expr):
    ...     return True
    """
    if not attr_key.startswith("target.") or attr_key == "target.":
        raise ExternalTargetError(f"register_op_attr({op_name!r}, {attr_key!r}): Kiln only takes "
                                  "'target.<name>' attributes (which external target takes the op)")
    if value is not None:
        set_op_attr(op_name, attr_key, value)
        return None

    def decorate(fn: Any) -> Any:
        set_op_attr(op_name, attr_key, fn)
        return fn

    return decorate
