# NVRTC from PyPI (nvidia-cuda-nvrtc-cu12, ~90 MB) in the venv under .data/ that
# scripts/schemathesis.sh also uses: CI compiles the CUDA kernels with it, no GPU or CUDA
# toolkit needed (shared/docs/executor.md §4). Sourced, not run. Sets NVRTC_LIB to the
# folder holding libnvrtc.so.12.

NVRTC_WHEEL="nvidia-cuda-nvrtc-cu12==12.8.93"

ensure_nvrtc() {
    ensure_venv
    local venv=$VENV
    NVRTC_LIB="$("$venv/bin/python" -c 'import site, os; print(os.path.join(site.getsitepackages()[0], "nvidia", "cuda_nvrtc", "lib"))')"
    if ! ls "$NVRTC_LIB"/libnvrtc.so.* >/dev/null 2>&1; then
        "$venv/bin/pip" install -q --disable-pip-version-check "$NVRTC_WHEEL"
    fi
    ls "$NVRTC_LIB"/libnvrtc.so.* >/dev/null
    export NVRTC_LIB
}
