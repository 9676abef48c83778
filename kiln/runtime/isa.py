"""CPU instruction-set features by name: what a compiled library needs and a CPU reports.

The names are Linux's ``/proc/cpuinfo`` ``flags`` (``avx2``, ``avx512f``, ...), how a running CPU
reports its features; the runtime compares a library's recorded features with them before running
its code (:func:`kiln.runtime.native.missing_cpu_features`), and the target resolution
(:mod:`kiln.target`) names the features a build may use from the compiler's predefined macros
through :data:`X86_MACRO_FEATURES`.
"""

from __future__ import annotations

__all__ = ["X86_MACRO_FEATURES"]

# GCC/Clang predefined macros of x86 instruction-set extensions -> the feature's name in Linux's
# /proc/cpuinfo "flags" (how a running CPU reports it; the runtime compares these names). Only
# extensions the compiler may use in ordinary C (vectorisation, bit manipulation) or through the
# intrinsics Kiln's prelude uses. Ordered oldest first: the runtime lists missing features widest
# vector extension first by this order.
X86_MACRO_FEATURES: dict[str, str] = {
    "__SSE__": "sse", "__SSE2__": "sse2", "__SSE3__": "pni", "__SSSE3__": "ssse3",
    "__SSE4_1__": "sse4_1", "__SSE4_2__": "sse4_2", "__SSE4A__": "sse4a", "__POPCNT__": "popcnt",
    "__LZCNT__": "abm", "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__FMA4__": "fma4",
    "__F16C__": "f16c", "__BMI__": "bmi1", "__BMI2__": "bmi2", "__MOVBE__": "movbe",
    "__AVX512F__": "avx512f", "__AVX512DQ__": "avx512dq", "__AVX512CD__": "avx512cd",
    "__AVX512BW__": "avx512bw", "__AVX512VL__": "avx512vl", "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi", "__AVX512VBMI2__": "avx512_vbmi2",
    "__AVX512VNNI__": "avx512_vnni", "__AVX512BITALG__": "avx512_bitalg",
    "__AVX512VPOPCNTDQ__": "avx512_vpopcntdq", "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16", "__AVX512VP2INTERSECT__": "avx512_vp2intersect",
    "__AVXVNNI__": "avx_vnni", "__GFNI__": "gfni", "__VAES__": "vaes",
    "__VPCLMULQDQ__": "vpclmulqdq",
}
