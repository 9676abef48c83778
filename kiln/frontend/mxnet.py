"""MXNet importer: a symbol JSON (``prefix-symbol.json``) and its weights to relay.

MXNet itself is not needed (it does not install on current Pythons): :func:`load_checkpoint` and
:func:`load_params` read ``prefix-%04d.params`` (MXNet's NDArray list format) with NumPy, and
:func:`from_mxnet` converts a symbol given as JSON text, a parsed dict or a path. An
``mxnet.symbol.Symbol`` or a Gluon ``HybridBlock`` is accepted too when MXNet is importable.

The params format (``NDArray::Save`` in MXNet's ``src/ndarray/ndarray.cc``; little-endian)::

    u64 0x112   u64 reserved
    u64 N, then N arrays:
        u32 magic: 0xF993FAC9 (v2) | 0xF993FACA (v3, NumPy shapes) | 0xF993FAC8 (v1) | else ndim (v0)
        v2/v3: i32 storage type (0: dense)
        shape: i32 ndim, ndim x i64 dims     (v0: the magic was ndim, ndim x u32 dims)
        i32 device type, i32 device id   i32 type flag (0 float32, 1 float64, 2 float16, ...)
        raw row-major data
    u64 K (0 or N), then K x (u64 length, UTF-8 name)   -- "arg:NAME" / "aux:NAME" in checkpoints

Every node's name is stamped on the relay calls made for it (provenance).
"""

from __future__ import annotations

import builtins
import json
import math
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError, KilnTypeError
from kiln.frontend.common import ImportState, require, unsupported_error
from kiln.ir.expr import Constant, Expr
from kiln.ir.module import IRModule
from kiln.runtime.params import ByteReader

__all__ = ["CONVERTERS", "Attrs", "Node", "converter", "from_mxnet", "load_checkpoint", "load_params",
           "mx_reshape", "save_params"]

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
_MAX_NDIM = 32
# mshadow type flags
_TYPE_FLAGS: dict[int, np.dtype] = {
    0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"), 4: np.dtype("<i4"),
    5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype(np.bool_), 8: np.dtype("<i2"), 9: np.dtype("<u2"),
    10: np.dtype("<u4"), 11: np.dtype("<u8"),
}
_FLAG_OF = {str(v): k for k, v in _TYPE_FLAGS.items()}
_FLAG_OF["bool"] = 7
_DTYPE_NAMES = {str(k): str(v) for k, v in _TYPE_FLAGS.items()}  # "__dtype__" attrs hold the flag
_SPARSE = {1: "row_sparse", 2: "csr"}


# --- the params file -------------------------------------------------------------------------

def _read_bytes(source: str | os.PathLike[str] | bytes, what: str) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), f"MXNet {what}"
    try:
        return Path(source).read_bytes(), f"MXNet {what} {str(source)!r}"
    except OSError as e:
        raise FrontendError(f"cannot read MXNet {what} {str(source)!r}: {e.strerror or e}") from None


def _shape(r: ByteReader, label: str, legacy_ndim: int | None = None) -> tuple[int, ...] | None:
    """A ``TShape``: i32 ndim and i64 dims (legacy: u32 dims); None for an unknown shape."""
    at = r.offset
    ndim = legacy_ndim if legacy_ndim is not None else r.i32(f"ndim of {label}")
    if ndim == -1:
        return None
    if not 0 <= ndim <= _MAX_NDIM:
        raise r.fail(f"{label} has an absurd ndim {ndim} (expected 0..{_MAX_NDIM}): not an MXNet "
                     f"params file, or a corrupt one", at)
    fmt = f"<{ndim}{'I' if legacy_ndim is not None else 'q'}"
    raw = r.raw(struct.calcsize(fmt), f"shape of {label}")
    dims = struct.unpack(fmt, raw)
    if any(d < 0 for d in dims):
        raise r.fail(f"{label} has a negative dim in its shape {list(dims)}", at)
    return tuple(int(d) for d in dims)


def _array(r: ByteReader, index: int) -> np.ndarray:
    label = f"array #{index}"
    at = r.offset
    magic = r.i32(f"magic of {label}") & 0xFFFFFFFF
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = r.i32(f"storage type of {label}")
        if stype != 0:
            raise r.fail(f"{label} has {_SPARSE.get(stype, f'storage type {stype}')} storage; only "
                         f"dense arrays are supported", at)
        shape = _shape(r, label)
        if shape is None or (magic == V2_MAGIC and not shape):
            return np.zeros((0,), np.float32)  # a "none" array
    elif magic == V1_MAGIC:
        shape = _shape(r, label)
        if not shape:
            return np.zeros((0,), np.float32)
    elif magic <= _MAX_NDIM:
        shape = _shape(r, label, legacy_ndim=magic)
        if not shape:
            return np.zeros((0,), np.float32)
    else:
        raise r.fail(f"bad magic 0x{magic:08X} for {label} (expected 0x{V2_MAGIC:08X}, "
                     f"0x{V3_MAGIC:08X} or 0x{V1_MAGIC:08X})", at)
    r.i32(f"device type of {label}")
    r.i32(f"device id of {label}")
    flag_at = r.offset
    flag = r.i32(f"type flag of {label}")
    if flag not in _TYPE_FLAGS:
        raise r.fail(f"{label} has an unsupported type flag {flag} (bfloat16 or unknown)", flag_at)
    dtype = _TYPE_FLAGS[flag]
    nbytes = math.prod(shape) * dtype.itemsize
    raw = r.raw(nbytes, f"data of {label} ({list(shape)} {dtype.name}, {nbytes} bytes)")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def load_params(source: str | os.PathLike[str] | bytes) -> dict[str, np.ndarray]:
    """Read an MXNet params file (``mx.nd.save``): name to NumPy array.

    Parameters
    ----------
    source : path or bytes
        The file, or its bytes.

    Returns
    -------
    dict of str to numpy.ndarray
        In file order; names as stored (``arg:NAME``/``aux:NAME`` in checkpoints), or ``"0"``,
        ``"1"``, ... for a list saved without names.
    """
    data, what = _read_bytes(source, "params file")
    r = ByteReader(data, what=what, error=FrontendError)
    header = r.u64("header")
    if header != LIST_MAGIC:
        raise r.fail(f"bad header 0x{header:X} (expected 0x{LIST_MAGIC:X}, MXNet's NDArray list "
                     f"magic): not an MXNet params file", 0)
    r.u64("reserved field")
    n = r.count("number of arrays", 8)
    arrays = [_array(r, i) for i in range(n)]
    names_at = r.offset
    names = r.strings("names")
    if names and len(names) != len(arrays):
        raise r.fail(f"the file holds {len(arrays)} arrays but {len(names)} names (expected one name "
                     f"per array)", names_at)
    if len(set(names)) != len(names):
        dup = sorted({x for x in names if names.count(x) > 1})
        raise r.fail(f"duplicate names {dup}", names_at)
    keys = names or [str(i) for i in range(len(arrays))]
    return dict(zip(keys, arrays))


def save_params(target: str | os.PathLike[str] | None, params: Mapping[str, Any]) -> bytes:
    """Write ``params`` (name to array) in MXNet's format (v2 arrays, CPU); also returns the bytes."""
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(params))]
    for name, value in params.items():
        a = np.ascontiguousarray(_as_numpy(value))
        if str(a.dtype) not in _FLAG_OF:
            raise FrontendError(f"cannot save {name!r}: dtype {a.dtype} has no MXNet type flag")
        out.append(struct.pack("<Iii", V2_MAGIC, 0, a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape))
        little = a.astype(a.dtype.newbyteorder("<"))
        out.append(struct.pack("<iii", 1, 0, _FLAG_OF[str(a.dtype)]) + little.tobytes())
    out.append(struct.pack("<Q", len(params)))
    for name in params:
        raw = name.encode()
        out.append(struct.pack("<Q", len(raw)) + raw)
    blob = b"".join(out)
    if target is not None:
        Path(target).write_bytes(blob)
    return blob


def load_checkpoint(prefix: str | os.PathLike[str], epoch: int
                    ) -> tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Read ``prefix-symbol.json`` and ``prefix-%04d.params`` (``mx.model.load_checkpoint``).

    Returns
    -------
    symbol_json : str
        The symbol JSON text (pass it to :func:`from_mxnet`).
    arg_params, aux_params : dict of str to numpy.ndarray
        The weights, without their ``arg:``/``aux:`` prefixes.
    """
    sym_path = Path(f"{prefix}-symbol.json")
    params_path = Path(f"{prefix}-{int(epoch):04d}.params")
    try:
        text = sym_path.read_text()
    except OSError as e:
        raise FrontendError(f"cannot read MXNet symbol file {str(sym_path)!r}: {e.strerror or e}") from None
    _parse_symbol(text, str(sym_path))
    arg: dict[str, np.ndarray] = {}
    aux: dict[str, np.ndarray] = {}
    for key, value in load_params(params_path).items():
        kind, _, name = key.partition(":")
        if kind not in ("arg", "aux") or not name:
            raise FrontendError(f"MXNet params file {str(params_path)!r}: key {key!r} is not of the form "
                                f"'arg:NAME' or 'aux:NAME' (expected a checkpoint written by "
                                f"mx.model.save_checkpoint or HybridBlock.export)")
        (arg if kind == "arg" else aux)[name] = value
    return text, arg, aux


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "asnumpy"):
        return np.asarray(value.asnumpy())
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


# --- the symbol JSON -------------------------------------------------------------------------

def _parse_symbol(sym: Any, what: str) -> dict[str, Any]:
    if isinstance(sym, (str, os.PathLike)) and not str(sym).lstrip().startswith("{"):
        try:
            text = Path(sym).read_text()
        except OSError as e:
            raise FrontendError(f"cannot read MXNet symbol file {str(sym)!r}: {e.strerror or e}") from None
        return _parse_symbol(text, repr(str(sym)))
    if isinstance(sym, str):
        try:
            sym = json.loads(sym)
        except json.JSONDecodeError as e:
            raise FrontendError(f"MXNet symbol {what} is not valid JSON: {e}") from None
    if not isinstance(sym, dict) or not isinstance(sym.get("nodes"), list) or "heads" not in sym:
        raise FrontendError(f"MXNet symbol {what} is not a symbol JSON (expected an object with "
                            f"'nodes' and 'heads')")
    for i, node in enumerate(sym["nodes"]):
        if not isinstance(node, dict) or "op" not in node or "name" not in node:
            raise FrontendError(f"MXNet symbol {what}: node #{i} has no 'op' or 'name'")
        for entry in node.get("inputs", []):
            if not (isinstance(entry, list) and len(entry) >= 2 and 0 <= int(entry[0]) < i):
                raise FrontendError(f"MXNet symbol {what}: node {node['name']!r} has a bad input "
                                    f"{entry!r} (expected [node index < {i}, output index, version])")
    for entry in sym["heads"]:
        if not (isinstance(entry, list) and len(entry) >= 2 and 0 <= int(entry[0]) < len(sym["nodes"])):
            raise FrontendError(f"MXNet symbol {what}: bad head {entry!r}")
    return sym


class Attrs:
    """A node's string attributes, parsed on demand."""

    def __init__(self, raw: Mapping[str, Any], node: builtins.str):
        self.raw = {k: str(v) for k, v in raw.items()}
        self.node = node

    def __contains__(self, key: builtins.str) -> bool:
        return key in self.raw and self.raw[key] not in ("None", "")

    def str(self, key: builtins.str, default: Any = None) -> Any:
        return self.raw[key] if key in self else default

    def _need(self, key: builtins.str) -> builtins.str:
        if key not in self:
            raise FrontendError(f"MXNet node {self.node!r} lacks the attribute {key!r}")
        return self.raw[key]

    def int(self, key: builtins.str, default: Any = None) -> Any:
        return int(self._need(key)) if key in self or default is None else default

    def float(self, key: builtins.str, default: Any = None) -> Any:
        return float(self._need(key)) if key in self or default is None else default

    def bool(self, key: builtins.str, default: bool = False) -> bool:
        return self.raw[key].strip().lower() in ("true", "1") if key in self else default

    def tuple(self, key: builtins.str, default: Any = None) -> Any:
        """``"(3, 3)"``, ``"[1,2]"`` or ``"3"`` as a tuple (``None`` entries stay None)."""
        if key not in self:
            return default
        text = self.raw[key].strip().strip("()[]").strip()
        if not text:
            return ()
        items = [t.strip() for t in text.split(",") if t.strip()]
        return tuple(None if t == "None" else (float(t) if "." in t or "e" in t else int(t)) for t in items)

    def ints(self, key: builtins.str, default: Any = None) -> Any:
        v = self.tuple(key, default)
        return v if v is None else tuple(int(t) for t in v)


class Node:
    """What a converter sees of one MXNet node."""

    def __init__(self, imp: _Importer, nid: int):
        raw = imp.nodes[nid]
        self.imp = imp
        self.nid = nid
        self.op: str = raw["op"]
        self.name: str = raw["name"]
        self.attrs = Attrs(raw.get("attrs", raw.get("attr", raw.get("param", {}))) or {}, self.name)
        self.inputs: list[tuple[int, int]] = [(int(e[0]), int(e[1])) for e in raw.get("inputs", [])]

    @property
    def state(self) -> ImportState:
        return self.imp.state

    def input(self, i: int) -> Expr:
        """Input ``i`` as an expression."""
        value = self.raw_input(i)
        if isinstance(value, _Deferred):
            raise self.error(f"input {i} is {value.op} with an unknown shape {list(value.shape)}")
        return value

    def raw_input(self, i: int) -> Expr | _Deferred:
        if i >= len(self.inputs):
            raise self.error(f"expected at least {i + 1} inputs, got {len(self.inputs)}")
        nid, idx = self.inputs[i]
        outs = self.imp.values[nid]
        if idx >= len(outs) or outs[idx] is None:
            raise self.error(f"output {idx} of node {self.imp.nodes[nid]['name']!r} is not available")
        return outs[idx]

    def shape(self, i: int | Expr) -> tuple[int, ...]:
        return self.state.shape_of(self.input(i) if isinstance(i, int) else i)

    def dtype(self, i: int | Expr) -> str:
        return self.state.dtype_of(self.input(i) if isinstance(i, int) else i)

    def scalar(self, value: float, like: Expr) -> Constant:
        return Constant(np.array(value, dtype=self.dtype(like)))

    def error(self, message: str) -> FrontendError:
        return FrontendError(f"MXNet node {self.name!r} ({self.op}){self.imp.where}: {message}")


class _Deferred:
    """``_zeros``/``_ones`` with an unknown (0) dim: its consumer (RNN states) knows the shape."""

    def __init__(self, op: str, shape: tuple[int, ...], dtype: str, value: float):
        self.op, self.shape, self.dtype, self.value = op, shape, dtype, value


Converter = Callable[[Node], Any]
Check = Callable[[Attrs], str | None]
CONVERTERS: dict[str, Converter] = {}
_CHECKS: dict[str, Check] = {}
_IGNORED_INPUTS: dict[str, set[int]] = {}


def converter(*ops: str, check: Check | None = None,
              ignore: Sequence[int] = ()) -> Callable[[Converter], Converter]:
    """Register a converter for MXNet op names ``ops``; ``check`` returns why attrs are unsupported."""

    def deco(fn: Converter) -> Converter:
        for op in ops:
            CONVERTERS[op] = fn
            if check is not None:
                _CHECKS[op] = check
            if ignore:
                _IGNORED_INPUTS[op] = set(ignore)
        return fn

    return deco


# --- the importer ----------------------------------------------------------------------------

def from_mxnet(symbol: Any, shape: Mapping[str, Sequence[int]] | None = None,
               dtype: str | Mapping[str, str] = "float32",
               arg_params: Mapping[str, Any] | None = None, aux_params: Mapping[str, Any] | None = None,
               freeze_params: bool = False) -> tuple[IRModule, dict[str, Any]]:
    """Import an MXNet symbol (TVM's ``relay.frontend.from_mxnet``).

    Parameters
    ----------
    symbol : str, dict, path, mxnet Symbol or Gluon HybridBlock
        The symbol JSON (text, parsed, or the ``-symbol.json`` path); an MXNet object needs MXNet.
    shape : dict of str to tuple of int
        The shape of every graph input (the variables that are not weights).
    dtype : str or dict of str to str
        The inputs' dtype (a dict: per input).
    arg_params, aux_params : dict of str to array, optional
        The weights (NumPy arrays, Kiln or MXNet NDArrays), e.g. from :func:`load_checkpoint`.
    freeze_params : bool
        False (TVM's behaviour): weights are parameters of ``main``, returned in ``params``;
        True: they are embedded as constants.

    Returns
    -------
    mod : IRModule
    params : dict of str to NDArray
    """
    params = {**{k: _as_numpy(v) for k, v in (arg_params or {}).items()},
              **{k: _as_numpy(v) for k, v in (aux_params or {}).items()}}
    what = "JSON"
    if hasattr(symbol, "collect_params") and hasattr(symbol, "hybridize"):
        mx = require("mxnet", "", "from_mxnet")  # no extra: mxnet needs numpy<1.24
        if arg_params or aux_params:
            raise FrontendError("from_mxnet: a Gluon block carries its own weights; "
                                "pass no arg_params/aux_params")
        params = {k: _as_numpy(v.data()) for k, v in symbol.collect_params().items()}
        outs = symbol(*[mx.sym.var(n) for n in (shape or {})])
        symbol = mx.sym.Group(list(outs)) if isinstance(outs, (list, tuple)) else outs
    if hasattr(symbol, "tojson"):
        symbol = symbol.tojson()
    elif isinstance(symbol, os.PathLike) or (isinstance(symbol, str)
                                              and not symbol.lstrip().startswith("{")):
        what = repr(str(symbol))
    graph = _parse_symbol(symbol, what)
    return _Importer(graph, what, dict(shape or {}), dtype, params, freeze_params).run()


class _Importer:
    def __init__(self, graph: dict[str, Any], what: str, shape: dict[str, Sequence[int]],
                 dtype: str | Mapping[str, str], params: dict[str, np.ndarray], freeze: bool):
        self.nodes: list[dict[str, Any]] = graph["nodes"]
        self.heads = [(int(e[0]), int(e[1])) for e in graph["heads"]]
        self.what = what
        self.where = "" if what == "JSON" else f" in {what}"
        self.shape = shape
        self.dtype = dtype
        self.params = params
        self.state = ImportState(freeze_params=freeze)
        self.values: dict[int, list[Any]] = {}

    def _used(self) -> tuple[list[int], dict[int, list[str]]]:
        """Nodes the heads depend on (in order) and, per variable, its consumers."""
        needed = {nid for nid, _ in self.heads}
        consumers: dict[int, list[str]] = {}
        for nid in range(len(self.nodes) - 1, -1, -1):
            if nid not in needed:
                continue
            node = self.nodes[nid]
            ignored = _IGNORED_INPUTS.get(node["op"], set())
            for i, e in enumerate(node.get("inputs", [])):
                if i in ignored:
                    continue
                needed.add(int(e[0]))
                consumers.setdefault(int(e[0]), []).append(node["name"])
        return sorted(needed), consumers

    def _check(self, order: list[int], consumers: dict[int, list[str]]) -> None:
        problems: dict[tuple[str, str], list[str]] = {}
        missing: list[str] = []
        variables = set()
        for nid in order:
            node = self.nodes[nid]
            op, name = node["op"], node["name"]
            if op == "null":
                variables.add(name)
                if name not in self.params and name not in self.shape:
                    users = ", ".join(repr(u) for u in consumers.get(nid, []))
                    missing.append(f"{name!r} (used by {users})")
                continue
            if op not in CONVERTERS:
                problems.setdefault((op, ""), []).append(name)
                continue
            check = _CHECKS.get(op)
            detail = check(Attrs(node.get("attrs", node.get("attr", node.get("param", {}))) or {}, name)) \
                if check else None
            if detail:
                problems.setdefault((op, detail), []).append(name)
        if problems:
            raise unsupported_error([(op, names, detail) for (op, detail), names in problems.items()],
                                    framework="MXNet")
        if missing:
            raise FrontendError(f"MXNet symbol {self.what} refers to variables that are neither weights "
                                f"(arg_params/aux_params) nor inputs with a shape: {', '.join(missing)}")
        extra = sorted(set(self.shape) - variables)
        if extra:
            raise FrontendError(f"shape names {extra}, which are not variables of MXNet symbol {self.what} "
                                f"(its variables: {sorted(variables)[:20]})")

    def _variable(self, nid: int) -> None:
        node = self.nodes[nid]
        name = node["name"]
        attrs = Attrs(node.get("attrs", node.get("attr", {})) or {}, name)
        if name in self.params:
            value = self.params[name]
            declared = attrs.ints("__shape__")
            if declared and all(d > 0 for d in declared) and tuple(declared) != value.shape:
                raise FrontendError(f"MXNet weight {name!r} has shape {list(value.shape)} but symbol "
                                    f"{self.what} declares {list(declared)}")
            self.values[nid] = [self.state.constant(name, value)]
        else:
            dt = self.dtype.get(name, "float32") if isinstance(self.dtype, Mapping) else self.dtype
            self.values[nid] = [self.state.add_input(name, self.shape[name], str(dt))]

    def run(self) -> tuple[IRModule, dict[str, Any]]:
        order, consumers = self._used()
        self._check(order, consumers)
        for nid in order:  # inputs first, so they keep their names
            if self.nodes[nid]["op"] == "null" and self.nodes[nid]["name"] not in self.params:
                self._variable(nid)
        for nid in order:
            op = self.nodes[nid]["op"]
            if op == "null":
                if nid not in self.values:
                    self._variable(nid)
                continue
            node = Node(self, nid)
            try:
                result = CONVERTERS[op](node)
                outs = _as_list(result)
                finished = self.state.finish([o if isinstance(o, Expr) else None for o in outs], node.name)
            except KilnTypeError as e:
                raise node.error(f"{e} (input shapes {self._input_shapes(node)})") from None
            self.values[nid] = [f if f is not None else o for f, o in zip(finished, outs)]
        outputs = []
        names = []
        for nid, idx in self.heads:
            outs = self.values[nid]
            value = outs[idx] if idx < len(outs) else None
            if not isinstance(value, Expr):
                raise FrontendError(f"MXNet symbol {self.what}: output {idx} of node "
                                    f"{self.nodes[nid]['name']!r} is not available")
            outputs.append(value)
            n_out = len(outs)
            base = self.nodes[nid]["name"]
            names.append(base if self.nodes[nid]["op"] == "null"
                         else f"{base}_output" + (str(idx) if n_out > 1 else ""))
        return self.state.module(outputs, names)

    def _input_shapes(self, node: Node) -> list[Any]:
        shapes: list[Any] = []
        for i in range(len(node.inputs)):
            try:
                shapes.append(list(node.shape(i)))
            except Exception:  # the shapes are only a hint in an error message
                shapes.append("?")
        return shapes


def _as_list(result: Any) -> list[Any]:
    if isinstance(result, (list, tuple)):
        return list(result)
    if hasattr(result, "astuple") and hasattr(result, "__len__"):
        return [result[i] for i in range(len(result))]
    return [result]


# --- converters: helpers ---------------------------------------------------------------------

def _const(value: Any, dtype: str) -> Constant:
    return Constant(np.array(value, dtype=dtype))


def _axis(axis: int, ndim: int, node: Node) -> int:
    if not -ndim <= axis < ndim:
        raise node.error(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def _slice_axis(x: Expr, axis: int, begin: int, end: int) -> Expr:
    return K.strided_slice(x, begin=[begin], end=[end], axes=[axis])


def _bias(node: Node, out: Expr, index: int, channels: int, axis: int = 1) -> Expr:
    if node.attrs.bool("no_bias", node.op == "Deconvolution"):
        return out
    b = node.input(index)
    if node.shape(b) != (channels,):
        raise node.error(f"bias {node.imp.nodes[node.inputs[index][0]]['name']!r} has shape "
                         f"{list(node.shape(b))}, expected [{channels}]")
    return K.nn.bias_add(out, b, axis=axis)


def _expect_shape(node: Node, index: int, expected: tuple[int, ...], what: str) -> Expr:
    value = node.input(index)
    got = node.shape(value)
    if got != expected:
        src = node.imp.nodes[node.inputs[index][0]]["name"]
        raise node.error(f"{what} {src!r} has shape {list(got)}, but the node's attributes need "
                         f"{list(expected)}")
    return value


def _check_layout(attrs: Attrs) -> str | None:
    layout = attrs.str("layout")
    if layout is not None and layout not in ("NCW", "NCHW", "NCDHW"):
        return f"layout={layout}"
    return None


# --- convolution, pooling, dense -------------------------------------------------------------

@converter("Convolution", check=_check_layout)
def _conv(node: Node) -> Expr:
    a = node.attrs
    kernel = a.ints("kernel")
    nd = len(kernel)
    x = node.input(0)
    channels = node.shape(x)[1]
    filters, groups = a.int("num_filter"), a.int("num_group", 1)
    if channels % groups:
        raise node.error(f"input channels {channels} not divisible by num_group={groups}")
    w = _expect_shape(node, 1, (filters, channels // groups, *kernel), "weight")
    fn = {1: K.conv.conv1d, 2: K.conv.conv2d, 3: K.conv.conv3d}[nd]
    out = fn(x, w, strides=a.ints("stride", (1,) * nd) or (1,) * nd,
             padding=a.ints("pad", (0,) * nd) or (0,) * nd,
             dilation=a.ints("dilate", (1,) * nd) or (1,) * nd, groups=groups, channels=filters,
             kernel_size=kernel)
    return _bias(node, out, 2, filters)


@converter("Deconvolution", check=_check_layout)
def _deconv(node: Node) -> Expr:
    a = node.attrs
    kernel = a.ints("kernel")
    nd = len(kernel)
    x = node.input(0)
    channels = node.shape(x)[1]
    filters, groups = a.int("num_filter"), a.int("num_group", 1)
    w = _expect_shape(node, 1, (channels, filters // groups, *kernel), "weight")
    stride = a.ints("stride", (1,) * nd) or (1,) * nd
    dilate = a.ints("dilate", (1,) * nd) or (1,) * nd
    pad = list(a.ints("pad", (0,) * nd) or (0,) * nd)
    adj = list(a.ints("adj", (0,) * nd) or (0,) * nd)
    target = a.ints("target_shape", ())
    if target and any(target):
        size = node.shape(x)[2:]
        for i in range(nd):
            total = stride[i] * (size[i] - 1) + dilate[i] * (kernel[i] - 1) + 1 - target[i]
            pad[i], adj[i] = (total + 1) // 2, total % 2
    fn = {1: K.conv.conv1d_transpose, 2: K.conv.conv2d_transpose, 3: K.conv.conv3d_transpose}[nd]
    out = fn(x, w, strides=stride, padding=pad, dilation=dilate, groups=groups, channels=filters,
             kernel_size=kernel, output_padding=adj)
    return _bias(node, out, 2, filters)


def _check_pool(attrs: Attrs) -> str | None:
    kind = attrs.str("pool_type", "max")
    if kind not in ("max", "avg", "sum"):
        return f"pool_type={kind}"
    conv = attrs.str("pooling_convention", "valid")
    if conv not in ("valid", "full"):
        return f"pooling_convention={conv}"
    if kind == "sum" and conv == "full" and not attrs.bool("global_pool"):
        return "sum pooling with pooling_convention=full"
    return _check_layout(attrs)


@converter("Pooling", check=_check_pool)
def _pool(node: Node) -> Expr:
    a = node.attrs
    x = node.input(0)
    kind = a.str("pool_type", "max")
    rank = len(node.shape(x))
    if a.bool("global_pool"):
        axes = list(range(2, rank))
        return {"max": K.max, "avg": K.mean, "sum": K.sum}[kind](x, axis=axes, keepdims=True)
    kernel = a.ints("kernel")
    nd = len(kernel)
    if nd != rank - 2:
        raise node.error(f"a {nd}-d kernel on a rank-{rank} input")
    stride = a.ints("stride", (1,) * nd) or (1,) * nd
    pad = a.ints("pad", (0,) * nd) or (0,) * nd
    ceil = a.str("pooling_convention", "valid") == "full"
    if kind == "max":
        fn = {1: K.pool.max_pool1d, 2: K.pool.max_pool2d, 3: K.pool.max_pool3d}[nd]
        return fn(x, pool_size=kernel, strides=stride, padding=pad, ceil_mode=ceil)
    fn = {1: K.pool.avg_pool1d, 2: K.pool.avg_pool2d, 3: K.pool.avg_pool3d}[nd]
    include = a.bool("count_include_pad", True) or kind == "sum"
    out = fn(x, pool_size=kernel, strides=stride, padding=pad, ceil_mode=ceil, count_include_pad=include)
    return K.multiply(out, node.scalar(math.prod(kernel), x)) if kind == "sum" else out


@converter("FullyConnected")
def _fc(node: Node) -> Expr:
    a = node.attrs
    x = node.input(0)
    units = a.int("num_hidden")
    if a.bool("flatten", True) and len(node.shape(x)) != 2:
        x = K.nn.batch_flatten(x)
    w = _expect_shape(node, 1, (units, node.shape(x)[-1]), "weight")
    return _bias(node, K.nn.dense(x, w, units=units), 2, units, axis=-1)


@converter("Flatten", "flatten")
def _flatten(node: Node) -> Expr:
    return K.nn.batch_flatten(node.input(0))


# --- normalisation ---------------------------------------------------------------------------

@converter("BatchNorm", "_contrib_SyncBatchNorm", "BatchNorm_v1")
def _batch_norm(node: Node) -> list[Any]:
    a = node.attrs
    x = node.input(0)
    axis = _axis(a.int("axis", 1), len(node.shape(x)), node)
    c = node.shape(x)[axis]
    gamma = _expect_shape(node, 1, (c,), "gamma") if not a.bool("fix_gamma", True) else \
        _const(np.ones(c), node.dtype(x))
    beta, mean, var = (_expect_shape(node, i, (c,), what) for i, what in
                       ((2, "beta"), (3, "moving_mean"), (4, "moving_var")))
    out = K.nn.batch_norm(x, gamma, beta, mean, var, axis=axis, epsilon=a.float("eps", 1e-3))[0]
    return [out, mean, var]


@converter("LayerNorm", check=lambda a: "output_mean_var=True" if a.bool("output_mean_var") else None)
def _layer_norm(node: Node) -> Expr:
    x = node.input(0)
    axis = _axis(node.attrs.int("axis", -1), len(node.shape(x)), node)
    c = node.shape(x)[axis]
    g, b = _expect_shape(node, 1, (c,), "gamma"), _expect_shape(node, 2, (c,), "beta")
    return K.nn.layer_norm(x, g, b, axis=axis, epsilon=node.attrs.float("eps", 1e-5))


@converter("InstanceNorm")
def _instance_norm(node: Node) -> Expr:
    x = node.input(0)
    c = node.shape(x)[1]
    g, b = _expect_shape(node, 1, (c,), "gamma"), _expect_shape(node, 2, (c,), "beta")
    return K.nn.instance_norm(x, g, b, axis=1, epsilon=node.attrs.float("eps", 1e-3))


@converter("L2Normalization")
def _l2_norm(node: Node) -> Expr:
    x = node.input(0)
    rank = len(node.shape(x))
    mode = node.attrs.str("mode", "instance")
    axes = {"instance": list(range(1, rank)), "channel": [1], "spatial": list(range(2, rank))}.get(mode)
    if axes is None:
        raise node.error(f"unknown mode {mode!r}")
    ss = K.sum(K.multiply(x, x), axis=axes, keepdims=True)
    return K.divide(x, K.sqrt(K.add(ss, node.scalar(node.attrs.float("eps", 1e-10), x))))


# --- activations -----------------------------------------------------------------------------

def _softrelu(node: Node, x: Expr) -> Expr:
    # log(1 + exp(-|x|)) + max(x, 0), stable for large |x|
    return K.add(K.log(K.add(node.scalar(1, x), K.exp(K.negative(K.abs(x))))), K.nn.relu(x))


def _softsign(node: Node, x: Expr) -> Expr:
    return K.divide(x, K.add(node.scalar(1, x), K.abs(x)))


_ACTIVATIONS: dict[str, Callable[[Node, Expr], Expr]] = {
    "relu": lambda n, x: K.nn.relu(x),
    "sigmoid": lambda n, x: K.sigmoid(x),
    "tanh": lambda n, x: K.tanh(x),
    "softrelu": _softrelu,
    "softsign": _softsign,
}


@converter("Activation", check=lambda a: None if a.str("act_type") in _ACTIVATIONS
           else f"act_type={a.str('act_type')}")
def _activation(node: Node) -> Expr:
    return _ACTIVATIONS[node.attrs.str("act_type")](node, node.input(0))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_LAMBDA = 1.0507009873554804934193349852946


def _elu(node: Node, x: Expr, alpha: float) -> Expr:
    neg = K.multiply(node.scalar(alpha, x), K.subtract(K.exp(x), node.scalar(1, x)))
    return K.where(K.greater(x, node.scalar(0, x)), x, neg)


@converter("LeakyReLU", check=lambda a: None if a.str("act_type", "leaky") in
           ("leaky", "prelu", "elu", "selu", "gelu", "rrelu") else f"act_type={a.str('act_type')}")
def _leaky_relu(node: Node) -> Expr | list[Expr]:
    a = node.attrs
    x = node.input(0)
    kind = a.str("act_type", "leaky")
    if kind == "leaky":
        return K.nn.leaky_relu(x, alpha=a.float("slope", 0.25))
    if kind == "rrelu":  # inference: the mean slope; the second output (the training mask) is zeros
        slope = (a.float("lower_bound", 0.125) + a.float("upper_bound", 0.334)) / 2
        return [K.nn.leaky_relu(x, alpha=slope), K.zeros_like(x)]
    if kind == "elu":
        return _elu(node, x, a.float("slope", 0.25))
    if kind == "selu":
        return K.multiply(node.scalar(_SELU_LAMBDA, x), _elu(node, x, _SELU_ALPHA))
    if kind == "gelu":
        inner = K.erf(K.multiply(x, node.scalar(1 / math.sqrt(2), x)))
        return K.multiply(K.multiply(node.scalar(0.5, x), x), K.add(node.scalar(1, x), inner))
    gamma = node.input(1)
    shape = node.shape(x)
    if node.shape(gamma) == (shape[1],) and len(shape) > 1:
        return K.nn.prelu(x, gamma, axis=1)
    if math.prod(node.shape(gamma)) != 1:
        raise node.error(f"prelu gamma of shape {list(node.shape(gamma))} for input {list(shape)}")
    g = K.reshape(gamma, newshape=[])
    return K.where(K.greater(x, node.scalar(0, x)), x, K.multiply(x, g))


def _softmax_over(node: Node, x: Expr, axis: int, log: bool = False) -> Expr:
    t = node.attrs.float("temperature", 1.0)
    if t != 1.0:
        x = K.divide(x, node.scalar(t, x))
    return (K.nn.log_softmax if log else K.nn.softmax)(x, axis=axis)


@converter("softmax", check=lambda a: "use_length=True" if a.bool("use_length") else None)
def _softmax(node: Node) -> Expr:
    return _softmax_over(node, node.input(0), node.attrs.int("axis", -1))


@converter("log_softmax", check=lambda a: "use_length=True" if a.bool("use_length") else None)
def _log_softmax(node: Node) -> Expr:
    return _softmax_over(node, node.input(0), node.attrs.int("axis", -1), log=True)


def _instance_softmax(node: Node, x: Expr) -> Expr:
    """Softmax over everything but the first axis (MXNet's per-instance softmax)."""
    shape = node.shape(x)
    if len(shape) == 2:
        return K.nn.softmax(x, axis=1)
    flat = K.reshape(x, newshape=[shape[0], -1])
    return K.reshape(K.nn.softmax(flat, axis=1), newshape=list(shape))


@converter("SoftmaxOutput", "Softmax", ignore=(1,))
def _softmax_output(node: Node) -> Expr:
    x = node.input(0)
    if node.attrs.bool("multi_output"):
        return K.nn.softmax(x, axis=1)
    if node.attrs.bool("preserve_shape"):
        return K.nn.softmax(x, axis=-1)
    return _instance_softmax(node, x)


@converter("SoftmaxActivation")
def _softmax_activation(node: Node) -> Expr:
    x = node.input(0)
    if node.attrs.str("mode", "instance") == "channel":
        return K.nn.softmax(x, axis=1)
    return _instance_softmax(node, x)


@converter("LinearRegressionOutput", "MAERegressionOutput", ignore=(1,))
def _regression_output(node: Node) -> Expr:
    return node.input(0)


@converter("LogisticRegressionOutput", ignore=(1,))
def _logistic_output(node: Node) -> Expr:
    return K.sigmoid(node.input(0))


# --- elementwise -----------------------------------------------------------------------------

def _round(x: Expr) -> Expr:
    # MXNet rounds half away from zero
    half = Constant(np.array(0.5, dtype="float32"))
    return K.multiply(K.sign(x), K.floor(K.add(K.abs(x), K.cast_like(half, x))))


_UNARY: dict[str, Callable[[Node, Expr], Expr]] = {
    "relu": lambda n, x: K.nn.relu(x), "sigmoid": lambda n, x: K.sigmoid(x), "tanh": lambda n, x: K.tanh(x),
    "exp": lambda n, x: K.exp(x), "log": lambda n, x: K.log(x), "sqrt": lambda n, x: K.sqrt(x),
    "rsqrt": lambda n, x: K.rsqrt(x), "square": lambda n, x: K.multiply(x, x), "abs": lambda n, x: K.abs(x),
    "negative": lambda n, x: K.negative(x), "reciprocal": lambda n, x: K.divide(n.scalar(1, x), x),
    "floor": lambda n, x: K.floor(x), "ceil": lambda n, x: K.ceil(x), "trunc": lambda n, x: K.trunc(x),
    "fix": lambda n, x: K.trunc(x), "round": lambda n, x: _round(x), "rint": lambda n, x: K.round(x),
    "sin": lambda n, x: K.sin(x), "cos": lambda n, x: K.cos(x), "tan": lambda n, x: K.tan(x),
    "arcsin": lambda n, x: K.asin(x), "arccos": lambda n, x: K.acos(x), "arctan": lambda n, x: K.atan(x),
    "sinh": lambda n, x: K.sinh(x), "cosh": lambda n, x: K.cosh(x), "arcsinh": lambda n, x: K.asinh(x),
    "arccosh": lambda n, x: K.acosh(x), "arctanh": lambda n, x: K.atanh(x),
    "erf": lambda n, x: K.erf(x), "sign": lambda n, x: K.sign(x), "softsign": _softsign,
    "log1p": lambda n, x: K.log(K.add(n.scalar(1, x), x)),
    "expm1": lambda n, x: K.subtract(K.exp(x), n.scalar(1, x)),
    "log2": lambda n, x: K.log2(x), "log10": lambda n, x: K.log10(x),
    "identity": lambda n, x: x, "_copy": lambda n, x: x, "BlockGrad": lambda n, x: x,
    "stop_gradient": lambda n, x: x, "make_loss": lambda n, x: x, "MakeLoss": lambda n, x: x,
    "Dropout": lambda n, x: x, "zeros_like": lambda n, x: K.zeros_like(x),
    "ones_like": lambda n, x: K.ones_like(x), "logical_not": lambda n, x: K.cast(
        K.equal(x, n.scalar(0, x)), n.dtype(x)),
}


def _unary(node: Node) -> Expr:
    return _UNARY[node.op](node, node.input(0))


for _name in _UNARY:
    converter(_name)(_unary)


def _compare(fn: Callable[[Expr, Expr], Expr]) -> Callable[[Expr, Expr], Expr]:
    def build(a: Expr, b: Expr) -> Expr:
        return K.cast_like(fn(a, b), a)

    return build


_BINARY: dict[str, Callable[[Expr, Expr], Expr]] = {
    "add": K.add, "sub": K.subtract, "mul": K.multiply, "div": K.divide, "maximum": K.maximum,
    "minimum": K.minimum, "power": K.power, "equal": _compare(K.equal), "not_equal": _compare(K.not_equal),
    "greater": _compare(K.greater), "greater_equal": _compare(K.greater_equal),
    "lesser": _compare(K.less), "lesser_equal": _compare(K.less_equal),
}
_BINARY_NAMES = {
    "add": ("elemwise_add", "_plus", "_Plus", "_add", "broadcast_add", "broadcast_plus"),
    "sub": ("elemwise_sub", "_minus", "_Minus", "_sub", "broadcast_sub", "broadcast_minus"),
    "mul": ("elemwise_mul", "_mul", "_Mul", "broadcast_mul"),
    "div": ("elemwise_div", "_div", "_Div", "broadcast_div"),
    "maximum": ("_maximum", "_Maximum", "broadcast_maximum"),
    "minimum": ("_minimum", "_Minimum", "broadcast_minimum"),
    "power": ("_power", "_Power", "broadcast_power"),
    **{k: (f"_{k}", f"broadcast_{k}") for k in
       ("equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal")},
}
_BINARY_OPS = {name: kind for kind, names in _BINARY_NAMES.items() for name in names}


@converter(*_BINARY_OPS)
def _binary(node: Node) -> Expr:
    return _BINARY[_BINARY_OPS[node.op]](node.input(0), node.input(1))


_SCALAR_OPS: dict[str, tuple[str, bool]] = {  # op -> (binary kind, scalar on the left)
    "_plus_scalar": ("add", False), "_PlusScalar": ("add", False),
    "_minus_scalar": ("sub", False), "_MinusScalar": ("sub", False),
    "_rminus_scalar": ("sub", True), "_RMinusScalar": ("sub", True),
    "_mul_scalar": ("mul", False), "_MulScalar": ("mul", False),
    "_div_scalar": ("div", False), "_DivScalar": ("div", False),
    "_rdiv_scalar": ("div", True), "_RDivScalar": ("div", True),
    "_power_scalar": ("power", False), "_PowerScalar": ("power", False),
    "_rpower_scalar": ("power", True), "_RPowerScalar": ("power", True),
    "_maximum_scalar": ("maximum", False), "_MaximumScalar": ("maximum", False),
    "_minimum_scalar": ("minimum", False), "_MinimumScalar": ("minimum", False),
    **{f"_{k}_scalar": (k, False) for k in ("equal", "not_equal", "greater", "greater_equal", "lesser",
                                          "lesser_equal")},
}


@converter(*_SCALAR_OPS)
def _scalar_op(node: Node) -> Expr:
    kind, left = _SCALAR_OPS[node.op]
    x = node.input(0)
    s = node.scalar(node.attrs.float("scalar"), x)
    return _BINARY[kind](s, x) if left else _BINARY[kind](x, s)


@converter("add_n", "ElementWiseSum")
def _add_n(node: Node) -> Expr:
    out = node.input(0)
    for i in range(1, len(node.inputs)):
        out = K.add(out, node.input(i))
    return out


@converter("clip")
def _clip(node: Node) -> Expr:
    return K.clip(node.input(0), node.attrs.float("a_min"), node.attrs.float("a_max"))


@converter("Cast", "cast", "amp_cast")
def _cast(node: Node) -> Expr:
    return K.cast(node.input(0), node.attrs.str("dtype"))


@converter("where")
def _where(node: Node) -> Expr:
    cond = node.input(0)
    return K.where(K.not_equal(cond, node.scalar(0, cond)), node.input(1), node.input(2))


# --- shapes ----------------------------------------------------------------------------------

def mx_reshape(src: Sequence[int], spec: Sequence[int], reverse: bool = False) -> tuple[int, ...]:
    """The output shape of MXNet's ``Reshape`` (codes 0, -1, -2, -3, -4; ``reverse``)."""
    src, spec = list(src), list(spec)
    if reverse:
        src.reverse()
        spec.reverse()
    out: list[int] = []
    infer = -1
    s = i = 0
    while i < len(spec):
        p = spec[i]
        if p > 0:
            out.append(p)
            s += 1
        elif p == 0:
            out.append(src[s])
            s += 1
        elif p == -1:
            if infer >= 0:
                raise ValueError("more than one -1")
            infer = len(out)
            out.append(1)
            s += 1
        elif p == -2:
            out.extend(src[s:])
            s = len(src)
        elif p == -3:
            out.append(src[s] * src[s + 1])
            s += 2
        elif p == -4:
            d0, d1, d2 = src[s], spec[i + 1], spec[i + 2]
            i += 2
            s += 1
            d1 = d0 // d2 if d1 == -1 else d1
            d2 = d0 // d1 if d2 == -1 else d2
            if d1 * d2 != d0:
                raise ValueError(f"-4 splits {d0} into {d1} x {d2}")
            out.extend([d1, d2])
        else:
            raise ValueError(f"unknown code {p}")
        i += 1
    if infer >= 0:
        known = math.prod(out)
        out[infer] = math.prod(src) // known if known else 0
    if reverse:
        out.reverse()
    if math.prod(out) != math.prod(src):
        raise ValueError(f"{math.prod(src)} elements cannot take the shape {out}")
    return tuple(out)


@converter("Reshape", "reshape", check=lambda a: "target_shape (deprecated)"
           if a.ints("target_shape", ()) and "shape" not in a else None)
def _reshape(node: Node) -> Expr:
    x = node.input(0)
    spec = node.attrs.ints("shape", ())
    try:
        new = mx_reshape(node.shape(x), spec, node.attrs.bool("reverse"))
    except (ValueError, IndexError) as e:
        raise node.error(f"cannot reshape {list(node.shape(x))} by {list(spec)}: {e}") from None
    return K.reshape(x, newshape=list(new))


@converter("transpose")
def _transpose(node: Node) -> Expr:
    axes = node.attrs.ints("axes", ())
    return K.transpose(node.input(0), axes=list(axes) if axes else None)


@converter("SwapAxis", "swapaxes")
def _swapaxes(node: Node) -> Expr:
    x = node.input(0)
    rank = len(node.shape(x))
    d1 = _axis(node.attrs.int("dim1", 0), rank, node)
    d2 = _axis(node.attrs.int("dim2", 0), rank, node)
    axes = list(range(rank))
    axes[d1], axes[d2] = axes[d2], axes[d1]
    return K.transpose(x, axes=axes)


@converter("Concat", "concat", "_rnn_param_concat")
def _concat(node: Node) -> Expr:
    xs = [node.input(i) for i in range(len(node.inputs))]
    return K.concatenate(xs, axis=node.attrs.int("dim", 1))


@converter("stack")
def _stack(node: Node) -> Expr:
    return K.stack([node.input(i) for i in range(len(node.inputs))], axis=node.attrs.int("axis", 0))


@converter("SliceChannel", "split")
def _split(node: Node) -> list[Expr]:
    x = node.input(0)
    rank = len(node.shape(x))
    axis = _axis(node.attrs.int("axis", 1), rank, node)
    n = node.attrs.int("num_outputs")
    if node.shape(x)[axis] % n:
        raise node.error(f"axis {axis} of size {node.shape(x)[axis]} does not split into {n}")
    parts = K.split(x, indices_or_sections=n, axis=axis)
    outs: list[Expr] = [parts[i] for i in range(n)]
    if node.attrs.bool("squeeze_axis"):
        outs = [K.squeeze(o, axis=[axis]) for o in outs]
    return outs


@converter("expand_dims")
def _expand_dims(node: Node) -> Expr:
    x = node.input(0)
    axis = node.attrs.int("axis")
    return K.expand_dims(x, axis=axis % (len(node.shape(x)) + 1))


@converter("squeeze")
def _squeeze(node: Node) -> Expr:
    axis = node.attrs.ints("axis", ())
    return K.squeeze(node.input(0), axis=list(axis) if axis else None)


def _check_slice(attrs: Attrs) -> str | None:
    step = attrs.tuple("step", ()) or ()
    if any(s is not None and s <= 0 for s in step):
        return "a step <= 0"
    return None


@converter("slice", "crop", check=_check_slice)
def _slice(node: Node) -> Expr:
    x = node.input(0)
    shape = node.shape(x)
    begin, end = node.attrs.tuple("begin"), node.attrs.tuple("end")
    step = node.attrs.tuple("step", ()) or ()
    b, e, s = [], [], []
    for i, dim in enumerate(shape[:len(begin)]):
        st = step[i] if i < len(step) and step[i] is not None else 1
        start, stop, _ = slice(begin[i], end[i] if i < len(end) else None, st).indices(dim)
        b.append(start)
        e.append(max(stop, start))
        s.append(st)
    return K.strided_slice(x, begin=b, end=e, strides=s)


@converter("slice_axis")
def _slice_axis_op(node: Node) -> Expr:
    x = node.input(0)
    shape = node.shape(x)
    axis = _axis(node.attrs.int("axis"), len(shape), node)
    end = node.attrs.int("end", shape[axis]) if "end" in node.attrs else None
    start, stop, _ = slice(node.attrs.int("begin", 0), end).indices(shape[axis])
    return _slice_axis(x, axis, start, max(stop, start))


@converter("slice_like")
def _slice_like(node: Node) -> Expr:
    axes = node.attrs.ints("axes", ())
    return K.slice_like(node.input(0), node.input(1), axes=list(axes) if axes else None)


@converter("tile")
def _tile(node: Node) -> Expr:
    return K.tile(node.input(0), reps=list(node.attrs.ints("reps")))


@converter("repeat")
def _repeat(node: Node) -> Expr:
    x = node.input(0)
    axis = node.attrs.int("axis", 0) if "axis" in node.attrs else None
    if axis is None:
        x = K.reshape(x, newshape=[-1])
        axis = 0
    return K.repeat(x, repeats=node.attrs.int("repeats"), axis=axis)


@converter("broadcast_to")
def _broadcast_to(node: Node) -> Expr:
    x = node.input(0)
    src = node.shape(x)
    shape = [s if t == 0 else t for s, t in zip(src, node.attrs.ints("shape"))]
    return K.broadcast_to(x, shape)


@converter("broadcast_like", check=lambda a: "lhs_axes/rhs_axes" if "lhs_axes" in a or "rhs_axes" in a
           else None)
def _broadcast_like(node: Node) -> Expr:
    return K.broadcast_to(node.input(0), list(node.shape(1)))


@converter("broadcast_axis", "broadcast_axes")
def _broadcast_axis(node: Node) -> Expr:
    x = node.input(0)
    shape = list(node.shape(x))
    for axis, size in zip(node.attrs.ints("axis"), node.attrs.ints("size")):
        shape[_axis(axis, len(shape), node)] = size
    return K.broadcast_to(x, shape)


@converter("Pad", "pad", check=lambda a: None if a.str("mode", "constant") in ("constant", "edge", "reflect")
           else f"mode={a.str('mode')}")
def _pad(node: Node) -> Expr:
    widths = node.attrs.ints("pad_width")
    pairs = [[widths[2 * i], widths[2 * i + 1]] for i in range(len(widths) // 2)]
    x = node.input(0)
    return K.nn.pad(x, pad_width=pairs, pad_value=node.attrs.float("constant_value", 0.0),
                    pad_mode=node.attrs.str("mode", "constant"))


# --- reductions, products, lookups -----------------------------------------------------------

def _reduce_axes(node: Node) -> Any:
    axis = node.attrs.ints("axis", ())
    return list(axis) if axis else None


_REDUCE = {"sum": K.sum, "sum_axis": K.sum, "mean": K.mean, "max": K.max, "max_axis": K.max,
           "min": K.min, "min_axis": K.min, "prod": K.prod}


@converter(*_REDUCE)
def _reduce(node: Node) -> Expr:
    out = _REDUCE[node.op](node.input(0), axis=_reduce_axes(node), keepdims=node.attrs.bool("keepdims"),
                           exclude=node.attrs.bool("exclude"))
    return _not_scalar(node, out)


def _not_scalar(node: Node, out: Expr) -> Expr:
    """MXNet's (non-NumPy) shapes have no rank 0: a full reduction has shape (1,)."""
    return K.reshape(out, newshape=[1]) if node.state.shape_of(out) == () else out


@converter("argmax", "argmin")
def _arg_reduce(node: Node) -> Expr:
    x = node.input(0)
    axis = node.attrs.int("axis") if "axis" in node.attrs else None
    fn = K.argmax if node.op == "argmax" else K.argmin
    return _not_scalar(node, K.cast(fn(x, axis=axis, keepdims=node.attrs.bool("keepdims")), node.dtype(x)))


@converter("dot")
def _dot(node: Node) -> Expr:
    a, b = node.input(0), node.input(1)
    sa, sb = node.shape(a), node.shape(b)
    ta, tb = node.attrs.bool("transpose_a"), node.attrs.bool("transpose_b")
    if len(sa) == 1 and len(sb) == 1:
        return K.sum(K.multiply(a, b), axis=[0], keepdims=True)
    # contract a's last axis (first when transposed) with b's first axis (last when transposed)
    if ta:
        a = K.transpose(a, axes=[*range(1, len(sa)), 0])
        sa = sa[1:] + sa[:1]
    if tb:
        b = K.transpose(b, axes=[len(sb) - 1, *range(len(sb) - 1)])
        sb = sb[-1:] + sb[:-1]
    if sa[-1] != sb[0]:
        raise node.error(f"cannot contract shapes {list(sa)} and {list(sb)}")
    a2 = K.reshape(a, newshape=[-1, sa[-1]])
    b2 = K.reshape(b, newshape=[sb[0], -1])
    out = K.nn.matmul(a2, b2)
    return K.reshape(out, newshape=list(sa[:-1]) + list(sb[1:]))


@converter("batch_dot")
def _batch_dot(node: Node) -> Expr:
    return K.nn.batch_matmul(node.input(0), node.input(1), transpose_a=node.attrs.bool("transpose_a"),
                             transpose_b=node.attrs.bool("transpose_b"))


@converter("Embedding")
def _embedding(node: Node) -> Expr:
    w = _expect_shape(node, 1, (node.attrs.int("input_dim"), node.attrs.int("output_dim")), "weight")
    idx = K.cast(node.input(0), "int32")
    return K.take(w, idx, axis=0, mode="clip")


@converter("take")
def _take(node: Node) -> Expr:
    mode = node.attrs.str("mode", "clip")
    return K.take(node.input(0), K.cast(node.input(1), "int32"), axis=node.attrs.int("axis", 0),
                  mode="wrap" if mode == "wrap" else "clip")


# --- creation, resizing ----------------------------------------------------------------------

@converter("_zeros", "_ones", "_full")
def _fill(node: Node) -> Any:
    shape = node.attrs.ints("shape", ())
    dtype = node.attrs.str("dtype", "float32")
    dtype = _DTYPE_NAMES.get(dtype, dtype)
    value = 0.0 if "zeros" in node.op else 1.0 if "ones" in node.op else node.attrs.float("value")
    if any(d == 0 for d in shape):
        return _Deferred(node.op, shape, dtype, value)
    return _const(np.full(shape, value), dtype)


@converter("UpSampling", check=lambda a: None if a.str("sample_type") == "nearest"
           and a.int("num_args", 1) == 1 else "only nearest sampling of one input")
def _upsampling(node: Node) -> Expr:
    s = node.attrs.int("scale")
    return K.nn.upsampling(node.input(0), scale_h=s, scale_w=s, method="nearest_neighbor")


_RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


@converter("_contrib_BilinearResize2D", check=lambda a: None if a.str("mode", "size") in _RESIZE_MODES
           else f"mode={a.str('mode')}")
def _bilinear_resize(node: Node) -> Expr:
    a = node.attrs
    x = node.input(0)
    _, _, h, w = node.shape(x)
    mode = a.str("mode", "size")
    sh, sw = a.float("scale_height", 0.0), a.float("scale_width", 0.0)
    size: tuple[int, ...]
    if mode == "size":
        size = (int(sh * h), int(sw * w)) if "scale_height" in a else (a.int("height"), a.int("width"))
    elif mode == "odd_scale":
        size = tuple(int(d * s) if d % 2 == 0 else int((d - 1) * s) + 1 for d, s in ((h, sh), (w, sw)))
    elif mode == "like":
        size = node.shape(1)[2:4]
    else:
        want_even = "even" in mode
        step = -1 if mode.endswith("down") else 1
        size = tuple(d if (d % 2 == 0) == want_even else d + step for d in (h, w))
    ctm = "align_corners" if a.bool("align_corners", True) else "pytorch_half_pixel"
    return K.image.resize2d(x, size=list(size), method="linear", coordinate_transformation_mode=ctm)


# --- recurrent layers ------------------------------------------------------------------------

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _check_rnn(attrs: Attrs) -> str | None:
    if attrs.str("mode") not in _GATES:
        return f"mode={attrs.str('mode')}"
    if "projection_size" in attrs:
        return "projection_size"
    if attrs.bool("use_sequence_length"):
        return "use_sequence_length=True"
    if "lstm_state_clip_min" in attrs or "lstm_state_clip_max" in attrs:
        return "lstm_state_clip_min/max"
    return None


def _state(node: Node, i: int, shape: tuple[int, ...], dtype: str) -> Expr:
    value = node.raw_input(i)
    if isinstance(value, _Deferred):
        return _const(np.full(shape, value.value), dtype)
    if node.shape(value) != shape:
        raise node.error(f"state input {i} has shape {list(node.shape(value))}, expected {list(shape)}")
    return value


@converter("RNN", check=_check_rnn)
def _rnn(node: Node) -> list[Expr]:
    a = node.attrs
    mode = a.str("mode")
    gates, hidden = _GATES[mode], a.int("state_size")
    layers = a.int("num_layers", 1)
    dirs = 2 if a.bool("bidirectional") else 1
    x = node.input(0)
    seq, batch, features = node.shape(x)
    dtype = node.dtype(x)
    flat = node.input(1)
    sizes = []  # (input size) per layer
    for layer in range(layers):
        sizes.append(features if layer == 0 else dirs * hidden)
    total = sum(dirs * gates * hidden * (n_in + hidden + 2) for n_in in sizes)
    if node.shape(flat) != (total,):
        raise node.error(f"parameters have shape {list(node.shape(flat))}, expected [{total}] for "
                         f"mode={mode}, "
                         f"state_size={hidden}, num_layers={layers}, bidirectional={dirs == 2} and "
                         f"{features} input features")
    offset = 0

    def take(n: int, shape: list[int]) -> Expr:
        nonlocal offset
        piece = K.reshape(_slice_axis(flat, 0, offset, offset + n), newshape=shape)
        offset += n
        return piece

    weights = [[(take(gates * hidden * sizes[la], [gates * hidden, sizes[la]]),
                 take(gates * hidden * hidden, [gates * hidden, hidden])) for _ in range(dirs)]
               for la in range(layers)]
    biases = [[(take(gates * hidden, [gates * hidden]), take(gates * hidden, [gates * hidden]))
               for _ in range(dirs)] for _ in range(layers)]
    state_shape = (layers * dirs, batch, hidden)
    h0 = _state(node, 2, state_shape, dtype)
    c0 = _state(node, 3, state_shape, dtype) if mode == "lstm" else None

    def split(v: Expr) -> list[Expr]:
        return [_slice_axis(v, 1, k * hidden, (k + 1) * hidden) for k in range(gates)]

    def initial(v: Expr, k: int) -> Expr:
        return K.reshape(_slice_axis(v, 0, k, k + 1), newshape=[batch, hidden])

    def one(v: Expr) -> Expr:
        return node.scalar(1, v)

    seq_in = x
    finals_h: list[Expr] = []
    finals_c: list[Expr] = []
    for la in range(layers):
        proj_in = K.reshape(seq_in, newshape=[seq * batch, sizes[la]])
        outs_per_dir = []
        for d in range(dirs):
            wx, wh = weights[la][d]
            bx, bh = biases[la][d]
            proj = K.add(K.nn.dense(proj_in, wx), bx)
            steps = [_slice_axis(proj, 0, t * batch, (t + 1) * batch) for t in range(seq)]
            order = range(seq - 1, -1, -1) if d == 1 else range(seq)
            h = initial(h0, la * dirs + d)
            c = initial(c0, la * dirs + d) if c0 is not None else None
            outs: list[Expr | None] = [None] * seq
            for t in order:
                rec = K.add(K.nn.dense(h, wh), bh)
                if mode == "lstm":
                    i, f, g, o = (K.add(p, q) for p, q in zip(split(steps[t]), split(rec)))
                    c = K.add(K.multiply(K.sigmoid(f), c), K.multiply(K.sigmoid(i), K.tanh(g)))
                    h = K.multiply(K.sigmoid(o), K.tanh(c))
                elif mode == "gru":
                    (xr, xz, xn), (hr, hz, hn) = split(steps[t]), split(rec)
                    r = K.sigmoid(K.add(xr, hr))
                    z = K.sigmoid(K.add(xz, hz))
                    n = K.tanh(K.add(xn, K.multiply(r, hn)))
                    h = K.add(K.multiply(K.subtract(one(z), z), n), K.multiply(z, h))
                else:
                    pre = K.add(steps[t], rec)
                    h = K.tanh(pre) if mode == "rnn_tanh" else K.nn.relu(pre)
                outs[t] = K.reshape(h, newshape=[1, batch, hidden])
            outs_per_dir.append(K.concatenate([o for o in outs if o is not None], axis=0))
            finals_h.append(K.reshape(h, newshape=[1, batch, hidden]))
            if c is not None:
                finals_c.append(K.reshape(c, newshape=[1, batch, hidden]))
        seq_in = outs_per_dir[0] if dirs == 1 else K.concatenate(outs_per_dir, axis=2)
    results = [seq_in, K.concatenate(finals_h, axis=0)]
    if finals_c:
        results.append(K.concatenate(finals_c, axis=0))
    return results

