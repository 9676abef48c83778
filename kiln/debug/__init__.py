"""Beyond TVM's debugger: find the layer that diverges, and dumps readable without Kiln.

- :func:`compare` runs a built module node by node against onnxruntime on the source ONNX model
  or against Kiln's reference interpreter, and names the first divergent node;
- :func:`write_npy_dump` / :func:`read_npy_dump` write and read node outputs as ``.npy`` files
  with a ``manifest.json`` (also from TVM's ``output_tensors.params`` with
  :func:`convert_params_dump`).
"""

from kiln.debug.compare import CompareReport, NodeComparison, compare, compare_outputs
from kiln.debug.dump import (
    DumpManifest,
    TensorRecord,
    convert_params_dump,
    read_npy_dump,
    records_from_graph,
    write_npy_dump,
)
from kiln.debug.reference import (
    ReferenceValues,
    interpreter_reference,
    onnx_reference,
    stamp_source_names,
)

__all__ = [
    "CompareReport",
    "DumpManifest",
    "NodeComparison",
    "ReferenceValues",
    "TensorRecord",
    "compare",
    "compare_outputs",
    "convert_params_dump",
    "interpreter_reference",
    "onnx_reference",
    "read_npy_dump",
    "records_from_graph",
    "stamp_source_names",
    "write_npy_dump",
]
