/* Kiln kernel fused_conv2d_add_relu
 * fused ops: nn.conv2d, add, nn.relu
 * source nodes: Conv_0, Relu_1
 * args[0] input  p0: float32[1x8x14x14]
 * args[1] input  p1: float32[16x8x3x3]
 * args[2] input  p2: float32[16]
 * args[3] output T_relu: float32[1x16x14x14]
 */
typedef struct {
  const float* restrict p1;
  float* restrict T_pad;
  float* restrict T_conv2d;
} fused_conv2d_add_relu__par0_ctx;

static void fused_conv2d_add_relu__par0(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {
  const fused_conv2d_add_relu__par0_ctx* restrict kiln_c = (const fused_conv2d_add_relu__par0_ctx*)kiln_ctx;
  const float* restrict p1 = kiln_c->p1;
  float* restrict T_pad = kiln_c->T_pad;
  float* restrict T_conv2d = kiln_c->T_conv2d;
  for (int32_t n_o_fused_y_fused_x_o_fused = (int32_t)kiln_begin; n_o_fused_y_fused_x_o_fused < (int32_t)kiln_end; ++n_o_fused_y_fused_x_o_fused) {
    {  /* x_i: 8 lanes */
      if (((((n_o_fused_y_fused_x_o_fused % 2) * 8) + 7) < 14)) {
        *(kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))] = KILN_SPLAT(kiln_f32x8, 0.0f);
      } else {
        kiln_i32x8 v1 = (kiln_i32x8){0, 1, 2, 3, 4, 5, 6, 7};
        kiln_i32x8 v2 = (kiln_i32x8)((kiln_u32x8)KILN_SPLAT(kiln_i32x8, ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + (kiln_u32x8)v1);
        kiln_i32x8 v3 = v2 < KILN_SPLAT(kiln_i32x8, 14);
        kiln_mstore_f32x8(&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))], v3, KILN_SPLAT(kiln_f32x8, 0.0f));
      }
    }
    for (int32_t rc = 0; rc < 8; ++rc) {
      for (int32_t ry = 0; ry < 3; ++ry) {
        if (((((n_o_fused_y_fused_x_o_fused / 2) % 14) + ry) >= 1) && ((((n_o_fused_y_fused_x_o_fused / 2) % 14) + ry) < 15)) {
          for (int32_t rx = 0; rx < 3; ++rx) {
            {  /* x_i: 8 lanes */
              if (((((n_o_fused_y_fused_x_o_fused % 2) * 8) + 7) < 14)) {
                kiln_f32x8 v4 = *(const kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))];
                kiln_f32x8 v5 = *(const kiln_f32x8u*)&T_pad[(((((rc * 256) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 16)) + (ry * 16)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + rx)];
                kiln_f32x8 v6 = v5 * KILN_SPLAT(kiln_f32x8, p1[(((((n_o_fused_y_fused_x_o_fused / 28) * 72) + (rc * 9)) + (ry * 3)) + rx)]);
                kiln_f32x8 v7 = v4 + v6;
                *(kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))] = v7;
              } else {
                kiln_i32x8 v8 = (kiln_i32x8){0, 1, 2, 3, 4, 5, 6, 7};
                kiln_i32x8 v9 = (kiln_i32x8)((kiln_u32x8)KILN_SPLAT(kiln_i32x8, ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + (kiln_u32x8)v8);
                kiln_i32x8 v10 = v9 < KILN_SPLAT(kiln_i32x8, 14);
                int32_t any = 0;
                for (int k = 0; k < 8; ++k) any |= (v10[k] != 0);
                if (any) {
                  kiln_f32x8 v11 = kiln_mload_f32x8(&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))], v10);
                  kiln_f32x8 v12 = kiln_mload_f32x8(&T_pad[(((((rc * 256) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 16)) + (ry * 16)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + rx)], v10);
                  kiln_f32x8 v13 = v12 * KILN_SPLAT(kiln_f32x8, p1[(((((n_o_fused_y_fused_x_o_fused / 28) * 72) + (rc * 9)) + (ry * 3)) + rx)]);
                  kiln_f32x8 v14 = v11 + v13;
                  kiln_mstore_f32x8(&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))], v10, v14);
                }
              }
            }
          }
        }
      }
    }
  }
}

int32_t fused_conv2d_add_relu(void** args) {
  const float* restrict p0 = (const float*)args[0];
  const float* restrict p1 = (const float*)args[1];
  const float* restrict p2 = (const float*)args[2];
  float* restrict T_relu = (float*)args[3];
  {
    float T_pad[2048] __attribute__((aligned(64)));  /* global buffer, 8192 bytes */
    {
      float T_conv2d[3136] __attribute__((aligned(64)));  /* global buffer, 12544 bytes */
      for (int32_t c = 0; c < 8; ++c) {
        for (int32_t y = 0; y < 16; ++y) {
          for (int32_t x_o = 0; x_o < 2; ++x_o) {
            if ((((y >= 1) && (y < 15)) && ((x_o * 8) >= 1)) && (((y >= 1) && (y < 15)) && (((x_o * 8) + 7) < 15))) {  /* x_i_1: 8 lanes where the condition holds on all */
              kiln_f32x8 v = *(const kiln_f32x8u*)&p0[((((c * 196) + (y * 14)) + (x_o * 8)) - 15)];
              *(kiln_f32x8u*)&T_pad[(((c * 256) + (y * 16)) + (x_o * 8))] = v;
            } else {
              #pragma omp simd
              for (int32_t x_i_1 = 0; x_i_1 < 8; ++x_i_1) {
                T_pad[((((c * 256) + (y * 16)) + (x_o * 8)) + x_i_1)] = (((((y >= 1) && (y < 15)) && (((x_o * 8) + x_i_1) >= 1)) && (((x_o * 8) + x_i_1) < 15)) ? p0[(((((c * 196) + (y * 14)) + (x_o * 8)) + x_i_1) - 15)] : 0.0f);
              }
            }
          }
        }
      }
      {
        fused_conv2d_add_relu__par0_ctx kiln_ctx1 = {p1, T_pad, T_conv2d};
        kiln_parallel_for(fused_conv2d_add_relu__par0, &kiln_ctx1, 448);
      }
      for (int32_t o = 0; o < 16; ++o) {
        for (int32_t y_x_fused_o = 0; y_x_fused_o < 25; ++y_x_fused_o) {
          {  /* y_x_fused_i: 8 lanes */
            if ((((y_x_fused_o * 8) + 7) < 196)) {
              kiln_f32x8 v15 = *(const kiln_f32x8u*)&T_conv2d[((o * 196) + (y_x_fused_o * 8))];
              kiln_f32x8 v16 = v15 + KILN_SPLAT(kiln_f32x8, p2[o]);
              kiln_i32x8 v17 = (KILN_SPLAT(kiln_f32x8, 0.0f) > v16);
              kiln_f32x8 v18 = KILN_SELECT(kiln_f32x8, kiln_i32x8, v17, KILN_SPLAT(kiln_f32x8, 0.0f), v16);
              *(kiln_f32x8u*)&T_relu[((o * 196) + (y_x_fused_o * 8))] = v18;
            } else {
              kiln_i32x8 v19 = (kiln_i32x8){0, 1, 2, 3, 4, 5, 6, 7};
              kiln_i32x8 v20 = (kiln_i32x8)((kiln_u32x8)KILN_SPLAT(kiln_i32x8, (y_x_fused_o * 8)) + (kiln_u32x8)v19);
              kiln_i32x8 v21 = v20 < KILN_SPLAT(kiln_i32x8, 196);
              int32_t any1 = 0;
              for (int k = 0; k < 8; ++k) any1 |= (v21[k] != 0);
              if (any1) {
                kiln_f32x8 v22 = kiln_mload_f32x8(&T_conv2d[((o * 196) + (y_x_fused_o * 8))], v21);
                kiln_f32x8 v23 = v22 + KILN_SPLAT(kiln_f32x8, p2[o]);
                kiln_i32x8 v24 = (KILN_SPLAT(kiln_f32x8, 0.0f) > v23);
                kiln_f32x8 v25 = KILN_SELECT(kiln_f32x8, kiln_i32x8, v24, KILN_SPLAT(kiln_f32x8, 0.0f), v23);
                kiln_mstore_f32x8(&T_relu[((o * 196) + (y_x_fused_o * 8))], v21, v25);
              }
            }
          }
        }
      }
    }
  }
  return 0;
}
