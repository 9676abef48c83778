"""PassContext, module/function passes, Sequential selection by opt level, instruments, errors."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import PassError
from kiln.ir import rewrite
from kiln.ir.expr import Call
from kiln.transform import (
    DumpIR,
    PassContext,
    PassInstrument,
    PassTimingInstrument,
    Sequential,
    function_pass,
    module_pass,
)


def exp_module() -> tvm.IRModule:
    x = relay.var("x", shape=(2,))
    return tvm.IRModule.from_expr(relay.exp(x))


def to_log(fn, mod, ctx):
    return rewrite(fn, lambda new, old: relay.log(new.args[0]) if isinstance(new, Call) else None)


def test_function_pass_returns_new_module_and_keeps_input():
    p = function_pass(to_log, opt_level=1, name="ExpToLog")
    mod = exp_module()
    out = p(mod)
    assert out["main"].body.op.name == "log"
    assert mod["main"].body.op.name == "exp"


def test_function_pass_skips_external_functions():
    p = function_pass(to_log, opt_level=1, name="ExpToLog")
    mod = exp_module()
    mod["main"] = mod["main"].with_attr("Compiler", "ext")
    assert p(mod)["main"].body.op.name == "exp"


def test_sequential_respects_opt_level_required_and_disabled():
    ran: list[str] = []

    def make(name, level):
        return module_pass(lambda mod, ctx: ran.append(name) or mod, opt_level=level, name=name)

    seq = Sequential([make("A", 0), make("B", 2), make("C", 3)])
    with PassContext(opt_level=2):
        seq(exp_module())
    assert ran == ["A", "B"]
    ran.clear()
    with PassContext(opt_level=2, required_pass=["C"], disabled_pass=["A"]):
        seq(exp_module())
    assert ran == ["B", "C"]
    ran.clear()
    with relay.build_config(opt_level=3):
        seq(exp_module())
    assert ran == ["A", "B", "C"]


def test_class_decorated_pass():
    @module_pass(opt_level=0, name="Renamer")
    class Renamer:
        def __init__(self, suffix):
            self.suffix = suffix

        def transform_module(self, mod, ctx):
            out = tvm.IRModule()
            out["main" + self.suffix] = mod["main"]
            return out

    assert "main_x" in Renamer("_x")(exp_module())


def test_instruments_time_and_dump(tmp_path):
    timing = PassTimingInstrument()
    p = function_pass(to_log, opt_level=0, name="ExpToLog")
    with PassContext(instruments=[timing, DumpIR(tmp_path)]):
        Sequential([p, relay.transform.InferType()])(exp_module())
    names = [n for n, _ in timing.timings]
    assert names[:2] == ["ExpToLog", "InferType"]
    assert "ExpToLog" in timing.render()
    dumps = sorted(f.name for f in tmp_path.iterdir())
    assert dumps[0] == "000_ExpToLog.txt"
    assert "log(%x)" in (tmp_path / dumps[0]).read_text()


def test_should_run_can_skip_a_pass():
    class SkipAll(PassInstrument):
        def should_run(self, mod, info):
            return False

    p = function_pass(to_log, opt_level=0, name="ExpToLog")
    with PassContext(instruments=[SkipAll()]):
        assert p(exp_module())["main"].body.op.name == "exp"


def test_failing_pass_names_itself_and_history():
    def boom(mod, ctx):
        raise RuntimeError("kaboom")

    seq = Sequential([relay.transform.InferType(), module_pass(boom, opt_level=0, name="Boom")])
    with PassContext(), pytest.raises(PassError, match=r"pass Boom failed \(RuntimeError: kaboom\); "
                                      r"passes run before it: .*InferType"):
        seq(exp_module())


def test_verifier_rejects_a_pass_producing_ill_typed_ir():
    def bad(mod, ctx):
        x = relay.var("x", shape=(2,))
        y = relay.var("y", shape=(3,))
        out = tvm.IRModule()
        out["main"] = relay.Function([x, y], x + y)
        return out

    with pytest.raises(PassError, match="IR verification failed after pass Bad"):
        module_pass(bad, opt_level=0, name="Bad")(exp_module())


def test_verifier_rejects_free_variables():
    def leak(mod, ctx):
        x = relay.var("x", shape=(2,))
        free = relay.var("free", shape=(2,))
        out = tvm.IRModule()
        out["main"] = relay.Function([x], x + free)
        return out

    with pytest.raises(PassError, match="free variable"):
        module_pass(leak, opt_level=0, name="Leak")(exp_module())


def test_timing_total_counts_leaf_passes_once():
    timing = PassTimingInstrument()
    p = function_pass(to_log, opt_level=0, name="ExpToLog")
    with PassContext(instruments=[timing]):
        Sequential([Sequential([p], name="Inner"), relay.transform.InferType()],
                   name="relay.build")(exp_module())
    names = [n for n, _ in timing.timings]
    assert names == ["ExpToLog", "Inner", "InferType", "relay.build"]
    leaves = dict(timing.timings)["ExpToLog"] + dict(timing.timings)["InferType"]
    total_ms = float(timing.render().splitlines()[-1].split()[-2])
    assert total_ms == pytest.approx(leaves * 1e3, abs=2e-3)  # not the sequences' times again
