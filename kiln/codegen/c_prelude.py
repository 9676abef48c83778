"""Fixed C text shared by every generated kernel: helpers with NumPy's semantics and vector math.

The scalar helpers give the results NumPy (the reference) gives where C leaves behaviour
undefined or differs: integer division and remainder by zero are 0, ``INT_MIN / -1`` wraps,
shifts by the bit width or more saturate, float-to-int conversion of NaN or infinity is 0,
``max``/``min`` of floats propagate NaN, float floor division and modulo follow NumPy's
``divmod``.

The vector math functions (:data:`VECTOR_MATH_TEMPLATE`, float32 only) are polynomial
approximations written with GCC vector extensions so that vector loops stay vectorized without
``-ffast-math``. Their coefficients were fitted (iteratively reweighted least squares towards
minimax, in float64) for this file. Measured maximum errors against float64 over dense samples
of the float32 range (see ``tests/codegen/test_c_codegen.py``) are:

==========  ===========================================  =========
function    method                                       max error
==========  ===========================================  =========
exp         Cody-Waite reduction, degree-6 polynomial,   1.03 ulp
            scaling by 2^k in two steps (subnormals ok)
tanh        odd polynomial below 0.55, else              1.4 ulp
            1 - 2 / (exp(2|x|) + 1)
sigmoid     e = exp(-|x|), then 1 / (1 + e) or           2.0 ulp
            e / (1 + e) (one division)
erf         x + x * P(x^2) below 1, else                 1.0 ulp
            1 - exp(-x^2) * P(1/x), 1 from 4 on
==========  ===========================================  =========

All return NaN for NaN and the correctly rounded limits for infinities; exp overflows to
infinity above 88.72283 and underflows to 0 below -103.97208.
"""

from __future__ import annotations

__all__ = ["SCALAR_PRELUDE", "VECTOR_MATH_TEMPLATE", "int_helper_names"]

SCALAR_PRELUDE = r"""#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Integer division and remainder with NumPy's results: 0 for a zero divisor, wrap-around for
   MIN / -1. kiln_div/kiln_mod truncate (C), kiln_floordiv/kiln_floormod round down (Python). */
#define KILN_SIGNED_INT_OPS(T, U, N, BITS)                                                   \
  static inline T kiln_div_##N(T a, T b) {                                                   \
    if (b == 0) return 0;                                                                    \
    if (b == -1) return (T)(0 - (U)a);                                                       \
    return (T)(a / b);                                                                       \
  }                                                                                          \
  static inline T kiln_mod_##N(T a, T b) {                                                   \
    if (b == 0 || b == -1) return 0;                                                         \
    return (T)(a % b);                                                                       \
  }                                                                                          \
  static inline T kiln_floordiv_##N(T a, T b) {                                              \
    if (b == 0) return 0;                                                                    \
    if (b == -1) return (T)(0 - (U)a);                                                       \
    T q = (T)(a / b);                                                                        \
    if ((T)(a % b) != 0 && ((a < 0) != (b < 0))) q = (T)(q - 1);                             \
    return q;                                                                                \
  }                                                                                          \
  static inline T kiln_floormod_##N(T a, T b) {                                              \
    if (b == 0 || b == -1) return 0;                                                         \
    T r = (T)(a % b);                                                                        \
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);                                      \
    return r;                                                                                \
  }                                                                                          \
  static inline T kiln_shl_##N(T a, T b) {                                                   \
    return (b < 0 || b >= BITS) ? (T)0 : (T)((U)a << b);                                     \
  }                                                                                          \
  static inline T kiln_shr_##N(T a, T b) {                                                   \
    return (b < 0 || b >= BITS) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b);                         \
  }

#define KILN_UNSIGNED_INT_OPS(T, N, BITS)                                                    \
  static inline T kiln_div_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }              \
  static inline T kiln_mod_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }              \
  static inline T kiln_floordiv_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }         \
  static inline T kiln_floormod_##N(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }         \
  static inline T kiln_shl_##N(T a, T b) { return b >= BITS ? (T)0 : (T)(a << b); }          \
  static inline T kiln_shr_##N(T a, T b) { return b >= BITS ? (T)0 : (T)(a >> b); }

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
static inline int32_t kiln_f2i32(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  return (x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : INT32_MIN;
}
static inline int64_t kiln_f2i64(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (int64_t)x : INT64_MIN;
}
static inline uint64_t kiln_f2u64(double x) {
  if (!(x == x && x - x == 0.0)) return 0;
  if (x >= 9223372036854775808.0 && x < 18446744073709551616.0) return (uint64_t)x;
  return (uint64_t)kiln_f2i64(x);
}

/* max / min of floats propagate NaN like numpy.maximum / numpy.minimum. */
static inline float kiln_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float kiln_minf(float a, float b) { return (a < b || a != a) ? a : b; }
static inline double kiln_maxd(double a, double b) { return (a > b || a != a) ? a : b; }
static inline double kiln_mind(double a, double b) { return (a < b || a != a) ? a : b; }

/* NumPy's float floor division and modulo (npy_divmod). */
static inline double kiln_floordivd(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return a / b;
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) div -= 1.0;
  if (div == 0.0) return copysign(0.0, a / b);
  double fl = floor(div);
  return (div - fl > 0.5) ? fl + 1.0 : fl;
}
static inline double kiln_floormodd(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return mod;
  if (mod != 0.0) {
    if ((b < 0.0) != (mod < 0.0)) mod += b;
    return mod;
  }
  return copysign(0.0, b);
}
static inline float kiln_floordivf(float a, float b) { return (float)kiln_floordivd(a, b); }
static inline float kiln_floormodf(float a, float b) {
  float mod = fmodf(a, b);
  if (b == 0.0f) return mod;
  if (mod != 0.0f) {
    if ((b < 0.0f) != (mod < 0.0f)) mod += b;
    return mod;
  }
  return copysignf(0.0f, b);
}

/* Logistic function without overflow for large |x|. */
static inline float kiln_sigmoidf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}
static inline double kiln_sigmoidd(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

/* Thread count used by every parallel loop (0: the OpenMP default). */
extern int32_t kiln__num_threads;
static inline int kiln_threads(void) {
#ifdef _OPENMP
  return kiln__num_threads > 0 ? kiln__num_threads : omp_get_max_threads();
#else
  return 1;
#endif
}
"""

# float32 vector math for one vector width; {V} float vector type, {I} int32 vector type,
# {S} the suffix naming the width (e.g. f32x8). Masks are {I} values (-1 true, 0 false).
VECTOR_MATH_TEMPLATE = r"""
static inline {V} kiln_vsel_{S}({I} m, {V} a, {V} b) {
  return ({V})((({I})a & m) | (({I})b & ~m));
}
static inline {V} kiln_vabs_{S}({V} x) { return ({V})(({I})x & 0x7fffffff); }
static inline {V} kiln_vcopysign_{S}({V} mag, {V} sgn) {
  return ({V})((({I})mag & 0x7fffffff) | (({I})sgn & (int32_t)0x80000000));
}
static inline {V} kiln_vexp_{S}({V} x) {
  /* Clamped to [-104, 88.73] the result still underflows to 0 / overflows to inf by itself;
     NaN passes the clamp and stays NaN. */
  const {V} hi = ({V}){} + 88.73f, lo = ({V}){} - 104.0f;
  {V} xc = kiln_vsel_{S}(x > hi, hi, kiln_vsel_{S}(x < lo, lo, x));
  {V} n = (xc * 1.44269502f + 12582912.0f) - 12582912.0f;
  {V} r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  {V} p = ({V}){} + 0.001390127f;
  p = p * r + 0.00836314075f;
  p = p * r + 0.0416668542f;
  p = p * r + 0.166665778f;
  p = p * r + 0.5f;
  p = (p * r) * r + r + 1.0f;
  {I} k = __builtin_convertvector(n, {I});
  {I} k1 = k >> 1, k2 = k - k1;
  p = p * ({V})((k1 + 127) << 23);
  return p * ({V})((k2 + 127) << 23);
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
static inline {V} kiln_vsigmoid_{S}({V} x) {
  {V} e = kiln_vexp_{S}(-kiln_vabs_{S}(x));
  return kiln_vsel_{S}(x >= 0.0f, ({V}){} + 1.0f, e) / (1.0f + e);
}
static inline {V} kiln_verf_{S}({V} x) {
  {V} ax = kiln_vabs_{S}(x);
  {V} x2 = x * x;
  {V} p = ({V}){} - 9.76361662e-06f;
  p = p * x2 + 0.000112933762f;
  p = p * x2 - 0.000848679454f;
  p = p * x2 + 0.00522112846f;
  p = p * x2 - 0.0268654265f;
  p = p * x2 + 0.112837814f;
  p = p * x2 - 0.376126379f;
  p = p * x2 + 0.128379166f;
  {V} small = x + x * p;
  {V} u = 1.0f / kiln_vsel_{S}(ax < 0.5f, ({V}){} + 1.0f, ax);
  {V} g = ({V}){} + 0.0307113044f;
  g = g * u - 0.17969808f;
  g = g * u + 0.438205004f;
  g = g * u - 0.536900759f;
  g = g * u + 0.238293201f;
  g = g * u + 0.230417505f;
  g = g * u - 0.375871032f;
  g = g * u + 0.0205375962f;
  g = g * u + 0.561767757f;
  g = g * u + 0.00012108995f;
  {V} big = 1.0f - kiln_vexp_{S}(-(ax * ax)) * g;
  big = kiln_vsel_{S}(ax >= 4.0f, ({V}){} + 1.0f, big);
  big = kiln_vcopysign_{S}(big, x);
  return kiln_vsel_{S}(ax < 1.0f, small, big);
}
"""

# Integer dtypes with helper functions in the prelude, by the suffix the helpers use.
_INT_SUFFIX = {
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "u8",
}


def int_helper_names(dtype: str) -> str:
    """The suffix of the prelude's integer helpers for ``dtype`` (``kiln_div_<suffix>``)."""
    return _INT_SUFFIX[dtype]
