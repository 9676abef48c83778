/* Kiln kernel fused_conv2d_add_relu
 * fused ops: nn.conv2d, add, nn.relu
 * source nodes: Conv_0, Relu_1
 * args[0] input  p0: float32[1x8x14x14]
 * args[1] input  p1: float32[16x8x3x3]
 * args[2] input  p2: float32[16]
 * args[3] output T_relu: float32[1x16x14x14]
 */
int32_t fused_conv2d_add_relu(void** args) {
  const float* restrict p0 = (const float*)args[0];
  const float* restrict p1 = (const float*)args[1];
  const float* restrict p2 = (const float*)args[2];
  float* restrict T_relu = (float*)args[3];
  {
    float T_pad[2048] __attribute__((aligned(64)));  /* global buffer, 8192 bytes */
    {
      float T_conv2d[3136] __attribute__((aligned(64)));  /* global buffer, 12544 bytes */
      for (int32_t n_c_fused_y_fused_x_o_fused = 0; n_c_fused_y_fused_x_o_fused < 256; ++n_c_fused_y_fused_x_o_fused) {
        #pragma omp simd
        for (int32_t x_i_1 = 0; x_i_1 < 8; ++x_i_1) {
          T_pad[(((((n_c_fused_y_fused_x_o_fused / 32) * 256) + (((n_c_fused_y_fused_x_o_fused / 2) % 16) * 16)) + ((n_c_fused_y_fused_x_o_fused % 2) * 8)) + x_i_1)] = (((((((n_c_fused_y_fused_x_o_fused / 2) % 16) >= 1) && (((n_c_fused_y_fused_x_o_fused / 2) % 16) < 15)) && ((((n_c_fused_y_fused_x_o_fused % 2) * 8) + x_i_1) >= 1)) && ((((n_c_fused_y_fused_x_o_fused % 2) * 8) + x_i_1) < 15)) ? p0[((((((n_c_fused_y_fused_x_o_fused / 32) * 196) + (((n_c_fused_y_fused_x_o_fused / 2) % 16) * 14)) + ((n_c_fused_y_fused_x_o_fused % 2) * 8)) + x_i_1) - 15)] : 0.0f);
        }
      }
      #pragma omp parallel for num_threads(kiln_threads()) schedule(static)
      for (int32_t n_o_fused_y_fused_x_o_fused = 0; n_o_fused_y_fused_x_o_fused < 448; ++n_o_fused_y_fused_x_o_fused) {
        {  /* x_i: 8 lanes */
          if (((((n_o_fused_y_fused_x_o_fused % 2) * 8) + 7) < 14)) {
            *(kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))] = (0.0f - (kiln_f32x8){});
          } else {
            for (int32_t x_i = 0; x_i < 8; ++x_i) {
              if ((((n_o_fused_y_fused_x_o_fused % 2) * 8) + x_i) < 14) {
                T_conv2d[(((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + x_i)] = 0.0f;
              }
            }
          }
        }
        for (int32_t rc = 0; rc < 8; ++rc) {
          for (int32_t ry = 0; ry < 3; ++ry) {
            for (int32_t rx = 0; rx < 3; ++rx) {
              {  /* x_i: 8 lanes */
                if (((((n_o_fused_y_fused_x_o_fused % 2) * 8) + 7) < 14)) {
                  kiln_f32x8 v = *(const kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))];
                  kiln_f32x8 v1 = *(const kiln_f32x8u*)&T_pad[(((((rc * 256) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 16)) + (ry * 16)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + rx)];
                  kiln_f32x8 v2 = v1 * (p1[(((((n_o_fused_y_fused_x_o_fused / 28) * 72) + (rc * 9)) + (ry * 3)) + rx)] - (kiln_f32x8){});
                  kiln_f32x8 v3 = v + v2;
                  *(kiln_f32x8u*)&T_conv2d[((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8))] = v3;
                } else {
                  for (int32_t x_i = 0; x_i < 8; ++x_i) {
                    if ((((n_o_fused_y_fused_x_o_fused % 2) * 8) + x_i) < 14) {
                      T_conv2d[(((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + x_i)] = (T_conv2d[(((((n_o_fused_y_fused_x_o_fused / 28) * 196) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 14)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + x_i)] + (T_pad[((((((rc * 256) + (((n_o_fused_y_fused_x_o_fused / 2) % 14) * 16)) + (ry * 16)) + ((n_o_fused_y_fused_x_o_fused % 2) * 8)) + x_i) + rx)] * p1[(((((n_o_fused_y_fused_x_o_fused / 28) * 72) + (rc * 9)) + (ry * 3)) + rx)]));
                    }
                  }
                }
              }
            }
          }
        }
      }
      for (int32_t n_o_fused_y_x_fused_o_fused = 0; n_o_fused_y_x_fused_o_fused < 400; ++n_o_fused_y_x_fused_o_fused) {
        {  /* y_x_fused_i: 8 lanes */
          if (((((n_o_fused_y_x_fused_o_fused % 25) * 8) + 7) < 196)) {
            kiln_f32x8 v4 = *(const kiln_f32x8u*)&T_conv2d[(((n_o_fused_y_x_fused_o_fused / 25) * 196) + ((n_o_fused_y_x_fused_o_fused % 25) * 8))];
            kiln_f32x8 v5 = v4 + (p2[(n_o_fused_y_x_fused_o_fused / 25)] - (kiln_f32x8){});
            kiln_i32x8 v6 = ((0.0f - (kiln_f32x8){}) > v5);
            kiln_f32x8 v7 = (kiln_f32x8)(((kiln_i32x8)(0.0f - (kiln_f32x8){}) & v6) | ((kiln_i32x8)v5 & ~v6));
            *(kiln_f32x8u*)&T_relu[(((n_o_fused_y_x_fused_o_fused / 25) * 196) + ((n_o_fused_y_x_fused_o_fused % 25) * 8))] = v7;
          } else {
            for (int32_t y_x_fused_i = 0; y_x_fused_i < 8; ++y_x_fused_i) {
              if ((((n_o_fused_y_x_fused_o_fused % 25) * 8) + y_x_fused_i) < 196) {
                T_relu[((((n_o_fused_y_x_fused_o_fused / 25) * 196) + ((n_o_fused_y_x_fused_o_fused % 25) * 8)) + y_x_fused_i)] = kiln_maxf((T_conv2d[((((n_o_fused_y_x_fused_o_fused / 25) * 196) + ((n_o_fused_y_x_fused_o_fused % 25) * 8)) + y_x_fused_i)] + p2[(n_o_fused_y_x_fused_o_fused / 25)]), 0.0f);
              }
            }
          }
        }
      }
    }
  }
  return 0;
}
