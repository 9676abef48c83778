"""``relay.vm``: compile for the VM (TVM's ``tvm.relay.vm``); run with ``kiln.runtime.vm``."""

from kiln.build_module import compile_vm as compile
from kiln.runtime.vm import Executable, VirtualMachine

__all__ = ["Executable", "VirtualMachine", "compile"]
