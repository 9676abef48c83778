"""Passes over IRModules and the pass infrastructure (``PassContext``, ``Sequential``, ...)."""

from kiln.transform.infer_type import InferType, infer_expr_type, infer_type
from kiln.transform.pass_infra import (
    DumpIR,
    FunctionPass,
    ModulePass,
    Pass,
    PassContext,
    PassInfo,
    PassInstrument,
    PassTimingInstrument,
    Sequential,
    function_pass,
    module_pass,
)

__all__ = [
    "DumpIR",
    "FunctionPass",
    "InferType",
    "ModulePass",
    "Pass",
    "PassContext",
    "PassInfo",
    "PassInstrument",
    "PassTimingInstrument",
    "Sequential",
    "function_pass",
    "infer_expr_type",
    "infer_type",
    "module_pass",
]
