"""The build cache: ``relay.build`` of an unchanged model with unchanged options, whole.

The compile cache (:mod:`kiln.codegen.compiler`) spares a rebuild the C compiler; the passes,
the lowering and the C generation still run (about 2 s for ResNet-50). This cache keys the
whole build and keeps its result, so a rebuild is a hash of the model and a load.

The key (:func:`build_key`) is a SHA-256 of everything the build reads:

- the module's :func:`~kiln.ir.structural.content_digest` (graph, constants, variable and
  source names, module attributes) and the bound params;
- the target and the instruction set it resolves to, the kernel thread count, the C compiler
  and its version;
- the PassContext (opt level, required and disabled passes, config) and ``mod_name``;
- Kiln's own code (the size and modification time of every file of the package), and any
  operator definition or schedule template registered from outside Kiln (their code).

Builds that read something else are not cached: a PassContext with instruments (they expect
the passes to run), a tuning dispatch context (``ApplyHistoryBest``), functions for external
compilers, and targets other than ``c``/``llvm``. ``KILN_BUILD_CACHE=0`` turns the cache off.

An entry is a folder ``<cache_dir>/builds/<key>`` with the graph JSON, the metadata and the
library's description (``entry.json``), the params (``params.bin``, TVM's params format) and
the fused functions (``functions.json``, for the debugger). The kernels stay in the compile
cache; an entry whose library has been pruned from there is a miss. The least recently used
entries are dropped when the folder outgrows :data:`MAX_BYTES`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kiln import progress
from kiln._version import __version__
from kiln.config import settings
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.ir.serialize import load_json, save_json
from kiln.ir.structural import content_digest
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.native import NativeLibrary
from kiln.runtime.params import load_param_dict, save_param_dict
from kiln.target import Target
from kiln.transform import InferType, PassContext

__all__ = ["MAX_BYTES", "build_key", "cached_build", "clear", "counts", "load", "prune", "store",
           "wait"]

#: Bytes the build cache may hold; past it, the least recently used entries go.
MAX_BYTES = 4 << 30
_FORMAT = 1
_code: list[str] = []  # Kiln's code fingerprint, computed once per process
#: Builds this process took from the cache ("hits") and stored ("stores").
counts = {"hits": 0, "stores": 0}
PRUNE_EVERY = 32  # stores between two prunings of the folder
_writers: list[threading.Thread] = []  # stores still being written


def _folder() -> Path:
    return Path(settings.cache_dir) / "builds"


def _code_fingerprint() -> str:
    """Size and modification time of every file of the installed package."""
    if not _code:
        root = Path(__file__).parent
        h = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{dirpath[len(str(root)):]}/{name} {st.st_size} {st.st_mtime_ns}\n"
                         .encode())
        _code.append(h.hexdigest())
    return _code[0]


def _callable_id(fn: Any) -> str:
    """A callable by name; by its code too when it comes from outside Kiln (a user's override)."""
    module = getattr(fn, "__module__", None) or ""
    name = f"{module}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    if module == "kiln" or module.startswith("kiln."):
        return name
    code = getattr(fn, "__code__", None)
    body = (code.co_code + repr(code.co_consts).encode()) if code is not None else repr(fn).encode()
    return f"{name}:{hashlib.sha256(body).hexdigest()}"


def _registries() -> str:
    """Operator definitions and schedule templates, as far as code outside Kiln changed them."""
    from kiln.ir.op_table import op_definitions
    from kiln.te.templates.registry import templates

    outside: list[str] = []
    for name, op_def in sorted(op_definitions().items()):
        fields = dataclasses.fields(op_def) if dataclasses.is_dataclass(op_def) else ()
        for f in fields:
            value = getattr(op_def, f.name)
            if callable(value) and not isinstance(value, type):
                ident = _callable_id(value)
                if ":" in ident:
                    outside.append(f"{name}.{f.name}={ident}")
    for tag, template in sorted(templates().items()):
        ident = _callable_id(template.fn)
        if ":" in ident:
            outside.append(f"template {tag}={ident}")
    return "\n".join(outside)


def _cacheable(mod: IRModule, target: Target, ctx: PassContext) -> bool:
    from kiln.te.dispatch import TuningLookup

    if not settings.build_cache or not target.is_native or ctx.instruments:
        return False
    if TuningLookup.from_context(target) is not None:
        return False
    return not any("Compiler" in fn.attrs for fn in mod.functions.values())


def build_key(mod: IRModule, params: Mapping[str, Any] | None, target: Target,
              mod_name: str) -> str | None:
    """The cache key of ``relay.build(mod, target, params=params, mod_name=mod_name)`` under
    the current PassContext, or None when such a build is not cached."""
    from kiln.codegen.compiler import compiler_version

    ctx = PassContext.current()
    if not _cacheable(mod, target, ctx):
        return None
    isa = target.isa()
    h = hashlib.sha256()
    for part in (f"kiln build {_FORMAT} {__version__}", _code_fingerprint(),
                 content_digest(mod), str(target), " ".join(isa.flags),
                 ",".join(sorted(isa.features)), str(settings.num_threads), settings.cc,
                 compiler_version(), str(ctx.opt_level), repr(sorted(ctx.required_pass)),
                 repr(sorted(ctx.disabled_pass)),
                 repr(sorted((k, repr(v)) for k, v in ctx.config.items())), mod_name,
                 _registries()):
        h.update(part.encode() + b"\0")
    for name in sorted(params or {}):
        value = params[name]  # type: ignore[index]
        array = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value)
        h.update(f"{name} {array.dtype.str} {array.shape}\0".encode())
        h.update(array.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def load(key: str, ir_mod: IRModule) -> GraphExecutorFactoryModule | None:
    """The build stored under ``key``, or None. An entry that cannot be used (its kernels were
    pruned from the compile cache, an older format, a damaged file) is deleted."""
    wait()
    entry = _folder() / key
    if not entry.is_dir():
        return None
    try:
        meta = json.loads((entry / "entry.json").read_text())
        spec = meta["lib"]
        paths = [Path(spec["path"]), *map(Path, spec["sources"])]
        if meta["format"] != _FORMAT or not all(p.is_file() for p in paths):
            raise FileNotFoundError("kernels pruned, or an older format")
        lib = NativeLibrary(paths[0], sources=paths[1:], signatures={
            name: tuple((tuple(shape), dtype) for shape, dtype in sig)
            for name, sig in spec["signatures"].items()},
            isa_features=spec["isa_features"], compile_flags=spec["compile_flags"])
        lib.kernel_flops = {k: float(v) for k, v in spec["kernel_flops"].items()}
        functions = load_json((entry / "functions.json").read_bytes())
        assert isinstance(functions, IRModule)
        functions = InferType()(functions)  # the debugger reads the fused functions' types
        lib.functions = {gv.name_hint: fn for gv, fn in functions.items()}
        params = load_param_dict((entry / "params.bin").read_bytes())
    except Exception:  # whatever is wrong with an entry, the build itself can still be done
        shutil.rmtree(entry, ignore_errors=True)
        return None
    now = time.time()
    with contextlib.suppress(OSError):  # the last use, for pruning
        os.utime(entry, (now, now))
    return GraphExecutorFactoryModule(meta["graph_json"], lib, params, meta["mod_name"],
                                      meta["metadata"], ir_mod=ir_mod)


def store(key: str, factory: GraphExecutorFactoryModule, folder: Path | None = None) -> None:
    """Keep ``factory`` under ``key`` in ``folder`` (default: the cache's) when it can be kept:
    a library with imports (external regions) cannot. The cache is an optimisation: a write
    that fails (a full disk, a removed folder) leaves it without the entry."""
    lib = factory.lib
    if not isinstance(lib, NativeLibrary) or lib.imported_modules or lib.functions is None:
        return
    folder = folder or _folder()
    entry = {
        "format": _FORMAT,
        "graph_json": factory.graph_json,
        "mod_name": factory.libmod_name,
        "metadata": factory.metadata,
        "lib": {"path": str(lib.path), "sources": [str(s) for s in lib.sources],
                "signatures": {k: [[list(shape), dtype] for shape, dtype in sig]
                               for k, sig in lib.signatures.items()},
                "isa_features": sorted(lib.isa_features), "compile_flags": list(lib.compile_flags),
                "kernel_flops": lib.kernel_flops},
    }
    functions = {k: f for k, f in lib.functions.items() if isinstance(f, Function)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=folder) as tmp:
            staged = Path(tmp) / key
            staged.mkdir()
            (staged / "params.bin").write_bytes(save_param_dict(factory.params))
            (staged / "functions.json").write_text(save_json(IRModule(functions)))
            (staged / "entry.json").write_text(json.dumps(entry))
            with contextlib.suppress(OSError):  # another process stored the same build first
                os.replace(staged, folder / key)
        if counts["stores"] % PRUNE_EVERY == 0:
            _prune(folder, MAX_BYTES)
    except OSError:
        return
    counts["stores"] += 1


def _size(entry: Path) -> int:
    return sum(p.stat().st_size for p in entry.iterdir() if p.is_file())


def prune(max_bytes: int | None = None) -> int:
    """Drop the least recently used builds until the cache holds at most ``max_bytes``
    (default :data:`MAX_BYTES`); returns how many were dropped."""
    wait()
    folder = _folder()
    if not folder.is_dir():
        return 0
    return _prune(folder, MAX_BYTES if max_bytes is None else max_bytes)


def _prune(folder: Path, limit: int) -> int:
    dropped = 0
    entries = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    sizes = {p: _size(p) for p in entries}
    total = sum(sizes.values())
    for entry in sorted(entries, key=lambda p: p.stat().st_mtime):
        if total <= limit:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= sizes[entry]
        dropped += 1
    return dropped


def clear() -> int:
    """Delete every stored build; returns how many there were."""
    wait()
    folder = _folder()
    if not folder.is_dir():
        return 0
    entries = [p for p in folder.iterdir() if p.is_dir()]
    for entry in entries:
        shutil.rmtree(entry, ignore_errors=True)
    return len(entries)


def cached_build(build: Callable[[], GraphExecutorFactoryModule], key: str | None,
                 ir_mod: IRModule) -> GraphExecutorFactoryModule:
    """``build()``, or the stored build of ``key``; a fresh build is stored under ``key``."""
    if key is not None:
        hit = load(key, ir_mod)
        if hit is not None:
            counts["hits"] += 1
            hit.from_build_cache = True
            progress.current().message(f"build cache: reused {_folder() / key}")
            return hit
    factory = build()
    if key is not None:  # written while the caller goes on (the process waits for it at exit)
        writer = threading.Thread(target=store, args=(key, factory, _folder()),
                                  name="kiln-build-cache")
        _writers.append(writer)
        writer.start()
    return factory


def wait() -> None:
    """Wait until the builds being stored by this process are written."""
    while _writers:
        _writers.pop().join()
