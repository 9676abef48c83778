"""relay.testing.temp_op_attr.TempOpAttr and relay.op's layout-hook registrars."""

from __future__ import annotations

import pytest

from kiln.ir.op_table import get_op_attr, set_op_attr
from kiln.relay.op import op as reg
from kiln.relay.testing.temp_op_attr import TempOpAttr


def hook_a(*args):
    return None


def hook_b(*args):
    return None


def test_temp_op_attr_sets_and_restores_an_absent_attribute():
    assert get_op_attr("nn.relu", "FTVMAlterOpLayout") is None
    with TempOpAttr("nn.relu", "FTVMAlterOpLayout", hook_a) as ctx:
        assert ctx.attr_value is hook_a
        assert get_op_attr("nn.relu", "FTVMAlterOpLayout") is hook_a
    assert get_op_attr("nn.relu", "FTVMAlterOpLayout") is None


def test_temp_op_attr_nests_and_restores_on_error():
    try:
        reg.register_alter_op_layout("nn.softmax", hook_a)
        with pytest.raises(RuntimeError), TempOpAttr("nn.softmax", "FTVMAlterOpLayout", hook_b):
            assert get_op_attr("nn.softmax", "FTVMAlterOpLayout") is hook_b
            raise RuntimeError("inside")
        assert get_op_attr("nn.softmax", "FTVMAlterOpLayout") is hook_a
    finally:
        set_op_attr("nn.softmax", "FTVMAlterOpLayout", None)


@pytest.mark.parametrize("registrar, key", [
    (reg.register_alter_op_layout, "FTVMAlterOpLayout"),
    (reg.register_convert_op_layout, "FTVMConvertOpLayout"),
    (reg.register_infer_correct_layout, "FInferCorrectLayout"),
])
def test_registrars_work_as_decorators(registrar, key):
    try:
        @registrar("tanh", level=11)
        def hook(*args):
            return None

        assert get_op_attr("tanh", key) is hook
    finally:
        set_op_attr("tanh", key, None)
