"""Fixed C text shared by every generated kernel: helpers with NumPy's semantics and vector math.

The scalar helpers give the results NumPy (the reference) gives where C leaves behaviour
undefined or differs: integer division and remainder by zero are 0, ``INT_MIN / -1`` wraps,
shifts by the bit width or more saturate, float-to-int conversion of NaN or infinity is 0,
``max``/``min`` of floats propagate NaN, float floor division and modulo follow NumPy's
``divmod``.

The vector math functions (:func:`vector_math_source`, float32 only) are polynomial
approximations written with GCC vector extensions so that vector loops stay vectorized without
``-ffast-math``; where the compiler targets AVX-512 (AVX512VL for 4 and 8 lanes) ``exp`` uses
``vscalefps``/``vrndscaleps`` and ``vmaxps``/``vminps``, and erf's table lookups are one
``vpermps`` per coefficient (AVX2 for 8 lanes). Their coefficients were fitted (iteratively
reweighted least squares towards minimax, in float64) for this file. Measured maximum errors
against float64 over dense samples of the float32 range (see ``tests/codegen/test_c_codegen.py``;
the same for every vector width and instruction set) are:

==========  ===========================================  =========
function    method                                       max error
==========  ===========================================  =========
exp         Cody-Waite reduction, degree-6 polynomial,   1.01 ulp
            times 2^n with one rounding (AVX-512
            scalef, else two exact power-of-2 factors)
tanh        odd polynomial below 0.55, else              1.4 ulp
            1 - 2 / (exp(2|x|) + 1)
sigmoid     e = exp(-|x|), then 1 / (1 + e) or           2.04 ulp
            e / (1 + e): a reciprocal estimate and a
            residual correction (AVX-512), else one
            division
erf         8 intervals of |x| (width 0.5, table         1.02 ulp
            lookups), degree-7 polynomial in |x| minus
            the centre, x + x * s(x) on [0, 0.5); no
            division, no exp; 1 from 4 on
==========  ===========================================  =========

All return NaN for NaN and the correctly rounded limits for infinities; exp overflows to
infinity above 88.72283 and underflows to 0 below -103.97208. The exp of an argument known to be
at most 0 (``te.exp(x, upper=0)``: softmax's, and sigmoid's ``exp(-|x|)``) skips the overflow
handling and returns the same bits.
"""

from __future__ import annotations

__all__ = [
    "NARROW_PRELUDE",
    "SCALAR_PRELUDE",
    "VECTOR_IDIOMS",
    "VECTOR_MATH_TABLES",
    "c_float",
    "int_helper_names",
    "scalar_helpers",
    "vector_math_source",
]

# Named vector idioms (GCC vector extensions), defined once a unit declares vector types. V is a
# vector type, M the integer vector type of its lane masks (all ones or all zeros per lane).
VECTOR_IDIOMS = r"""/* KILN_SPLAT: x in every lane (x - 0 is exact for every value, -0.0 included, and folds
   away). KILN_SELECT: lanes of a where mask m is set, else of b. KILN_MAX/KILN_MIN: numpy.maximum
   and numpy.minimum lane by lane (a NaN in either operand is the result). */
#define KILN_SPLAT(V, x) ((x) - (V){})
#define KILN_SELECT(V, M, m, a, b) ((V)((((M)(a)) & (m)) | (((M)(b)) & ~(m))))
#define KILN_MAX(V, M, a, b) KILN_SELECT(V, M, (((a) > (b)) | ((a) != (a))), a, b)
#define KILN_MIN(V, M, a, b) KILN_SELECT(V, M, (((a) < (b)) | ((a) != (a))), a, b)
"""

_SCALAR_INCLUDES = r"""#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
"""

# The scalar helpers; KILN_FN stands for how each helper is declared (see scalar_helpers)
_SCALAR_HELPERS = r"""
/* Integer division and remainder with NumPy's results: 0 for a zero divisor, wrap-around for
   MIN / -1. kiln_div/kiln_mod truncate (C), kiln_floordiv/kiln_floormod round down (Python). */
#define KILN_SIGNED_INT_OPS(T, U, N, BITS)                                                   \
  KILN_FN T kiln_div_##N(T a, T b) {                                                   \
    if (b == 0) return 0;                                                                    \
    if (b == -1) return (T)(0 - (U)a);                                                       \
    return (T)(a / b);                                                                       \
  }                                                                                          \
  KILN_FN T kiln_mod_##N(T a, T b) {                                                   \
    if (b == 0 || b == -1) return 0;                                                         \
    return (T)(a % b);                                                                       \
  }                                                                                          \
  KILN_FN T kiln_floordiv_##N(T a, T b) {                                              \
    if (b == 0) return 0;                                                                    \
    if (b == -1) return (T)(0 - (U)a);                                                       \
    T q = (T)(a / b);                                                                        \
    if ((T)(a % b) != 0 && ((a < 0) != (b < 0))) q = (T)(q - 1);                             \
    return q;                                                                                \
  }                                                                                          \
  KILN_FN T kiln_floormod_##N(T a, T b) {                                              \
    if (b == 0 || b == -1) return 0;                                                         \
    T r = (T)(a % b);                                                                        \
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);                                      \
    return r;                                                                                \
  }                                                                                          \
  KILN_FN T kiln_shl_##N(T a, T b) {                                                   \
    return (b < 0 || b >= BITS) ? (T)0 : (T)((U)a << b);                                     \
  }                                                                                          \
  KILN_FN T kiln_shr_##N(T a, T b) {                                                   \
    return (b < 0 || b >= BITS) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b);                         \
  }

#define KILN_UNSIGNED_INT_OPS(T, N, BITS)                                                    \
  KILN_FN T kiln_div_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }              \
  KILN_FN T kiln_mod_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }              \
  KILN_FN T kiln_floordiv_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }         \
  KILN_FN T kiln_floormod_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }         \
  KILN_FN T kiln_shl_##N(T a, T b) { return b >= BITS ? (T)0 : (T)(a << b); }          \
  KILN_FN T kiln_shr_##N(T a, T b) { return b >= BITS ? (T)0 : (T)(a >> b); }

KILN_SIGNED_INT_OPS(int8_t, uint8_t, i8, 8)
KILN_SIGNED_INT_OPS(int16_t, uint16_t, i16, 16)
KILN_SIGNED_INT_OPS(int32_t, uint32_t, i32, 32)
KILN_SIGNED_INT_OPS(int64_t, uint64_t, i64, 64)
KILN_UNSIGNED_INT_OPS(uint8_t, u8, 8)
KILN_UNSIGNED_INT_OPS(uint16_t, u16, 16)
KILN_UNSIGNED_INT_OPS(uint32_t, u32, 32)
KILN_UNSIGNED_INT_OPS(uint64_t, u64, 64)

/* Float to integer: truncation toward zero; NaN and infinities give 0 (as the reference); a
   finite value out of range gives the x86 conversion result (the minimum integer), as NumPy's
   casts do on x86. Types narrower than 32 bits convert through int32, uint32 through int64. */
KILN_FN int32_t kiln_f2i32(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  return (x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : INT32_MIN;
}
KILN_FN int64_t kiln_f2i64(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (int64_t)x : INT64_MIN;
}
KILN_FN uint64_t kiln_f2u64(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  if (x >= 9223372036854775808.0 && x < 18446744073709551616.0) return (uint64_t)x;
  return (uint64_t)kiln_f2i64(x);
}

/* max / min of floats propagate NaN like numpy.maximum / numpy.minimum: b when a > b is false
   (b is NaN, or equal), then a when a is NaN. Written as two selects, not one condition with
   ||, so that the compiler makes them maxss/minss and a blend instead of a branch on the data
   (a 3x3 max pool of random values: half its comparisons mispredicted). */
KILN_FN float kiln_maxf(float a, float b) { float m = a > b ? a : b; return a != a ? a : m; }
KILN_FN float kiln_minf(float a, float b) { float m = a < b ? a : b; return a != a ? a : m; }
KILN_FN double kiln_maxd(double a, double b) { double m = a > b ? a : b; return a != a ? a : m; }
KILN_FN double kiln_mind(double a, double b) { double m = a < b ? a : b; return a != a ? a : m; }

/* NumPy's float floor division and modulo (npy_divmod). */
KILN_FN double kiln_floordivd(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return a / b;
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) div -= 1.0;
  if (div == 0.0) return copysign(0.0, a / b);
  double fl = floor(div);
  return (div - fl > 0.5) ? fl + 1.0 : fl;
}
KILN_FN double kiln_floormodd(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return mod;
  if (mod != 0.0) {
    if ((b < 0.0) != (mod < 0.0)) mod += b;
    return mod;
  }
  return copysign(0.0, b);
}
KILN_FN float kiln_floordivf(float a, float b) { return (float)kiln_floordivd(a, b); }
KILN_FN float kiln_floormodf(float a, float b) {
  float mod = fmodf(a, b);
  if (b == 0.0f) return mod;
  if (mod != 0.0f) {
    if ((b < 0.0f) != (mod < 0.0f)) mod += b;
    return mod;
  }
  return copysignf(0.0f, b);
}

/* Logistic function without overflow for large |x|. */
KILN_FN float kiln_sigmoidf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}
KILN_FN double kiln_sigmoidd(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
"""


def scalar_helpers(qualifier: str = "static inline") -> str:
    """The scalar helpers (NumPy's integer division, float-to-int conversion, NaN-propagating
    min/max, floor division, sigmoid), each declared with ``qualifier`` (CUDA device code
    declares them ``static __device__ __forceinline__``)."""
    return _SCALAR_HELPERS.replace("KILN_FN", qualifier)


SCALAR_PRELUDE = _SCALAR_INCLUDES + scalar_helpers()

# erf on |x| in [k/2, (k+1)/2), k = 0..7 (columns): the interval's centre, c0, b and the
# coefficients s0..s6 of kiln_verf (rows, in that order), fitted for this file.
_ERF_TABLE: tuple[tuple[float, ...], ...] = (
    (0, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75),  # centre
    (0, 0.711155653, 0.92290014, 0.986671686, 0.998537302, 0.999899387, 0.999995708, 0.999999881),  # c0
    (1, 0, 0, 0, 0, 0, 0, 0),  # b
    (0.128379181, 0.642931104, 0.236521125, 0.0527749956,
     0.00714231934, 0.00058627734, 2.9189001e-05, 8.81426217e-07),  # s0
    (-1.6232824e-06, -0.482198179, -0.295651734, -0.092356205,
     -0.0160701573, -0.00161226734, -9.48693269e-05, -3.30607054e-06),  # s1
    (-0.376076341, 0.0267879069, 0.167536095, 0.0901574269,
     0.0217244923, 0.00276037655, 0.000195813991, 7.9706615e-06),  # s2
    (-0.000574062578, 0.150675893, -0.00613199174, -0.0481054932,
     -0.0190882534, -0.00325771305, -0.000286169554, -1.37854267e-05),  # s3
    (0.115914568, -0.053202793, -0.0471930839, 0.00661715167,
     0.0106606977, 0.00275641214, 0.000313585449, 1.83193752e-05),  # s4
    (-0.00807157438, -0.0265856516, 0.0205972735, 0.00904917624,
     -0.00277959299, -0.00166782201, -0.000273757032, -2.06922396e-05),  # s5
    (-0.0179326236, 0.0177543275, 0.00380483782, -0.0059209452,
     -0.000727365899, 0.000634701864, 0.000173993161, 1.72423934e-05),  # s6
)


def c_float(value: float) -> str:
    """A float32 C literal that reads back as ``value`` rounded to float32."""
    text = f"{value:.9g}"
    return text + ("f" if "e" in text or "." in text else ".0f")


def _erf_table_source() -> str:
    """``kiln_erf_tab``: each row twice, so that 16-lane vectors index it directly."""
    rows = []
    for row in _ERF_TABLE:
        values = [c_float(v) for v in row]
        rows.append("  {" + ", ".join(values) + ",\n   " + ", ".join(values) + "},")
    head = f"static const float kiln_erf_tab[{len(rows)}][16] __attribute__((aligned(64))) = {{"
    return "\n" + head + "\n" + "\n".join(rows) + "\n};\n"


VECTOR_MATH_TABLES = _erf_table_source()

# float32 vector math for one vector width; {V} float vector type, {I} int32 vector type,
# {S} the suffix naming the width (e.g. f32x8), {L} the lanes. Masks are {I} values (-1 true,
# 0 false). Sections between "#if KILN_AVX512" and "#endif" use AVX-512 intrinsics ({P} the
# intrinsic prefix, {M} the intrinsic vector type) and are kept only for widths AVX-512 has.
_VECTOR_MATH_TEMPLATE = r"""
static inline {V} kiln_vsel_{S}({I} m, {V} a, {V} b) {
  return ({V})((({I})a & m) | (({I})b & ~m));
}
static inline {V} kiln_vabs_{S}({V} x) { return ({V})(({I})x & 0x7fffffff); }
static inline {V} kiln_vcopysign_{S}({V} mag, {V} sgn) {
  return ({V})((({I})mag & 0x7fffffff) | (({I})sgn & (int32_t)0x80000000));
}
/* e^r for r = xc - n ln 2 (Cody-Waite, two constants), n = round(xc / ln 2): a degree-6
   polynomial. */
static inline {V} kiln_vexp_poly_{S}({V} xc, {V} n) {
  {V} r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  {V} p = ({V}){} + 0.001390127f;
  p = p * r + 0.00836314075f;
  p = p * r + 0.0416668542f;
  p = p * r + 0.166665778f;
  p = p * r + 0.5f;
  return (p * r) * r + r + 1.0f;
}
static inline {V} kiln_vexp_{S}({V} x) {
  /* Clamped to [-104, 88.73] the result still underflows to 0 / overflows to inf by itself;
     NaN passes the clamp and stays NaN. */
#if KILN_AVX512
  {M} xc = {P}_min_ps({P}_set1_ps(88.73f), {P}_max_ps({P}_set1_ps(-104.0f), ({M})x));
  {V} n = ({V}){P}_roundscale_ps({P}_mul_ps(xc, {P}_set1_ps(1.44269502f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  {V} p = kiln_vexp_poly_{S}(({V})xc, n);
  return ({V}){P}_scalef_ps(({M})p, ({M})n);  /* p * 2^n, one rounding, subnormals included */
#else
#if KILN_AVX
  /* min/max instructions, not compares and blends: fewer instructions and registers in a
     convolution's epilogue (a conv+sigmoid kernel of the AVX2 build: 9.05 -> 6.05 ms) */
  {V} xc = ({V}){AP}_min_ps({AP}_set1_ps(88.73f), {AP}_max_ps({AP}_set1_ps(-104.0f), ({AM})x));
#else
  const {V} hi = ({V}){} + 88.73f, lo = ({V}){} - 104.0f;
  {V} xc = kiln_vsel_{S}(x > hi, hi, kiln_vsel_{S}(x < lo, lo, x));
#endif
  {V} n = (xc * 1.44269502f + 12582912.0f) - 12582912.0f;
  {V} p = kiln_vexp_poly_{S}(xc, n);
  {I} k = __builtin_convertvector(n, {I});
  {I} k1 = k >> 1, k2 = k - k1;
  p = p * ({V})((k1 + 127) << 23);
  return p * ({V})((k2 + 127) << 23);
#endif
}
/* exp(x) for x <= 0 and NaN (sigmoid's exp(-|x|), softmax's exp(x - max)): no overflow to
   clamp; without x86's vectors, 2^n (n >= -150) applied as 2^(n+25), exact, then 2^-25, which
   rounds only into the subnormals: the same results as kiln_vexp, in fewer instructions (with
   them, the same results too, below). t = x log2(e) + 1.5 *
   2^23 + 152 rounds to an integer in the same binade (the same n: 152 is even, so ties go the
   same way) whose bits are those of 1.5 * 2^23 (0x4b400000) plus n + 152: no conversion to
   integers. */
static inline {V} kiln_vexpneg_{S}({V} x) {
#if KILN_AVX512
  return kiln_vexp_{S}(x);
#else
#if KILN_AVX
  {V} xc = ({V}){AP}_max_ps({AP}_set1_ps(-104.0f), ({AM})x);
#else
  const {V} lo = ({V}){} - 104.0f;
  {V} xc = kiln_vsel_{S}(x < lo, lo, x);
#endif
  {V} t = xc * 1.44269502f + 12583064.0f;
  {V} n = t - 12583064.0f;
  {V} p = kiln_vexp_poly_{S}(xc, n);
#if KILN_AVX
  /* x86: 2^n in one multiply down to n = -125 (t's bits hold n + 152). Below, where p * 2^n is
     subnormal or 0, its bits are the integer round(p * 2^(n + 149)), made by a conversion
     instead of by a multiply into the subnormals, which costs x86 a microcode assist: an AVX2
     softmax whose exps underflow (masked attention scores) took 210 us instead of 120, a
     sigmoid of x < -104 on 32k floats 39 us instead of 14 (Zen 5); nothing is spent while no
     lane is below -125. */
  {I} k = ({I})({V}){AP}_max_ps(({AM})t, {AP}_set1_ps(12583064.0f - 125.0f)) - 0x4b400000;
  {V} r = p * ({V})((k - 25) << 23);
  {I} tiny = n < -125.0f;
  if (!{AP}_movemask_ps(({AM})tiny)) return r;
  {I} kt = ({I})({V}){AP}_min_ps(({AM})t, {AP}_set1_ps(12583064.0f - 126.0f)) - 0x4b400000;
  {V} s = p * ({V})((kt + 124) << 23);  /* 2^(n + 149): n + 149 + 127 = kt + 124 */
  return kiln_vsel_{S}(tiny, ({V}){AP}_cvtps_epi32(({AM})s), r);
#else
  p = p * ({V})((({I})t - 0x4b400000) << 23);
  return p * 2.98023224e-8f;
#endif
#endif
}
static inline {V} kiln_vtanh_{S}({V} x) {
  {V} ax = kiln_vabs_{S}(x);
  {V} x2 = x * x;
  {V} p = ({V}){} - 0.00663209567f;
  p = p * x2 + 0.0213242508f;
  p = p * x2 - 0.0539127924f;
  p = p * x2 + 0.133331418f;
  p = p * x2 - 0.333333313f;
  {V} small = x + (x * x2) * p;
  {V} e = kiln_vexp_{S}(ax + ax);
  {V} big = kiln_vcopysign_{S}(1.0f - 2.0f / (e + 1.0f), x);
  return kiln_vsel_{S}(ax < 0.55f, small, big);
}
/* n / d for d in [1, 2] and 0 <= n <= d. With AVX-512: the 14-bit reciprocal estimate, the
   quotient from it, then one correction by the quotient's residual (n - d * q is exact with
   FMA), within half an ulp more than a division and cheaper (a YOLOv8n 1x1 conv+SiLU kernel:
   1017 -> 902 us on Zen 4). Elsewhere the division, which 8-lane vectors do cheaply enough: the
   same kernel built for AVX2 took 1689 us with AVX's 12-bit estimate and a Newton step, 1495
   with the division. */
static inline {V} kiln_vdiv12_{S}({V} n, {V} d) {
#if KILN_AVX512
  {V} r = ({V}){P}_rcp14_ps(({M})d);
  {V} q = n * r;
  return q + r * (n - d * q);
#else
  return n / d;
#endif
}
static inline {V} kiln_vsigmoid_{S}({V} x) {
  {V} e = kiln_vexpneg_{S}(-kiln_vabs_{S}(x));
  return kiln_vdiv12_{S}(kiln_vsel_{S}(x >= 0.0f, ({V}){} + 1.0f, e), 1.0f + e);
}
/* Row `row` of kiln_erf_tab at the interval of each lane (k in 0..7). */
static inline {V} kiln_verf_lut_{S}(int row, {I} k) {
  const float* t = kiln_erf_tab[row];
KILN_LUT_BODY
}
static inline {V} kiln_verf_{S}({V} x) {
  /* |x| in 8 intervals of 0.5 (clamped below 4, where erf rounds to 1): with t = |x| - centre,
     erf = t * s(t) + (t * b + c0), s of degree 6; the first interval (b = 1, c0 = 0, centre 0)
     is |x| + |x| * s(|x|), exact in relative terms near 0. NaN stays NaN (its index is 0). */
  {V} ax = kiln_vabs_{S}(x);
  ax = kiln_vsel_{S}(ax > 3.99999976f, ({V}){} + 3.99999976f, ax);
  {I} k = __builtin_convertvector(ax * 2.0f, {I}) & 7;
  {V} t = ax - kiln_verf_lut_{S}(0, k);
  {V} s = kiln_verf_lut_{S}(9, k);
  s = s * t + kiln_verf_lut_{S}(8, k);
  s = s * t + kiln_verf_lut_{S}(7, k);
  s = s * t + kiln_verf_lut_{S}(6, k);
  s = s * t + kiln_verf_lut_{S}(5, k);
  s = s * t + kiln_verf_lut_{S}(4, k);
  s = s * t + kiln_verf_lut_{S}(3, k);
  {V} base = t * kiln_verf_lut_{S}(2, k) + kiln_verf_lut_{S}(1, k);
  return kiln_vcopysign_{S}(t * s + base, x);
}
"""

_AVX512 = {16: ("defined(__AVX512F__)", "_mm512", "__m512"),
           8: ("defined(__AVX512F__) && defined(__AVX512VL__)", "_mm256", "__m256"),
           4: ("defined(__AVX512F__) && defined(__AVX512VL__)", "_mm", "__m128")}


# Sections between "#if KILN_AVX" and "#endif" use AVX (SSE for 4 lanes) intrinsics ({AP} the
# prefix, {AM} the vector type): min and max.
_AVX = {8: ("defined(__AVX__)", "_mm256", "__m256"), 4: ("defined(__SSE__)", "_mm", "__m128")}

_LUT_LOOP = "  {V} r;\n  for (int j = 0; j < {L}; ++j) r[j] = t[k[j]];\n  return r;"
_LUT_BODIES = {
    16: ("#if defined(__AVX512F__)\n"
         "  return ({V})_mm512_permutexvar_ps((__m512i)k, _mm512_load_ps(t));\n"
         "#elif defined(__GNUC__) && !defined(__clang__)\n"
         "  {V} tv;\n  __builtin_memcpy(&tv, t, sizeof(tv));\n  return __builtin_shuffle(tv, k);\n"
         "#else\n" + _LUT_LOOP + "\n#endif"),
    8: ("#if defined(__AVX2__)\n"
        "  return ({V})_mm256_permutevar8x32_ps(_mm256_load_ps(t), (__m256i)k);\n"
        "#elif defined(__GNUC__) && !defined(__clang__)\n"
        "  {V} tv;\n  __builtin_memcpy(&tv, t, sizeof(tv));\n  return __builtin_shuffle(tv, k);\n"
        "#else\n" + _LUT_LOOP + "\n#endif"),
    4: ("#if defined(__GNUC__) && !defined(__clang__)\n"
        "  {V} lo, hi;\n  __builtin_memcpy(&lo, t, sizeof(lo));\n"
        "  __builtin_memcpy(&hi, t + 4, sizeof(hi));\n  return __builtin_shuffle(lo, hi, k);\n"
        "#else\n" + _LUT_LOOP + "\n#endif"),
}


def vector_math_source(lanes: int) -> str:
    """The float32 vector math functions for vectors of ``lanes`` lanes.

    They need the ``kiln_f32x<lanes>`` and ``kiln_i32x<lanes>`` typedefs, :data:`VECTOR_MATH_TABLES`
    and (for the AVX-512 sections) ``<immintrin.h>`` before them.
    """
    cond, prefix, mtype = _AVX512.get(lanes, ("0", "", ""))
    text = _VECTOR_MATH_TEMPLATE.replace("KILN_LUT_BODY", _LUT_BODIES.get(lanes, _LUT_LOOP))
    avx_cond, avx_prefix, avx_type = _AVX.get(lanes, ("0", "", ""))
    text = text.replace("KILN_AVX512", cond).replace("{P}", prefix).replace("{M}", mtype)
    text = text.replace("KILN_AVX", f"({avx_cond})").replace("{AP}", avx_prefix)
    text = text.replace("{AM}", avx_type)
    return text.replace("{V}", f"kiln_f32x{lanes}").replace("{I}", f"kiln_i32x{lanes}") \
        .replace("{S}", f"f32x{lanes}").replace("{L}", str(lanes))


# Integer dtypes with helper functions in the prelude, by the suffix the helpers use.
_INT_SUFFIX = {
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "u8",
}


def int_helper_names(dtype: str) -> str:
    """The suffix of the prelude's integer helpers for ``dtype`` (``kiln_div_<suffix>``)."""
    return _INT_SUFFIX[dtype]


# --- narrow dtypes (bfloat16, float8, float4, int4/int2; see kiln.codegen.c_narrow) ---------------
_MINIFLOAT = r"""/* Narrow floats <-> float: code bits = sign | exponent (eb) | mantissa (mb). kind 0: IEEE
   (infinities, NaNs with an all-ones exponent), 1: "fn" (no infinity, all-ones code NaN),
   2: "fnuz" (no infinity, no -0, NaN = the sign bit alone), 3: no infinity nor NaN. Encoding
   rounds to nearest even (nearbyint in the default mode); overflow gives infinity (kind 0), NaN
   (1, 2) or the largest finite value (3), like ml_dtypes (which turns NaN into a zero of the
   opposite sign where there is no NaN). */
static inline float kiln_mf_decode(uint32_t code, int eb, int mb, int bias, int kind) {
  const uint32_t sbit = 1u << (eb + mb), emax = (1u << eb) - 1u, mmax = (1u << mb) - 1u;
  const uint32_t e = (code >> mb) & emax, m = code & mmax;
  if (kind == 2 && code == sbit) return -NAN;
  if (kind == 0 && e == emax) return (code & sbit) ? (m ? -NAN : -INFINITY) : (m ? NAN : INFINITY);
  if (kind == 1 && e == emax && m == mmax) return (code & sbit) ? -NAN : NAN;
  const float v = e ? ldexpf((float)(m | (mmax + 1u)), (int)e - bias - mb)
                    : ldexpf((float)m, 1 - bias - mb);
  return (code & sbit) ? -v : v;
}
static inline uint32_t kiln_mf_encode(double x, int eb, int mb, int bias, int kind,
                                      uint32_t maxcode) {
  const uint32_t sbit = 1u << (eb + mb), emax = (1u << eb) - 1u;
  const uint32_t s = signbit(x) ? sbit : 0u;
  const uint32_t qnan = kind == 2 ? sbit : kind == 3 ? (s ^ sbit) : kind == 1 ? (s | (sbit - 1u))
                        : (s | (emax << mb) | (1u << (mb - 1)));
  const uint32_t over = kind == 0 ? (s | (emax << mb)) : kind == 3 ? (s | maxcode) : qnan;
  if (x != x) return qnan;
  const double a = fabs(x);
  if (a > 1.79769313486231570815e308) return over;
  int ex = 0;
  (void)frexp(a, &ex);
  const int emin = 1 - bias;
  int E = a == 0.0 ? emin : ex - 1;
  if (E < emin) E = emin;
  const double code = ldexp((double)(E - emin), mb) + nearbyint(ldexp(a, mb - E));
  if (code > (double)maxcode) return over;
  const uint32_t c = (uint32_t)code;
  return (kind == 2 && c == 0u) ? 0u : (s | c);
}
static inline float kiln_bf16_decode(uint16_t b) {
  union { uint32_t u; float f; } v = { .u = (uint32_t)b << 16 };
  return v.f;
}
static inline uint16_t kiln_bf16_encode(float x) {
  union { float f; uint32_t u; } v = { .f = x };
  if (x != x) return (uint16_t)((v.u >> 16) | 0x40u);
  return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float kiln_bf16_round(float x) { return kiln_bf16_decode(kiln_bf16_encode(x)); }
"""
# short name: (exponent bits, mantissa bits, bias, kind, largest finite code)
_SMALL_FLOATS = {"e4m3fn": (4, 3, 7, 1, 0x7E), "e4m3fnuz": (4, 3, 8, 2, 0x7F),
                 "e5m2": (5, 2, 15, 0, 0x7B), "e5m2fnuz": (5, 2, 16, 2, 0x7F),
                 "e2m1fn": (2, 1, 1, 3, 0x7)}
# short name: (bits, signed)
_SMALL_INTS = {"i4": (4, True), "u4": (4, False), "i2": (2, True), "u2": (2, False)}


def _narrow_prelude() -> str:
    parts = [_MINIFLOAT]
    for short, (eb, mb, bias, kind, maxcode) in _SMALL_FLOATS.items():
        args = f"{eb}, {mb}, {bias}, {kind}"
        parts.append(
            f"static inline float kiln_{short}_decode(uint8_t b) "
            f"{{ return kiln_mf_decode(b, {args}); }}\n"
            f"static inline uint8_t kiln_{short}_encode(float x) "
            f"{{ return (uint8_t)kiln_mf_encode(x, {args}, {maxcode}u); }}\n"
            f"static inline float kiln_{short}_round(float x) "
            f"{{ return kiln_{short}_decode((uint8_t)kiln_mf_encode(x, {args}, {maxcode}u)); }}\n")
    for short, (nbits, signed) in _SMALL_INTS.items():
        mask = (1 << nbits) - 1
        shift = 8 - nbits
        decode = (f"(int32_t)((int8_t)(uint8_t)(b << {shift}) >> {shift})" if signed
                  else f"(int32_t)(b & {mask}u)")
        parts.append(
            f"static inline int32_t kiln_{short}_decode(uint8_t b) {{ return {decode}; }}\n"
            f"static inline uint8_t kiln_{short}_encode(int32_t v) "
            f"{{ return (uint8_t)((uint32_t)v & {mask}u); }}\n"
            f"static inline int32_t kiln_{short}_round(int32_t v) "
            f"{{ return kiln_{short}_decode(kiln_{short}_encode(v)); }}\n")
    return "".join(parts)


# Conversions between the narrow dtypes' storage and float32 / int32 (after SCALAR_PRELUDE).
NARROW_PRELUDE = _narrow_prelude()
