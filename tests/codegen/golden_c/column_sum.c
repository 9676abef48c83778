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
        *(kiln_f32x8u*)&T_sum_sq[(j_o * 8)] = KILN_SPLAT(kiln_f32x8, 0.0f);
      } else {
        kiln_i32x8 v = (kiln_i32x8){0, 1, 2, 3, 4, 5, 6, 7};
        kiln_i32x8 v1 = (kiln_i32x8)((kiln_u32x8)KILN_SPLAT(kiln_i32x8, (j_o * 8)) + (kiln_u32x8)v);
        kiln_i32x8 v2 = v1 < KILN_SPLAT(kiln_i32x8, 100);
        kiln_mstore_f32x8(&T_sum_sq[(j_o * 8)], v2, KILN_SPLAT(kiln_f32x8, 0.0f));
      }
    }
    for (int32_t k = 0; k < 37; ++k) {
      {  /* j_i: 8 lanes */
        if ((((j_o * 8) + 7) < 100)) {
          kiln_f32x8 v3 = *(const kiln_f32x8u*)&T_sum_sq[(j_o * 8)];
          kiln_f32x8 v4 = *(const kiln_f32x8u*)&p0[((k * 100) + (j_o * 8))];
          kiln_f32x8 v5 = v4 * v4;
          kiln_f32x8 v6 = v3 + v5;
          *(kiln_f32x8u*)&T_sum_sq[(j_o * 8)] = v6;
        } else {
          kiln_i32x8 v7 = (kiln_i32x8){0, 1, 2, 3, 4, 5, 6, 7};
          kiln_i32x8 v8 = (kiln_i32x8)((kiln_u32x8)KILN_SPLAT(kiln_i32x8, (j_o * 8)) + (kiln_u32x8)v7);
          kiln_i32x8 v9 = v8 < KILN_SPLAT(kiln_i32x8, 100);
          kiln_f32x8 v10 = kiln_mload_f32x8(&T_sum_sq[(j_o * 8)], v9);
          kiln_f32x8 v11 = kiln_mload_f32x8(&p0[((k * 100) + (j_o * 8))], v9);
          kiln_f32x8 v12 = v11 * v11;
          kiln_f32x8 v13 = v10 + v12;
          kiln_mstore_f32x8(&T_sum_sq[(j_o * 8)], v9, v13);
        }
      }
    }
  }
  return 0;
}
