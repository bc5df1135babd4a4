//! Partial updates with a field mask: what an off-host launcher writes about an instance
//! (issue 11, the edge platform's InfoSender).
//!
//! A launcher reports an [`InstanceFacts`] record and a [`FieldMask`] naming the fields it means;
//! only those are written. Paths are dotted (`placement.node`). Setting a parent field
//! (`placement`) means the **whole sub-record**: every field under it is copied, including the
//! ones the sender left at their defaults. [`FieldMask::diff`] builds the mask of what changed
//! between two records (each changed leaf and its ancestors).

use std::collections::BTreeSet;

use uuid::Uuid;

use super::{Fault, InstanceChange, InstanceState, StoreError};

/// Where an instance runs, as its launcher says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The (off-host) host that runs it; `None`: nowhere now.
    pub node: Option<Uuid>,
    /// The subnet's CNCI it is wired to, if any.
    pub cnci: Option<Uuid>,
}

/// What a launcher knows of an instance: the fields it may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    /// Its state.
    pub state: InstanceState,
    /// Where it runs.
    pub placement: Placement,
    /// Why it is in error (a failed start: the launcher's reason and message).
    pub fault: Option<Fault>,
}

impl Default for InstanceFacts {
    fn default() -> InstanceFacts {
        InstanceFacts {
            state: InstanceState::Pending,
            placement: Placement::default(),
            fault: None,
        }
    }
}

/// Every path a mask may name.
pub const PATHS: [&str; 5] = [
    "state",
    "placement",
    "placement.node",
    "placement.cnci",
    "fault",
];

/// Most paths one mask holds (every known path fits).
const MAX_PATHS: usize = 16;

/// A set of dotted field paths. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldMask {
    paths: BTreeSet<String>,
}

impl FieldMask {
    /// A mask of `paths`; an unknown path is `Invalid`.
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<FieldMask, StoreError> {
        let mut mask = FieldMask::default();
        for path in paths {
            if !PATHS.contains(&path) {
                return Err(StoreError::Invalid(format!("unknown field path {path:?}")));
            }
            if mask.paths.len() >= MAX_PATHS {
                return Err(StoreError::Invalid("too many field paths".into()));
            }
            mask.paths.insert(path.to_string());
        }
        Ok(mask)
    }

    /// The mask with every field.
    pub fn all() -> FieldMask {
        FieldMask {
            paths: PATHS.iter().map(|p| (*p).to_string()).collect(),
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The paths set, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.iter().map(String::as_str)
    }

    /// Whether `path` is to be written: it or one of its ancestors is set.
    pub fn has(&self, path: &str) -> bool {
        let mut at = path;
        loop {
            if self.paths.contains(at) {
                return true;
            }
            match at.rsplit_once('.') {
                Some((parent, _)) => at = parent,
                None => return false,
            }
        }
    }

    /// Whether `path` or anything under it is set (whether to look inside it at all).
    pub fn has_or_has_child(&self, path: &str) -> bool {
        self.has(path)
            || self.paths.iter().any(|p| {
                p.strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
    }

    /// The mask of what differs between `old` and `new`: each changed leaf and its ancestors.
    pub fn diff(old: &InstanceFacts, new: &InstanceFacts) -> FieldMask {
        let mut paths = Vec::new();
        if old.state != new.state {
            paths.push("state");
        }
        if old.placement.node != new.placement.node {
            paths.extend(["placement", "placement.node"]);
        }
        if old.placement.cnci != new.placement.cnci {
            paths.extend(["placement", "placement.cnci"]);
        }
        if old.fault != new.fault {
            paths.push("fault");
        }
        FieldMask {
            paths: paths.into_iter().map(str::to_string).collect(),
        }
    }

    /// Copies the masked fields of `from` onto `to` (the partial update, in memory).
    pub fn merge(&self, from: &InstanceFacts, to: &mut InstanceFacts) {
        if self.has("state") {
            to.state = from.state.clone();
        }
        if self.has("placement.node") {
            to.placement.node = from.placement.node;
        }
        if self.has("placement.cnci") {
            to.placement.cnci = from.placement.cnci;
        }
        if self.has("fault") {
            to.fault = from.fault.clone();
        }
    }

    /// The instance change that writes the masked fields of `from` (what the stores apply).
    pub fn change(&self, from: &InstanceFacts) -> InstanceChange {
        InstanceChange {
            state: self.has("state").then(|| from.state.clone()),
            node: self.has("placement.node").then_some(from.placement.node),
            cnci: self.has("placement.cnci").then_some(from.placement.cnci),
            name: None,
            fault: self.has("fault").then(|| from.fault.clone()),
            workload: None,
            resize: false,
            previous_workload: None,
            metadata: None,
            locked_by: None,
        }
    }
}

/// What a fenced write does to the operation's instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceWrite {
    /// Nothing (only the operation changes).
    Nothing,
    /// Writes the masked fields.
    Update(FieldMask, InstanceFacts),
    /// Removes the instance's record (it is deleted on its host); absent already is fine.
    Remove,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: InstanceState, node: Option<Uuid>, cnci: Option<Uuid>) -> InstanceFacts {
        InstanceFacts {
            state,
            placement: Placement { node, cnci },
            fault: None,
        }
    }

    #[test]
    fn a_leaf_writes_only_itself() {
        let (n1, n2, c1) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut to = facts(InstanceState::Pending, Some(n1), Some(c1));
        let from = facts(InstanceState::Active, Some(n2), None);
        FieldMask::of(["placement.node"])
            .unwrap()
            .merge(&from, &mut to);
        assert_eq!(to, facts(InstanceState::Pending, Some(n2), Some(c1)));
    }

    #[test]
    fn a_parent_writes_the_whole_sub_record() {
        let (n1, c1) = (Uuid::new_v4(), Uuid::new_v4());
        let mut to = facts(InstanceState::Active, Some(n1), Some(c1));
        // The sender left placement at its default: the parent means all of it, cleared.
        let from = facts(InstanceState::Exited, None, None);
        FieldMask::of(["placement"]).unwrap().merge(&from, &mut to);
        assert_eq!(to, facts(InstanceState::Active, None, None));
        let change = FieldMask::of(["placement"]).unwrap().change(&from);
        assert_eq!(change.node, Some(None));
        assert_eq!(change.cnci, Some(None));
        assert_eq!(change.state, None);
    }

    #[test]
    fn an_empty_mask_writes_nothing() {
        let n1 = Uuid::new_v4();
        let before = facts(InstanceState::Active, Some(n1), None);
        let mut to = before.clone();
        FieldMask::default().merge(&InstanceFacts::default(), &mut to);
        assert_eq!(to, before);
        assert_eq!(
            FieldMask::default().change(&InstanceFacts::default()),
            InstanceChange::default()
        );
    }

    #[test]
    fn has_sees_ancestors_and_has_or_has_child_sees_descendants() {
        let mask = FieldMask::of(["placement.cnci"]).unwrap();
        assert!(mask.has("placement.cnci"));
        assert!(!mask.has("placement"));
        assert!(!mask.has("placement.node"));
        assert!(mask.has_or_has_child("placement"));
        assert!(!mask.has_or_has_child("state"));
        let parent = FieldMask::of(["placement"]).unwrap();
        assert!(parent.has("placement.node") && parent.has("placement.cnci"));
        // A prefix that is not a parent is not one.
        assert!(!FieldMask::of(["state"]).unwrap().has_or_has_child("sta"));
    }

    #[test]
    fn diff_then_merge_gives_the_new_record() {
        let (n1, n2, c1) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let cases = [
            (
                facts(InstanceState::Pending, None, None),
                facts(InstanceState::Active, Some(n1), None),
            ),
            (
                facts(InstanceState::Active, Some(n1), Some(c1)),
                facts(InstanceState::Active, Some(n2), Some(c1)),
            ),
            (
                facts(InstanceState::Active, Some(n1), Some(c1)),
                facts(InstanceState::Error("x".into()), None, None),
            ),
            (
                facts(InstanceState::Pending, Some(n1), None),
                InstanceFacts {
                    fault: Some(Fault::now("launch_failure", "QEMU could not open /x")),
                    ..facts(InstanceState::Error("x".into()), None, None)
                },
            ),
        ];
        for (old, new) in cases {
            let mask = FieldMask::diff(&old, &new);
            let mut merged = old.clone();
            mask.merge(&new, &mut merged);
            assert_eq!(merged, new);
            // Each changed leaf's ancestor is in the mask too.
            if mask.has_or_has_child("placement") {
                assert!(mask.paths().any(|p| p == "placement"));
            }
        }
        let same = facts(InstanceState::Active, Some(n1), None);
        assert!(FieldMask::diff(&same, &same).is_empty());
    }

    #[test]
    fn unknown_paths_are_refused() {
        assert!(matches!(
            FieldMask::of(["state", "secret"]),
            Err(StoreError::Invalid(_))
        ));
        assert_eq!(FieldMask::all().paths().count(), PATHS.len());
    }
}
