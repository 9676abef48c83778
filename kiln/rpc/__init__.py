"""``kiln.rpc``: TVM's ``tvm.rpc`` names, so that scripts importing them load; Kiln has no RPC.

TVM runs models on remote devices through an RPC server and tracker. Kiln compiles for and runs
on the host only, so every entry point here raises :class:`~kiln.errors.RPCUnsupportedError` when
called (not when imported): a test file that imports ``rpc`` at module level loads, and only the
units that connect to a server fail, with that reason.
"""

from __future__ import annotations

from typing import Any, NoReturn

from kiln.errors import RPCUnsupportedError

__all__ = [
    "LocalSession",
    "PopenSession",
    "RPCSession",
    "Server",
    "TrackerSession",
    "connect",
    "connect_tracker",
    "with_minrpc",
]


def _no_rpc(what: str) -> NoReturn:
    raise RPCUnsupportedError(f"kiln.rpc.{what}: Kiln has no RPC runtime (TVM's tvm.rpc server, "
                              "tracker and remote sessions); build and run on the host instead")


def connect(url: str, port: int, *args: Any, **kwargs: Any) -> NoReturn:
    """TVM's ``rpc.connect``: raises :class:`~kiln.errors.RPCUnsupportedError`."""
    _no_rpc("connect")


def connect_tracker(url: str, port: int, *args: Any, **kwargs: Any) -> NoReturn:
    """TVM's ``rpc.connect_tracker``: raises :class:`~kiln.errors.RPCUnsupportedError`."""
    _no_rpc("connect_tracker")


def with_minrpc(compile_func: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """TVM's ``rpc.with_minrpc``: raises :class:`~kiln.errors.RPCUnsupportedError`."""
    _no_rpc("with_minrpc")


class _Unsupported:
    """Base of TVM's RPC classes: constructing one raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _no_rpc(type(self).__name__)


class Server(_Unsupported):
    """TVM's ``rpc.Server``: raises :class:`~kiln.errors.RPCUnsupportedError`."""


class RPCSession(_Unsupported):
    """TVM's ``rpc.RPCSession``: raises :class:`~kiln.errors.RPCUnsupportedError`."""


class LocalSession(RPCSession):
    """TVM's ``rpc.LocalSession``: raises :class:`~kiln.errors.RPCUnsupportedError`."""


class PopenSession(RPCSession):
    """TVM's ``rpc.PopenSession``: raises :class:`~kiln.errors.RPCUnsupportedError`."""


class TrackerSession(_Unsupported):
    """TVM's ``rpc.TrackerSession``: raises :class:`~kiln.errors.RPCUnsupportedError`."""
