# tools/: the benchmark sweep, the plots, and the PyTorch comparison's .npy check (label tools).
# tests/check_tools.py does the work; it exits 77 (skipped) where NumPy or matplotlib is missing.

# fma_peak: a table with the float32 ymm row measured on one thread (a positive GFLOP/s); an unknown argument and a
# log it cannot write are refused with one line.
add_test(NAME tools_fma_peak COMMAND fma_peak)
set_tests_properties(tools_fma_peak PROPERTIES LABELS "tools;cpu"
                     PASS_REGULAR_EXPRESSION "ymm \\(256-bit\\) +1 +[1-9][0-9]*\\.[0-9]")
fa_add_bad_input_test(NAME tools_fma_peak_bad_argument LABEL tools BINARY fma_peak ARGS --registers)
fa_add_bad_input_test(NAME tools_fma_peak_bad_log LABEL tools BINARY fma_peak ARGS --log /nonexistent/dir/peak.log)

if(NOT Python3_Interpreter_FOUND)
  return()
endif()
set(tools_checker ${CMAKE_CURRENT_SOURCE_DIR}/check_tools.py)
set(tools_dir ${CMAKE_SOURCE_DIR}/tools)

# bench.py --quick on phase 1's CPU: a well-formed results.csv (header, one row per run, FLOPs and GFLOP/s that add
# up, S and P bytes), a progress line per configuration, and summary.md.
add_test(NAME tools_bench_quick
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} bench ${tools_dir} ${CMAKE_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_bench_quick)

# plot_bench.py on a small CSV (tests/fixtures/bench_small.csv: CPU, GPU, PyTorch and out-of-memory rows): five PNGs,
# each a real PNG of slide size; a CSV that is not a benchmark CSV is refused with one "error:" line and exit 2.
add_test(NAME tools_plots
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} plots ${tools_dir}
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bench_small.csv ${CMAKE_CURRENT_BINARY_DIR}/tools_plots)

# pytorch_compare.py --check with its NumPy reference (no PyTorch needed): passes on phase 1's saved outputs, fails
# on one changed element; passes on phases 2-4's saved outputs (O, LSE, and dQ, dK, dV) where they are built.
add_test(NAME tools_npy_check
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} npy ${tools_dir} ${CMAKE_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_npy_check)

# headline_tables.py on a log of tools/headline.sh's commands (run small on the CPU, rows relabelled cuda): the docs'
# four GPU tables hold the log's numbers; a log that lacks a phase is refused with one "error:" line and exit 2.
add_test(NAME tools_headline_tables
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} headline ${tools_dir} ${CMAKE_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_headline_tables)

# hopper_tables.py on the committed phase 7 logs: chapter 09's tables (no GPU needed: the logs are the input);
# ncu_source_diff.py on small exports with known counts and on the committed ones; and hopper_bench.sh's refusals of
# a missing binary or a bad PARTS.
add_test(NAME tools_hopper_tables
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} hopper ${tools_dir} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_hopper_tables)
set_tests_properties(tools_hopper_tables PROPERTIES LABELS "tools;cpu")

# cpu_compare.py --table on the committed CPU comparison logs (no PyTorch needed: the logs are the input), and its
# refusal of a malformed --backward-tiles (one line, exit 2, no log written).
add_test(NAME tools_cpu_compare_tables
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} cpu-compare ${tools_dir} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_cpu_compare_tables)
set_tests_properties(tools_cpu_compare_tables PROPERTIES LABELS "tools;cpu")

# plot_ring_efficiency.py and plot_ring_timeline.py on the committed phase 8 logs of four GPUs (no GPU needed: the
# logs are the input): chapter 10's efficiencies and timeline summary, and their refusals of bad logs.
add_test(NAME tools_ring_plots
         COMMAND ${Python3_EXECUTABLE} ${tools_checker} ring ${tools_dir} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/tools_ring_plots)
set_tests_properties(tools_ring_plots PROPERTIES LABELS "tools;cpu")

# The scripts compile (pytorch_compare.py cannot run here: no PyTorch, no GPU).
add_test(NAME tools_py_compile
         COMMAND ${Python3_EXECUTABLE} -c "import sys; [compile(open(f).read(), f, 'exec') for f in sys.argv[1:]]"
                 ${tools_dir}/bench.py ${tools_dir}/plot_bench.py ${tools_dir}/pytorch_compare.py
                 ${tools_dir}/headline_tables.py ${tools_dir}/hopper_tables.py ${tools_dir}/ncu_tables.py
                 ${tools_dir}/ncu_source_diff.py
                 ${tools_dir}/log_excerpt.py
                 ${tools_dir}/kernel_rules.py ${tools_dir}/plot_concepts.py ${tools_dir}/plot_tile_maps.py
                 ${tools_dir}/plot_tensor_core_maps.py ${tools_dir}/plot_ring_efficiency.py
                 ${tools_dir}/plot_ring_timeline.py ${tools_checker})

set_tests_properties(tools_bench_quick tools_plots tools_npy_check tools_headline_tables tools_py_compile
                     PROPERTIES LABELS "tools;cpu" SKIP_RETURN_CODE 77)
set_tests_properties(tools_bench_quick tools_npy_check tools_headline_tables
                     PROPERTIES REQUIRED_FILES "${CMAKE_BINARY_DIR}/bin/phase1_naive")
