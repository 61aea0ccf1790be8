//! What can go wrong with a plugin, always naming the plugin, its version and the cause.

/// A plugin call or load that failed. The scheduler never stops on one: it counts it,
/// decides that call with the safe built-in, and quarantines the plugin after enough.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("plugin `{plugin}` {version}: {cause}")]
pub struct PluginError {
    /// The plugin's name (its SHA-256 prefix until `describe` has answered).
    pub plugin: String,
    pub version: String,
    // In the message, not `source()`: shown once where a caller prints the chain.
    pub cause: Cause,
}

/// Why a plugin failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Cause {
    /// The bytes are not a Wasm component the engine can compile.
    #[error("not a valid Wasm component: {0}")]
    Compile(String),
    /// A component, but not a policy: it exports no `slicesched:policy/policy` interface,
    /// or imports something the sandbox does not provide.
    #[error("not a policy component: {0}")]
    NotAPolicy(String),
    /// A policy built against an interface version this host does not know.
    #[error("interface version {found} is not supported (supported: {supported})")]
    UnsupportedVersion { found: String, supported: String },
    /// The plugin trapped (a panic, an out-of-bounds access, `unreachable`); `log` holds
    /// its last error line (the SDK's panic hook writes the panic message there).
    #[error("trapped in `{hook}`: {trap}{}", log.as_deref().map(|l| format!(" (plugin log: {l})")).unwrap_or_default())]
    Trap { hook: &'static str, trap: String, log: Option<String> },
    /// The call used up its fuel (an endless or too long computation).
    #[error("ran out of fuel in `{hook}` ({fuel} units per call)")]
    FuelExhausted { hook: &'static str, fuel: u64 },
    /// The plugin tried to grow its memory past the cap.
    #[error("hit the memory cap in `{hook}` ({cap_bytes} bytes)")]
    MemoryCap { hook: &'static str, cap_bytes: usize },
    /// The plugin answered an error of its own.
    #[error("refused in `{hook}`: {message}")]
    Refused { hook: &'static str, message: String },
    /// An answer of the right type that makes no sense (an op index out of range or
    /// named twice, more placements than ops, an instance index out of range).
    #[error("malformed answer from `{hook}`: {detail}")]
    Malformed { hook: &'static str, detail: String },
    /// A placement the scheduler would have to refuse: no such group, weights not
    /// resident, attention away from its KV cache.
    #[error("invalid placement of op {op} (tenant {tenant}) on group {group}: {reason}")]
    InvalidPlacement { op: u32, tenant: u32, group: u32, reason: &'static str },
    /// The plugin failed too often and is no longer called.
    #[error("quarantined after {failures} failures")]
    Quarantined { failures: u32 },
    /// Building the plugin from source failed.
    #[error("build failed: {0}")]
    Build(String),
}

/// Most bytes of a plugin's own text (a refusal, a trap's log line, a version) an error
/// keeps: a plugin refusing with a 24 MiB message must not make every kept error, audit
/// entry and log line 24 MiB.
pub const MAX_PLUGIN_TEXT: usize = 2048;

impl PluginError {
    pub(crate) fn new(plugin: &str, version: &str, cause: Cause) -> Self {
        Self {
            plugin: bounded(plugin.into(), MAX_PLUGIN_TEXT),
            version: bounded(version.into(), MAX_PLUGIN_TEXT),
            cause: cause.bounded(),
        }
    }
}

impl Cause {
    /// The cause with every text the plugin chose cut to [`MAX_PLUGIN_TEXT`].
    pub fn bounded(self) -> Self {
        match self {
            Cause::Refused { hook, message } => Cause::Refused { hook, message: bounded(message, MAX_PLUGIN_TEXT) },
            Cause::Trap { hook, trap, log } => Cause::Trap {
                hook,
                trap: bounded(trap, MAX_PLUGIN_TEXT),
                log: log.map(|l| bounded(l, MAX_PLUGIN_TEXT)),
            },
            Cause::Malformed { hook, detail } => Cause::Malformed { hook, detail: bounded(detail, MAX_PLUGIN_TEXT) },
            other => other,
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with a marker saying how
/// much was cut (never a panic, whatever the text).
pub fn bounded(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = s.len() - end;
    s.truncate(end);
    s.push_str(&format!("… [truncated: {cut} more bytes]"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_on_a_char_boundary_with_a_marker() {
        let s = bounded("é".repeat(600), 1023);
        assert!(s.starts_with(&"é".repeat(511)) && s.ends_with("[truncated: 178 more bytes]"), "{s}");
        assert_eq!(bounded("short".into(), 10), "short");
        let big = Cause::Refused { hook: "place", message: "x".repeat(24 << 20) }.bounded();
        assert!(big.to_string().len() < MAX_PLUGIN_TEXT + 100);
    }
}
