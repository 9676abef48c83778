"""Build an imported module with ``relay.build`` (native C) and run it with the graph executor:
what every frontend test compares with the framework's own inference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.ir.module import IRModule

__all__ = ["run_compiled"]


def run_compiled(mod: IRModule, params: Mapping[str, Any] | None, inputs: Mapping[str, np.ndarray],
                 opt_level: int = 3, target: str = "llvm") -> list[np.ndarray]:
    """Every output of ``mod["main"]`` on ``inputs``, built at ``opt_level`` for ``target``."""
    with kiln.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target=target, params=dict(params or {}))
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    for name, value in inputs.items():
        gm.set_input(name, value)
    gm.run()
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
