"""``tvm.contrib.debugger.debug_executor``: the debug executor (its code:
:mod:`kiln.runtime.debug_executor`, and :mod:`kiln.debug.debug_executor`, whose
``GraphModuleDebug`` adds the per-node profile and ``.npy`` dumps)."""

from kiln.debug.debug_executor import *
from kiln.debug.debug_executor import __all__
