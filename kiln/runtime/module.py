"""Runtime modules: TVM's ``runtime.Module`` shape, kernel libraries, and ``load_module``.

A :class:`Module` exposes named functions (``mod["get_graph_json"]()``) and may import other
modules, as TVM's do. A :class:`KernelLibrary` is a module whose functions are the kernels graph
nodes call by ``func_name``. Every kernel follows one ABI, whatever implements it: it takes the
fused function's input arrays then its output arrays (dense, row-major, of the exact shapes and
dtypes the kernel was built for) and writes the outputs in place.

Kernel libraries:

- :class:`~kiln.runtime.native.NativeLibrary`: compiled C in a shared library (the ``c`` target);
- :class:`~kiln.runtime.python_library.PythonLibrary`: plain Python callables (custom kernels);
- libraries the compiler defines, such as the ``numpy`` target's
  (:class:`kiln.codegen.numpy_library.NumpyLibrary`: fused functions run by the reference
  interpreter).

:func:`load_module` reads what ``export_library`` wrote: a Kiln shared library, or Kiln's portable
container (:mod:`kiln.runtime.export`) holding a library of a kind registered with
:func:`register_library_kind` (the ``numpy`` kind registers itself when ``kiln`` is imported),
and returns the ``GraphExecutorFactory`` module it holds. The runtime imports nothing from the
compiler: a library kind it does not know is a clear :class:`~kiln.errors.RuntimeFormatError`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError, RuntimeFormatError

__all__ = [
    "FunctionNotFoundError",
    "Kernel",
    "KernelError",
    "KernelLibrary",
    "LibraryKind",
    "Module",
    "Signature",
    "check_args",
    "check_fcompile",
    "library_kind",
    "library_kind_of",
    "load_module",
    "register_library_kind",
    "registered_library_kinds",
]


class FunctionNotFoundError(KilnError, AttributeError):
    """A module has no function of the requested name (an ``AttributeError``, as in TVM)."""


class KernelError(KilnError):
    """A kernel was called with wrong arguments, or reported a failure."""


class Module:
    """A runtime module: named functions plus imported modules (TVM's ``runtime.Module``)."""

    type_key = "module"

    def __init__(self) -> None:
        self._imports: list[Module] = []

    @property
    def imported_modules(self) -> list[Module]:
        """Modules this one imports (a copy of the list)."""
        return list(self._imports)

    def import_module(self, module: Module) -> None:
        """Add ``module`` to the imports (its functions become reachable with ``query_imports``)."""
        if not isinstance(module, Module):
            raise TypeError(f"import_module takes a Module, got {type(module).__name__}")
        self._imports.append(module)

    def _function(self, name: str) -> Callable[..., Any] | None:
        """This module's own function ``name``, or None (subclasses provide their functions)."""
        return None

    def get_function(self, name: str, query_imports: bool = False) -> Callable[..., Any]:
        """The function called ``name``.

        Parameters
        ----------
        name : str
            The function name.
        query_imports : bool
            Also look in imported modules (depth first).

        Raises
        ------
        FunctionNotFoundError
            No such function.
        """
        fn = self._function(name)
        if fn is None and query_imports:
            for mod in self._walk_imports():
                fn = mod._function(name)
                if fn is not None:
                    break
        if fn is None:
            raise FunctionNotFoundError(f"Module[{self.type_key}] has no function {name!r}")
        return fn

    def get_source(self, fmt: str = "") -> str:
        """The source this module was compiled from, as TVM's ``Module.get_source`` (``""``
        for modules without one)."""
        return ""

    def implemented(self, name: str) -> bool:
        """Whether ``get_function(name)`` would succeed."""
        return self._function(name) is not None

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if not isinstance(name, str):
            raise TypeError(f"function names are strings, got {type(name).__name__}")
        return self.get_function(name)

    def _walk_imports(self) -> Iterator[Module]:
        seen: set[int] = {id(self)}
        stack = list(reversed(self._imports))
        while stack:
            mod = stack.pop()
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            yield mod
            stack.extend(reversed(mod._imports))

    def find_kernel(self, func_name: str) -> Kernel | None:
        """The kernel ``func_name`` from this module or its imports, or None."""
        for mod in (self, *self._walk_imports()):
            if isinstance(mod, KernelLibrary):
                kernel = mod.kernel(func_name)
                if kernel is not None:
                    return kernel
        return None

    def export_library(self, file_name: str | Path, fcompile: Any = None, addons: Any = None,
                       workspace_dir: Any = None, **kwargs: Any) -> None:
        """Write the module to one self-contained file (only build results can be exported)."""
        check_fcompile(fcompile)
        raise KilnError(f"Module[{self.type_key}] cannot be exported; export the factory module "
                        "that relay.build returned")

    def __repr__(self) -> str:
        return f"Module({self.type_key}, {id(self):#x})"


def check_fcompile(fcompile: Any) -> None:
    """``export_library``'s ``fcompile``: TVM's compiler hook. None or False (the default
    toolchain) is accepted; a callable is refused, Kiln links with its own toolchain."""
    if fcompile not in (None, False):
        raise KilnError("export_library(fcompile=...): Kiln links with its own C toolchain "
                        "(kiln.runtime.toolchain); leave fcompile unset")


class Kernel(abc.ABC):
    """One kernel of a library: call it on arrays, or bind arrays once and call repeatedly.

    Parameters
    ----------
    name : str
        Its symbol (the graph-JSON ``func_name``).
    """

    def __init__(self, name: str):
        self.name = name

    @abc.abstractmethod
    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        """A zero-argument callable running the kernel on ``arrays`` (inputs then outputs).

        Checks happen here, once: the returned callable does no validation or allocation.
        """

    def __call__(self, *arrays: Any) -> None:
        """Run the kernel on arrays (NumPy arrays or NDArrays); outputs are written in place."""
        self.bind([_as_array(a, self.name, i) for i, a in enumerate(arrays)])()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def _as_array(value: Any, kernel: str, i: int) -> np.ndarray:
    from kiln.runtime.ndarray import NDArray

    if isinstance(value, NDArray):
        return value.view_numpy()
    if isinstance(value, np.ndarray):
        return value
    raise KernelError(f"kernel {kernel}: argument {i} must be a NumPy array or NDArray, got "
                      f"{type(value).__name__}")


Signature = tuple[tuple[tuple[int, ...], str], ...]
"""The (shape, dtype) of each kernel argument, inputs then outputs."""


def check_args(kernel: str, arrays: Sequence[np.ndarray], signature: Signature | None = None) -> None:
    """Raise :class:`KernelError` unless the arrays are dense and match ``signature`` (if known).

    Parameters
    ----------
    kernel : str
        The kernel's name (for messages).
    arrays : sequence of numpy.ndarray
        Its arguments, inputs then outputs.
    signature : tuple of (shape, dtype), optional
        What the kernel was built for.
    """
    from kiln.runtime.dtype import np_dtype

    if signature is not None and len(arrays) != len(signature):
        raise KernelError(f"kernel {kernel} takes {len(signature)} arrays (inputs then outputs), "
                          f"got {len(arrays)}")
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise KernelError(f"kernel {kernel}: argument {i} must be a NumPy array, got "
                              f"{type(a).__name__}")
        if not (a.flags.c_contiguous and a.flags.aligned):
            raise KernelError(f"kernel {kernel}: argument {i} (shape {a.shape}, {a.dtype}) must "
                              "be a C-contiguous, aligned array")
        if signature is not None:
            shape, dtype = signature[i]
            if a.shape != tuple(shape) or a.dtype != np_dtype(dtype):
                raise KernelError(f"kernel {kernel}: argument {i} must be {tuple(shape)} {dtype}, "
                                  f"got {a.shape} {a.dtype}")


class KernelLibrary(Module):
    """A module whose functions are kernels, looked up by symbol name."""

    type_key = "library"

    @abc.abstractmethod
    def kernel(self, name: str) -> Kernel | None:
        """The kernel ``name``, or None when the library has no such symbol."""

    def _function(self, name: str) -> Callable[..., Any] | None:
        return self.kernel(name)


# --- library kinds: kernel libraries exported as a payload -------------------------------------

@dataclass(frozen=True)
class LibraryKind:
    """How libraries of one kind are written into, and read back from, an exported container.

    Attributes
    ----------
    type_key : str
        The kind's name: the libraries' ``type_key``, recorded in the container.
    library_type : type
        The :class:`KernelLibrary` subclass it exports.
    save : callable
        ``save(library) -> bytes``: the library's payload.
    load : callable
        ``load(payload, what) -> KernelLibrary``: the library back; raises
        :class:`~kiln.errors.RuntimeFormatError` naming ``what`` (the file) on bad data.
    """

    type_key: str
    library_type: type[KernelLibrary]
    save: Callable[[Any], bytes]
    load: Callable[[bytes, str], KernelLibrary]


_KINDS: dict[str, LibraryKind] = {}


def register_library_kind(type_key: str, library_type: type[KernelLibrary],
                          save: Callable[[Any], bytes],
                          load: Callable[[bytes, str], KernelLibrary]) -> LibraryKind:
    """Make libraries of ``library_type`` exportable to, and loadable from, Kiln's container.

    The module defining a library kind registers it when it is imported (TVM registers a
    module's ``runtime.module.loadbinary_<type_key>`` the same way). Registering a kind again
    replaces it.

    Parameters
    ----------
    type_key : str
        The kind's name, recorded in exported files.
    library_type : type
        The kernel library class (instances of subclasses are exported as this kind too).
    save : callable
        ``save(library) -> bytes``.
    load : callable
        ``load(payload, what) -> KernelLibrary``.

    Returns
    -------
    LibraryKind
        The registered kind.

    Examples
    --------
    >>> register_library_kind("numpy", NumpyLibrary, save_numpy, load_numpy)  # doctest: +SKIP
    """
    if not (isinstance(library_type, type) and issubclass(library_type, KernelLibrary)):
        raise TypeError(f"register_library_kind({type_key!r}): library_type must be a "
                        f"KernelLibrary subclass, got {library_type!r}")
    kind = LibraryKind(type_key, library_type, save, load)
    _KINDS[type_key] = kind
    return kind


def registered_library_kinds() -> list[str]:
    """The names of the registered library kinds, sorted."""
    return sorted(_KINDS)


def library_kind(type_key: str, what: str = "load_module") -> LibraryKind:
    """The registered kind ``type_key``.

    Raises
    ------
    RuntimeFormatError
        No kind of that name is registered (the message names ``what`` and the known kinds).
    """
    kind = _KINDS.get(type_key)
    if kind is None:
        known = ", ".join(registered_library_kinds()) or "none"
        raise RuntimeFormatError(f"{what}: holds a library of kind {type_key!r}, but no such "
                                 f"library kind is registered (registered: {known}); import the "
                                 "module that defines it (import kiln registers the compiler's "
                                 "kinds, numpy among them)")
    return kind


def library_kind_of(library: Module) -> LibraryKind | None:
    """The registered kind ``library`` is an instance of, or None."""
    for kind in _KINDS.values():
        if isinstance(library, kind.library_type):
            return kind
    return None


# --- loading exported files --------------------------------------------------------------------

def load_module(path: str | Path, fmt: str = "") -> Module:
    """Load what ``export_library`` wrote (``tvm.runtime.load_module``).

    Parameters
    ----------
    path : str or Path
        A Kiln shared library (``.so``) or a Kiln container (e.g. a ``numpy``-target export).
    fmt : str
        Accepted for TVM compatibility; the format is recognised from the file's contents.

    Returns
    -------
    Module
        The ``GraphExecutorFactory`` module with the graph JSON, params and kernels
        (``lib["default"](dev)``, ``lib["get_graph_json"]()``, ...). A shared library without an
        embedded graph loads as a plain kernel library.

    Raises
    ------
    RuntimeFormatError
        The file is missing, truncated, corrupt or not a Kiln artifact, or holds a library of a
        kind that is not registered; the message says which.
    CPUFeatureError
        The library was compiled for CPU features this CPU lacks (its metadata's
        ``isa_features``); the message names them.
    """
    from kiln.runtime.export import CONTAINER_MAGIC, decode_module_blob, read_container
    from kiln.runtime.factory import GraphExecutorFactoryModule
    from kiln.runtime.graph_json import parse_graph_json
    from kiln.runtime.native import NativeLibrary

    path = Path(path)
    if not path.is_file():
        raise RuntimeFormatError(f"load_module: {path} does not exist or is not a file")
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith(b"\x7fELF"):
        lib = NativeLibrary(path)  # reads the CPU features its metadata records; runs nothing
        lib.check_cpu()
        blob = lib.decoded_blob()
        if blob is None:
            return lib
        lib.signatures.update(parse_graph_json(blob.graph_json).kernel_signatures())
        return GraphExecutorFactoryModule(blob.graph_json, lib, blob.params, blob.module_name,
                                          blob.metadata)
    if head.startswith(CONTAINER_MAGIC):
        container = read_container(path.read_bytes(), str(path))
        kind = library_kind(container.kind, str(path))
        blob = decode_module_blob(container.blob, f"module blob in {path}")
        kernels = kind.load(container.payload, str(path))
        return GraphExecutorFactoryModule(blob.graph_json, kernels, blob.params,
                                          blob.module_name, blob.metadata)
    raise RuntimeFormatError(f"load_module: {path} is neither a Kiln shared library nor a Kiln "
                             f"container (it starts with {head[:8]!r})")
