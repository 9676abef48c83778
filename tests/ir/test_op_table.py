"""The IR's operator table: operators by name, their attribute maps, attrs classes by type key.

The IR layer holds the tables and the operator layer fills them (as TVM's ``tvm.ir`` registry
and ``OpAttrMap``); these tests check the lookups, the facade names that re-export them, and
that the IR needs no import of a higher layer to answer.
"""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import ExternalTargetError, UnknownOpError
from kiln.ir import op_table
from kiln.ir.attrs import Attrs, attrs_class, attrs_class_for
from kiln.ir.expr import Op
from kiln.op.registry import OpPattern, get_op_def, register_op
from kiln.transform.external_target import op_supported, supported_ops


def test_lookups_answer_from_the_ir_table() -> None:
    add = Op.get("add")
    assert add is op_table.get_op("add") is Op.get("add")  # one node per name
    assert add.op_def is get_op_def("add") and add.op_def.pattern == OpPattern.BROADCAST
    assert set(op_table.op_definitions()) >= {"add", "nn.conv2d", "cast"}


@pytest.mark.parametrize("lookup", [Op.get, get_op_def, op_table.op_definition,
                                    lambda name: tvm.ir.register_op_attr(name, "target.x", True)])
def test_an_unknown_operator_is_an_error_naming_it(lookup) -> None:
    with pytest.raises(UnknownOpError, match="no operator named 'nn.no_such_op'"):
        lookup("nn.no_such_op")
    with pytest.raises(KeyError):  # callers written for dict lookups keep working
        lookup("nn.no_such_op")


def test_astype_builds_the_registered_cast() -> None:
    x = relay.var("x", shape=(2, 3))
    call = x.astype("int32")
    assert call.op is Op.get("cast")
    assert isinstance(call.attrs, get_op_def("cast").attrs_type) and call.attrs.dtype == "int32"
    tvm.ir.assert_structural_equal(call, relay.cast(x, "int32"))
    mod = tvm.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], call)))
    assert mod["main"].body.checked_type == relay.TensorType((2, 3), "int32")


def test_register_op_attr_is_one_function_behind_every_facade_name() -> None:
    assert tvm.ir.register_op_attr is op_table.register_op_attr
    assert relay.op.contrib.register_op_attr is op_table.register_op_attr
    assert relay.op.contrib.register.register_op_attr is op_table.register_op_attr


def test_target_attributes_live_in_the_attr_map() -> None:
    tvm.ir.register_op_attr("abs", "target.tt_table", lambda call: True)
    tvm.ir.register_op_attr("negative", "target.tt_table")(lambda attrs, args: False)
    assert sorted(op_table.op_attr_map("target.tt_table")) == ["abs", "negative"]
    assert supported_ops("tt_table") == ["abs", "negative"]
    x = relay.var("x", shape=(2,))
    typed = tvm.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.abs(x))))
    assert op_supported(typed["main"].body, "tt_table")
    op_table.set_op_attr("abs", "target.tt_table", None)  # None removes the attribute
    assert op_table.get_op_attr("abs", "target.tt_table") is None
    assert supported_ops("tt_table") == ["negative"]
    with pytest.raises(ExternalTargetError, match="only takes 'target.<name>'"):
        tvm.ir.register_op_attr("abs", "FTVMStrategy", True)


def test_kiln_c_is_the_compilers_and_the_facade_re_exports_it() -> None:
    from kiln.codegen import external, external_kiln_c
    from kiln.relay.op.contrib import kiln_c

    assert kiln_c.kiln_c_op is external_kiln_c.kiln_c_op and kiln_c.TARGET == "kiln_c"
    assert {"kiln_c", "ccompiler"} <= set(external.registered_codegens())
    assert "nn.conv2d" in supported_ops("kiln_c")


def test_temporary_operators_can_be_removed() -> None:
    register_op("test.op_table_tmp", num_inputs=1, type_rel=lambda t, a: t[0],
                reference=lambda args, attrs, out: args[0], pattern=OpPattern.ELEMWISE)
    tvm.ir.register_op_attr("test.op_table_tmp", "target.tt_tmp", True)
    assert Op.get("test.op_table_tmp").op_def.num_inputs == 1
    op_table.unregister_op_def("test.op_table_tmp")
    with pytest.raises(UnknownOpError):
        Op.get("test.op_table_tmp")
    assert op_table.op_attr_map("target.tt_tmp") == {}


def test_attrs_classes_are_found_by_type_key() -> None:
    conv = get_op_def("nn.conv2d").attrs_type
    assert attrs_class_for("relay.attrs.Conv2DAttrs") is conv
    assert attrs_class_for("relay.attrs.NoSuchAttrs") is None
    with pytest.raises(ValueError, match="'relay.attrs.Conv2DAttrs' .* is already declared by"):
        @attrs_class("relay.attrs.Conv2DAttrs")
        class Clash(Attrs):
            x: int = 0
    assert attrs_class_for("relay.attrs.Conv2DAttrs") is conv
