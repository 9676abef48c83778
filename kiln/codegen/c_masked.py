"""Masked vector loads and stores: the lanes of a vector tail that lie inside the data.

A vectorized loop whose last iteration runs past the end of the data (a split that does not
divide) runs that iteration as vector code too, with a lane mask (an integer vector, -1 for
lanes inside, 0 outside): loads read only the lanes inside (the others are 0) and stores write
only those, so no memory outside the tensors is touched. Per vector type the generator emits

* ``V kiln_mload_<S>(const void* p, M m)`` and
* ``void kiln_mstore_<S>(void* p, M m, V v)``,

where ``M`` is the integer vector type with the element width of ``V``. They use the masked
moves of AVX-512 (``vmovups`` with a mask register; 8- and 16-bit elements need AVX512BW, 128-
and 256-bit vectors AVX512VL) or AVX/AVX2 (``vmaskmovps``/``vpmaskmovd`` for 32- and 64-bit
elements) when the compiler targets them, and a loop over the lanes otherwise.
"""

from __future__ import annotations

__all__ = ["INTRINSICS_INCLUDE", "masked_helpers"]

# Included (once per translation unit) before helpers that may use intrinsics.
INTRINSICS_INCLUDE = """#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
"""

_FLOAT_SUFFIX = {32: "ps", 64: "pd"}


def _avx512(bits: int, is_float: bool, nbytes: int) -> tuple[str, str, str] | None:
    """(preprocessor condition, load expression, store statement) with AVX-512 masked moves."""
    prefix = {64: "_mm512", 32: "_mm256", 16: "_mm"}.get(nbytes)
    if prefix is None:
        return None
    need = ["defined(__AVX512F__)"]
    if bits in (8, 16):
        need.append("defined(__AVX512BW__)")
    if nbytes < 64:
        need.append("defined(__AVX512VL__)")
    ivec = {64: "__m512i", 32: "__m256i", 16: "__m128i"}[nbytes]
    fvec = {64: "__m512", 32: "__m256", 16: "__m128"}[nbytes] + ("d" if bits == 64 else "")
    data = _FLOAT_SUFFIX[bits] if is_float else f"epi{bits}"
    vec = fvec if is_float else ivec
    kmask = f"{prefix}_test_epi{bits}_mask(({ivec})m, ({ivec})m)"
    load = f"{prefix}_maskz_loadu_{data}({kmask}, p)"
    store = f"{prefix}_mask_storeu_{data}(p, {kmask}, ({vec})v);"
    return " && ".join(need), load, store


def _avx2(bits: int, is_float: bool, nbytes: int) -> tuple[str, str, str] | None:
    """(condition, load, store) with AVX/AVX2 ``maskmov`` (32- and 64-bit elements only)."""
    if bits not in (32, 64) or nbytes not in (16, 32):
        return None
    prefix = "_mm256" if nbytes == 32 else "_mm"
    ivec = "__m256i" if nbytes == 32 else "__m128i"
    if is_float:
        data, ptr = _FLOAT_SUFFIX[bits], "float" if bits == 32 else "double"
        vec = ("__m256" if nbytes == 32 else "__m128") + ("d" if bits == 64 else "")
        cond = "defined(__AVX__)"
    else:
        data, ptr = f"epi{bits}", "int" if bits == 32 else "long long"
        vec, cond = ivec, "defined(__AVX2__)"
    load = f"{prefix}_maskload_{data}((const {ptr}*)p, ({ivec})m)"
    store = f"{prefix}_maskstore_{data}(({ptr}*)p, ({ivec})m, ({vec})v);"
    return cond, load, store


def masked_helpers(vtype: str, mtype: str, ctype: str, suffix: str, bits: int, lanes: int,
                   is_float: bool) -> str:
    """C text of ``kiln_mload_<suffix>`` and ``kiln_mstore_<suffix>`` for one vector type.

    Parameters
    ----------
    vtype, mtype : str
        The data vector type and the integer (mask) vector type of the same element width.
    ctype : str
        The element's C type.
    suffix : str
        The name suffix (e.g. ``f32x16``).
    bits : int
        Element width in bits.
    lanes : int
        Lanes per vector.
    is_float : bool
        Whether the elements are floating point.

    Returns
    -------
    str
        Two ``static inline`` functions.
    """
    nbytes = bits // 8 * lanes
    variants = [v for v in (_avx512(bits, is_float, nbytes), _avx2(bits, is_float, nbytes)) if v]
    loads, stores = [], []
    for k, (cond, load, store) in enumerate(variants):
        word = "#if" if k == 0 else "#elif"
        loads += [f"{word} {cond}", f"  return ({vtype}){load};"]
        stores += [f"{word} {cond}", f"  {store}"]
    generic_load = [f"  {vtype} r = {{}};", f"  const {ctype}* q = (const {ctype}*)p;",
                    f"  for (int k = 0; k < {lanes}; ++k)", "    if (m[k]) r[k] = q[k];",
                    "  return r;"]
    generic_store = [f"  {ctype}* q = ({ctype}*)p;", f"  for (int k = 0; k < {lanes}; ++k)",
                     "    if (m[k]) q[k] = v[k];"]
    if variants:
        loads += ["#else", *generic_load, "#endif"]
        stores += ["#else", *generic_store, "#endif"]
    else:
        loads, stores = generic_load, generic_store
    return (f"static inline {vtype} kiln_mload_{suffix}(const void* p, {mtype} m) {{\n"
            + "\n".join(loads) + "\n}\n"
            f"static inline void kiln_mstore_{suffix}(void* p, {mtype} m, {vtype} v) {{\n"
            + "\n".join(stores) + "\n}\n")
