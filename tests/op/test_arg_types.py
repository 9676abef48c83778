"""OpDef.infer_args: the argument types that operators' relations imply (TVM's Conv2DRel, MatmulRel,
BiasAddRel, BatchNormRel, IdentityRel ...), checked against shapes written out by hand and against
each op's own type relation (the implied argument must type-check and give the expected result).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.ir.types import TensorType, TupleType
from kiln.op.arg_types import axis_vectors, same_as_result
from kiln.op.conv import Conv1DAttrs, Conv2DAttrs, Conv2DTransposeAttrs, Conv3DAttrs
from kiln.op.deformable_conv import DeformableConv2DAttrs
from kiln.op.nn import BiasAddAttrs, DenseAttrs, MatmulAttrs, PReluAttrs
from kiln.op.nn_norm import BatchNormAttrs, GroupNormAttrs, LayerNormAttrs
from kiln.op.registry import get_op_def


def implied(op: str, types: list, attrs, out=None) -> list:
    fn = get_op_def(op).infer_args
    assert fn is not None, f"{op} declares no infer_args"
    return fn(types, attrs, out)


def by_letters(layout: str, dims: dict[str, int]) -> tuple[int, ...]:
    """A shape in ``layout`` from the sizes of its (unsplit) axes."""
    return tuple(dims[c] for c in layout)


@pytest.mark.parametrize("kernel_layout", ["OIHW", "HWIO", "OHWI", "HWOI", "IOHW", "IHWO"])
@pytest.mark.parametrize("data_layout", ["NCHW", "NHWC"])
def test_conv2d_weight_in_every_kernel_layout(data_layout: str, kernel_layout: str) -> None:
    n, c, h, w = 2, 6, 9, 7
    data = TensorType(by_letters(data_layout, {"N": n, "C": c, "H": h, "W": w}), "float32")
    attrs = Conv2DAttrs(channels=10, kernel_size=(3, 2), padding=(1, 0), data_layout=data_layout,
                        kernel_layout=kernel_layout)
    weight = implied("nn.conv2d", [data, None], attrs)[1]
    assert weight == TensorType(by_letters(kernel_layout, {"O": 10, "I": c, "H": 3, "W": 2}))
    out = get_op_def("nn.conv2d").type_rel([data, weight], attrs)
    assert out == TensorType(by_letters(data_layout, {"N": n, "C": 10, "H": h, "W": w - 1}))


def test_conv2d_weight_in_blocked_layouts() -> None:
    # NCHW2c data of 4 channels, OIHW2i4o kernel of 8 output channels (FoldScaleAxis' test)
    data = TensorType((2, 2, 10, 10, 2), "float32")
    attrs = Conv2DAttrs(channels=8, kernel_size=(3, 3), padding=(1, 1), data_layout="NCHW2c",
                        kernel_layout="OIHW2i4o")
    weight = implied("nn.conv2d", [data, None], attrs)[1]
    assert weight == TensorType((8 // 4, 4 // 2, 3, 3, 2, 4))
    assert get_op_def("nn.conv2d").type_rel([data, weight], attrs) == TensorType((2, 4, 10, 10, 2))


def test_conv2d_weight_keeps_data_dtype_and_ignores_out_dtype() -> None:
    data = TensorType((1, 3, 8, 8), "int8")
    attrs = Conv2DAttrs(channels=4, kernel_size=(1, 1), out_dtype="int32")
    assert implied("nn.conv2d", [data, None], attrs)[1] == TensorType((4, 3, 1, 1), "int8")


@pytest.mark.parametrize("attrs", [
    Conv2DAttrs(kernel_size=(3, 3)),          # no channels
    Conv2DAttrs(channels=4),                  # no kernel_size
    Conv2DAttrs(channels=4, kernel_size=(3, 3), groups=2),  # TVM needs a grouped conv2d's weight
])
def test_conv2d_weight_not_implied(attrs) -> None:
    data = TensorType((1, 4, 8, 8), "float32")
    assert implied("nn.conv2d", [data, None], attrs) == [None, None]


def test_conv_weight_needs_known_data() -> None:
    assert implied("nn.conv2d", [None, None], Conv2DAttrs(channels=4, kernel_size=(3, 3))) == \
        [None, None]


@settings(max_examples=40, deadline=None)
@given(c=st.integers(1, 4), groups=st.integers(1, 3), per_group=st.integers(1, 3),
       k=st.integers(1, 3), width=st.integers(3, 9))
def test_conv1d_grouped_weight(c: int, groups: int, per_group: int, k: int, width: int) -> None:
    channels_in, channels_out = c * groups, per_group * groups
    data = TensorType((1, channels_in, width), "float32")
    attrs = Conv1DAttrs(channels=channels_out, kernel_size=(k,), groups=groups)
    weight = implied("nn.conv1d", [data, None], attrs)[1]
    assert weight == TensorType((channels_out, c, k))
    out = get_op_def("nn.conv1d").type_rel([data, weight], attrs)
    assert out == TensorType((1, channels_out, width - k + 1))


@settings(max_examples=30, deadline=None)
@given(c=st.integers(1, 5), channels=st.integers(1, 5), kd=st.integers(1, 3),
       kh=st.integers(1, 3), kw=st.integers(1, 3))
def test_conv3d_weight_ndhwc(c: int, channels: int, kd: int, kh: int, kw: int) -> None:
    data = TensorType((1, 4, 5, 6, c), "float32")
    attrs = Conv3DAttrs(channels=channels, kernel_size=(kd, kh, kw), data_layout="NDHWC",
                        kernel_layout="DHWIO")
    weight = implied("nn.conv3d", [data, None], attrs)[1]
    assert weight == TensorType((kd, kh, kw, c, channels))
    out = get_op_def("nn.conv3d").type_rel([data, weight], attrs)
    assert out == TensorType((1, 5 - kd, 6 - kh, 7 - kw, channels))


@settings(max_examples=30, deadline=None)
@given(c=st.integers(1, 4), groups=st.integers(1, 3), per_group=st.integers(1, 3),
       k=st.integers(1, 4), stride=st.integers(1, 3))
def test_conv2d_transpose_weight(c: int, groups: int, per_group: int, k: int, stride: int) -> None:
    # transposed: weight (C, channels // groups, kh, kw) in IOHW, also when grouped
    channels_in, channels_out = c * groups, per_group * groups
    data = TensorType((1, channels_in, 5, 5), "float32")
    attrs = Conv2DTransposeAttrs(channels=channels_out, kernel_size=(k, k), strides=(stride, stride),
                                 groups=groups)
    weight = implied("nn.conv2d_transpose", [data, None], attrs)[1]
    assert weight == TensorType((channels_in, per_group, k, k))
    out = get_op_def("nn.conv2d_transpose").type_rel([data, weight], attrs)
    size = (5 - 1) * stride + k
    assert out == TensorType((1, channels_out, size, size))


def test_blocked_nchwc_conv_implies_no_weight() -> None:
    # TVM types nn.contrib_conv2d_NCHWc with Conv2DWinogradRel, which never assigns the weight
    data = TensorType((1, 2, 8, 8, 4), "float32")
    attrs = Conv2DAttrs(channels=8, kernel_size=(3, 3), data_layout="NCHW4c",
                        kernel_layout="OIHW4i4o")
    assert implied("nn.contrib_conv2d_NCHWc", [data, None], attrs) == [None, None]


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(st.integers(1, 4), min_size=0, max_size=2), k=st.integers(1, 6),
       units=st.integers(1, 6))
def test_dense_weight(batch: list[int], k: int, units: int) -> None:
    data = TensorType((*batch, k), "float16")
    attrs = DenseAttrs(units=units)
    weight = implied("nn.dense", [data, None], attrs)[1]
    assert weight == TensorType((units, k), "float16")
    assert get_op_def("nn.dense").type_rel([data, weight], attrs) == \
        TensorType((*batch, units), "float16")


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_weight(transpose_a: bool, transpose_b: bool) -> None:
    data = TensorType((3, 5), "float32")
    attrs = MatmulAttrs(units=7, transpose_a=transpose_a, transpose_b=transpose_b)
    weight = implied("nn.matmul", [data, None], attrs)[1]
    k = 3 if transpose_a else 5
    assert weight == TensorType((7, k) if transpose_b else (k, 7))
    out = get_op_def("nn.matmul").type_rel([data, weight], attrs)
    assert out == TensorType((5 if transpose_a else 3, 7))


def test_dense_without_units_implies_nothing() -> None:
    assert implied("nn.dense", [TensorType((2, 3)), None], DenseAttrs()) == [None, None]


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_bias_add_and_prelu_vectors(axis: int) -> None:
    data = TensorType((2, 3, 4), "float32")
    size = data.shape[axis]
    for op, attrs in (("nn.bias_add", BiasAddAttrs(axis=axis)), ("nn.prelu", PReluAttrs(axis=axis))):
        vec = implied(op, [data, None], attrs)[1]
        assert vec == TensorType((size,), "float32")
        assert get_op_def(op).type_rel([data, vec], attrs) == data


def test_axis_out_of_range_implies_nothing() -> None:
    assert implied("nn.bias_add", [TensorType((2, 3)), None], BiasAddAttrs(axis=2)) == [None, None]


@pytest.mark.parametrize("axis", [1, 3, -1])
def test_batch_norm_parameters(axis: int) -> None:
    data = TensorType((2, 3, 4, 5), "float64")
    attrs = BatchNormAttrs(axis=axis)
    types = implied("nn.batch_norm", [data, None, None, None, None], attrs)
    vec = TensorType((data.shape[axis],), "float64")
    assert types == [None, vec, vec, vec, vec]
    assert get_op_def("nn.batch_norm").type_rel([data, *types[1:]], attrs) == \
        TupleType((data, vec, vec))


def test_norm_gamma_beta() -> None:
    data = TensorType((2, 6, 5), "float32")
    for op, attrs, size in (("nn.layer_norm", LayerNormAttrs(), 5),
                            ("nn.instance_norm", LayerNormAttrs(axis=1), 6),
                            ("nn.group_norm", GroupNormAttrs(num_groups=3), 6)):
        types = implied(op, [data, None, None], attrs)
        assert types == [None, TensorType((size,)), TensorType((size,))], op


def test_only_unknown_positions_matter() -> None:
    # a rule returns every implied type; InferType uses only those of unknown arguments
    rule = axis_vectors(1, 2)
    data = TensorType((4, 3))
    assert rule([data, TensorType((3,)), None], LayerNormAttrs(axis=1), None)[2] == TensorType((3,))


@pytest.mark.parametrize("op", ["exp", "negative", "nn.relu", "clip", "logical_not", "copy",
                                "annotation.stop_fusion", "annotation.compiler_begin"])
def test_elementwise_argument_from_result(op: str) -> None:
    out = TensorType((2, 5), "bool" if op == "logical_not" else "float32")
    assert get_op_def(op).infer_args is same_as_result
    assert same_as_result([None], None, out) == [out]
    assert same_as_result([None], None, None) == [None]


@pytest.mark.parametrize("op", ["add", "multiply", "isnan", "nn.softmax", "cast"])
def test_ops_that_imply_nothing(op: str) -> None:
    # TVM's BroadcastRel, IdentityCompRel, SoftmaxRel, CastRel assign no argument type
    assert get_op_def(op).infer_args is None


@pytest.mark.parametrize("layout", [("NCHW", "OIHW"), ("NHWC", "HWIO")])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deformable_conv2d_weight_offset_and_mask(layout: tuple[str, str], with_mask: bool) -> None:
    data_layout, kernel_layout = layout
    n, c, h, w, dg, groups = 2, 4, 7, 6, 2, 2
    data = TensorType(by_letters(data_layout, {"N": n, "C": c, "H": h, "W": w}), "float32")
    attrs = DeformableConv2DAttrs(channels=6, kernel_size=(3, 2), padding=(1, 1), strides=(2, 1),
                                  deformable_groups=dg, groups=groups, data_layout=data_layout,
                                  kernel_layout=kernel_layout)
    types = implied("nn.deformable_conv2d", [data, None, None] + [None] * with_mask, attrs)
    oh, ow = (h + 2 - 3) // 2 + 1, (w + 2 - 2) + 1
    assert types[2] == TensorType(by_letters(kernel_layout, {"O": 6, "I": c // groups, "H": 3,
                                                             "W": 2}))
    assert types[1] == TensorType(by_letters(data_layout, {"N": n, "C": 2 * dg * 6, "H": oh,
                                                           "W": ow}))
    if with_mask:
        assert types[3] == TensorType(by_letters(data_layout, {"N": n, "C": dg * 6, "H": oh,
                                                               "W": ow}))
    out = get_op_def("nn.deformable_conv2d").type_rel([data, *types[1:]], attrs)
    assert out == TensorType(by_letters(data_layout, {"N": n, "C": 6, "H": oh, "W": ow}))


def test_deformable_conv2d_offset_from_a_known_weight() -> None:
    data = TensorType((1, 3, 8, 8), "float32")
    types = implied("nn.deformable_conv2d", [data, None, TensorType((5, 3, 3, 3))],
                    DeformableConv2DAttrs())
    assert types[1] == TensorType((1, 18, 6, 6))
