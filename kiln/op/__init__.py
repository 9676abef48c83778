"""Kiln's operator library: one registry entry per operator, one file per family.

Importing this package registers every operator. Builders (``add``, ``nn.conv2d``, ...) live in
their family file and are re-exported under ``kiln.relay`` (``relay.add``, ``relay.nn.conv2d``).

===================  ==========================================================================
family               operators
===================  ==========================================================================
``elemwise``         unary/binary math, comparisons, logic, clip, cast, reinterpret, where
``nn``               dense/matmul, activations, softmax, normalisations, dropout, pad, lrn, ...
``conv``             conv1d/2d/3d, conv2d_transpose, NCHWc variants
``nn_winograd``      Winograd 3x3 convolution on NCHWc data (Kiln's, AlterOpLayout's choice)
``deformable_conv``  deformable_conv2d (DCNv1, and DCNv2 with a mask)
``pool``             max/avg/global/adaptive pooling
``reduce``           sum, mean, max, min, prod, argmax, argmin, variance, ...
``transform``        reshape, transpose, concatenate, split, slicing, gather/scatter, layout, ...
``image``            resize
``algorithm``        topk, sort, argsort, cumsum
``vision``           detection helpers
``dyn``              value-specialized imports (shapes decided by input values)
===================  ==========================================================================
"""

from typing import TYPE_CHECKING

from kiln.op import (
    algorithm,
    conv,
    deformable_conv,
    dyn,
    elemwise,
    image,
    nn,
    nn_winograd,
    pool,
    qnn,
    reduce,
    transform,
    vision,
)
from kiln.op.algorithm import *
from kiln.op.elemwise import *
from kiln.op.reduce import *
from kiln.op.registry import OpDef, OpPattern, all_ops, get_op_def, make_call, register_op
from kiln.op.transform import *

if TYPE_CHECKING:
    from typing import Any

    # elemwise's builders are made from its tables (see kiln.op.elemwise.__getattr__)
    def __getattr__(name: str) -> Any: ...

# Family modules are attributes (kiln.op.nn, ...) but not star-exported: ``relay`` has its own
# ``nn`` and ``transform`` namespaces.
__all__ = ["OpDef", "OpPattern", "all_ops", "get_op_def", "make_call", "register_op"]
__all__ += algorithm.__all__ + elemwise.__all__ + reduce.__all__ + transform.__all__
