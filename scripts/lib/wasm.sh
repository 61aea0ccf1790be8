# Shared by the scripts: a Wasm guest toolchain, and the shipped policy plugins built
# from source. Sourced, not run.
#
# The guest route: rustup's wasm32-unknown-unknown target when it is installed (or can
# be added), else Debian's rustc-web, cargo-web and rust-web-src, which build the
# standard library from source (see ../shared/docs/wasm-toolchain.md).

SHIPPED_PLUGINS="dedicated timeslice mps pooled slice template earliest"

ensure_wasm_toolchain() {
    if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
        return
    fi
    if rustup target add wasm32-unknown-unknown >/dev/null 2>&1; then
        return
    fi
    if [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ] && [ -d /usr/lib/rustlib/src/rust/library ]; then
        return
    fi
    echo "installing Debian's Rust for the Wasm guests (rustc-web cargo-web rust-web-src)" >&2
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends rustc-web cargo-web rust-web-src
}

# Builds every shipped plugin into target/plugins/<name>.wasm with the workspace's
# `slicesched plugin build` (profile given as $1: debug or release).
build_plugins() {
    local profile="${1:-release}" flag=""
    [ "$profile" = release ] && flag="--release"
    cargo build $flag --locked --bin slicesched
    for p in $SHIPPED_PLUGINS; do
        "./target/$profile/slicesched" plugin build "plugins/$p"
    done
}
