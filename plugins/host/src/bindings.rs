//! Host bindings of each frozen interface version the host loads.

/// `slicesched:policy@0.1.0`.
pub mod v1 {
    wasmtime::component::bindgen!({
        path: "../wit/since_v0.1.0",
        world: "plugin",
    });

    pub use exports::slicesched::policy::policy as wit;
}

/// `slicesched:policy@0.2.0`.
pub mod v2 {
    wasmtime::component::bindgen!({
        path: "../wit/since_v0.2.0",
        world: "plugin",
    });

    pub use exports::slicesched::policy::policy as wit;
}

/// `slicesched:policy@0.3.0`.
pub mod v3 {
    wasmtime::component::bindgen!({
        path: "../wit/since_v0.3.0",
        world: "plugin",
    });

    pub use exports::slicesched::policy::policy as wit;
}
