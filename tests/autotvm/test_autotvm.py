"""kiln.autotvm: dispatch contexts and config entities, with TVM's record formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kiln
from kiln import autotvm
from kiln.autotvm.task.space import (
    ConfigEntity,
    FallbackConfigEntity,
    OtherOptionEntity,
    ReorderEntity,
    SplitEntity,
)

WORKLOAD = ["depthwise_conv2d_nchw_spatial_pack.arm_cpu", [1, 512, 32, 32, "float32"],
            [512, 1, 3, 3, "float32"], [1, 1], [1, 1], [1, 1], "float32"]


def _v01_record(tile_co: list[int], cost: float, error_no: int = 0) -> str:
    """A record in the version-0.1 format of TVM's test_op_level2 log."""
    return json.dumps({
        "i": ["llvm -device=arm_cpu", WORKLOAD[0], [], {}, WORKLOAD,
              {"i": 7, "t": "", "c": None,
               "e": [["tile_co", "sp", tile_co], ["reorder_0", "re", [0, 2, 1]],
                     ["ann_reduce", "an", ["unroll", "none"]], ["conv_inline", "ot", 0]]}],
        "r": [[cost], error_no, 1.0, 0.0], "v": 0.1})


def test_apply_history_best_picks_fastest_successful_record(tmp_path: Path) -> None:
    log = tmp_path / "tune.log"
    log.write_text("\n".join([_v01_record([32, 16], 3e-4), _v01_record([16, 32], 1e-4),
                              _v01_record([8, 64], 1e-6, error_no=4)]) + "\n")
    ctx = autotvm.apply_history_best(str(log))
    cfg = ctx.query("llvm -device=arm_cpu", WORKLOAD)
    assert cfg["tile_co"] == SplitEntity([16, 32])  # the failed 1e-6 record is ignored
    assert cfg["reorder_0"] == ReorderEntity([0, 2, 1])
    assert cfg.get_other_option() == {"conv_inline": 0}
    assert cfg.cost == pytest.approx(1e-4)
    assert ctx.query("llvm -device=arm_cpu", ["other", 1]) is None  # not entered: no outer context


def test_apply_history_best_warns_and_restores_the_stack(tmp_path: Path) -> None:
    autotvm.ApplyHistoryBest._warned = False
    outer = autotvm.DispatchContext.current
    with pytest.warns(UserWarning, match="do not change what relay.build compiles"), \
            autotvm.apply_history_best([]) as ctx:
        assert autotvm.DispatchContext.current is ctx
        # no record: the outer (global fallback) context answers
        assert isinstance(ctx.query("llvm", ["w", 1]), FallbackConfigEntity)
    assert autotvm.DispatchContext.current is outer


def test_fallback_context_subclass_as_tvm_tests_write_it() -> None:
    class WinogradFallback(autotvm.FallbackContext):
        def _query_inside(self, target, workload):  # type: ignore[no-untyped-def]
            key = (target, workload)
            if key in self.memory:
                return self.memory[key]
            cfg = autotvm.task.space.FallbackConfigEntity()
            cfg.is_fallback = False
            cfg["tile_b"] = autotvm.task.space.SplitEntity([-1, 1, 1, 1])
            cfg["auto_unroll_max_step"] = autotvm.task.space.OtherOptionEntity(1500)
            self.memory[key] = cfg
            return cfg

    with WinogradFallback() as ctx:
        cfg = autotvm.DispatchContext.current.query("cuda", "conv2d_winograd")
        assert ctx.query("cuda", "conv2d_winograd") is cfg
    assert not cfg.is_fallback
    assert cfg["auto_unroll_max_step"] == OtherOptionEntity(1500)


def test_config_entity_json_round_trip() -> None:
    cfg = ConfigEntity(3, "h")
    cfg["tile"] = SplitEntity([-1, 4])
    cfg["unroll"] = OtherOptionEntity(True)
    again = ConfigEntity.from_json_dict(json.loads(json.dumps(cfg.to_json_dict())))
    assert again == cfg and again.index == 3
    with pytest.raises(ValueError, match="unknown kind"):
        ConfigEntity.from_json_dict({"e": [["x", "zz", 1]]})


def test_reached_as_kiln_attribute() -> None:
    assert kiln.autotvm is autotvm
