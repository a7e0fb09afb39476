#!/usr/bin/env bash
# h100.sh OUT - the binding's whole GPU check in one command, on a machine with an NVIDIA GPU and PyTorch:
#   1. builds the binding's library for the visible GPU (build-python/, -DFA_PYTHON=ON: the kernels it needs only);
#   2. runs its pytest suite, CPU and CUDA (python/tests/), into OUT/pytest.log;
#   3. trains the GPT comparison (python/train/train_gpt.py: PyTorch's attention with two seeds, the suite's fp32 and
#      bf16 kernels) into OUT/training/ (training.csv, summary.csv) and OUT/training.log;
#   4. draws OUT/training/training.png (where matplotlib is installed; else plot_training.py draws it elsewhere).
# OUT/machine.log names the GPU, the driver, PyTorch and the commit. PYTHON (default python3) is the interpreter with
# PyTorch; STEPS (default 600) the training steps. pytest missing: `pip install --no-index --find-links WHEELS pytest`
# from a folder of wheels (WHEELS=dir). Exits 1 when a test failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: python/train/h100.sh OUT}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT/training"
{
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$OUT/machine.log" 2>&1
cat "$OUT/machine.log"

start=$SECONDS
cmake -S . -B build-python -DFA_PYTHON=ON -DFA_TORCH_PYTHON="$(command -v "$PYTHON")" > "$OUT/build.log" 2>&1 &&
    cmake --build build-python --target flash_steps_c -j "$(nproc)" >> "$OUT/build.log" 2>&1 ||
    { echo "error: the build failed (OUT/build.log)"; tail -20 "$OUT/build.log"; exit 1; }
echo "build: $((SECONDS - start)) s"
export FLASH_STEPS_LIBRARY=$PWD/build-python/lib/libflash_steps_c.so

if ! "$PYTHON" -c "import pytest" 2> /dev/null && [ -n "${WHEELS:-}" ]; then
    "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" pytest
fi
start=$SECONDS
status=0
"$PYTHON" -m pytest python/tests -q -rs -p no:cacheprovider > "$OUT/pytest.log" 2>&1 || status=1
tail -3 "$OUT/pytest.log"
echo "pytest: $((SECONDS - start)) s"

start=$SECONDS
"$PYTHON" python/train/train_gpt.py --out "$OUT/training" --steps "${STEPS:-600}" > "$OUT/training.log" 2>&1 || status=1
tail -12 "$OUT/training.log"
echo "training: $((SECONDS - start)) s"
"$PYTHON" python/train/plot_training.py "$OUT/training" || echo "no figure here (matplotlib missing?)"
exit $status
