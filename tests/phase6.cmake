# Phase 6: the extensions, CPU and CUDA, against the phase-6 float64 oracle (phase6_extensions/oracle_ext.h).
# Each feature on ragged shapes (sizes that are no multiple of the tiles), Sq != Sk both ways, with --causal where
# the two combine; rows that see no key (a window past the last key, bottom-right alignment with Sq > Sk) must give
# O = 0. Without a feature flag, the feature kernels run with the feature off beside phase 3 step 3. Split-KV runs
# whenever Sq <= 16: one split and many, causal (bottom-right) and not. Varlen packs sequences of 1 to 1000 tokens.
# The backward of softcapping, of GQA/MQA and of the window checks dQ, dK and dV (and its forward's O and LSE); GQA's with a
# sample of heads too (the oracle then computes whole groups, and dK, dV are checked on their K/V heads).
set(phase6_shapes
  "off_B2_H3_Sq130_Sk100_D64|--B|2|--H|3|--Sq|130|--Sk|100|--D|64"
  "off_B2_H2_S200_D32_causal|--B|2|--H|2|--S|200|--D|32|--causal"
  "gqa_B2_H8_Hkv2_Sq130_Sk100_D64|--B|2|--H|8|--H-kv|2|--Sq|130|--Sk|100|--D|64"
  "gqa_B1_H6_Hkv3_Sq100_Sk130_D128_causal|--B|1|--H|6|--H-kv|3|--Sq|100|--Sk|130|--D|128|--causal"
  "mqa_B2_H4_Hkv1_Sq65_Sk300_D32_causal_tile128x64|--B|2|--H|4|--H-kv|1|--Sq|65|--Sk|300|--D|32|--causal|--block-m|128|--block-n|64"
  "window_B2_H2_Sq130_Sk100_D64_w20_5|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--window|20,5"
  "window_B2_H2_Sq300_Sk500_D32_w40_causal|--B|2|--H|2|--Sq|300|--Sk|500|--D|32|--window|40,0|--causal"
  "window_B1_H2_Sq500_Sk100_D16_w3_3_emptyrows|--B|1|--H|2|--Sq|500|--Sk|100|--D|16|--window|3,3"
  "window_B1_H2_S1000_D64_w100_unbounded_right|--B|1|--H|2|--S|1000|--D|64|--window|100,-1|--block-m|64|--block-n|64"
  "window_B1_H2_S700_D128_right_only|--B|1|--H|2|--S|700|--D|128|--window|-1,33"
  "softcap_B2_H2_Sq130_Sk100_D64_c5_logits|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--softcap|5|--scale|2"
  "softcap_B1_H3_Sq100_Sk300_D32_c30_causal|--B|1|--H|3|--Sq|100|--Sk|300|--D|32|--softcap|30|--causal"
  "softcap_backward_B2_H2_Sq130_Sk100_D64_c5_logits|--backward|--softcap|5|--scale|2|--B|2|--H|2|--Sq|130|--Sk|100|--D|64"
  "softcap_backward_B1_H2_Sq100_Sk300_D32_c30_causal|--backward|--softcap|30|--B|1|--H|2|--Sq|100|--Sk|300|--D|32|--causal"
  "softcap_backward_B1_H3_S200_D128_c20_tile64x64|--backward|--softcap|20|--B|1|--H|3|--S|200|--D|128|--block-m|64|--block-n|64"
  "softcap_backward_B2_H1_Sq300_Sk65_D16_c1_causal|--backward|--softcap|1|--scale|3|--B|2|--H|1|--Sq|300|--Sk|65|--D|16|--causal"
  "gqa_backward_B2_H8_Hkv2_Sq130_Sk100_D64|--backward|--B|2|--H|8|--H-kv|2|--Sq|130|--Sk|100|--D|64"
  "mqa_backward_B1_H6_Hkv1_Sq100_Sk300_D32_causal|--backward|--B|1|--H|6|--H-kv|1|--Sq|100|--Sk|300|--D|32|--causal"
  "gqa_backward_B1_H6_Hkv3_Sq300_Sk65_D128_causal_sampled|--backward|--H|6|--H-kv|3|--Sq|300|--Sk|65|--D|128|--causal|--check-heads|2|--block-m|64|--block-n|64"
  "window_backward_B2_H2_Sq130_Sk100_D64_w20_5|--backward|--window|20,5|--B|2|--H|2|--Sq|130|--Sk|100|--D|64"
  "window_backward_B2_H2_Sq300_Sk500_D32_w40_causal|--backward|--window|40,0|--causal|--B|2|--H|2|--Sq|300|--Sk|500|--D|32"
  "window_backward_B1_H2_Sq500_Sk100_D16_w3_3_emptyrows|--backward|--window|3,3|--H|2|--Sq|500|--Sk|100|--D|16"
  "window_backward_B1_H2_S300_D128_right_only_tile64x64|--backward|--window|-1,33|--H|2|--S|300|--D|128|--block-m|64|--block-n|64"
  "align_B2_H2_Sq130_Sk100_D64_bottomright_emptyrows|--B|2|--H|2|--Sq|130|--Sk|100|--D|64|--causal|--causal-align|bottom-right"
  "align_B2_H2_Sq100_Sk1000_D32_bottomright|--B|2|--H|2|--Sq|100|--Sk|1000|--D|32|--causal|--causal-align|bottom-right"
  "align_B1_H2_Sq100_Sk130_D16_topleft|--B|1|--H|2|--Sq|100|--Sk|130|--D|16|--causal|--causal-align|top-left"
  "varlen_H4_D64_causal_3_17_1000_130|--seqlens|3,17,1000,130|--H|4|--D|64|--causal"
  "varlen_H3_D32_1_64_65_200|--seqlens|1,64,65,200|--H|3|--D|32"
  "varlen_H2_D128_300_7_129_tile64x64|--seqlens|300,7,129|--H|2|--D|128|--block-m|64|--block-n|64"
  "varlen_H2_D16_one_sequence_causal_tile128x64|--seqlens|257|--H|2|--D|16|--causal|--block-m|128|--block-n|64"
  "splitkv_B2_H3_Sq1_Sk5000_D128|--B|2|--H|3|--Sq|1|--Sk|5000|--D|128"
  "splitkv_B2_H2_Sq7_Sk3000_D32_causal_bottomright|--B|2|--H|2|--Sq|7|--Sk|3000|--D|32|--causal|--causal-align|bottom-right"
  "splitkv_B1_H2_Sq16_Sk10_D16_causal_bottomright_emptyrows|--B|1|--H|2|--Sq|16|--Sk|10|--D|16|--causal|--causal-align|bottom-right"
  "splitkv_B1_H2_Sq3_Sk1024_D64|--B|1|--H|2|--Sq|3|--Sk|1024|--D|64")
foreach(entry ${phase6_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  foreach(impl cpu cuda)
    fa_add_check_test(NAME phase6_${impl}_${name} LABEL phase6 BINARY phase6_extensions IMPL ${impl} ARGS ${parts})
  endforeach()
endforeach()

# CPU only: any D and any tile size.
set(phase6_cpu_shapes
  "window_B2_H2_Sq33_Sk20_D3_tile1x1_w2_1|--B|2|--H|2|--Sq|33|--Sk|20|--D|3|--block-m|1|--block-n|1|--window|2,1"
  "window_B2_H1_Sq300_Sk100_D24_tile17x5_w3_3|--B|2|--H|1|--Sq|300|--Sk|100|--D|24|--block-m|17|--block-n|5|--window|3,3"
  "gqa_B1_H4_Hkv2_Sq50_Sk70_D48_tile40x24|--B|1|--H|4|--H-kv|2|--Sq|50|--Sk|70|--D|48|--block-m|40|--block-n|24"
  "align_B1_H2_Sq70_Sk33_D20_tile16x8_bottomright|--B|1|--H|2|--Sq|70|--Sk|33|--D|20|--block-m|16|--block-n|8|--causal|--causal-align|bottom-right"
  "window_backward_B2_H1_Sq300_Sk100_D24_tile17x5_w3_3|--backward|--window|3,3|--B|2|--H|1|--Sq|300|--Sk|100|--D|24|--block-m|17|--block-n|5"
  "varlen_H2_D20_tile17x5_causal|--seqlens|5,40,1,33|--H|2|--D|20|--block-m|17|--block-n|5|--causal"
  "splitkv_B1_H2_Sq5_Sk2100_D7|--B|1|--H|2|--Sq|5|--Sk|2100|--D|7")
foreach(entry ${phase6_cpu_shapes})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_check_test(NAME phase6_cpu_${name} LABEL phase6 BINARY phase6_extensions IMPL cpu ARGS ${parts})
endforeach()

# GPU only, the benchmark shapes of docs/08-extensions.md (the CPU would take minutes).
fa_add_check_test(NAME phase6_cuda_splitkv_B4_H32_Sq1_Sk32768_D128 LABEL phase6 BINARY phase6_extensions IMPL cuda
                  BIG ARGS --B 4 --H 32 --Sq 1 --Sk 32768 --D 128 --check-heads 2)
fa_add_check_test(NAME phase6_cuda_varlen_H16_D64_causal LABEL phase6 BINARY phase6_extensions IMPL cuda BIG
                  ARGS --seqlens 512,8192,100,3000,16384,7 --H 16 --D 64 --causal --check-heads 500)
fa_add_check_test(NAME phase6_cuda_window_B1_H16_S16384_D64_w1024_causal LABEL phase6 BINARY phase6_extensions
                  IMPL cuda BIG ARGS --B 1 --H 16 --S 16384 --D 64 --window 1024,0 --causal --check-heads 2)

# Bad input: one line on stderr, exit status 2, before any work.
set(phase6_bad
  "Hkv_not_dividing|--H|6|--H-kv|4"
  "Hkv_zero|--H-kv|0"
  "Hkv_above_H|--H|4|--H-kv|8"
  "Hkv_text|--H-kv|two"
  "window_below_minus_one|--window|-2,5"
  "window_one_number|--window|5"
  "window_text|--window|a,b"
  "window_causal_right|--window|5,3|--causal"
  "softcap_zero|--softcap|0"
  "softcap_negative|--softcap|-3"
  "softcap_nan|--softcap|nan"
  "align_unknown|--causal|--causal-align|middle"
  "align_without_causal|--causal-align|bottom-right"
  "two_features|--H|4|--H-kv|2|--softcap|30"
  "missing_value|--softcap"
  "save_dir|--save-dir|phase6_not_written"
  "seqlens_zero|--seqlens|3,0,5"
  "seqlens_empty_item|--seqlens|3,,5"
  "seqlens_trailing_comma|--seqlens|3,5,"
  "seqlens_text|--seqlens|3,x"
  "seqlens_with_S|--seqlens|3,5|--S|8"
  "seqlens_with_gqa|--seqlens|3,5|--H|4|--H-kv|2"
  "backward_of_align_not_built|--backward|--causal|--causal-align|bottom-right"
  "backward_without_feature|--backward"
  "backward_forward_only_tiles|--backward|--softcap|30|--block-m|128|--block-n|64"
  "dropout_not_built|--dropout|0.1")
foreach(entry ${phase6_bad})
  string(REPLACE "|" ";" parts "${entry}")
  list(POP_FRONT parts name)
  fa_add_bad_input_test(NAME phase6_bad_${name} LABEL phase6 BINARY phase6_extensions ARGS ${parts})
endforeach()

# The window's tile rule (window_tile_stage, window_first_tile) against a brute force over the elements.
add_executable(test_phase6_tiles test_phase6_tiles.c)
target_link_libraries(test_phase6_tiles PRIVATE phase6_extensions_kernels)
add_test(NAME phase6_window_tiles COMMAND test_phase6_tiles)
set_tests_properties(phase6_window_tiles PROPERTIES LABELS "phase6;cpu")
