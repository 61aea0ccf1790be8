# Shared by the scripts: make sure the tools a fresh Debian machine with rustup lacks
# are present. Sourced, not run.

ensure_toolchain() {
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            echo "cargo not found: install Rust with rustup (https://rustup.rs) first" >&2
            exit 1
        fi
    fi
    if ! command -v cc >/dev/null 2>&1; then
        as_root apt-get update -qq
        as_root apt-get install -y -qq build-essential pkg-config
    fi
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# The project's Python venv under .data/ (schemathesis, NVRTC for the kernel check),
# with Debian's python3-venv installed where the interpreter lacks it. Sets VENV.
ensure_venv() {
    VENV=.data/venv
    if [ ! -x "$VENV/bin/pip" ]; then
        if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
            rm -rf "$VENV"
            as_root apt-get update -qq
            as_root apt-get install -y -qq python3-venv >/dev/null
            python3 -m venv "$VENV"
        fi
    fi
}
