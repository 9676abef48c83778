"""Pass instruments (kiln.instrument / kiln.transform.instrument) with TVM's error semantics."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.instrument import PassInstrument, PrintAfterAll, pass_instrument
from kiln.transform import PassContext, PrintIR


def _mod() -> kiln.IRModule:
    x = relay.var("x", shape=(2, 2))
    return kiln.IRModule.from_expr(relay.Function([x], relay.nn.relu(x)))


@pass_instrument
class Recorder:
    def __init__(self, name: str, log: list[str], fail: str = "") -> None:
        self.name_, self.log, self.fail = name, log, fail

    def _hook(self, what: str) -> None:
        self.log.append(f"{self.name_}.{what}")
        if what == self.fail:
            raise ValueError(f"{self.name_} {what}")

    def enter_pass_ctx(self) -> None:
        self._hook("enter")

    def exit_pass_ctx(self) -> None:
        self._hook("exit")

    def run_before_pass(self, mod: kiln.IRModule, info: object) -> None:
        self._hook("before")


def test_pass_instrument_decorator_makes_an_instrument() -> None:
    log: list[str] = []
    inst = Recorder("a", log)
    assert isinstance(inst, PassInstrument)
    assert inst.should_run(_mod(), None)  # type: ignore[arg-type]  # the base hook
    with PassContext(instruments=[inst]):
        relay.transform.InferType()(_mod())
    assert log == ["a.enter", "a.before", "a.exit"]


def test_enter_failure_exits_the_entered_and_clears() -> None:
    log: list[str] = []
    ctx = PassContext(instruments=[Recorder("a", log), Recorder("b", log, "enter"), Recorder("c", log)])
    before = PassContext.current()
    with pytest.raises(ValueError, match="b enter"), ctx:
        pass
    assert log == ["a.enter", "b.enter", "a.exit"]
    assert ctx.instruments == [] and PassContext.current() is before


def test_exit_failure_clears_and_leaves_the_context() -> None:
    log: list[str] = []
    ctx = PassContext(instruments=[Recorder("a", log), Recorder("b", log, "exit"), Recorder("c", log)])
    before = PassContext.current()
    with pytest.raises(ValueError, match="b exit"), ctx:
        pass
    assert log[-2:] == ["a.exit", "b.exit"]  # c does not exit
    assert ctx.instruments == [] and PassContext.current() is before
    ctx.override_instruments([])  # nothing left to exit
    assert log[-1] == "b.exit"


def test_run_before_failure_keeps_instruments_and_exits_all() -> None:
    log: list[str] = []
    ctx = PassContext(instruments=[Recorder("a", log), Recorder("b", log, "before")])
    with pytest.raises(ValueError, match="b before"), ctx:
        relay.transform.InferType()(_mod())
    assert log[-2:] == ["a.exit", "b.exit"]
    assert len(ctx.instruments) == 2


def test_print_ir_prints_and_returns_the_module(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _mod()
    out = PrintIR("after relu")(mod)
    text = capsys.readouterr().out
    assert "PrintIR(after relu)" in text and "nn.relu" in text
    assert kiln.ir.structural_equal(out, mod)


def test_print_after_all(capsys: pytest.CaptureFixture[str]) -> None:
    with PassContext(instruments=[PrintAfterAll()]):
        relay.transform.InferType()(_mod())
    assert "After Running Pass: InferType" in capsys.readouterr().out
