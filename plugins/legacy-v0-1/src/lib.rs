//! A policy plugin as one was written for `slicesched:policy@0.1.0`, against the WIT
//! directly (no SDK): `dedicated`'s rule, every op on its home group. The host's tests
//! build it and replay it beside the native `dedicated`: a host that loads newer
//! interface versions must keep running plugins built for older ones, unchanged.

#[cfg(target_arch = "wasm32")]
mod guest {
    wit_bindgen::generate!({
        path: "../wit/since_v0.1.0",
        world: "plugin",
    });

    use exports::slicesched::policy::policy::{
        Deployment, Guest, Info, Instance, Placement, ReadyOp, ReplicaMode, View,
    };

    struct Legacy;

    impl Guest for Legacy {
        fn describe() -> Info {
            Info {
                name: "legacy".into(),
                version: "0.1.0".into(),
                replicas: ReplicaMode::None,
                context_switch_ns: 0,
                spatial_sharing: false,
                reads_view: false,
            }
        }

        fn configure(_: Deployment) -> Result<(), String> {
            Ok(())
        }

        fn place(_: View, ready: Vec<ReadyOp>) -> Result<Vec<Placement>, String> {
            Ok(ready.iter().enumerate().map(|(k, r)| Placement { op: k as u32, group: r.home, priority: 0 }).collect())
        }

        fn admit(_: View, inst: Instance) -> Result<bool, String> {
            Ok(inst.inflight == 0)
        }

        fn route(_: View, _: Vec<Instance>) -> Result<u32, String> {
            Ok(0)
        }
    }

    export!(Legacy);
}
