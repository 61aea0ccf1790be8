//! A policy plugin as one was written for `slicesched:policy@0.2.0`, against the WIT
//! directly (no SDK): `dedicated`'s rule, every op on its home group, after asking the
//! host's `what-if` (new in 0.2.0) about each placement. The host's tests build it and
//! replay it beside the native `dedicated`: a host that loads 0.3.0 plugins must keep
//! running plugins built for 0.2.0, what-if included, unchanged.

#[cfg(target_arch = "wasm32")]
mod guest {
    wit_bindgen::generate!({
        path: "../wit/since_v0.2.0",
        world: "plugin",
    });

    use exports::slicesched::policy::policy::{
        Deployment, Guest, Info, Instance, Placement, ReadyOp, ReplicaMode, View,
    };
    use slicesched::policy::host::{what_if, Probe};

    struct Legacy;

    impl Guest for Legacy {
        fn describe() -> Info {
            Info {
                name: "legacy-v0-2".into(),
                version: "0.2.0".into(),
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
            let probes: Vec<Probe> =
                ready.iter().enumerate().map(|(k, r)| Probe { op: k as u32, group: r.home, priority: 0 }).collect();
            // Every op at home is always accepted: an answer short of that is a host bug.
            let answer = what_if(&probes);
            if answer.outcomes.len() != probes.len() {
                return Err(format!("what-if answered {} of {} probes", answer.outcomes.len(), probes.len()));
            }
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
