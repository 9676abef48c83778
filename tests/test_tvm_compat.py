"""``kiln.testing`` (TVM's helper names) and the TVM conformance runner (``kiln.testing.compat``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import testing
from kiln.testing.compat import (
    FileResult,
    UnitResult,
    compat_markdown,
    convert_source,
    convert_tutorial,
    out_of_scope_reason,
    run_file,
    run_tutorial,
    tutorials_markdown,
)

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT.parent / "shared" / "tvm_relay_tests" / "tests"
TUTORIALS = ROOT.parent / "shared" / "tvm_relay_tests" / "tutorials"


def _parametrize_mark(func):
    marks = [m for m in func.pytestmark if m.name == "parametrize"]
    assert len(marks) == 1
    return marks[0]


def test_import_kiln_does_not_import_pytest():
    code = "import sys, kiln, kiln.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_enabled_targets_are_cpu():
    targets = testing.enabled_targets()
    assert [t for t, _ in targets] == ["llvm", "c"]
    assert all(dev == kiln.cpu(0) for _, dev in targets)
    assert testing.device_enabled("llvm -mcpu=skylake")
    assert not testing.device_enabled("cuda")
    assert not testing.device_enabled("opencl -device=mali")


def test_parametrize_targets_all_enabled_with_dev():
    @testing.parametrize_targets
    def t(target, dev):
        pass

    mark = _parametrize_mark(t)
    assert mark.args[0] == "target,dev"
    assert [p.id for p in mark.args[1]] == ["llvm", "c"]
    assert [p.values[0] for p in mark.args[1]] == ["llvm", "c"]
    assert all(not p.marks for p in mark.args[1])


def test_parametrize_targets_skips_gpu_and_omits_dev_when_unused():
    @testing.parametrize_targets("llvm", "cuda")
    def t(target):
        pass

    mark = _parametrize_mark(t)
    assert mark.args[0] == "target"
    llvm, cuda = mark.args[1]
    assert llvm.values == ("llvm",) and not llvm.marks
    assert [m.name for m in cuda.marks] == ["skip"]
    assert "cuda" in cuda.marks[0].kwargs["reason"]


def test_known_failing_targets_marks_xfail():
    @testing.parametrize_targets("llvm")
    @testing.known_failing_targets("llvm")
    def t(target):
        pass

    (llvm,) = _parametrize_mark(t).args[1]
    assert [m.name for m in llvm.marks] == ["xfail"]


def test_requires_marks():
    def f():
        pass

    assert testing.requires_llvm(f) is f
    for deco in (testing.requires_gpu, testing.requires_cuda):
        def g():
            pass

        marked = deco(g)
        assert [m.name for m in marked.pytestmark] == ["skip"]


def test_assert_allclose_accepts_ndarrays():
    a = kiln.nd.array(np.ones(3, dtype="float32"))
    testing.assert_allclose(a, np.ones(3))
    with pytest.raises(AssertionError):
        testing.assert_allclose(a, np.zeros(3))


def test_convert_source_renames_imports_only():
    src = textwrap.dedent("""\
        import numpy as np
        import tvm
        import tvm.testing
        import tvm.topi.testing as ref  # comment
        from tvm import relay, te
        from tvm.relay.testing import run_infer_type
            from tvm.contrib import graph_executor
        x = "import tvm"
        y = tvm.testing.enabled_targets()
        """)
    assert convert_source(src) == textwrap.dedent("""\
        import numpy as np
        import kiln as tvm
        import kiln.testing; import kiln as tvm
        import kiln.topi.testing as ref  # comment
        from kiln import relay, te
        from kiln.relay.testing import run_infer_type
            from kiln.contrib import graph_executor
        x = "import tvm"
        y = tvm.testing.enabled_targets()
        """)


TVM_STYLE = '''
import numpy as np
import pytest
import tvm
import tvm.testing
from tvm import relay

dtype = tvm.testing.parameter("float32", "float64")
size, scale = tvm.testing.parameters((2, 1.0), (3, 2.0))


@tvm.testing.fixture
def data(size, dtype):
    return np.arange(size).astype(dtype)


@tvm.testing.uses_gpu
def test_uses_gpu_runs_on_cpu():
    for target, dev in tvm.testing.enabled_targets():
        assert dev is not None


@tvm.testing.requires_cuda
def test_needs_cuda():
    raise AssertionError("must not run")


def test_auto_target(target, dev, data, scale):
    assert data.shape == (int(scale) + 1,)


@tvm.testing.parametrize_targets("llvm", "cuda")
def test_explicit(target):
    assert target == "llvm"


class TestInClass:
    a, b = tvm.testing.parameters((1, 2), (5, 10))
    c = tvm.testing.parameter(7, 8)

    def test_pairs(self, a, b, c):
        assert b == 2 * a and c in (7, 8)


def test_fails():
    tvm.testing.assert_allclose(np.ones(2), np.zeros(2))
'''


def test_runner_on_tvm_style_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "test_sample.py").write_text(TVM_STYLE)
    work = tmp_path / "work"
    work.mkdir()
    res = run_file(src / "test_sample.py", work, timeout=120)
    assert not res.import_error and not res.timed_out
    outcomes = {u.nodeid: u.outcome for u in res.units}
    assert outcomes["test_uses_gpu_runs_on_cpu"] == "passed"
    assert outcomes["test_needs_cuda"] == "skipped"
    assert outcomes["test_explicit[llvm]"] == "passed"
    assert outcomes["test_explicit[cuda]"] == "skipped"
    assert outcomes["test_fails"] == "failed"
    auto = sorted(k for k in outcomes if k.startswith("test_auto_target"))
    assert len(auto) == 2 * 2 * 2  # targets x dtypes x (size, scale) pairs
    assert all(outcomes[k] == "passed" for k in auto)
    assert [outcomes[k] for k in outcomes if k.startswith("TestInClass")] == ["passed"] * 4
    fails = next(u for u in res.units if u.nodeid == "test_fails")
    assert "Not equal to tolerance" in fails.message
    needs_cuda = next(u for u in res.units if u.nodeid == "test_needs_cuda")
    assert out_of_scope_reason(needs_cuda.message) == "needs a GPU or a GPU library"
    assert out_of_scope_reason(fails.message) is None


def test_runner_reports_import_error(tmp_path):
    (tmp_path / "test_bad.py").write_text("import tvm\nfrom tvm import no_such_thing\n")
    work = tmp_path / "work"
    work.mkdir()
    res = run_file(tmp_path / "test_bad.py", work, timeout=60)
    assert res.units == []
    assert "no_such_thing" in res.import_error


def test_compat_markdown_table():
    results = [
        FileResult("test_a.py", [UnitResult("t1", "passed"), UnitResult("t2", "failed", "boom"),
                                 UnitResult("t3", "skipped", "requires cuda")]),
        FileResult("test_b.py", import_error="ModuleNotFoundError: No module named 'kiln.rpc'"),
        FileResult("test_c.py", import_error="ModuleNotFoundError: No module named 'torch'"),
    ]
    text = compat_markdown(results)
    assert "**1 / 3 units pass (33.3%)**" in text
    assert "| test_a.py | 3 | 1 | 1 | 0 | 1 | 1 |  |" in text
    assert "`test_a.py::t3` (skipped): needs a GPU or a GPU library" in text
    assert "`test_c.py` (whole file): needs a module outside Kiln" in text
    assert "`test_b.py` (whole file)" not in text  # Kiln should provide a missing kiln module
    assert "### test_b.py\n\n- import error: ModuleNotFoundError: No module named 'kiln.rpc'" in text
    assert "- `t2` (failed): boom" in text


@pytest.mark.slow
@pytest.mark.skipif(not (SUITE / "test_runtime_graph.py").exists(), reason="TVM suite not present")
def test_runner_on_suite_file(tmp_path):
    res = run_file(SUITE / "test_runtime_graph.py", tmp_path, timeout=300)
    assert not res.timed_out
    assert res.units or res.import_error
    row = compat_markdown([res]).splitlines()
    assert any(line.startswith("| test_runtime_graph.py | ") for line in row)


def test_convert_source_maps_tvm_ir_instrument_to_kiln_instrument():
    src = "from tvm.ir.instrument import pass_instrument\nimport tvm.ir.instrument as inst\n"
    out = convert_source(src)
    assert out == "from kiln.instrument import pass_instrument\nimport kiln.instrument as inst\n"
    ns: dict = {}
    exec(out, ns)  # the converted imports resolve
    assert ns["pass_instrument"] is ns["inst"].pass_instrument


def test_convert_tutorial_edits_and_reports_a_stale_edit():
    text = ("from tvm.contrib.download import download_testdata\n"
            "target = tvm.target.cuda()\ndev = tvm.cuda()\n")
    out, edits = convert_tutorial("relay_quick_start.py", text)
    assert "from kiln.testing.tutorial_data import download_testdata" in out
    assert 'target = tvm.target.Target("llvm")' in out and "dev = tvm.cpu()" in out
    assert len(edits) == 3 and any("CUDA" in e for e in edits)
    with pytest.raises(ValueError, match="no longer applies"):
        convert_tutorial("relay_quick_start.py", "import tvm\n")


def test_run_tutorial_runs_and_fails(tmp_path):
    (tmp_path / "good.py").write_text("import tvm\nprint(tvm.cpu())\n")
    (tmp_path / "bad.py").write_text("import tvm\nfrom tvm import autotvm\nraise ValueError('boom')\n")
    work = tmp_path / "work"
    work.mkdir()
    good = run_tutorial(tmp_path / "good.py", work, timeout=120)
    bad = run_tutorial(tmp_path / "bad.py", work, timeout=120)
    assert (good.status, good.message, good.tuning) == ("runs", "", False)
    assert (bad.status, bad.message, bad.tuning) == ("fails", "ValueError: boom", True)
    text = tutorials_markdown([good, bad])
    assert "| good.py | runs |" in text and "| bad.py | fails: ValueError: boom |" in text
    assert "`bad.py`" in text  # listed as out of scope until tuning lands


def test_runner_supplies_tvms_test_tree_utils(tmp_path):
    (tmp_path / "test_uses_utils.py").write_text(
        "from utils.external_codegen import set_external_func_attr, check_graph_executor_result\n"
        "def test_names():\n    assert callable(set_external_func_attr)\n")
    work = tmp_path / "work"
    work.mkdir()
    res = run_file(tmp_path / "test_uses_utils.py", work, timeout=120)
    assert not res.import_error
    assert [u.outcome for u in res.units] == ["passed"]


@pytest.mark.slow
@pytest.mark.skipif(not (TUTORIALS / "use_pass_instrument.py").exists(), reason="TVM tutorials not present")
def test_pass_instrument_tutorial_runs(tmp_path):
    res = run_tutorial(TUTORIALS / "use_pass_instrument.py", tmp_path, timeout=600)
    assert res.status == "runs", res.message
