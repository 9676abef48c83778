"""``tvm.contrib.debugger.debug_result``: the debugger's dumps and tables (its code:
:mod:`kiln.runtime.debug_result`, and the profile report of :mod:`kiln.debug.debug_result`)."""

from kiln.debug.debug_result import *
from kiln.debug.debug_result import __all__
