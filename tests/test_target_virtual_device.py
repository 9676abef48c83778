"""kiln.target.VirtualDevice and kiln.target.codegen (TVM's names)."""

from __future__ import annotations

import kiln
from kiln.target import Target, VirtualDevice


def test_virtual_device_holds_device_target_scope() -> None:
    vd = VirtualDevice(kiln.cpu(), Target("llvm"))
    assert vd.device_type == 1 and vd.virtual_device_id == 0
    assert vd.target == Target("llvm") and vd.memory_scope == ""
    assert vd == VirtualDevice(kiln.cpu(0), "llvm")
    assert not vd.is_fully_unconstrained()
    assert VirtualDevice().is_fully_unconstrained()
    assert "device_type=1" in str(vd)


def test_llvm_version_major_says_no_llvm_with_gcc(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import kiln.runtime.toolchain as toolchain

    monkeypatch.setattr(toolchain, "compiler_version", lambda: "cc (Debian 12.2.0-14) 12.2.0")
    assert kiln.target.codegen.llvm_version_major() == 0
    assert kiln.target.codegen.llvm_version_major(allow_none=True) is None
    monkeypatch.setattr(toolchain, "compiler_version", lambda: "Debian clang version 16.0.6 (15)")
    assert kiln.target.codegen.llvm_version_major() == 16
