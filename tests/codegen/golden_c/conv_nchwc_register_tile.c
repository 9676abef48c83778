/* Kiln kernel fused_conv2d_NCHWc_add_relu
 * fused ops: nn.contrib_conv2d_NCHWc, add, nn.relu
 * args[0] input  p0: float32[1x1x8x8x16]
 * args[1] input  p1: float32[2x1x3x3x16x16]
 * args[2] input  p2: float32[1x2x1x1x16]
 * args[3] output T_relu: float32[1x2x8x8x16]
 */
typedef struct {
  const float* restrict p1;
  const float* restrict p2;
  float* restrict T_relu;
  float* restrict data_pad;
} fused_conv2d_NCHWc_add_relu__par0_ctx;

static void fused_conv2d_NCHWc_add_relu__par0(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {
  const fused_conv2d_NCHWc_add_relu__par0_ctx* restrict kiln_c = (const fused_conv2d_NCHWc_add_relu__par0_ctx*)kiln_ctx;
  const float* restrict p1 = kiln_c->p1;
  const float* restrict p2 = kiln_c->p2;
  float* restrict T_relu = kiln_c->T_relu;
  float* restrict data_pad = kiln_c->data_pad;
  for (int32_t ax0_ax2_o_fused_ax1_o_fused = (int32_t)kiln_begin; ax0_ax2_o_fused_ax1_o_fused < (int32_t)kiln_end; ++ax0_ax2_o_fused_ax1_o_fused) {
    {
      /* local buffer conv2d_NCHWc_local in 16 vector variables */
      kiln_f32x16 conv2d_NCHWc_local_0, conv2d_NCHWc_local_1, conv2d_NCHWc_local_2, conv2d_NCHWc_local_3, conv2d_NCHWc_local_4, conv2d_NCHWc_local_5, conv2d_NCHWc_local_6, conv2d_NCHWc_local_7;
      kiln_f32x16 conv2d_NCHWc_local_8, conv2d_NCHWc_local_9, conv2d_NCHWc_local_10, conv2d_NCHWc_local_11, conv2d_NCHWc_local_12, conv2d_NCHWc_local_13, conv2d_NCHWc_local_14, conv2d_NCHWc_local_15;
      conv2d_NCHWc_local_0 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_8 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_1 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_9 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_2 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_10 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_3 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_11 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_4 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_12 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_5 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_13 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_6 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_14 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_7 = KILN_SPLAT(kiln_f32x16, 0.0f);
      conv2d_NCHWc_local_15 = KILN_SPLAT(kiln_f32x16, 0.0f);
      for (int32_t kh = 0; kh < 3; ++kh) {
        if (((ax0_ax2_o_fused_ax1_o_fused + kh) >= 1) && ((ax0_ax2_o_fused_ax1_o_fused + kh) < 9)) {
          for (int32_t kw = 0; kw < 3; ++kw) {
            for (int32_t ic_i = 0; ic_i < 16; ++ic_i) {
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v2 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v3 = KILN_SPLAT(kiln_f32x16, data_pad[((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i)]) * v2;
                kiln_f32x16 v4 = conv2d_NCHWc_local_0 + v3;
                conv2d_NCHWc_local_0 = v4;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v5 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v6 = KILN_SPLAT(kiln_f32x16, data_pad[((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i)]) * v5;
                kiln_f32x16 v7 = conv2d_NCHWc_local_8 + v6;
                conv2d_NCHWc_local_8 = v7;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v8 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v9 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 16)]) * v8;
                kiln_f32x16 v10 = conv2d_NCHWc_local_1 + v9;
                conv2d_NCHWc_local_1 = v10;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v11 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v12 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 16)]) * v11;
                kiln_f32x16 v13 = conv2d_NCHWc_local_9 + v12;
                conv2d_NCHWc_local_9 = v13;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v14 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v15 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 32)]) * v14;
                kiln_f32x16 v16 = conv2d_NCHWc_local_2 + v15;
                conv2d_NCHWc_local_2 = v16;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v17 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v18 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 32)]) * v17;
                kiln_f32x16 v19 = conv2d_NCHWc_local_10 + v18;
                conv2d_NCHWc_local_10 = v19;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v20 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v21 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 48)]) * v20;
                kiln_f32x16 v22 = conv2d_NCHWc_local_3 + v21;
                conv2d_NCHWc_local_3 = v22;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v23 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v24 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 48)]) * v23;
                kiln_f32x16 v25 = conv2d_NCHWc_local_11 + v24;
                conv2d_NCHWc_local_11 = v25;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v26 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v27 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 64)]) * v26;
                kiln_f32x16 v28 = conv2d_NCHWc_local_4 + v27;
                conv2d_NCHWc_local_4 = v28;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v29 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v30 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 64)]) * v29;
                kiln_f32x16 v31 = conv2d_NCHWc_local_12 + v30;
                conv2d_NCHWc_local_12 = v31;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v32 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v33 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 80)]) * v32;
                kiln_f32x16 v34 = conv2d_NCHWc_local_5 + v33;
                conv2d_NCHWc_local_5 = v34;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v35 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v36 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 80)]) * v35;
                kiln_f32x16 v37 = conv2d_NCHWc_local_13 + v36;
                conv2d_NCHWc_local_13 = v37;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v38 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v39 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 96)]) * v38;
                kiln_f32x16 v40 = conv2d_NCHWc_local_6 + v39;
                conv2d_NCHWc_local_6 = v40;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v41 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v42 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 96)]) * v41;
                kiln_f32x16 v43 = conv2d_NCHWc_local_14 + v42;
                conv2d_NCHWc_local_14 = v43;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v44 = *(const kiln_f32x16u*)&p1[(((kh * 768) + (kw * 256)) + (ic_i * 16))];
                kiln_f32x16 v45 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 112)]) * v44;
                kiln_f32x16 v46 = conv2d_NCHWc_local_7 + v45;
                conv2d_NCHWc_local_7 = v46;
              }
              {  /* oc_block_c: 16 lanes */
                kiln_f32x16 v47 = *(const kiln_f32x16u*)&p1[((((kh * 768) + (kw * 256)) + (ic_i * 16)) + 2304)];
                kiln_f32x16 v48 = KILN_SPLAT(kiln_f32x16, data_pad[(((((ax0_ax2_o_fused_ax1_o_fused * 160) + (kh * 160)) + (kw * 16)) + ic_i) + 112)]) * v47;
                kiln_f32x16 v49 = conv2d_NCHWc_local_15 + v48;
                conv2d_NCHWc_local_15 = v49;
              }
            }
          }
        }
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v50 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v51 = conv2d_NCHWc_local_0 + v50;
        kiln_i32x16 v52 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v51);
        kiln_f32x16 v53 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v52, KILN_SPLAT(kiln_f32x16, 0.0f), v51);
        *(kiln_f32x16u*)&T_relu[(ax0_ax2_o_fused_ax1_o_fused * 128)] = v53;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v54 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v55 = conv2d_NCHWc_local_1 + v54;
        kiln_i32x16 v56 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v55);
        kiln_f32x16 v57 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v56, KILN_SPLAT(kiln_f32x16, 0.0f), v55);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 16)] = v57;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v58 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v59 = conv2d_NCHWc_local_2 + v58;
        kiln_i32x16 v60 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v59);
        kiln_f32x16 v61 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v60, KILN_SPLAT(kiln_f32x16, 0.0f), v59);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 32)] = v61;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v62 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v63 = conv2d_NCHWc_local_3 + v62;
        kiln_i32x16 v64 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v63);
        kiln_f32x16 v65 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v64, KILN_SPLAT(kiln_f32x16, 0.0f), v63);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 48)] = v65;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v66 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v67 = conv2d_NCHWc_local_4 + v66;
        kiln_i32x16 v68 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v67);
        kiln_f32x16 v69 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v68, KILN_SPLAT(kiln_f32x16, 0.0f), v67);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 64)] = v69;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v70 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v71 = conv2d_NCHWc_local_5 + v70;
        kiln_i32x16 v72 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v71);
        kiln_f32x16 v73 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v72, KILN_SPLAT(kiln_f32x16, 0.0f), v71);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 80)] = v73;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v74 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v75 = conv2d_NCHWc_local_6 + v74;
        kiln_i32x16 v76 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v75);
        kiln_f32x16 v77 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v76, KILN_SPLAT(kiln_f32x16, 0.0f), v75);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 96)] = v77;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v78 = *(const kiln_f32x16u*)&p2[0];
        kiln_f32x16 v79 = conv2d_NCHWc_local_7 + v78;
        kiln_i32x16 v80 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v79);
        kiln_f32x16 v81 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v80, KILN_SPLAT(kiln_f32x16, 0.0f), v79);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 112)] = v81;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v82 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v83 = conv2d_NCHWc_local_8 + v82;
        kiln_i32x16 v84 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v83);
        kiln_f32x16 v85 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v84, KILN_SPLAT(kiln_f32x16, 0.0f), v83);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1024)] = v85;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v86 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v87 = conv2d_NCHWc_local_9 + v86;
        kiln_i32x16 v88 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v87);
        kiln_f32x16 v89 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v88, KILN_SPLAT(kiln_f32x16, 0.0f), v87);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1040)] = v89;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v90 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v91 = conv2d_NCHWc_local_10 + v90;
        kiln_i32x16 v92 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v91);
        kiln_f32x16 v93 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v92, KILN_SPLAT(kiln_f32x16, 0.0f), v91);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1056)] = v93;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v94 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v95 = conv2d_NCHWc_local_11 + v94;
        kiln_i32x16 v96 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v95);
        kiln_f32x16 v97 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v96, KILN_SPLAT(kiln_f32x16, 0.0f), v95);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1072)] = v97;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v98 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v99 = conv2d_NCHWc_local_12 + v98;
        kiln_i32x16 v100 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v99);
        kiln_f32x16 v101 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v100, KILN_SPLAT(kiln_f32x16, 0.0f), v99);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1088)] = v101;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v102 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v103 = conv2d_NCHWc_local_13 + v102;
        kiln_i32x16 v104 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v103);
        kiln_f32x16 v105 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v104, KILN_SPLAT(kiln_f32x16, 0.0f), v103);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1104)] = v105;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v106 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v107 = conv2d_NCHWc_local_14 + v106;
        kiln_i32x16 v108 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v107);
        kiln_f32x16 v109 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v108, KILN_SPLAT(kiln_f32x16, 0.0f), v107);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1120)] = v109;
      }
      {  /* ax4: 16 lanes */
        kiln_f32x16 v110 = *(const kiln_f32x16u*)&p2[16];
        kiln_f32x16 v111 = conv2d_NCHWc_local_15 + v110;
        kiln_i32x16 v112 = (KILN_SPLAT(kiln_f32x16, 0.0f) > v111);
        kiln_f32x16 v113 = KILN_SELECT(kiln_f32x16, kiln_i32x16, v112, KILN_SPLAT(kiln_f32x16, 0.0f), v111);
        *(kiln_f32x16u*)&T_relu[((ax0_ax2_o_fused_ax1_o_fused * 128) + 1136)] = v113;
      }
    }
  }
}

int32_t fused_conv2d_NCHWc_add_relu(void** args) {
  const float* restrict p0 = (const float*)args[0];
  const float* restrict p1 = (const float*)args[1];
  const float* restrict p2 = (const float*)args[2];
  float* restrict T_relu = (float*)args[3];
  {
    float data_pad[1600] __attribute__((aligned(64)));  /* global buffer, 6400 bytes */
    for (int32_t i0_i1_fused_i2_fused = 0; i0_i1_fused_i2_fused < 10; ++i0_i1_fused_i2_fused) {
      for (int32_t i3 = 0; i3 < 10; ++i3) {
        {  /* i4: 16 lanes */
          kiln_f32x16 v;
          if ((((i0_i1_fused_i2_fused >= 1) && (i0_i1_fused_i2_fused < 9)) && (i3 >= 1)) && (i3 < 9)) {
            kiln_f32x16 v1 = *(const kiln_f32x16u*)&p0[(((i0_i1_fused_i2_fused * 128) + (i3 * 16)) - 144)];
            v = v1;
          } else {
            v = KILN_SPLAT(kiln_f32x16, 0.0f);
          }
          *(kiln_f32x16u*)&data_pad[((i0_i1_fused_i2_fused * 160) + (i3 * 16))] = v;
        }
      }
    }
    {
      fused_conv2d_NCHWc_add_relu__par0_ctx kiln_ctx1 = {p1, p2, T_relu, data_pad};
      kiln_parallel_for(fused_conv2d_NCHWc_add_relu__par0, &kiln_ctx1, 8);
    }
  }
  return 0;
}
