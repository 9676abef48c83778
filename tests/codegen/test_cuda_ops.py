"""Every op family on the cuda target, against the reference interpreter.

Three levels, so that what a machine can check it does:
* the GPU schedule's loop IR run by the loop-IR evaluator (no compiler, no GPU);
* the generated CUDA compiled by NVRTC or nvcc (``requires_cuda_compiler``);
* the build run on the GPU by the graph executor (``cuda``).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.build_module import lower_to_graph
from kiln.codegen.cuda import lower_cuda_function
from kiln.codegen.numpy_library import NumpyLibrary
from kiln.contrib import graph_executor
from kiln.target import Target
from kiln.te.interp import run_prim_func
from kiln.transform import PassContext
from tests.codegen._cuda_cases import CASES, TILED_CASES

ALL_CASES = {**CASES, **TILED_CASES}


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal for integers; for floats within float32 rounding of sums of O(100) terms (the GPU
    contracts multiply-adds and orders sums its own way)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        scale = float(np.max(np.abs(want))) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * (1 + scale), err_msg=what)


def _reference(make, inputs):  # type: ignore[no-untyped-def]
    mod = kiln.IRModule.from_expr(make())
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy")
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.set_input(**inputs)
    gm.run()
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_schedule_computes_the_reference(case: str) -> None:
    """Each fused function's GPU loop IR (thread loops run as loops) gives the interpreter's
    result on the same random arguments."""
    make, _ = CASES[case]
    mod = kiln.IRModule.from_expr(make())
    with PassContext(opt_level=3):
        lowered, _ = lower_to_graph(mod, Target("cuda -arch=sm_80"), None, "default")
    ref_lib = NumpyLibrary(lowered.functions)
    rng = np.random.default_rng(0)
    for name, fn in lowered.functions.items():
        prim = lower_cuda_function(name, fn)
        args = [(rng.standard_normal(b.shape) * 2).astype(b.dtype) if b.kind == "input"
                else np.zeros(b.shape, b.dtype) for b in prim.params]
        expected = [a.copy() for a in args]
        kernel = ref_lib.kernel(name)
        assert kernel is not None
        kernel.bind(expected)()
        run_prim_func(prim, args)
        for got, want, buf in zip(args, expected, prim.params):
            if buf.kind == "output":
                _close(got, want, f"{case}: {name}")


@pytest.mark.requires_cuda_compiler
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_generated_cuda_compiles(case: str) -> None:
    make, _ = ALL_CASES[case]
    with PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(make()), target="cuda -arch=sm_80")
    cuda_lib = lib.get_lib()
    assert cuda_lib.type_key == "cuda" and cuda_lib.ptx.startswith(b"//")
    assert ".entry" in cuda_lib.get_source("ptx")


@pytest.mark.cuda
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_runs_on_the_gpu(case: str) -> None:
    make, inputs = ALL_CASES[case]
    with PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(make()), target="cuda")
    gm = graph_executor.GraphModule(lib["default"](kiln.cuda(0)))
    gm.set_input(**inputs)
    gm.run()
    got = [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
    for g, want in zip(got, _reference(make, inputs)):
        _close(g, want, case)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unsupported_dtypes_are_refused_by_name(dtype: str) -> None:
    x = relay.var("x", shape=(4, 4), dtype=dtype)
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.add(x, x)))
    with pytest.raises(kiln.errors.CompileError, match=f"{dtype} tensors .* cuda target"), \
            PassContext(opt_level=3):
        relay.build(mod, target="cuda -arch=sm_80")
