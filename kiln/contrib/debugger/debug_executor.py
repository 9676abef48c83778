"""``tvm.contrib.debugger.debug_executor``: the debug executor (its code:
:mod:`kiln.debug.debug_executor`)."""

from kiln.debug.debug_executor import *
from kiln.debug.debug_executor import __all__
