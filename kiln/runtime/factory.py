"""The build result: ``GraphExecutorFactoryModule`` (what ``relay.build`` returns).

It holds the graph JSON, the kernel library and the params, creates executors with the params
already set (``factory["default"](dev)``), and exports everything as one file
(``export_library``): a shared library with the kernels and an embedded module blob for the ``c``
target, Kiln's portable container for the libraries of a registered kind (the ``numpy``
target's; :func:`kiln.runtime.module.register_library_kind`). Like NNVM's build result it also
unpacks as ``graph_json, lib, params = relay.build(...)``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.runtime.cuda_executor import executor_class
from kiln.runtime.export import (
    ModuleBlob,
    default_metadata,
    encode_module_blob,
    write_container,
)
from kiln.runtime.graph_executor import GraphExecutor
from kiln.runtime.graph_json import GraphJSON, parse_graph_json
from kiln.runtime.module import Module, check_fcompile, library_kind_of, registered_library_kinds
from kiln.runtime.ndarray import Device, NDArray
from kiln.runtime.params import as_numpy, save_param_dict

__all__ = ["GraphExecutorFactoryModule"]


class GraphExecutorFactoryModule(Module):
    """Graph JSON + kernel library + params: makes executors and exports artifacts.

    Parameters
    ----------
    graph_json : str
        The graph (TVM's graph JSON text).
    lib : Module
        The kernel library (imported by this module, as in TVM).
    params : mapping of str to NDArray or numpy.ndarray
        The bound params (``p0``, ``p1``, ... after a build).
    mod_name : str
        The name ``factory[mod_name](dev)`` creates executors under.
    metadata : dict, optional
        Build facts (``target``, ``opt_level``, ...), completed at export with the inputs,
        outputs, Kiln version and time.

    Examples
    --------
    >>> factory = relay.build(mod, target="c", params=params)  # doctest: +SKIP
    >>> m = graph_executor.GraphModule(factory["default"](kiln.cpu()))  # doctest: +SKIP
    >>> factory.export_library("net.so")  # doctest: +SKIP
    """

    type_key = "GraphExecutorFactory"

    def __init__(
        self,
        graph_json: str,
        lib: Module,
        params: Mapping[str, Any] | None = None,
        mod_name: str = "default",
        metadata: Mapping[str, Any] | None = None,
        ir_mod: Any = None,
    ):
        super().__init__()
        self.ir_mod = ir_mod  # the module before optimisation, as TVM's factory keeps it
        self.from_build_cache = False  # True when relay.build reused a stored build
        if not isinstance(lib, Module):
            raise TypeError(f"lib must be a runtime Module, got {type(lib).__name__}")
        self.graph: GraphJSON = parse_graph_json(graph_json)
        self.graph_json = graph_json
        self.lib = lib
        self.params: dict[str, NDArray] = {
            name: v if isinstance(v, NDArray) else NDArray(as_numpy(v, name), copy=False)
            for name, v in (params or {}).items()}
        self.libmod_name = mod_name
        self.metadata = dict(metadata or {})
        self.import_module(lib)

    # --- TVM's accessors -----------------------------------------------------------------------
    def get_graph_json(self) -> str:
        """The graph JSON text."""
        return self.graph_json

    get_executor_config = get_graph_json

    def get_lib(self) -> Module:
        """The kernel library."""
        return self.lib

    def get_params(self) -> dict[str, NDArray]:
        """The params, by name."""
        return dict(self.params)

    @property
    def module(self) -> Module:
        """The runtime module (this one: Kiln has no separate FFI handle)."""
        return self

    def __iter__(self) -> Iterator[Any]:
        """``graph_json, lib, params = factory`` (NNVM's build result)."""
        return iter((self.graph_json, self.lib, self.get_params()))

    # --- executors -----------------------------------------------------------------------------
    def create(self, *devices: Device) -> GraphExecutor:
        """An executor on ``devices`` (the CPU, or a CUDA GPU for a cuda build) with the params
        set."""
        executor = executor_class(list(devices) or None)(self.graph, self, list(devices) or None)
        executor.set_params(self.params)
        return executor

    def debug_create(self, name: str, *devices: Device) -> Any:
        """A debug executor with the params set (``factory["debug_create"]("default", dev)``)."""
        if name != self.libmod_name:
            raise KilnError(f"debug_create: this factory builds module {self.libmod_name!r}, not "
                            f"{name!r}")
        from kiln.runtime.debug_executor import create_from_factory

        return create_from_factory(self, *devices)

    def _function(self, name: str) -> Callable[..., Any] | None:
        table: dict[str, Callable[..., Any]] = {
            self.libmod_name: self.create,
            "get_graph_json": self.get_graph_json,
            "get_lib": self.get_lib,
            "get_params": self.get_params,
            "debug_create": self.debug_create,
        }
        return table.get(name)

    # --- export --------------------------------------------------------------------------------
    def module_blob(self) -> bytes:
        """The ``__tvm_dev_mblob`` contents for this build (graph, params, metadata)."""
        from kiln.runtime.native import library_features

        given = dict(self.metadata)
        features = library_features(self.lib)  # the CPU features the kernels need (isa)
        if features:
            given["isa_features"] = features
        metadata = default_metadata(self.graph, self.params, given)
        return encode_module_blob(ModuleBlob(self.graph_json, self.params, self.libmod_name,
                                             metadata))

    def export_library(self, file_name: str | Path, fcompile: Any = None, addons: Any = None,
                       workspace_dir: Any = None, **kwargs: Any) -> None:
        """Write one self-contained file that ``kiln.runtime.load_module`` reads back.

        Parameters
        ----------
        file_name : str or Path
            Where to write: a shared library for compiled kernels, Kiln's portable container for
            a library of a registered kind (the ``numpy`` target's).
        fcompile, addons, workspace_dir, **kwargs : optional
            Accepted for TVM compatibility (its compiler hook and options such as
            ``options=[...]``): Kiln links with its own toolchain and flags, and refuses a
            callable ``fcompile``.

        Raises
        ------
        KilnError
            The library kind cannot be exported, or its sources are gone; ``CompileError`` when
            linking fails.
        """
        from kiln.runtime.native import NativeLibrary

        check_fcompile(fcompile)
        path = Path(file_name)
        blob = self.module_blob()
        extra = _imported_native_libraries(self.lib)
        if isinstance(self.lib, NativeLibrary):
            if not self.lib.sources and not extra and self.lib.module_blob() == blob:
                shutil.copyfile(self.lib.path, path)  # a loaded artifact, exported unchanged
                return
            from kiln.runtime.toolchain import compile_shared

            inputs = [p for lib in (self.lib, *extra) for p in lib.link_inputs()]
            compile_shared(inputs, path, blob=blob, extra_flags=self.lib.compile_flags)
        elif extra:
            raise KilnError("this build runs external-compiler regions as compiled code next to "
                            f"Module[{self.lib.type_key}] kernels; only a build for the c target "
                            "exports them into one file")
        elif (kind := library_kind_of(self.lib)) is not None:
            data = write_container(blob, kind.save(self.lib), kind.type_key)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        else:
            kinds = ", ".join(["c", *registered_library_kinds()])
            raise KilnError(f"cannot export a build whose kernels are a Module[{self.lib.type_key}]; "
                            f"only compiled (c) libraries and registered library kinds ({kinds}) "
                            "can be exported")

    def save_params(self) -> bytearray:
        """The params as a params blob (``relay.save_param_dict(factory.get_params())``)."""
        return save_param_dict(self.params)

    def __repr__(self) -> str:
        return (f"GraphExecutorFactoryModule({len(self.graph.nodes)} nodes, "
                f"{len(self.params)} params, lib={self.lib.type_key})")


def _imported_native_libraries(lib: Module) -> list[Any]:
    """Compiled libraries imported by ``lib`` (external-compiler regions) to link into an export.

    A region library whose kernels carry their own data (constants passed at call time) cannot be
    re-linked into one file; builds lift region constants into params, so this only rejects
    libraries assembled by hand.
    """
    from kiln.runtime.native import NativeLibrary

    out = []
    for mod in lib._walk_imports():
        native = mod if isinstance(mod, NativeLibrary) else getattr(mod, "native", None)
        if not isinstance(native, NativeLibrary) or native is lib:
            continue
        if any(len(getattr(info, "constants", ())) for info in getattr(mod, "infos", {}).values()):
            raise KilnError(f"{mod!r} holds constants outside the graph's params; it cannot be "
                            "exported into one file")
        out.append(native)
    return out
