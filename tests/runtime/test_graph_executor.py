"""The graph executor on graphs TVM wrote, checked against the outputs TVM computed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphExecutor, GraphModule, InputError
from kiln.runtime.graph_json import parse_graph_json
from kiln.runtime.module import KernelError
from kiln.runtime.params import load_param_dict, save_param_dict
from kiln.runtime.profiling import BenchmarkResult
from kiln.runtime.python_library import PythonLibrary


def _read(fixtures: Path, name: str) -> str:
    return (fixtures / name).read_text()


@pytest.fixture
def small_o3(fixtures_dir: Path, small_o3_lib: PythonLibrary) -> GraphModule:
    return graph_executor.create(_read(fixtures_dir, "small_o3.graph.json"), small_o3_lib, kiln.cpu())


def test_small_o3_matches_tvm(fixtures_dir: Path, small_o3: GraphModule) -> None:
    small_o3.load_params((fixtures_dir / "small_o3.params").read_bytes())
    small_o3.set_input("data", np.load(fixtures_dir / "small_input.npy"))
    small_o3.run()
    out = small_o3.get_output(0).numpy()
    expected = np.load(fixtures_dir / "small_o3_output.npy")
    assert out.dtype == np.float32 and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)
    reference = np.load(fixtures_dir / "small_reference_numpy_f64.npy")
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-5)


def test_small_o3_input_info_like_tvm(fixtures_dir: Path, small_o3: GraphModule) -> None:
    # graph_json_loader_checks.txt: get_input_info after load_params, num_inputs 5, num_outputs 1
    small_o3.load_params((fixtures_dir / "small_o3.params").read_bytes())
    shapes, dtypes = small_o3.get_input_info()
    assert {k: list(v) for k, v in shapes.items()} == {"data": [1, 3, 16, 16]}
    assert dtypes == {"data": "float32"}
    assert small_o3.get_num_inputs() == 5
    assert small_o3.get_num_outputs() == 1


def test_small_o3_storage_plan_is_shared(fixtures_dir: Path, small_o3: GraphModule) -> None:
    ex = small_o3.module
    g = ex.graph
    # entries 1 and 5 share storage id 1, entries 4 and 6 share storage id 4
    assert g.storage_ids[1] == g.storage_ids[5] and g.storage_ids[4] == g.storage_ids[6]
    assert np.shares_memory(ex.entries[1], ex.entries[5])
    assert np.shares_memory(ex.entries[4], ex.entries[6])
    assert len(ex.storage) == len(set(g.storage_ids))
    for eid, entry in enumerate(ex.entries):
        assert entry.shape == g.shapes[eid]
        assert entry.ctypes.data % 64 == 0 or entry.size == 0


def test_small_o0_unbound_params_as_inputs(fixtures_dir: Path, small_o0_lib: PythonLibrary) -> None:
    m = graph_executor.create(_read(fixtures_dir, "small_o0_unbound.graph.json"), small_o0_lib,
                              kiln.cpu())
    m.load_params((fixtures_dir / "small_o0_unbound.params").read_bytes())
    weights = load_param_dict((fixtures_dir / "small_params_original.params").read_bytes())
    m.set_input(**weights)
    m.set_input(0, np.load(fixtures_dir / "small_input.npy"))
    m.run()
    expected = np.load(fixtures_dir / "small_o0_unbound_output.npy")
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=0, atol=1e-5)
    shapes, _ = m.get_input_info()
    assert set(shapes) == {"data", *weights}  # only p0 came from load_params
    assert m.get_num_inputs() == 9


def test_nop_nodes_alias_their_input(fixtures_dir: Path, small_o0_lib: PythonLibrary) -> None:
    ex = GraphExecutor(_read(fixtures_dir, "small_o0_unbound.graph.json"), small_o0_lib, kiln.cpu())
    nops = [nid for nid, n in enumerate(ex.nodes) if n.func_name == "__nop"]
    assert nops == [13, 18, 22]
    for nid in nops:
        (src,), (dst,) = ex.node_inputs(nid), ex.node_outputs(nid)
        assert np.shares_memory(src, dst) and src.size == dst.size
        assert nid not in ex.op_nodes


def test_multi_output_graph(fixtures_dir: Path, multi_o3_lib: PythonLibrary) -> None:
    m = graph_executor.create(_read(fixtures_dir, "multi_o3.graph.json"), multi_o3_lib, kiln.cpu())
    m.run(x=np.load(fixtures_dir / "multi_input.npy"))
    expected = np.load(fixtures_dir / "multi_o3_outputs.npz")
    assert m.get_num_outputs() == 4
    for i in range(4):
        out = m.get_output(i).numpy()
        want = expected[f"out{i}"]
        assert out.dtype == want.dtype and out.shape == want.shape
        np.testing.assert_array_equal(out, want)


def test_get_output_into_out(fixtures_dir: Path, multi_o3_lib: PythonLibrary) -> None:
    m = graph_executor.create(_read(fixtures_dir, "multi_o3.graph.json"), multi_o3_lib, kiln.cpu())
    m.run(x=np.load(fixtures_dir / "multi_input.npy"))
    out = kiln.nd.empty((2, 2), "int32")
    assert m.get_output(1, out) is out
    np.testing.assert_array_equal(out.numpy(), np.load(fixtures_dir / "multi_o3_outputs.npz")["out1"])
    with pytest.raises(InputError, match=r"\(2, 2\) int32"):
        m.get_output(1, kiln.nd.empty((2, 2), "float32"))
    with pytest.raises(IndexError):
        m.get_output(4)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("nope", np.zeros((1, 3, 16, 16), "float32"), r"no input named 'nope'.*data, p0"),
        (7, np.zeros((1, 3, 16, 16), "float32"), r"index 7 is out of range.*5 inputs"),
        ("data", np.zeros((1, 3, 16), "float32"), r"expects shape \(1, 3, 16, 16\) dtype float32, "
                                                   r"got shape \(1, 3, 16\)"),
        ("data", np.zeros((1, 3, 16, 16), "int32"), r"expects .* float32, got .* int32.*within a kind"),
        ("data", np.zeros((3, 16, 16, 1), "float32"), r"expects shape \(1, 3, 16, 16\)"),
        ("p2", np.zeros((2, 512, 5), "int32"), r"'p2' expects shape \(2, 512, 5\) dtype float32"),
    ],
)
def test_set_input_errors(small_o3: GraphModule, key: object, value: np.ndarray, message: str) -> None:
    with pytest.raises(InputError, match=message):
        small_o3.set_input(key, value)


def test_set_input_keyword_errors(small_o3: GraphModule) -> None:
    with pytest.raises(InputError, match="expects shape"):
        small_o3.run(data=np.zeros((16, 16), "float32"))
    with pytest.raises(TypeError):
        small_o3.set_input(1.5, np.zeros(1))


def test_set_input_accepts_ndarray_and_lists(fixtures_dir: Path, multi_o3_lib: PythonLibrary) -> None:
    m = graph_executor.create(_read(fixtures_dir, "multi_o3.graph.json"), multi_o3_lib, kiln.cpu())
    x = np.load(fixtures_dir / "multi_input.npy")
    m.set_input("x", kiln.nd.array(x))
    np.testing.assert_array_equal(m.get_input("x").numpy(), x)
    m.set_input("x", x.tolist())  # a nested list takes the input's dtype
    np.testing.assert_array_equal(m.get_input(0).numpy(), x)


def test_get_input_shares_the_buffer(small_o3: GraphModule) -> None:
    view = small_o3.get_input("data")
    small_o3.set_input("data", np.full((1, 3, 16, 16), 2.5, "float32"))
    assert float(view.numpy()[0, 0, 0, 0]) == 2.5


def test_share_params(fixtures_dir: Path, small_o3_lib: PythonLibrary) -> None:
    text = _read(fixtures_dir, "small_o3.graph.json")
    blob = (fixtures_dir / "small_o3.params").read_bytes()
    first = graph_executor.create(text, small_o3_lib, kiln.cpu())
    first.load_params(blob)
    second = graph_executor.create(text, small_o3_lib, kiln.cpu())
    second.share_params(first, blob)
    assert np.shares_memory(first.module.entries[2], second.module.entries[2])  # p0
    x = np.load(fixtures_dir / "small_input.npy")
    second.run(data=x)
    np.testing.assert_allclose(second.get_output(0).numpy(),
                               np.load(fixtures_dir / "small_o3_output.npy"), atol=1e-5)
    assert second.get_input_info()[0] == {"data": (1, 3, 16, 16)}


def test_missing_kernel_is_named(fixtures_dir: Path) -> None:
    lib = PythonLibrary({})
    with pytest.raises(KernelError, match="tvmgen_default_fused_layout_transform"):
        graph_executor.create(_read(fixtures_dir, "small_o3.graph.json"), lib, kiln.cpu())


def test_run_node_hook_sees_every_kernel_node(fixtures_dir: Path, small_o3_lib: PythonLibrary) -> None:
    class Recording(GraphExecutor):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            self.calls: list[int] = []

        def run_node(self, nid: int) -> None:
            self.calls.append(nid)
            super().run_node(nid)

    ex = Recording(_read(fixtures_dir, "small_o3.graph.json"), small_o3_lib, kiln.cpu())
    ex.load_params((fixtures_dir / "small_o3.params").read_bytes())
    ex.run(data=np.load(fixtures_dir / "small_input.npy"))
    assert ex.calls == [1, 4, 5, 6, 9, 10]
    out = ex.get_output(0).numpy()
    np.testing.assert_allclose(out, np.load(fixtures_dir / "small_o3_output.npy"), atol=1e-5)


def test_factory_default_and_tuple_unpacking(fixtures_dir: Path, small_o3_lib: PythonLibrary) -> None:
    text = _read(fixtures_dir, "small_o3.graph.json")
    params = load_param_dict((fixtures_dir / "small_o3.params").read_bytes())
    factory = GraphExecutorFactoryModule(text, small_o3_lib, params)
    assert factory.type_key == "GraphExecutorFactory"
    assert factory["get_graph_json"]() == text
    assert factory["get_lib"]() is small_o3_lib
    assert set(factory["get_params"]()) == {"p0", "p1", "p2", "p3"}
    graph, lib, got_params = factory
    assert graph == text and lib is small_o3_lib and set(got_params) == set(params)
    m = GraphModule(factory["default"](kiln.cpu()))
    m.run(data=np.load(fixtures_dir / "small_input.npy"))
    np.testing.assert_allclose(m.get_output(0).numpy(), np.load(fixtures_dir / "small_o3_output.npy"),
                               atol=1e-5)
    assert m.get_input_info()[1] == {"data": "float32"}
    # graph_executor.create with the factory as library: kernels come through its imports
    m2 = graph_executor.create(factory["get_graph_json"](), factory, kiln.cpu())
    m2.load_params(save_param_dict(params))
    m2.run(data=np.load(fixtures_dir / "small_input.npy"))
    np.testing.assert_array_equal(m2.get_output(0).numpy(), m.get_output(0).numpy())
    with pytest.raises(AttributeError):
        factory["no_such_function"]


def test_benchmark_reports_tvm_summary(fixtures_dir: Path, multi_o3_lib: PythonLibrary) -> None:
    m = graph_executor.create(_read(fixtures_dir, "multi_o3.graph.json"), multi_o3_lib, kiln.cpu())
    x = np.load(fixtures_dir / "multi_input.npy")
    result = m.benchmark(kiln.cpu(), repeat=3, number=2, x=x)
    assert isinstance(result, BenchmarkResult) and len(result.results) == 3
    assert result.min <= result.median <= result.max
    assert result.mean == pytest.approx(np.mean(result.results))
    assert result.std == pytest.approx(np.std(result.results))
    assert result.num_threads == 1
    text = str(result)
    assert text.startswith("Execution time summary:\n mean (ms)   median (ms)    max (ms)  ")
    e2e = m.benchmark(kiln.cpu(), repeat=2, number=1, end_to_end=True, x=x)
    assert len(e2e.results) == 2
    slow = m.benchmark(kiln.cpu(), repeat=1, number=1, min_repeat_ms=5)
    assert slow.results[0] > 0


def test_devices_other_than_cpu_are_refused(fixtures_dir: Path, multi_o3_lib: PythonLibrary) -> None:
    with pytest.raises(KilnError, match="CPU"):
        graph_executor.create(_read(fixtures_dir, "multi_o3.graph.json"), multi_o3_lib,
                              kiln.runtime.Device(2, 0))


def test_kernel_sees_exact_shapes(fixtures_dir: Path) -> None:
    seen: dict[str, list[tuple[tuple[int, ...], str]]] = {}

    def spy(name: str) -> Callable[..., None]:
        def kernel(*arrays: np.ndarray) -> None:
            seen[name] = [(a.shape, str(a.dtype)) for a in arrays]
        return kernel

    text = _read(fixtures_dir, "multi_o3.graph.json")
    g = parse_graph_json(text)
    lib = PythonLibrary({name: spy(name) for name in g.func_names()})
    graph_executor.create(text, lib, kiln.cpu()).run()
    assert seen["tvmgen_default_fused_split"] == [((2, 6), "float32")] + [((2, 2), "float32")] * 3
    assert seen["tvmgen_default_fused_greater"][-1] == ((2, 2), "bool")
    assert seen["tvmgen_default_fused_cast"] == [((2, 6), "float32"), ((2, 6), "float16")]


def _mutate(value: object, rng: np.random.Generator) -> object:
    """``value`` with one random entry (at any depth) deleted or replaced by a junk value."""
    if isinstance(value, dict) and value:
        key = list(value)[int(rng.integers(len(value)))]
        if rng.random() < 0.3:
            del value[key]
        else:
            value[key] = _mutate(value[key], rng)
        return value
    if isinstance(value, list) and value:
        i = int(rng.integers(len(value)))
        if rng.random() < 0.3:
            value.pop(i)
        else:
            value[i] = _mutate(value[i], rng)
        return value
    return [0, -1, 7, "x", None, [1], 2.5, "float64"][int(rng.integers(8))]


def test_damaged_graph_json_gives_kiln_errors_only() -> None:
    """Randomly damaged graph JSON: the executor raises a KilnError or computes what it says.

    The kernels stay those of relu(exp(x) + 1), so an accepted graph's output is the value of one
    node of that chain (a damaged ``heads`` may name another node), computed here with NumPy.
    """
    import copy
    import json

    x = kiln.relay.var("x", shape=(2, 3))
    y = kiln.relay.nn.relu(kiln.relay.exp(x) + kiln.relay.const(1.0))
    mod = kiln.IRModule.from_expr(kiln.relay.Function([x], y))
    with kiln.transform.PassContext(opt_level=0):
        lib = kiln.relay.build(mod, target="numpy")
    graph = json.loads(lib.get_graph_json())
    rng = np.random.default_rng(5)
    data = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    chain = [data, np.exp(data), np.exp(data) + 1, np.maximum(np.exp(data) + 1, 0)]

    def run(graph_json: str) -> np.ndarray:
        module = graph_executor.create(graph_json, lib.get_lib(), kiln.cpu())
        module.set_input("x", data, **lib.get_params())
        module.run()
        return module.get_output(0).numpy()

    np.testing.assert_allclose(run(json.dumps(graph)), chain[-1], rtol=1e-6)
    accepted = 0
    for _ in range(300):
        damaged = json.dumps(_mutate(copy.deepcopy(graph), rng))
        try:
            out = run(damaged)
        except KilnError:
            continue
        accepted += 1
        assert any(out.shape == v.shape and np.allclose(out, v, rtol=1e-6) for v in chain), (
            f"damaged graph ran to a value no node of it computes: {damaged}")
    assert accepted > 0  # the value check above ran


def test_set_input_bulk_skips_names_that_are_not_inputs(small_o3: GraphModule) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    small_o3.set_input(data=x, not_an_input=np.zeros(3, "float32"))  # TVM's bulk form skips it
    np.testing.assert_array_equal(small_o3.get_input("data").numpy(), x)
    with pytest.raises(InputError, match="no input named 'not_an_input'"):
        small_o3.set_input("not_an_input", np.zeros(3, "float32"))


def test_set_input_converts_within_a_kind_with_one_warning(small_o3: GraphModule) -> None:
    from kiln.runtime.graph_executor import InputConversionWarning

    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16))  # float64
    with pytest.warns(InputConversionWarning, match="'data': converting float64 to float32") as rec:
        small_o3.set_input("data", x)
        small_o3.set_input(data=x)
    assert len([w for w in rec if issubclass(w.category, InputConversionWarning)]) == 1
    np.testing.assert_array_equal(small_o3.get_input("data").numpy(), x.astype("float32"))
    with pytest.raises(InputError, match="within a kind"):
        small_o3.set_input("data", np.ones((1, 3, 16, 16), "int64"))
