"""Passes over IRModules and the pass infrastructure (``PassContext``, ``Sequential``, ...)."""

from kiln.transform.alter_batch_matmul import AlterBatchMatmul
from kiln.transform.alter_op_layout import AlterOpLayout
from kiln.transform.annotate_target import AnnotateTarget
from kiln.transform.bind_params import bind_params_by_name
from kiln.transform.canonicalize_ops import CanonicalizeOps
from kiln.transform.convert_layout import ConvertLayout
from kiln.transform.dead_code import DeadCodeElimination, ToGraphNormalForm
from kiln.transform.eliminate_common_subexpr import EliminateCommonSubexpr
from kiln.transform.fold_constant import FoldConstant, FoldConstantExpr
from kiln.transform.fold_scale_axis import BackwardFoldScaleAxis, FoldScaleAxis, ForwardFoldScaleAxis
from kiln.transform.fuse_ops import DefuseOps, FuseOps
from kiln.transform.fuse_patterns import FuseLayerNorm, PadSoftmaxRows
from kiln.transform.infer_type import InferType, InferTypeLocal, infer_expr_type, infer_type
from kiln.transform.inline import Inline, RemoveUnusedFunctions
from kiln.transform.instrument import PrintIR
from kiln.transform.merge_compiler_regions import MergeCompilerRegions
from kiln.transform.merge_composite import MergeComposite
from kiln.transform.partition_graph import PartitionGraph
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
from kiln.transform.simplify_expr import SimplifyExpr
from kiln.transform.simplify_inference import SimplifyInference

__all__ = [
    "BackwardFoldScaleAxis",
    "CanonicalizeOps",
    "ConvertLayout",
    "DeadCodeElimination",
    "DefuseOps",
    "DumpIR",
    "EliminateCommonSubexpr",
    "FoldConstant",
    "FoldConstantExpr",
    "FoldScaleAxis",
    "ForwardFoldScaleAxis",
    "FunctionPass",
    "FuseLayerNorm",
    "FuseOps",
    "InferType",
    "InferTypeLocal",
    "Inline",
    "ModulePass",
    "Pass",
    "PassContext",
    "PassInfo",
    "PassInstrument",
    "PadSoftmaxRows",
    "PassTimingInstrument",
    "PrintIR",
    "RemoveUnusedFunctions",
    "Sequential",
    "SimplifyExpr",
    "SimplifyInference",
    "ToGraphNormalForm",
    "bind_params_by_name",
    "function_pass",
    "infer_expr_type",
    "infer_type",
    "module_pass",
    "AnnotateTarget",
    "MergeCompilerRegions",
    "MergeComposite",
    "PartitionGraph",
    "AlterOpLayout",
    "AlterBatchMatmul",
]
