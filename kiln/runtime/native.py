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
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kiln.config import settings
from kiln.errors import RuntimeFormatError
from kiln.runtime.module import Kernel, KernelError, KernelLibrary, Signature, check_args

__all__ = ["NativeKernel", "NativeLibrary", "PlanEntry", "RunPlan", "check_elf"]

BLOB_SYMBOL = "__tvm_dev_mblob"
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

    def __init__(self, name: str, cfunc: ctypes._CFuncPtr, library: NativeLibrary,
                 signature: Signature | None = None):
        super().__init__(name)
        self.cfunc = cfunc
        self.library = library
        self.signature = signature

    @property
    def address(self) -> int:
        """The kernel's entry point (for :class:`RunPlan`)."""
        value = ctypes.cast(self.cfunc, ctypes.c_void_p).value
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
    """

    type_key = "library"

    def __init__(self, path: str | Path, sources: Sequence[str | Path] = (),
                 signatures: Mapping[str, Signature] | None = None):
        super().__init__()
        self.path = Path(path).resolve()
        self.sources = tuple(Path(s) for s in sources)
        self.signatures: dict[str, Signature] = dict(signatures or {})
        # the fused functions by kernel name when built in this process (build_native sets
        # them; a loaded artifact has none): the debugger reads provenance from them
        self.functions: dict[str, object] | None = None
        check_elf(self.path)
        self._lib = _dlopen(self.path)
        self._kernels: dict[str, NativeKernel] = {}
        self.num_threads: int | None = None  # None: the library runs single-threaded
        if self.has_symbol(THREADS_SYMBOL):
            self.set_num_threads(settings.num_threads)
        self.run_plan: ctypes._CFuncPtr | None = None  # kiln_run_plan, when exported
        if self.has_symbol(RUN_PLAN_SYMBOL):
            runner = getattr(self._lib, RUN_PLAN_SYMBOL)
            runner.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                               ctypes.POINTER(_ARGV)]
            runner.restype = ctypes.c_int32
            self.run_plan = runner

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

    def export_library(self, file_name: str | Path) -> None:
        """Write the kernels (without a graph) as one shared library.

        Parameters
        ----------
        file_name : str or Path
            The ``.so`` to write: linked again from the sources when they are known, otherwise a
            copy of the loaded file.
        """
        path = Path(file_name)
        if not self.sources:
            shutil.copyfile(self.path, path)
            return
        from kiln.codegen.compiler import compile_shared

        compile_shared(self.link_inputs(), path)

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

    def __init__(self, entries: Sequence[PlanEntry], runner: ctypes._CFuncPtr):
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
