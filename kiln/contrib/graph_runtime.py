"""``tvm.contrib.graph_runtime``: the name TVM used for the graph executor before 0.8.

Scripts of that era (``graph_runtime.create(graph, lib, ctx)``) run unchanged; new code should use
:mod:`kiln.contrib.graph_executor`, which this module re-exports.
"""

from __future__ import annotations

from kiln.contrib.graph_executor import GraphModule, create

__all__ = ["GraphModule", "create"]
