"""NumPy kernels for the graphs TVM wrote (the executor's oracles), derived from the networks.

The fixture README gives the small network: conv 3x3 pad 1 -> batch norm -> relu -> max pool 2x2
-> flatten -> dense -> bias -> softmax. At opt_level 3 TVM folded the batch norm into the conv's
weights and bias and moved to NCHW{c} layouts; each kernel below follows its graph node's
``func_name``, layouts (``src_layout``, ``dst_layout``, ``kernel_layout``, ``weight_layout``) and
entry shapes. The multi-output graph splits x (2, 6) in three along axis 1 and returns
(relu(a), int32(b * 10), c > 0, float16(x)); the constants 10 and 0 are what TVM's outputs imply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kiln.runtime.python_library import PythonLibrary


def conv2d_nchw_pad1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3 convolution, stride 1, zero padding 1, as a sum over the window (float64)."""
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + 2, wd + 2))
    xp[:, :, 1:-1, 1:-1] = x
    out = np.zeros((n, w.shape[0], h, wd))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx])
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --- small network, opt_level 3 (NCHW3c / NCHW4c / NC5n) -----------------------------------------

def _layout_nchw_to_nchw3c(x: np.ndarray, out: np.ndarray) -> None:
    n, c, h, w = x.shape
    out[...] = x.reshape(n, c // 3, 3, h, w).transpose(0, 1, 3, 4, 2)


def _conv_nchwc_add_relu(data: np.ndarray, kernel: np.ndarray, bias: np.ndarray,
                         out: np.ndarray) -> None:
    # data NCHW3c, kernel OIHW3i4o, bias (1, O/4, 1, 1, 4), out NCHW4c
    n, ci_o, h, w, ci_i = data.shape
    x = data.transpose(0, 1, 4, 2, 3).reshape(n, ci_o * ci_i, h, w)
    co_o, _, kh, kw, _, co_i = kernel.shape
    weight = kernel.transpose(0, 5, 1, 4, 2, 3).reshape(co_o * co_i, ci_o * ci_i, kh, kw)
    y = conv2d_nchw_pad1(x.astype(np.float64), weight.astype(np.float64))
    y = y.reshape(n, co_o, co_i, h, w).transpose(0, 1, 3, 4, 2) + bias
    out[...] = np.maximum(y, 0)


def _max_pool_2x2_nchwc(x: np.ndarray, out: np.ndarray) -> None:
    n, c, h, w, b = x.shape
    out[...] = x.reshape(n, c, h // 2, 2, w // 2, 2, b).max(axis=(3, 5))


def _nchw4c_to_nchw_flatten(x: np.ndarray, out: np.ndarray) -> None:
    n, c, h, w, b = x.shape
    out[...] = x.transpose(0, 1, 4, 2, 3).reshape(n, c * b * h * w)


def _dense_pack_add(x: np.ndarray, packed: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    # weight layout NC5n: packed[n_outer, k, n_inner] = W[n_outer * 5 + n_inner, k]
    no, k, ni = packed.shape
    weight = packed.transpose(0, 2, 1).reshape(no * ni, k)
    out[...] = x.astype(np.float64) @ weight.astype(np.float64).T + bias


def _softmax_kernel(x: np.ndarray, out: np.ndarray) -> None:
    out[...] = _softmax(x)


SMALL_O3_KERNELS = {
    "tvmgen_default_fused_layout_transform": _layout_nchw_to_nchw3c,
    "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu": _conv_nchwc_add_relu,
    "tvmgen_default_fused_nn_max_pool2d": _max_pool_2x2_nchwc,
    "tvmgen_default_fused_layout_transform_nn_batch_flatten": _nchw4c_to_nchw_flatten,
    "tvmgen_default_fused_nn_contrib_dense_pack_add": _dense_pack_add,
    "tvmgen_default_fused_nn_softmax": _softmax_kernel,
}


# --- small network, opt_level 0 (NCHW, batch norm as arithmetic) ---------------------------------

def _binary(fn: np.ufunc) -> Callable[..., None]:
    def kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        out[...] = fn(a, b)
    return kernel


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., None]:
    def kernel(a: np.ndarray, out: np.ndarray) -> None:
        out[...] = fn(a)
    return kernel


def _conv_nchw(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    out[...] = conv2d_nchw_pad1(x.astype(np.float64), w.astype(np.float64))


def _max_pool_2x2_nchw(x: np.ndarray, out: np.ndarray) -> None:
    n, c, h, w = x.shape
    out[...] = x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _dense(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    out[...] = x.astype(np.float64) @ w.astype(np.float64).T


SMALL_O0_KERNELS = {
    "tvmgen_default_fused_nn_conv2d": _conv_nchw,
    "tvmgen_default_fused_add": _binary(np.add),
    "tvmgen_default_fused_rsqrt": _unary(lambda v: 1.0 / np.sqrt(v.astype(np.float64))),
    "tvmgen_default_fused_multiply": _binary(np.multiply),
    "tvmgen_default_fused_multiply_1": _binary(np.multiply),
    "tvmgen_default_fused_negative": _unary(np.negative),
    "tvmgen_default_fused_add_1": _binary(np.add),
    "tvmgen_default_fused_add_2": _binary(np.add),
    "tvmgen_default_fused_nn_relu": _unary(lambda v: np.maximum(v, 0)),
    "tvmgen_default_fused_nn_max_pool2d": _max_pool_2x2_nchw,
    "tvmgen_default_fused_nn_dense": _dense,
    "tvmgen_default_fused_nn_bias_add": _binary(np.add),
    "tvmgen_default_fused_nn_softmax": _softmax_kernel,
}


# --- the multi-output graph -----------------------------------------------------------------------

def _split3(x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    a[...], b[...], c[...] = np.split(x, 3, axis=1)


def _relu_first(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    out[...] = np.maximum(a, 0)


def _multiply_cast_second(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    out[...] = np.trunc(b * np.float32(10)).astype(np.int32)


def _greater_third(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    out[...] = c > 0


MULTI_O3_KERNELS = {
    "tvmgen_default_fused_split": _split3,
    "tvmgen_default_fused_nn_relu": _relu_first,
    "tvmgen_default_fused_multiply_cast": _multiply_cast_second,
    "tvmgen_default_fused_greater": _greater_third,
    "tvmgen_default_fused_cast": _unary(lambda v: v.astype(np.float16)),
}


@pytest.fixture
def small_o3_lib() -> PythonLibrary:
    """Kernels of ``small_o3.graph.json``."""
    return PythonLibrary(SMALL_O3_KERNELS)


@pytest.fixture
def small_o0_lib() -> PythonLibrary:
    """Kernels of ``small_o0_unbound.graph.json``."""
    return PythonLibrary(SMALL_O0_KERNELS)


@pytest.fixture
def multi_o3_lib() -> PythonLibrary:
    """Kernels of ``multi_o3.graph.json``."""
    return PythonLibrary(MULTI_O3_KERNELS)


# --- a small graph with compiled (C) and interpreted (numpy) kernels ------------------------------

TINY_C = r"""#include <stdint.h>
static int32_t kiln_threads = 1;
void kiln_set_num_threads(int32_t n) { kiln_threads = n; }
int32_t tvmgen_default_fused_add_nn_relu(void** args) {
  const float* x = (const float*)args[0];
  const float* w = (const float*)args[1];
  float* y = (float*)args[2];
  for (int i = 0; i < 6; ++i) { float v = x[i] + w[i]; y[i] = v > 0.0f ? v : 0.0f; }
  return 0;
}
int32_t tvmgen_default_fused_greater(void** args) {
  const float* y = (const float*)args[0];
  uint8_t* z = (uint8_t*)args[1];
  for (int i = 0; i < 6; ++i) z[i] = y[i] > 0.5f;
  return 0;
}
int32_t kiln_test_threads(void** args) { ((int32_t*)args[0])[0] = kiln_threads; return 0; }
int32_t kiln_test_fail(void** args) { return ((const float*)args[0])[0] < 0.0f ? 7 : 0; }
"""


@pytest.fixture
def tiny_graph() -> str:
    """Graph JSON: x (2, 3) and param p0 -> y = relu(x + p0) -> z = y > 0.5; outputs (y, z)."""
    from kiln.runtime.graph_json import GraphJSON, Node, NodeEntry

    nodes = [
        Node.input("x"),
        Node.input("p0"),
        Node.kernel("tvmgen_default_fused_add_nn_relu", "tvmgen_default_fused_add_nn_relu",
                    [NodeEntry(0), NodeEntry(1)], extra_attrs={"source_names": '["Add_0", "Relu_1"]'}),
        Node.kernel("tvmgen_default_fused_greater", "tvmgen_default_fused_greater", [NodeEntry(2)]),
    ]
    return GraphJSON.create(nodes, [NodeEntry(2), NodeEntry(3)], [(2, 3)] * 4,
                            ["float32", "float32", "float32", "bool"], [0, 1, 2, 3]).to_json()


@pytest.fixture
def tiny_functions() -> dict:
    """The tiny graph's fused functions as relay IR (the numpy target's kernels)."""
    from kiln import relay

    a, b = relay.var("a", shape=(2, 3)), relay.var("b", shape=(2, 3))
    add_relu = relay.Function([a, b], relay.maximum(relay.add(a, b), relay.const(0.0)))
    y = relay.var("y", shape=(2, 3))
    greater = relay.Function([y], relay.greater(y, relay.const(0.5)))
    return {"tvmgen_default_fused_add_nn_relu": add_relu.with_attr("Primitive", 1),
            "tvmgen_default_fused_greater": greater.with_attr("Primitive", 1)}


@pytest.fixture
def tiny_c_source() -> str:
    """C source of the tiny graph's kernels (plus a thread-count probe and a failing kernel)."""
    return TINY_C


@pytest.fixture(scope="session")
def tiny_native_sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(shared library, C source) of the tiny graph's kernels; skips without a C compiler."""
    from tests._toolchain import have_cc

    if not have_cc():
        pytest.skip("needs a C compiler (CC)")
    from kiln.codegen.compiler import compile_shared

    folder = tmp_path_factory.mktemp("tiny_native")
    src = folder / "tiny.c"
    src.write_text(TINY_C)
    return compile_shared([src], folder / "tiny.so"), src
