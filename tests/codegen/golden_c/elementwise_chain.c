/* Kiln kernel fused_add_exp_multiply
 * fused ops: add, exp, multiply
 * args[0] input  p0: float32[64x1024]
 * args[1] input  p1: float32[1024]
 * args[2] output T_multiply: float32[64x1024]
 */
int32_t fused_add_exp_multiply(void** args) {
  const float* restrict p0 = (const float*)args[0];
  const float* restrict p1 = (const float*)args[1];
  float* restrict T_multiply = (float*)args[2];
  #pragma omp parallel for num_threads(kiln_threads()) schedule(static)
  for (int32_t i0_i1_o_fused = 0; i0_i1_o_fused < 8192; ++i0_i1_o_fused) {
    {  /* i1_i: 8 lanes */
      kiln_f32x8 v = *(const kiln_f32x8u*)&p0[(i0_i1_o_fused * 8)];
      kiln_f32x8 v1 = *(const kiln_f32x8u*)&p1[((i0_i1_o_fused % 128) * 8)];
      kiln_f32x8 v2 = v + v1;
      kiln_f32x8 v3 = kiln_vexp_f32x8(v2);
      kiln_f32x8 v4 = v3 * (2.0f - (kiln_f32x8){});
      *(kiln_f32x8u*)&T_multiply[(i0_i1_o_fused * 8)] = v4;
    }
  }
  return 0;
}
