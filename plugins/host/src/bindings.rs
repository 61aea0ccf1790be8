//! Host bindings of the frozen interface `slicesched:policy@0.1.0`.

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "plugin",
});

pub use exports::slicesched::policy::policy as wit;
