#!/usr/bin/env bash
# The CUDA backend measured on a real GPU (shared/docs/executor.md §9). Builds nothing:
# it runs two prebuilt binaries, each found as GPU_CHECK_BIN / SLICESCHED_BIN, else in
# target/release/, else in the current folder, else beside this script; build them on a
# CI-like machine with
#   cargo build --release -p slicesched-exec --no-default-features --features cuda-13 --bin gpu-check
#   cargo build --release -p slicesched-cli --no-default-features --features cuda-13
# Usage: scripts/gpu-check.sh OUT   (GPU_CHECK_ONLY=b_ops,h_run repeats some sections; at most 7.5 minutes, about 6.5 when sections finish
# early; without slicesched, section (h) is skipped). Writes OUT/env.txt, OUT/log.txt,
# OUT/results.jsonl, OUT/h_*.log and (h)'s profile and run folders, and prints a table.
set -uo pipefail
out="${1:?usage: scripts/gpu-check.sh OUT}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GPU_CHECK_BIN:-}"
for c in "$here/target/release/gpu-check" "$PWD/gpu-check" "$(dirname "$0")/gpu-check"; do
    [ -z "$bin" ] && [ -x "$c" ] && bin="$c"
done
[ -x "$bin" ] || { echo "gpu-check binary not found (set GPU_CHECK_BIN)" >&2; exit 2; }
sbin="${SLICESCHED_BIN:-}"
for c in "$here/target/release/slicesched" "$PWD/slicesched" "$(dirname "$0")/slicesched"; do
    [ -z "$sbin" ] && [ -x "$c" ] && sbin="$c"
done
hargs=()
if [ -x "$sbin" ]; then hargs=(--slicesched "$sbin" --repo "$here"); else echo "slicesched binary not found (set SLICESCHED_BIN): section (h) skipped" >&2; fi

# The CUDA libraries: the toolkit's lib64, then any pip wheels (torch brings cuBLAS and
# NVRTC). cudarc tries the unversioned name and a few sonames; NCCL's libnccl.so.2 is
# never tried, so a libnccl.so link goes in a temp folder on the path.
libdirs=()
[ -n "${CUDA_HOME:-}" ] && [ -d "$CUDA_HOME/lib64" ] && libdirs+=("$CUDA_HOME/lib64")
[ -d /usr/local/cuda/lib64 ] && libdirs+=(/usr/local/cuda/lib64)
sp="$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)"
if [ -n "$sp" ] && [ -d "$sp/nvidia" ]; then
    while IFS= read -r f; do libdirs+=("$(dirname "$f")"); done < <(find "$sp/nvidia" \( -name 'libcublas.so*' -o -name 'libnvrtc.so*' \) 2>/dev/null)
    links="$(mktemp -d)"
    nccl="$(find "$sp/nvidia" -name 'libnccl.so.2' 2>/dev/null | head -1)"
    [ -n "$nccl" ] && ln -sf "$nccl" "$links/libnccl.so" && libdirs+=("$links")
fi
path="$(printf '%s\n' "${libdirs[@]}" | awk '!seen[$0]++' | paste -sd: -)"
export LD_LIBRARY_PATH="${path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A fresh kernel cache: the first compile is part of what is measured.
export SLICESCHED_KERNEL_CACHE="$out/kernel-cache"

{
    echo "date: $(date -u +%FT%TZ)"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1
    nvcc --version 2>&1 | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
} >"$out/env.txt"

only=()
[ -n "${GPU_CHECK_ONLY:-}" ] && only=(--only "$GPU_CHECK_ONLY")
timeout 450 "$bin" --out "$out" --budget-s "${GPU_CHECK_BUDGET_S:-390}" ${only[@]+"${only[@]}"} ${hargs[@]+"${hargs[@]}"} 2>&1 | tee "$out/log.txt"
rc=${PIPESTATUS[0]}
echo "gpu-check exit $rc; results in $out/results.jsonl"
exit "$rc"
