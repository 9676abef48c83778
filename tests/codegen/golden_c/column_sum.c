/* Kiln kernel fused_square_sum
 * fused ops: multiply, sum
 * source nodes: Square, Sum
 * args[0] input  p0: float32[37x100]
 * args[1] output T_sum_sq: float32[100]
 */
int32_t fused_square_sum(void** args) {
  const float* restrict p0 = (const float*)args[0];
  float* restrict T_sum_sq = (float*)args[1];
  for (int32_t j_o = 0; j_o < 13; ++j_o) {
    {  /* j_i: 8 lanes */
      if ((((j_o * 8) + 7) < 100)) {
        *(kiln_f32x8u*)&T_sum_sq[(j_o * 8)] = (0.0f - (kiln_f32x8){});
      } else {
        for (int32_t j_i = 0; j_i < 8; ++j_i) {
          if (((j_o * 8) + j_i) < 100) {
            T_sum_sq[((j_o * 8) + j_i)] = 0.0f;
          }
        }
      }
    }
    for (int32_t k = 0; k < 37; ++k) {
      {  /* j_i: 8 lanes */
        if ((((j_o * 8) + 7) < 100)) {
          kiln_f32x8 v = *(const kiln_f32x8u*)&T_sum_sq[(j_o * 8)];
          kiln_f32x8 v1 = *(const kiln_f32x8u*)&p0[((k * 100) + (j_o * 8))];
          kiln_f32x8 v2 = v1 * v1;
          kiln_f32x8 v3 = v + v2;
          *(kiln_f32x8u*)&T_sum_sq[(j_o * 8)] = v3;
        } else {
          for (int32_t j_i = 0; j_i < 8; ++j_i) {
            if (((j_o * 8) + j_i) < 100) {
              T_sum_sq[((j_o * 8) + j_i)] = (T_sum_sq[((j_o * 8) + j_i)] + (p0[(((k * 100) + (j_o * 8)) + j_i)] * p0[(((k * 100) + (j_o * 8)) + j_i)]));
            }
          }
        }
      }
    }
  }
  return 0;
}
