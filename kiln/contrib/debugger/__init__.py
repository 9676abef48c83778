"""``tvm.contrib.debugger``: the debug executor and its result dumps."""

from kiln.contrib.debugger import debug_executor, debug_result

__all__ = ["debug_executor", "debug_result"]
