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

import functools
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kiln.config import settings, usable_cpus
from kiln.errors import KilnError
from kiln.ir.types import np_dtype

__all__ = ["Target", "TargetError", "TargetKind", "host_triple", "native_vector_bytes"]


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


# Vector register bytes of CPUs named by -mcpu / -march (LLVM and GCC spellings): 64 with
# AVX-512F, 32 with AVX or AVX2, 16 for SSE-only x86 and for 128-bit NEON on Arm.
_CPU_VECTOR_BYTES: dict[str, int] = {
    **dict.fromkeys((
        "x86-64-v4", "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake",
        "icelake-client", "icelake-server", "tigerlake", "rocketlake", "sapphirerapids",
        "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids", "knl", "knm",
        "znver4", "znver5"), 64),
    **dict.fromkeys((
        "x86-64-v3", "sandybridge", "corei7-avx", "ivybridge", "core-avx-i", "haswell",
        "core-avx2", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
        "arrowlake", "arrowlake-s", "lunarlake", "pantherlake", "gracemont", "sierraforest",
        "grandridge", "clearwaterforest", "bdver1", "bdver2", "bdver3", "bdver4", "btver2",
        "znver1", "znver2", "znver3"), 32),
    **dict.fromkeys((
        "x86-64", "x86-64-v2", "i686", "pentium4", "prescott", "nocona", "core2", "penryn",
        "nehalem", "corei7", "westmere", "bonnell", "atom", "silvermont", "slm", "goldmont",
        "goldmont-plus", "tremont", "k8", "opteron", "athlon64", "amdfam10", "barcelona",
        "btver1"), 16),
}
# Arm cores (-mcpu=cortex-a72, neoverse-n1, apple-m1, ...): 128-bit NEON registers.
_ARM_CPU = re.compile(r"^(cortex-|neoverse-|apple-|generic$|armv[89]|a64fx$|ampere|thunderx|"
                      r"kryo|exynos|carmel|falkor|saphira|tsv110)")
# -mattr features, strongest first.
_FEATURE_VECTOR_BYTES = (("avx512f", 64), ("avx2", 32), ("avx", 32), ("sse2", 16), ("neon", 16))


@functools.cache
def _probe_vector_bytes(cc: str) -> int:
    """Vector register bytes of ``cc -march=native`` (from its predefined macros); 16 when the
    compiler cannot be run."""
    try:
        out = subprocess.run([*shlex.split(cc), "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: CC does not parse
        return 16
    macros = set(re.findall(r"#define (\w+)", out))
    if "__AVX512F__" in macros:
        return 64
    if "__AVX__" in macros:
        return 32
    return 16


def native_vector_bytes() -> int:
    """Vector register bytes of this machine as the C compiler sees it with ``-march=native``.

    Returns
    -------
    int
        64 with AVX-512F, 32 with AVX/AVX2, otherwise 16 (probed once per compiler command,
        ``settings.cc``, then cached).
    """
    return _probe_vector_bytes(settings.cc)


def _cpu_vector_bytes(cpu: str) -> int | None:
    cpu = cpu.strip().lower()
    if cpu in _CPU_VECTOR_BYTES:
        return _CPU_VECTOR_BYTES[cpu]
    return 16 if _ARM_CPU.match(cpu) else None


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

    def vector_width(self, dtype: str = "float32") -> int:
        """Lanes of ``dtype`` in one vector register of this target's CPU.

        The register size comes from, in order: the ``-vector-width`` option (bits, as TVM's LLVM
        target), a recognised ``-mcpu`` / ``-march`` (``skylake-avx512``: 512 bits, ``znver3``:
        256, ``x86-64``: 128, Arm cores: 128), the vector features of ``-mattr``
        (``+avx512f``, ``+avx2``, ...), and otherwise this machine's ``-march=native`` (probed once).

        Parameters
        ----------
        dtype : str
            Element type (``"float32"``: 16 lanes with AVX-512F, 8 with AVX/AVX2, 4 otherwise).

        Returns
        -------
        int
            Lanes, at least 1.

        Examples
        --------
        >>> Target("llvm -mcpu=skylake-avx512").vector_width()
        16
        >>> Target("llvm -mcpu=haswell").vector_width("float64")
        4
        """
        itemsize = np_dtype(dtype).itemsize
        bits = self.attrs.get("vector-width")
        if bits:
            return max(1, int(bits) // (8 * itemsize))
        return max(1, self._vector_bytes() // itemsize)

    def _vector_bytes(self) -> int:
        for key in ("mcpu", "march"):
            cpu = str(self.attrs.get(key, ""))
            if cpu and cpu != "native":
                known = _cpu_vector_bytes(cpu)
                if known is not None:
                    return known
        features = {f.lstrip("+").lower() for f in self.mattr if not f.startswith("-")}
        for feature, size in _FEATURE_VECTOR_BYTES:
            if feature in features:
                return size
        return native_vector_bytes()

    @property
    def num_cores(self) -> int:
        """Cores kernels may use: ``-num-cores`` when given, else the CPUs this process may run
        on (:func:`kiln.config.usable_cpus`: affinity mask and cgroup quota)."""
        given = self.attrs.get("num-cores")
        return int(given) if given else usable_cpus()

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
