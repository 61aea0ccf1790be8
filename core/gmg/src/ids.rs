//! Newtype identifiers used across the core.

use serde::{Deserialize, Serialize};

macro_rules! id {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u32);
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id!(
    /// A tenant of the cluster (index into the scenario's tenants).
    TenantId, "t"
);
id!(
    /// A request of one replay (index into the replay's request table).
    RequestId, "r"
);
id!(
    /// A group of GPUs an op runs on at once (a tensor-parallel group).
    GroupId, "g"
);
id!(
    /// An in-flight iteration in the GMG. Slots are reused once an iteration retires.
    IterId, "i"
);

/// An in-flight operator in the GMG. Opaque: valid until its iteration is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpId(pub(crate) u32);

impl OpId {
    /// A stable number for logs and hashing (not an index anyone should use).
    pub fn raw(self) -> u32 {
        self.0
    }
}
