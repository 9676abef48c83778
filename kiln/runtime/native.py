"""Compiled kernels in a shared library, loaded with ctypes.

The kernel ABI, shared with the C code generator: each kernel is
``int32_t <func_name>(void** args)`` where ``args[i]`` is the data pointer of the i-th tensor (the
fused function's inputs, then its outputs, dense row-major, of the shapes and dtypes it was built
for); it returns 0 on success. A library may also export ``void kiln_set_num_threads(int32_t)``,
``int32_t kiln_run_plan(int32_t n, void* const* fns, void** const* args)`` (calls ``fns[i](args[i])``
in order; -1, or the index of the first kernel returning non-zero) and ``const unsigned char
__tvm_dev_mblob[]`` (u64 little-endian payload size, then the payload; see
:mod:`kiln.runtime.export`).

:class:`RunPlan` uses ``kiln_run_plan`` to run a whole graph's kernels with one call from Python.

A library records the CPU features its code may use (``isa_features``: from the build's
compiler flags, or from the ``isa_features`` key of an exported library's metadata). Before any
of its code runs, they are compared with the running CPU's (:func:`cpu_features`, from
``/proc/cpuinfo``; on other platforms the check is skipped): a library needing features the CPU
lacks runs nothing and raises :class:`~kiln.errors.CPUFeatureError` naming them, instead of
dying with SIGILL in the first kernel.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import shutil
import struct
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kiln.config import settings
from kiln.errors import CPUFeatureError, RuntimeFormatError
from kiln.runtime.export import BLOB_SYMBOL, decode_module_blob
from kiln.runtime.isa import X86_MACRO_FEATURES
from kiln.runtime.module import (
    Kernel,
    KernelError,
    KernelLibrary,
    Module,
    Signature,
    check_args,
    check_fcompile,
)

__all__ = ["NativeKernel", "NativeLibrary", "PlanEntry", "RunPlan", "check_elf", "cpu_features",
           "library_features", "missing_cpu_features"]

THREADS_SYMBOL = "kiln_set_num_threads"
RUN_PLAN_SYMBOL = "kiln_run_plan"
_ARGV = ctypes.POINTER(ctypes.c_void_p)

_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
                 "riscv64": 243, "s390x": 22}
# path -> (device, inode, mtime) of the file dlopen'ed under that path in this process
_loaded: dict[str, tuple[int, int, int]] = {}


def check_elf(path: Path) -> None:
    """Check that ``path`` is a complete ELF shared library for this machine.

    dlopen of a truncated library can crash the process (its segments are mapped past the end
    of the file), so the headers are checked against the file size first.

    Raises
    ------
    RuntimeFormatError
        Not ELF, the wrong class, byte order or machine, or shorter than its headers say.
    """
    where = f"shared library {path}"
    try:
        data_size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(64)
    except OSError as e:
        raise RuntimeFormatError(f"{where}: cannot read it ({e.strerror})") from None
    if len(head) < 64 or not head.startswith(b"\x7fELF"):
        raise RuntimeFormatError(f"{where}: not an ELF file, or truncated inside its header "
                                 f"({data_size} bytes)")
    if head[4] != 2 or head[5] != 1:
        raise RuntimeFormatError(f"{where}: only 64-bit little-endian ELF libraries are supported")
    (e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize,
     e_shnum, _) = struct.unpack_from("<HHIQQQIHHHHHH", head, 16)
    if e_type != 3:
        raise RuntimeFormatError(f"{where}: ELF type {e_type} is not a shared library (3)")
    expected = _ELF_MACHINES.get(platform.machine().lower())
    if expected is not None and e_machine != expected:
        raise RuntimeFormatError(f"{where}: built for ELF machine {e_machine}, but this is "
                                 f"{platform.machine()} ({expected})")
    for what, end in (("program headers", e_phoff + e_phnum * e_phentsize),
                      ("section headers", e_shoff + e_shnum * e_shentsize)):
        if end > data_size:
            raise RuntimeFormatError(f"{where}: truncated: its {what} end at byte {end} but the "
                                     f"file has {data_size} bytes")
    with path.open("rb") as f:
        f.seek(e_phoff)
        table = f.read(e_phnum * e_phentsize)
    for i in range(e_phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * e_phentsize)
        if p_type == 1 and p_offset + p_filesz > data_size:  # PT_LOAD
            raise RuntimeFormatError(f"{where}: truncated: segment {i} ends at byte "
                                     f"{p_offset + p_filesz} but the file has {data_size} bytes")


CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def _read_cpuinfo_flags(path: Path) -> frozenset[str] | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return None


def cpu_features() -> frozenset[str] | None:
    """The running CPU's features by their ``/proc/cpuinfo`` names (``avx2``, ``avx512f``, ...).

    Returns
    -------
    frozenset of str or None
        The ``flags`` (x86) or ``Features`` (Arm) of the first CPU; None where the platform does
        not say (no ``/proc/cpuinfo``): then no library is refused.
    """
    return _read_cpuinfo_flags(CPUINFO)


def missing_cpu_features(required: Iterable[str]) -> list[str]:
    """The features of ``required`` this CPU lacks (none when :func:`cpu_features` is unknown),
    widest vector extensions first (``avx512f`` before ``avx512bw``)."""
    have = cpu_features()
    if have is None:
        return []
    order = {f: i for i, f in enumerate(X86_MACRO_FEATURES.values())}
    order["avx512f"] = -1
    return sorted((f for f in set(required) if f not in have),
                  key=lambda f: (order.get(f, -1), f))


def library_features(lib: Module) -> list[str] | None:
    """CPU features the compiled code of ``lib`` and the native libraries it imports needs
    (sorted), or None when none of them is a :class:`NativeLibrary`."""
    found: set[str] | None = None
    for mod in (lib, *lib._walk_imports()):
        native = mod if isinstance(mod, NativeLibrary) else getattr(mod, "native", None)
        if isinstance(native, NativeLibrary):
            found = (found or set()) | set(native.isa_features)
    return None if found is None else sorted(found)


def _dlopen(path: Path) -> ctypes.CDLL:
    """dlopen ``path`` privately, even if another file was loaded under the same path before.

    glibc hands back the already-loaded library when the path string matches, so a library
    rewritten in place (re-exported) would otherwise run stale code: load such a file through a
    private copy instead.
    """
    st = path.stat()
    ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
    key = str(path)
    previous = _loaded.setdefault(key, ident)
    try:
        if previous == ident:
            return ctypes.CDLL(key, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        with tempfile.TemporaryDirectory(prefix="kiln-so-") as tmp:
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            return ctypes.CDLL(str(copy), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as e:
        raise RuntimeFormatError(f"cannot load shared library {path}: {e}") from None


class NativeKernel(Kernel):
    """A compiled kernel: ``int32_t name(void** args)``.

    Parameters
    ----------
    name : str
        The symbol.
    cfunc : ctypes function
        The loaded symbol.
    library : NativeLibrary
        Its library (kept alive as long as the kernel is).
    signature : tuple of (shape, dtype), optional
        The arguments it was built for; when known, every binding is checked against it.
    """

    def __init__(self, name: str, cfunc: Callable[..., Any], library: NativeLibrary,
                 signature: Signature | None = None):
        super().__init__(name)
        self.cfunc = cfunc
        self.library = library
        self.signature = signature

    @property
    def address(self) -> int:
        """The kernel's entry point (for :class:`RunPlan`)."""
        value = ctypes.cast(self.cfunc, ctypes.c_void_p).value  # type: ignore[arg-type]  # a ctypes function pointer
        assert value is not None
        return value

    def plan_entry(self, arrays: Sequence[np.ndarray]) -> PlanEntry:
        """The kernel bound to ``arrays`` as a :class:`RunPlan` step (checked like :meth:`bind`)."""
        check_args(self.name, arrays, self.signature)
        argv = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        return PlanEntry(self.name, self.address, argv, tuple(arrays), self.library)

    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        entry = self.plan_entry(arrays)
        argv = entry.argv
        cfunc, name, keep = self.cfunc, self.name, entry.arrays

        def call() -> None:
            rc = cfunc(argv)
            if rc != 0:
                shapes = ", ".join(f"{a.shape} {a.dtype}" for a in keep)
                raise KernelError(f"kernel {name} failed with code {rc} (arguments: {shapes})")

        return call


class NativeLibrary(KernelLibrary):
    """A shared library of compiled kernels (the ``c`` target's library).

    Parameters
    ----------
    path : str or Path
        The ``.so`` to load (``RTLD_LOCAL``: its symbols do not leak into other libraries).
    sources : sequence of path
        The ``.c`` / ``.o`` files it was built from, needed to link it again with an embedded
        graph by ``export_library``.
    signatures : mapping of str to signature, optional
        Per kernel, the (shape, dtype) of its arguments; kernels with a signature refuse other
        arrays (``load_module`` takes them from the embedded graph).
    isa_features : iterable of str, optional
        CPU features its code may use (``/proc/cpuinfo`` names; the build knows them from the
        target). Default: the ``isa_features`` recorded in its embedded metadata, else none.
    compile_flags : sequence of str
        The flags its sources were compiled with (to compile them again the same way).

    Attributes
    ----------
    missing_features : list of str
        Features of ``isa_features`` this CPU lacks; when any, nothing in the library is run
        (:meth:`kernel` and :meth:`set_num_threads` raise :class:`~kiln.errors.CPUFeatureError`)
        but it can still be exported.
    """

    type_key = "library"

    def __init__(self, path: str | Path, sources: Sequence[str | Path] = (),
                 signatures: Mapping[str, Signature] | None = None,
                 isa_features: Iterable[str] | None = None, compile_flags: Sequence[str] = ()):
        super().__init__()
        self.path = Path(path).resolve()
        self.sources = tuple(Path(s) for s in sources)
        self.signatures: dict[str, Signature] = dict(signatures or {})
        self.compile_flags = tuple(compile_flags)
        # the fused functions by kernel name when built in this process (build_native sets
        # them; a loaded artifact has none): the debugger reads provenance from them
        self.functions: dict[str, object] | None = None
        # FLOPs of one run of each kernel (build_native sets them; the build writes them into
        # the graph JSON, where the debugger's roofline profile reads them)
        self.kernel_flops: dict[str, float] = {}
        check_elf(self.path)
        self._lib = _dlopen(self.path)  # no code of the library runs before the check below
        self._kernels: dict[str, NativeKernel] = {}
        self._blob: Any = None
        self.built_for: str | None = None
        if isa_features is None:
            isa_features = self._recorded_features()
        self.isa_features = frozenset(isa_features)
        self.missing_features = missing_cpu_features(self.isa_features)
        if self.missing_features and self.sources:  # built here for another CPU: export only
            warnings.warn(f"{CPUFeatureError(self.path.name, self.missing_features)} (it can be "
                          "exported, but not run here)", stacklevel=2)
        self.num_threads: int | None = None  # None: the library runs single-threaded
        if self.has_symbol(THREADS_SYMBOL) and not self.missing_features:
            self.set_num_threads(settings.num_threads)
        self.run_plan: Callable[..., Any] | None = None  # kiln_run_plan, when exported
        if self.has_symbol(RUN_PLAN_SYMBOL) and not self.missing_features:
            runner = getattr(self._lib, RUN_PLAN_SYMBOL)
            runner.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                               ctypes.POINTER(_ARGV)]
            runner.restype = ctypes.c_int32
            self.run_plan = runner

    def _recorded_features(self) -> list[str]:
        """``isa_features`` of the embedded metadata (none when there is no readable blob)."""
        try:
            blob = self.decoded_blob()
        except RuntimeFormatError:  # reported by load_module, which decodes it again
            return []
        if blob is None:
            return []
        target = blob.metadata.get("target")
        self.built_for = str(target) if target else None
        return [str(f) for f in blob.metadata.get("isa_features") or ()]

    def decoded_blob(self) -> Any:
        """The embedded module blob, decoded (a :class:`~kiln.runtime.export.ModuleBlob`), or None
        when the library has none; decoded once.

        Raises
        ------
        RuntimeFormatError
            The blob is corrupt.
        """
        if self._blob is None:
            payload = self.module_blob()
            if payload is None:
                return None
            self._blob = decode_module_blob(payload, f"module blob in {self.path}")
        return self._blob

    def check_cpu(self) -> None:
        """Raise :class:`~kiln.errors.CPUFeatureError` when this CPU lacks features the library
        needs (naming them)."""
        if self.missing_features:
            raise CPUFeatureError(self.path.name, self.missing_features, self.built_for)

    def has_symbol(self, name: str) -> bool:
        """Whether the library exports ``name``."""
        try:
            getattr(self._lib, name)
        except AttributeError:
            return False
        return True

    def kernel(self, name: str) -> NativeKernel | None:
        """The kernel exported as ``name`` (checked against its signature when one is known)."""
        if name in self._kernels:
            return self._kernels[name]
        self.check_cpu()
        if name in (BLOB_SYMBOL, THREADS_SYMBOL, RUN_PLAN_SYMBOL) or not self.has_symbol(name):
            return None
        cfunc = getattr(self._lib, name)
        cfunc.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        cfunc.restype = ctypes.c_int32
        self._kernels[name] = NativeKernel(name, cfunc, self, self.signatures.get(name))
        return self._kernels[name]

    def set_num_threads(self, num_threads: int) -> None:
        """Set the thread count of the kernels' parallel loops (when the library exports the
        setter); it applies from the next parallel loop on."""
        if not self.has_symbol(THREADS_SYMBOL):
            raise KernelError(f"{self.path.name} has no {THREADS_SYMBOL}; its kernels do not use "
                              "threads")
        self.check_cpu()
        fn = getattr(self._lib, THREADS_SYMBOL)
        fn.argtypes = [ctypes.c_int32]
        fn.restype = None
        fn(int(num_threads))
        self.num_threads = int(num_threads)

    def module_blob(self) -> bytes | None:
        """The ``__tvm_dev_mblob`` contents (size prefix included), or None when absent."""
        if not self.has_symbol(BLOB_SYMBOL):
            return None
        address = ctypes.addressof(ctypes.c_uint64.in_dll(self._lib, BLOB_SYMBOL))
        size = ctypes.c_uint64.from_address(address).value
        file_size = self.path.stat().st_size
        if size > file_size:
            raise RuntimeFormatError(f"{self.path}: its module blob claims {size} "
                                     f"bytes, more than the whole file ({file_size})")
        return ctypes.string_at(address, 8 + size)

    def link_inputs(self) -> list[Path]:
        """Object files (or, failing those, C sources) to link this library again.

        Raises
        ------
        RuntimeFormatError
            The library was not built by Kiln in this process, or its sources were removed.
        """
        if not self.sources:
            raise RuntimeFormatError(f"{self.path.name} was loaded without its sources, so it "
                                     "cannot be linked with a new module blob")
        inputs = []
        for src in self.sources:
            obj = src.with_suffix(".o")
            if obj.is_file():
                inputs.append(obj)
            elif src.is_file():
                inputs.append(src)
            else:
                raise RuntimeFormatError(f"the source {src} of {self.path.name} no longer exists "
                                         "(was the compile cache pruned?); build again to export")
        return inputs

    def get_source(self, fmt: str = "c") -> str:
        """The C the library was compiled from: its kernel units, then the runtime's.

        Raises
        ------
        RuntimeFormatError
            ``fmt`` is not ``"c"``/``""``, or the library was loaded without its sources.
        """
        if fmt not in ("", "c"):
            raise RuntimeFormatError(f"{self.path.name} has only C source, not {fmt!r}")
        if not self.sources:
            raise RuntimeFormatError(f"{self.path.name} was loaded without its sources")
        texts = []
        for src in self.sources:
            if not src.is_file():
                raise RuntimeFormatError(f"the source {src} of {self.path.name} no longer exists "
                                         "(was the compile cache pruned?)")
            texts.append(src.read_text())
        return "\n".join(texts)

    def export_library(self, file_name: str | Path, fcompile: Any = None, addons: Any = None,
                       workspace_dir: Any = None, **kwargs: Any) -> None:
        """Write the kernels (without a graph) as one shared library, with those of the compiled
        libraries it imports (external-compiler regions), as TVM's ``export_library``.

        Parameters
        ----------
        file_name : str or Path
            The ``.so`` to write: linked again from the sources when they are known, otherwise a
            copy of the loaded file.
        fcompile, addons, workspace_dir, **kwargs : optional
            Accepted for TVM compatibility (its compiler hook and options such as
            ``options=[...]``): Kiln links with its own toolchain and flags, and refuses a
            callable ``fcompile``.
        """
        check_fcompile(fcompile)
        from kiln.runtime.factory import _imported_native_libraries

        path = Path(file_name)
        extra = _imported_native_libraries(self)  # external-compiler regions, linked in as TVM's
        if not self.sources and not extra:
            shutil.copyfile(self.path, path)
            return
        from kiln.runtime.toolchain import compile_shared

        inputs = [p for lib in (self, *extra) for p in lib.link_inputs()]
        compile_shared(inputs, path, extra_flags=self.compile_flags)

    def __repr__(self) -> str:
        return f"NativeLibrary({self.path})"


class PlanEntry(NamedTuple):
    """One step of a :class:`RunPlan`: a compiled kernel and the arguments it is bound to."""

    name: str
    address: int
    argv: ctypes.Array[ctypes.c_void_p]
    arrays: tuple[np.ndarray, ...]
    library: NativeLibrary


class RunPlan:
    """Compiled kernels run in order by one ``kiln_run_plan`` call.

    Parameters
    ----------
    entries : sequence of PlanEntry
        The steps, in execution order; their arrays stay referenced by the plan.
    runner : ctypes function
        A library's ``kiln_run_plan`` (any library's: it only calls function pointers).

    Examples
    --------
    >>> plan = RunPlan.create([k.plan_entry([x, y]) for k, (x, y) in steps])  # doctest: +SKIP
    >>> failed = plan()  # -1 when every kernel returned 0
    """

    def __init__(self, entries: Sequence[PlanEntry], runner: Callable[..., Any]):
        self.entries = tuple(entries)
        self._runner = runner
        n = len(self.entries)
        self._n = ctypes.c_int32(n)
        self._fns = (ctypes.c_void_p * max(n, 1))(*[e.address for e in self.entries])
        self._args = (_ARGV * max(n, 1))(*[ctypes.cast(e.argv, _ARGV) for e in self.entries])

    @classmethod
    def create(cls, entries: Sequence[PlanEntry]) -> RunPlan | None:
        """A plan over ``entries``, or None when no library among them exports the runner."""
        for entry in entries:
            if entry.library.run_plan is not None:
                return cls(entries, entry.library.run_plan)
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def __call__(self) -> int:
        """Run every step; -1, or the index of the first kernel that returned non-zero."""
        return int(self._runner(self._n, self._fns, self._args))
