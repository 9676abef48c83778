"""Attributes of calls and functions.

Each op declares its attributes as a frozen dataclass deriving from :class:`Attrs` (made with
:func:`attrs_class`); field order is the printing order and field defaults are TVM's defaults, so the
text printer shows only what differs from them. Function attributes (``Compiler``, ``Primitive``,
...) are a :class:`DictAttrs`, an immutable insertion-ordered mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, dataclass_transform

import numpy as np

__all__ = ["Attrs", "DictAttrs", "attrs_class", "attrs_class_for", "freeze_value"]


def freeze_value(value: Any) -> Any:
    """Turn lists into tuples and NumPy scalars into Python scalars, recursively (hashable attrs)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(freeze_value(v) for v in value.tolist())
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


class Attrs:
    """Base class of op attributes; subclasses are frozen dataclasses made by :func:`attrs_class`."""

    type_key: ClassVar[str] = "Attrs"
    # fields printed even when equal to their default (TVM prints e.g. ``units=None`` for dense)
    always_print: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:
        # the fields are declared by each subclass (one per op family): a checker sees any name
        def __getattr__(self, name: str) -> Any: ...

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            object.__setattr__(self, f.name, freeze_value(getattr(self, f.name)))

    def keys(self) -> list[str]:
        """Names of the attributes, in declaration order."""
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def items(self) -> list[tuple[str, Any]]:
        """``(name, value)`` pairs in declaration order."""
        return [(k, getattr(self, k)) for k in self.keys()]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(f"{type(self).__name__} has no attribute {key!r}")
        return getattr(self, key)

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def get_int_tuple(self, key: str) -> tuple[int, ...]:
        """The attribute as a tuple of ints (TVM's accessor)."""
        return tuple(int(v) for v in self[key])

    def get_int(self, key: str) -> int:
        """The attribute as an int."""
        return int(self[key])

    def get_str(self, key: str) -> str:
        """The attribute as a string."""
        return str(self[key])

    def non_default_items(self) -> list[tuple[str, Any]]:
        """The attributes that differ from their defaults (what the text printer shows)."""
        out = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            default = f.default
            if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            if f.name in self.always_print or default is dataclasses.MISSING or value != default:
                out.append((f.name, value))
        return out

    def replace(self, **changes: Any) -> Attrs:
        """A copy with some attributes changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


_C = TypeVar("_C", bound=Attrs)


@dataclass_transform(frozen_default=True)
def attrs_class(type_key: str, always_print: tuple[str, ...] = ()) -> Callable[[type[_C]], type[_C]]:
    """Class decorator turning an :class:`Attrs` subclass into a frozen dataclass.

    Parameters
    ----------
    type_key : str
        TVM's name of the attrs node, e.g. ``"relay.attrs.Conv2DAttrs"``.
    always_print : tuple of str
        Fields the text printer shows even at their default value.
    """

    def wrap(cls: type[_C]) -> type[_C]:
        held = _BY_TYPE_KEY.get(type_key)
        if held is not None and (held.__module__, held.__qualname__) != (cls.__module__,
                                                                         cls.__qualname__):
            raise ValueError(f"attrs type key {type_key!r} of {cls.__module__}.{cls.__qualname__} "
                             f"is already declared by {held.__module__}.{held.__qualname__}")
        cls.type_key = type_key
        cls.always_print = always_print
        made = dataclasses.dataclass(frozen=True)(cls)
        _BY_TYPE_KEY[type_key] = made
        return made

    return wrap


# Every attrs class by its type key (IR JSON names attrs by key); filled by attrs_class.
_BY_TYPE_KEY: dict[str, type[Attrs]] = {}


def attrs_class_for(type_key: str) -> type[Attrs] | None:
    """The attrs class declared with ``type_key``, or None (every operator's attrs class is
    declared once ``kiln`` is imported)."""
    return _BY_TYPE_KEY.get(type_key)


class DictAttrs(Mapping[str, Any]):
    """Immutable, insertion-ordered function attributes (``Compiler``, ``Primitive``, ...).

    Setting an existing key keeps its position, as TVM's ``WithAttr`` does.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None):
        self._items: dict[str, Any] = {k: freeze_value(v) for k, v in (items or {}).items()}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(key) from None

    def with_attr(self, key: str, value: Any) -> DictAttrs:
        """A copy with ``key`` set to ``value`` (position kept if the key exists)."""
        items = dict(self._items)
        items[key] = value
        return DictAttrs(items)

    def without(self, key: str) -> DictAttrs:
        """A copy without ``key``."""
        return DictAttrs({k: v for k, v in self._items.items() if k != key})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DictAttrs):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"DictAttrs({self._items!r})"
