"""Compilation targets (TVM's ``tvm.target.Target``).

Kiln compiles for the CPU it runs on. ``"c"`` and ``"llvm"`` (with any TVM options such as
``-mcpu=znver3``) are aliases of Kiln's C backend; ``"numpy"`` runs the fused functions with the
NumPy reference kernels (no compiler needed). Targets print in TVM's canonical form, which tuning
records store: ``Target("llvm")`` is ``llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu`` (the
host triple is filled in when neither ``-mtriple`` nor ``-mcpu`` is given, as TVM's LLVM target
parser does), options sorted by name.

Examples
--------
>>> t = Target("llvm -mcpu=znver3")
>>> str(t), t.kind.name, t.keys, t.mcpu
('llvm -keys=cpu -mcpu=znver3', 'llvm', ('cpu',), 'znver3')
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kiln.errors import KilnError

__all__ = ["Target", "TargetError", "TargetKind", "host_triple"]


class TargetError(KilnError, ValueError):
    """A target string or configuration Kiln cannot use."""


@dataclass(frozen=True)
class TargetKind:
    """A kind of target: its name, DLPack device type and the options it accepts."""

    name: str
    device_type: int
    options: Mapping[str, type]
    default_keys: tuple[str, ...] = ("cpu",)

    def __str__(self) -> str:
        return self.name


# Options every kind accepts (TVM's common target attributes).
_COMMON: dict[str, type] = {"keys": list, "tag": str, "device": str, "model": str, "libs": list}

_KINDS: dict[str, TargetKind] = {
    "llvm": TargetKind("llvm", 1, {
        **_COMMON, "mattr": list, "mcpu": str, "mtriple": str, "mfloat-abi": str, "mabi": str,
        "num-cores": int, "fast-math": bool, "fast-math-nnan": bool, "fast-math-ninf": bool,
        "fast-math-nsz": bool, "fast-math-arcp": bool, "fast-math-contract": bool,
        "fast-math-reassoc": bool, "opt-level": int, "cl-opt": list, "jit": str,
        "vector-width": int}),
    "c": TargetKind("c", 1, {
        **_COMMON, "mcpu": str, "march": str, "workspace-byte-alignment": int,
        "constants-byte-alignment": int}),
    "numpy": TargetKind("numpy", 1, dict(_COMMON)),
}


def host_triple() -> str:
    """The LLVM triple of this machine (what TVM's ``target.llvm_get_system_triple`` returns)."""
    machine = platform.machine().lower() or "x86_64"
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if sys.platform == "darwin":
        return f"{machine}-apple-darwin"
    if sys.platform.startswith("win"):
        return f"{machine}-pc-windows-msvc"
    return f"{machine}-unknown-linux-gnu"


def _parse_value(kind: TargetKind, key: str, text: str) -> Any:
    if key not in kind.options:
        known = ", ".join(sorted(kind.options))
        raise TargetError(f"target {kind.name}: unknown option -{key} (it accepts {known})")
    expected = kind.options[key]
    text = text.strip().strip("'\"")
    if expected is list:
        return tuple(v for v in text.split(",") if v)
    if expected in (int, bool):
        lowered = text.lower()
        if lowered in ("true", "false"):
            value = int(lowered == "true")
        else:
            try:
                value = int(text)
            except ValueError:
                raise TargetError(f"target {kind.name}: option -{key} needs an integer, got "
                                  f"{text!r}") from None
        return bool(value) if expected is bool else value
    return text


def _parse_string(text: str) -> tuple[TargetKind, dict[str, Any]]:
    tokens = text.split()
    if not tokens:
        raise TargetError("empty target string")
    kind = _kind(tokens[0])
    attrs: dict[str, Any] = {}
    i = 1
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            raise TargetError(f"target {text!r}: expected -option=value, got {token!r}")
        key, sep, value = token.lstrip("-").partition("=")
        if not sep:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not nxt.startswith("-"):
                value, i = nxt, i + 1
            else:
                value = "true"
        if key in attrs:
            raise TargetError(f"target {text!r}: option -{key} appears more than once")
        attrs[key] = _parse_value(kind, key, value)
        i += 1
    return kind, attrs


def _kind(name: str) -> TargetKind:
    if name not in _KINDS:
        raise TargetError(f"unknown target kind {name!r}: Kiln compiles for the CPU only; use "
                          f"{', '.join(repr(k) for k in _KINDS)}")
    return _KINDS[name]


def _stringify(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    text = str(value)
    return f"'{text}'" if " " in text else text


class Target:
    """A compilation target.

    Parameters
    ----------
    target : str, dict or Target
        ``"c"``, ``"llvm -mcpu=znver3"``, ``"numpy"``, a config dict with a ``"kind"`` key, or a
        Target (copied).
    host : str, dict or Target, optional
        The host target (CPU targets are their own host).

    Attributes
    ----------
    kind : TargetKind
        The kind (``target.kind.name`` is ``"llvm"``, ``"c"`` or ``"numpy"``).
    keys : tuple of str
        Keys used to select schedules (``("cpu",)``).
    attrs : dict
        The options, by name (``{"mcpu": "znver3"}``).
    host : Target or None
        The host target.
    """

    _stack: ClassVar[list[Target]] = []

    def __init__(self, target: str | Mapping[str, Any] | Target,
                 host: str | Mapping[str, Any] | Target | None = None):
        if isinstance(target, Target):
            kind, attrs = target.kind, dict(target.attrs)
            attrs["keys"] = target.keys
            host = host if host is not None else target.host
        elif isinstance(target, Mapping):
            config = dict(target)
            if "kind" not in config:
                raise TargetError(f"target config {config} has no 'kind'")
            kind = _kind(str(config.pop("kind")))
            config_host = config.pop("host", None)
            host = host if host is not None else config_host
            attrs = {k: _parse_value(kind, k, _stringify(tuple(v) if isinstance(v, list) else v))
                     for k, v in config.items()}
        elif isinstance(target, str):
            kind, attrs = _parse_string(target)
        else:
            raise TargetError(f"cannot make a target from {type(target).__name__}")
        self.kind = kind
        user_keys = "keys" in attrs
        keys = list(attrs.pop("keys", ()))
        if "device" in attrs:
            keys.append(attrs["device"])
        if not user_keys:
            keys.extend(kind.default_keys)
        self.keys: tuple[str, ...] = tuple(dict.fromkeys(keys))
        if kind.name == "llvm" and "mtriple" not in attrs and "mcpu" not in attrs:
            attrs["mtriple"] = host_triple()
        self.attrs: dict[str, Any] = attrs
        self.host: Target | None = Target(host) if host is not None else None

    # --- TVM's accessors -----------------------------------------------------------------------
    @property
    def mcpu(self) -> str:
        """The ``-mcpu`` option (``""`` when not given)."""
        return str(self.attrs.get("mcpu", ""))

    @property
    def mattr(self) -> tuple[str, ...]:
        """The ``-mattr`` option."""
        return tuple(self.attrs.get("mattr", ()))

    @property
    def model(self) -> str:
        """The ``-model`` option (``"unknown"`` when not given)."""
        return str(self.attrs.get("model", "unknown"))

    @property
    def libs(self) -> tuple[str, ...]:
        """The ``-libs`` option."""
        return tuple(self.attrs.get("libs", ()))

    @property
    def is_native(self) -> bool:
        """Whether this target compiles C (``c`` and ``llvm``), as opposed to ``numpy``."""
        return self.kind.name in ("c", "llvm")

    def get_target_device_type(self) -> int:
        """The DLPack device type (1, the CPU)."""
        return self.kind.device_type

    def export(self) -> dict[str, Any]:
        """The target as a config dict (``Target(t.export())`` gives ``t`` back)."""
        out: dict[str, Any] = {"kind": self.kind.name, "keys": list(self.keys)}
        out.update({k: list(v) if isinstance(v, tuple) else v for k, v in self.attrs.items()})
        if self.host is not None:
            out["host"] = self.host.export()
        return out

    # --- the current target ------------------------------------------------------------------------
    def __enter__(self) -> Target:
        Target._stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        Target._stack.pop()

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target entered with ``with``; ``None`` (or an error) when there is none."""
        if Target._stack:
            return Target._stack[-1]
        if not allow_none:
            raise TargetError("no target is set: pass target= or enter `with Target(...)`")
        return None

    @staticmethod
    def canon_target(target: str | Mapping[str, Any] | Target | None) -> Target | None:
        """``target`` as a Target (``None`` stays ``None``)."""
        return None if target is None else Target(target)

    # --- text and comparison -----------------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind.name]
        if self.keys:
            parts.append("-keys=" + ",".join(self.keys))
        parts.extend(f"-{k}={_stringify(self.attrs[k])}" for k in sorted(self.attrs))
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Target(other)
        return isinstance(other, Target) and str(self) == str(other) and \
            str(self.host) == str(other.host)

    def __hash__(self) -> int:
        return hash(str(self))
