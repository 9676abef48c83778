"""Compilation targets (TVM's ``tvm.target.Target``).

Kiln compiles for CPUs and NVIDIA GPUs. ``"c"`` and ``"llvm"`` (with any TVM options such as
``-mcpu=znver3``) are aliases of Kiln's C backend; ``"cuda"`` (``-arch=sm_90``, ...) generates
CUDA kernels; ``"numpy"`` runs the fused functions with the NumPy reference kernels (no compiler
needed). Targets print in TVM's canonical form, which tuning
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
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kiln.config import settings, usable_cpus
from kiln.errors import KilnError
from kiln.ir.types import np_dtype
from kiln.runtime.isa import X86_MACRO_FEATURES

__all__ = ["X86_MACRO_FEATURES", "Target", "TargetError", "TargetISA", "TargetKind", "VirtualDevice",
           "cuda", "host_triple", "native_isa", "native_vector_bytes"]


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
    # TVM's cuda options; -arch=sm_90 picks the GPU code is compiled for (default: device 0's)
    "cuda": TargetKind("cuda", 2, {
        **_COMMON, "arch": str, "mcpu": str, "max_num_threads": int,
        "max_threads_per_block": int, "max_shared_memory_per_block": int,
        "thread_warp_size": int, "registers_per_block": int}, ("cuda", "gpu")),
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


# --- instruction sets: compiler flags and CPU features of a target ------------------------------

# CPUs a compiler may not know yet (GCC 12 has no znver4): the closest CPU it knows plus the
# extensions the newer one adds.
_AVX512_ZEN4 = ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma",
                "avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
                "avx512bf16", "gfni", "vaes", "vpclmulqdq")
_CPU_FALLBACK: dict[str, tuple[str, tuple[str, ...]]] = {
    "znver4": ("znver3", _AVX512_ZEN4),
    "znver5": ("znver3", (*_AVX512_ZEN4, "avxvnni")),
    "emeraldrapids": ("sapphirerapids", ()),
    "graniterapids": ("sapphirerapids", ()),
    "graniterapids-d": ("sapphirerapids", ()),
    "diamondrapids": ("sapphirerapids", ()),
    **dict.fromkeys(("raptorlake", "meteorlake", "arrowlake", "arrowlake-s", "lunarlake",
                     "pantherlake", "gracemont", "sierraforest", "grandridge",
                     "clearwaterforest"), ("alderlake", ())),
}
# Last resort for a CPU of a known vector class: a generic x86-64 level, then explicit flags.
_LEVEL_FALLBACK: dict[int, tuple[tuple[str, ...], ...]] = {
    64: (("-march=x86-64-v4",),
         ("-march=x86-64", "-mavx2", "-mfma", "-mf16c", "-mbmi", "-mbmi2", "-mlzcnt",
          "-mpopcnt", "-mmovbe", "-mavx512f", "-mavx512dq", "-mavx512cd", "-mavx512bw",
          "-mavx512vl")),
    32: (("-march=x86-64-v3",),
         ("-march=x86-64", "-mavx2", "-mfma", "-mf16c", "-mbmi", "-mbmi2", "-mlzcnt",
          "-mpopcnt", "-mmovbe")),
    16: (("-march=x86-64-v2",), ("-march=x86-64",)),
}
# LLVM -mattr spellings that GCC spells differently (the rest are -m<name> / -mno-<name>).
_MATTR_GCC = {"sse4.1": "sse4.1", "sse4.2": "sse4.2", "prefer-256-bit": None, "64bit": None,
              "cmov": None, "cx8": None, "x87": None, "fxsr": None, "mmx": None}
_X86_MACHINES = ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")


@dataclass(frozen=True)
class TargetISA:
    """The instruction set a target compiles for, as the C compiler resolves it.

    Attributes
    ----------
    flags : tuple of str
        Compiler flags selecting it (``("-march=znver3",)``, ``("-march=native",)``,
        ``("-march=x86-64", "-mavx2", "-mfma", "-mno-avx512f")``).
    features : frozenset of str
        CPU features the compiled code may use, by their ``/proc/cpuinfo`` names (``avx2``,
        ``fma``, ``avx512f``, ...): what a CPU must have to run the library. Empty when the
        compiler could not be asked, or on non-x86 machines.
    vector_bytes : int
        Bytes of one vector register (64 with AVX-512F, 32 with AVX/AVX2, else 16).
    native : bool
        Whether the flags are ``-march=native`` (this machine's CPU).
    """

    flags: tuple[str, ...]
    features: frozenset[str]
    vector_bytes: int
    native: bool

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 (and on AArch64), 16 on other x86."""
        if self.vector_bytes >= 64 or not _host_is_x86():
            return 32
        return 16


def _host_is_x86() -> bool:
    return (platform.machine().lower() or "x86_64") in _X86_MACHINES


@functools.cache
def _probe_macros(cc: str, flags: tuple[str, ...]) -> frozenset[str] | None:
    """Macros ``cc <flags>`` predefines (with value 1), or None when it rejects the flags."""
    try:
        proc = subprocess.run([*shlex.split(cc), *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: CC does not parse
        return None
    if proc.returncode != 0 or proc.stderr.strip():  # gcc warns on an -march it half-knows
        return None
    return frozenset(re.findall(r"#define (\w+) 1\b", proc.stdout))


def _isa_of(flags: tuple[str, ...], macros: frozenset[str], native: bool) -> TargetISA:
    features = frozenset(f for m, f in X86_MACRO_FEATURES.items() if m in macros)
    if "__AVX512F__" in macros:
        vector_bytes = 64
    elif "__AVX__" in macros:
        vector_bytes = 32
    else:
        vector_bytes = 16
    return TargetISA(flags, features, vector_bytes, native)


def _warn_once(message: str) -> None:
    _warn_once_cached(message)


@functools.cache
def _warn_once_cached(message: str) -> None:
    warnings.warn(message, stacklevel=4)


def _mattr_flags(mattr: tuple[str, ...]) -> tuple[str, ...]:
    flags = []
    for item in mattr:
        item = item.strip()
        on = not item.startswith("-")
        name = item.lstrip("+-").lower()
        if not name:
            continue
        if name == "prefer-256-bit":
            flags.append("-mprefer-vector-width=256" if on else "-mprefer-vector-width=512")
            continue
        gcc_name = _MATTR_GCC.get(name, name)
        if gcc_name is None:  # always present on x86-64
            continue
        flags.append(f"-m{gcc_name}" if on else f"-mno-{gcc_name}")
    return tuple(flags)


def _foreign_arch(target: Target) -> str | None:
    """The architecture a target names when it is not this machine's (None when it is)."""
    host_x86 = _host_is_x86()
    triple = str(target.attrs.get("mtriple", ""))
    if triple:
        arch = triple.split("-")[0].lower()
        arch_x86 = arch in _X86_MACHINES
        if arch and arch_x86 != host_x86:
            return arch
    cpu = str(target.attrs.get("mcpu") or target.attrs.get("march") or "").lower()
    if cpu and cpu != "native":
        if host_x86 and _ARM_CPU.match(cpu):
            return "arm"
        if not host_x86 and cpu in _CPU_VECTOR_BYTES:
            return "x86_64"
    if host_x86 and any(f.lstrip("+-").lower() in ("neon", "sve", "sve2") for f in target.mattr):
        return "arm"
    return None


def _resolve_isa(target: Target, cc: str) -> TargetISA:
    where = f"target {target}"
    native_macros = _probe_macros(cc, ("-march=native",))
    native = _isa_of(("-march=native",), native_macros or frozenset(), True)
    if native_macros is None:  # no working compiler: this machine, by the vector-class table
        native = TargetISA(("-march=native",), frozenset(), _fallback_vector_bytes(target), True)
        return native
    foreign = _foreign_arch(target)
    if foreign is not None:
        _warn_once(f"{where} is for {foreign}, but Kiln compiles C for this "
                   f"{platform.machine()} machine: the library is built with -march=native")
        return TargetISA(native.flags, native.features, _fallback_vector_bytes(target), True)
    cpu = str(target.attrs.get("mcpu") or target.attrs.get("march") or "").strip().lower()
    extra = _mattr_flags(target.mattr) if _host_is_x86() else ()
    generic = bool(extra) and not cpu  # LLVM: -mattr alone modifies the generic CPU
    if target.mattr and not _host_is_x86():
        _warn_once(f"{where}: -mattr is only translated to compiler flags on x86; ignored")
    width = target.attrs.get("vector-width")
    if width in (128, 256, 512) and _host_is_x86():
        extra += (f"-mprefer-vector-width={int(width)}",)
    if not cpu or cpu == "native":
        base: list[tuple[str, ...]] = [("-march=x86-64",) if generic else ("-march=native",)]
    else:
        opt = "-march" if _host_is_x86() else "-mcpu"
        base = [(f"{opt}={cpu}",)]
        if cpu in _CPU_FALLBACK:
            known, adds = _CPU_FALLBACK[cpu]
            base.append((f"{opt}={known}", *(f"-m{a}" for a in adds)))
        level = _CPU_VECTOR_BYTES.get(cpu)
        if level is not None and _host_is_x86():
            base.extend(_LEVEL_FALLBACK[level])
    for arch_flags in base:
        flags = (*arch_flags, *extra)
        macros = _probe_macros(cc, flags)
        if macros is not None:
            if arch_flags != base[0]:
                _warn_once(f"{where}: the C compiler ({cc}) does not know {base[0][0]}; "
                           f"compiling with {' '.join(arch_flags)} instead")
            isa = _isa_of(flags, macros, arch_flags == ("-march=native",))
            if "avx2" in isa.features and "fma" not in isa.features:
                _warn_once(f"{where} enables AVX2 without FMA: kernels will not use fused "
                           "multiply-add (add +fma to -mattr, or name a CPU with -mcpu)")
            return isa
    if cpu and cpu != "native" and cpu not in _CPU_VECTOR_BYTES:  # a CPU nobody here knows
        macros = _probe_macros(cc, ("-march=native", *extra))
        if macros is not None:
            _warn_once(f"{where}: the C compiler ({cc}) does not know -mcpu={cpu}; compiling "
                       "for this machine (-march=native)")
            return _isa_of(("-march=native", *extra), macros, True)
    proc_err = _compiler_complaint(cc, (*base[0], *extra))
    raise TargetError(f"{where}: the C compiler ({cc}) rejects the flags "
                      f"{' '.join((*base[0], *extra))}: {proc_err}")


def _compiler_complaint(cc: str, flags: tuple[str, ...]) -> str:
    try:
        proc = subprocess.run([*shlex.split(cc), *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return str(e)
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    return lines[0] if lines else f"exit code {proc.returncode}"


def _fallback_vector_bytes(target: Target) -> int:
    """Vector bytes from the CPU-name and -mattr tables alone (no compiler)."""
    for key in ("mcpu", "march"):
        cpu = str(target.attrs.get(key, ""))
        if cpu and cpu != "native":
            known = _cpu_vector_bytes(cpu)
            if known is not None:
                return known
    features = {f.lstrip("+").lower() for f in target.mattr if not f.startswith("-")}
    for feature, size in _FEATURE_VECTOR_BYTES:
        if feature in features:
            return size
    return native_vector_bytes()


@functools.cache
def _cached_isa(text: str, cc: str) -> TargetISA:
    return _resolve_isa(Target(text), cc)


def native_isa() -> TargetISA:
    """The instruction set of ``-march=native`` on this machine (what ``"c"`` compiles for)."""
    return _cached_isa("c", settings.cc)


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
        raise TargetError(f"unknown target kind {name!r}: Kiln compiles for CPUs and CUDA GPUs; use "
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
        self.kind: TargetKind = kind
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
        (``+avx512f``, ``+avx2``, ``-avx512f``, ...), and otherwise this machine's ``-march=native``, as
        the C compiler resolves them (:meth:`isa`).

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
        return self.isa().vector_bytes

    def isa(self) -> TargetISA:
        """The instruction set this target compiles for (flags, required CPU features, width).

        ``-mcpu`` / ``-march`` name the CPU (``-march=<cpu>`` for the C compiler; a CPU the
        compiler does not know yet is approximated by the closest one it knows plus the newer
        extensions, with a warning), ``-mattr`` adds or removes extensions (``+avx2`` ->
        ``-mavx2``, ``-avx512f`` -> ``-mno-avx512f``; alone, as in LLVM, it modifies the generic
        x86-64 CPU), and a target naming neither (``"c"``, ``"llvm"``, ``-mcpu=native``)
        compiles for this machine (``-march=native``). The compiler is asked once per flag set
        which extensions the flags enable; the vector width and the features a CPU needs to run
        the library follow from its answer.

        Returns
        -------
        TargetISA
            Flags, features (``/proc/cpuinfo`` names), vector bytes and registers.

        Raises
        ------
        TargetError
            The compiler rejects an ``-mattr`` extension.

        Examples
        --------
        >>> Target("llvm -mcpu=znver3").isa().flags
        ('-march=znver3',)
        >>> Target("llvm -mattr=+avx2,+fma,-avx512f").isa().vector_bytes
        32
        """
        if not self.is_native:
            return native_isa()
        return _cached_isa(str(self), settings.cc)

    @property
    def num_cores(self) -> int:
        """Cores kernels may use: ``-num-cores`` when given, else the CPUs this process may run
        on (:func:`kiln.config.usable_cpus`: affinity mask and cgroup quota)."""
        given = self.attrs.get("num-cores")
        return int(given) if given else usable_cpus()

    @property
    def is_cuda(self) -> bool:
        """Whether this target generates CUDA kernels."""
        return self.kind.name == "cuda"

    @property
    def arch(self) -> str:
        """The ``-arch`` option of a cuda target (``"sm_90"``; ``""`` when not given)."""
        return str(self.attrs.get("arch", ""))

    def get_target_device_type(self) -> int:
        """The DLPack device type (1 for CPU targets, 2 for cuda)."""
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


def cuda(model: str = "unknown", arch: str | None = None,
         options: str | list[str] | None = None) -> Target:
    """A cuda target (TVM's ``tvm.target.cuda``): ``cuda(arch="sm_90")``."""
    parts = ["cuda", f"-model={model}"]
    if arch:
        parts.append(f"-arch={arch}")
    if options:
        parts.extend(options.split() if isinstance(options, str) else options)
    return Target(" ".join(parts))


@dataclass(frozen=True)
class VirtualDevice:
    """Where an expression's value lives (TVM's ``tvm.target.VirtualDevice``).

    Kiln runs everything on the host CPU, so a VirtualDevice is plain data that device-planning
    annotations (``on_device``, ``memory.alloc_storage(..., virtual_device=...)``) carry.

    Parameters
    ----------
    device : Device or None
        The runtime device (``kiln.cpu()``); ``None`` leaves the device unconstrained.
    target : Target or str or None
        The target compiling for it.
    memory_scope : str
        The memory scope (``""`` for the default global memory).
    """

    device_type_int: int = -1
    virtual_device_id: int = -1
    target: Target | None = None
    memory_scope: str = ""

    def __init__(self, device: Any = None, target: Target | str | None = None,
                 memory_scope: str = "") -> None:
        object.__setattr__(self, "device_type_int", -1 if device is None else int(device.device_type))
        object.__setattr__(self, "virtual_device_id", -1 if device is None else int(device.device_id))
        object.__setattr__(self, "target", None if target is None else Target(target))
        object.__setattr__(self, "memory_scope", memory_scope)

    @property
    def device_type(self) -> int:
        """The device type code (DLPack numbering; -1 when unconstrained)."""
        return self.device_type_int

    def is_fully_unconstrained(self) -> bool:
        """Whether nothing (device, target, scope) is fixed."""
        return self.device_type_int == -1 and self.target is None and not self.memory_scope

    def __str__(self) -> str:
        parts = []
        if self.device_type_int != -1:
            parts.append(f"device_type={self.device_type_int}")
        if self.virtual_device_id != -1:
            parts.append(f"virtual_device_id={self.virtual_device_id}")
        if self.target is not None:
            parts.append(f"target={self.target}")
        if self.memory_scope:
            parts.append(f"memory_scope='{self.memory_scope}'")
        return "VirtualDevice(" + ", ".join(parts) + ")"


def _llvm_version_major(allow_none: bool = False) -> int | None:
    """The LLVM major version behind Kiln's ``llvm`` target (TVM's ``target.codegen.llvm_version_major``).

    Kiln links no LLVM: its ``llvm`` target emits C for the configured C compiler. When that
    compiler is clang, its major version is the LLVM version that generates the code. Otherwise no
    LLVM is involved: ``None`` with ``allow_none``, else ``0``, so that version gates such as
    ``llvm_version_major() >= 8`` (TVM's LLVM-specific intrinsics) take their "no LLVM" branch.
    """
    from kiln.runtime.toolchain import compiler_version

    try:
        text = compiler_version()
    except KilnError:
        text = ""
    match = re.search(r"clang version (\d+)", text)
    if match:
        return int(match.group(1))
    return None if allow_none else 0


class _CodegenNamespace:
    """``tvm.target.codegen``: what Kiln can say about its code generators."""

    llvm_version_major = staticmethod(_llvm_version_major)

    @staticmethod
    def llvm_lookup_intrinsic_id(name: str) -> int:
        """TVM looks an LLVM intrinsic up here; Kiln emits C, so none is known (0, as TVM's "not found")."""
        return 0


#: ``tvm.target.codegen`` (Kiln's ``llvm`` target is its C backend).
codegen = _CodegenNamespace()
