//! The JSON records of flavors kept in etcd (`flavor/<id>`, and `faccess/<flavor>/<tenant>` for
//! the access lists of private flavors), and their conversions to the store's model types.
//! Records are the schema: see [`super::records`].

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::*;

fn public() -> bool {
    true
}

/// A flavor. `is_public` and `extra_specs` came with private flavors: a record written before
/// them is a public flavor without extra specs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FlavorRec {
    pub(super) id: Uuid,
    pub(super) name: String,
    pub(super) vcpus: u32,
    pub(super) memory_mb: u64,
    pub(super) disk_gb: u64,
    #[serde(default = "public")]
    pub(super) is_public: bool,
    #[serde(default)]
    pub(super) extra_specs: ExtraSpecs,
}

impl FlavorRec {
    pub(super) fn model(&self) -> Flavor {
        Flavor {
            id: self.id,
            name: self.name.clone(),
            vcpus: self.vcpus,
            memory_mb: self.memory_mb,
            disk_gb: self.disk_gb,
            is_public: self.is_public,
            extra_specs: self.extra_specs.clone(),
        }
    }
}

impl From<Flavor> for FlavorRec {
    fn from(f: Flavor) -> FlavorRec {
        FlavorRec {
            id: f.id,
            name: f.name,
            vcpus: f.vcpus,
            memory_mb: f.memory_mb,
            disk_gb: f.disk_gb,
            is_public: f.is_public,
            extra_specs: f.extra_specs,
        }
    }
}

/// A tenant on the access list of a private flavor (at `faccess/<flavor>/<tenant>`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct FlavorAccessRec {
    pub(super) flavor: Uuid,
    pub(super) tenant: Uuid,
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_flavor_recorded_before_private_flavors_is_public_without_specs() {
        let id = Uuid::new_v4();
        let old = format!(r#"{{"id":"{id}","name":"m1","vcpus":1,"memory_mb":512,"disk_gb":1}}"#);
        let rec: FlavorRec = serde_json::from_str(&old).unwrap();
        let flavor = rec.model();
        assert!(flavor.is_public);
        assert!(flavor.extra_specs.is_empty());
        let again: FlavorRec =
            serde_json::from_str(&serde_json::to_string(&FlavorRec::from(flavor.clone())).unwrap())
                .unwrap();
        assert_eq!(again.model(), flavor);
    }
}
