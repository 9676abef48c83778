/* Kiln kernel fused_add_exp_multiply
 * fused ops: add, exp, multiply
 * args[0] input  p0: float32[64x1024]
 * args[1] input  p1: float32[1024]
 * args[2] output T_multiply: float32[64x1024]
 */
typedef struct {
  const float* restrict p0;
  const float* restrict p1;
  float* restrict T_multiply;
} fused_add_exp_multiply__par0_ctx;

static void fused_add_exp_multiply__par0(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {
  const fused_add_exp_multiply__par0_ctx* restrict kiln_c = (const fused_add_exp_multiply__par0_ctx*)kiln_ctx;
  const float* restrict p0 = kiln_c->p0;
  const float* restrict p1 = kiln_c->p1;
  float* restrict T_multiply = kiln_c->T_multiply;
  for (int32_t ax0 = (int32_t)kiln_begin; ax0 < (int32_t)kiln_end; ++ax0) {
    for (int32_t ax1_o = 0; ax1_o < 128; ++ax1_o) {
      {  /* ax1_i: 8 lanes */
        kiln_f32x8 v = *(const kiln_f32x8u*)&p0[((ax0 * 1024) + (ax1_o * 8))];
        kiln_f32x8 v1 = *(const kiln_f32x8u*)&p1[(ax1_o * 8)];
        kiln_f32x8 v2 = v + v1;
        kiln_f32x8 v3 = kiln_vexp_f32x8(v2);
        kiln_f32x8 v4 = v3 * KILN_SPLAT(kiln_f32x8, 2.0f);
        *(kiln_f32x8u*)&T_multiply[((ax0 * 1024) + (ax1_o * 8))] = v4;
      }
    }
  }
}

int32_t fused_add_exp_multiply(void** args) {
  const float* restrict p0 = (const float*)args[0];
  const float* restrict p1 = (const float*)args[1];
  float* restrict T_multiply = (float*)args[2];
  {
    fused_add_exp_multiply__par0_ctx kiln_ctx1 = {p0, p1, T_multiply};
    kiln_parallel_for(fused_add_exp_multiply__par0, &kiln_ctx1, 64);
  }
  return 0;
}
