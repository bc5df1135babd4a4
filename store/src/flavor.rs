//! Flavors as the store keeps them: a size of instance ([`Flavor`]), global, public or private
//! (seen only by the tenants given access, and in [`Scope::All`]), with its extra specs
//! ([`ExtraSpecs`]: free key/value pairs, kept and shown), and the input that makes one
//! ([`NewFlavor`]).

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::{Scope, StoreError};

/// A flavor's extra specs (Nova's `os-extra_specs`), by key.
pub type ExtraSpecs = BTreeMap<String, String>;

/// A size of instance. Its size is immutable (as in OpenStack); its extra specs change, and who
/// sees a private one (its access list, kept beside it) changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flavor {
    /// Its identifier.
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Root disk in GiB.
    pub disk_gb: u64,
    /// Whether every tenant sees it (Nova's `os-flavor-access:is_public`); a private one is seen
    /// in [`Scope::All`] and by the tenants on its access list only. Fixed at creation.
    pub is_public: bool,
    /// Its extra specs: at most [`Flavor::MAX_EXTRA_SPECS`], as [`Flavor::check_extra_specs`]
    /// says.
    pub extra_specs: ExtraSpecs,
}

impl Flavor {
    /// Most extra specs a flavor holds.
    pub const MAX_EXTRA_SPECS: usize = 128;
    /// Longest extra spec key or value, in characters.
    pub const MAX_EXTRA_SPEC_TEXT: usize = 255;

    /// Whether `key` may name an extra spec: 1 to [`Flavor::MAX_EXTRA_SPEC_TEXT`] letters,
    /// digits, `-`, `_`, `:`, `.` or spaces (Nova's pattern).
    pub fn is_spec_key(key: &str) -> bool {
        (1..=Flavor::MAX_EXTRA_SPEC_TEXT).contains(&key.len())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | ' '))
    }

    /// Whether `specs` fit a flavor: `Invalid` says what does not.
    pub fn check_extra_specs(specs: &ExtraSpecs) -> Result<(), StoreError> {
        if specs.len() > Flavor::MAX_EXTRA_SPECS {
            return Err(StoreError::Invalid(format!(
                "a flavor holds at most {} extra specs",
                Flavor::MAX_EXTRA_SPECS
            )));
        }
        for (key, value) in specs {
            if !Flavor::is_spec_key(key) {
                return Err(StoreError::Invalid(format!(
                    "an extra spec key is 1 to {} letters, digits, '-', '_', ':', '.' or spaces",
                    Flavor::MAX_EXTRA_SPEC_TEXT
                )));
            }
            if value.chars().count() > Flavor::MAX_EXTRA_SPEC_TEXT {
                return Err(StoreError::Invalid(format!(
                    "an extra spec value is at most {} characters",
                    Flavor::MAX_EXTRA_SPEC_TEXT
                )));
            }
        }
        Ok(())
    }

    /// Whether `scope` sees this flavor, given whether its tenant is on the access list.
    pub fn seen_in(&self, scope: Scope, has_access: bool) -> bool {
        self.is_public || scope == Scope::All || has_access
    }
}

/// Input of [`CatalogStore::create_flavor`](crate::CatalogStore::create_flavor): a flavor
/// without extra specs or access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFlavor {
    /// Unique name.
    pub name: String,
    /// Virtual CPUs (at least 1).
    pub vcpus: u32,
    /// Memory in MiB (at least 1).
    pub memory_mb: u64,
    /// Root disk in GiB.
    pub disk_gb: u64,
    /// Whether every tenant sees it.
    pub is_public: bool,
}

impl NewFlavor {
    /// Whether the flavor may be made: a name of 1 to 255 bytes, not blank; a vCPU and a MiB at
    /// least (`Invalid` otherwise).
    pub fn check(&self) -> Result<(), StoreError> {
        crate::common::check_name("flavor", &self.name)?;
        if self.vcpus == 0 || self.memory_mb == 0 {
            return Err(StoreError::Invalid(
                "a flavor needs at least 1 vCPU and 1 MiB".into(),
            ));
        }
        Ok(())
    }

    /// The flavor it makes, with id `id`.
    pub(crate) fn into_flavor(self, id: Uuid) -> Flavor {
        Flavor {
            id,
            name: self.name,
            vcpus: self.vcpus,
            memory_mb: self.memory_mb,
            disk_gb: self.disk_gb,
            is_public: self.is_public,
            extra_specs: ExtraSpecs::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_specs_are_checked_as_nova_checks_them() {
        let ok: ExtraSpecs = [
            ("hw:cpu_policy".to_string(), "dedicated".to_string()),
            ("a b.c-d_e".to_string(), "é".repeat(255)),
        ]
        .into();
        assert!(Flavor::check_extra_specs(&ok).is_ok());
        for (key, value) in [
            ("", "v"),
            ("k/1", "v"),
            ("ké", "v"),
            (&"k".repeat(256), "v"),
            ("k", &"v".repeat(256)),
        ] {
            let bad: ExtraSpecs = [(key.to_string(), value.to_string())].into();
            assert!(Flavor::check_extra_specs(&bad).is_err(), "{key:?}");
        }
        let many: ExtraSpecs = (0..=Flavor::MAX_EXTRA_SPECS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(Flavor::check_extra_specs(&many).is_err());
    }
}
