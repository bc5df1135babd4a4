//! Placement of START requests on nodes: pure code, no IO, no clock.
//!
//! Nodes live in a slab; the compute list and the network list hold slab indices in connection
//! order, so a dual-role node is in both lists with one resource account. Each list remembers
//! its most recently used node; a search starts just after it and wraps, and takes the first
//! node that fits (first fit with rotation: identical requests spread over identical nodes). A
//! placement reserves the request's memory, disk and vCPUs until the node's next READY replaces
//! its figures. A request's `avoid_nodes` (nodes an admin disabled) are never chosen, pinned or
//! not. A member of a server group goes where its group's policy says, given the nodes its other
//! members are on ([`Members`]): the search is the same rotation, with the policy's test added.
//! A request that names a zone fits only the nodes of that zone (a node's zone comes with its
//! READY).

use ssntp::Uuid;
use ssntp::payload::{
    DEFAULT_ZONE, GroupPolicy, NodeState, NodeStatus, Requirements, StartFailureReason,
};
use std::collections::{HashMap, HashSet};

/// A node's free resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capacity {
    /// Memory, MiB.
    pub mem_mb: u32,
    /// Disk, MiB.
    pub disk_mb: u32,
    /// vCPUs.
    pub vcpus: u32,
}

/// What placement knows of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's session UUID.
    pub uuid: Uuid,
    /// Its host name (from READY).
    pub hostname: String,
    /// Its availability zone (from READY; [`DEFAULT_ZONE`] until then, or when it names none).
    pub zone: String,
    /// Its last status; `None` until its first READY.
    pub status: Option<NodeState>,
    /// Free resources: the last READY's figures less what was placed since.
    pub free: Capacity,
    /// Whether it is in the compute list.
    pub compute: bool,
    /// Whether it is in the network list.
    pub network: bool,
}

impl Node {
    fn fits(&self, req: &Requirements) -> bool {
        self.status == Some(NodeState::Ready)
            && self.free.mem_mb >= req.mem_mb
            && self.free.disk_mb >= req.disk_mb
            && self.free.vcpus >= req.vcpus
            && req.hostname.as_ref().is_none_or(|h| *h == self.hostname)
            && req.zone.as_ref().is_none_or(|z| *z == self.zone)
    }
}

#[derive(Debug, Default)]
struct List {
    /// Slab indices, in connection order.
    order: Vec<usize>,
    /// Position in `order` of the most recently used node.
    mru: Option<usize>,
}

impl List {
    fn remove(&mut self, idx: usize) {
        if let Some(pos) = self.order.iter().position(|&i| i == idx) {
            self.order.remove(pos);
            self.mru = match self.mru {
                // The MRU node left: the next search starts from the start of the list.
                Some(m) if m == pos => None,
                Some(m) if m > pos => Some(m - 1),
                other => other,
            };
        }
    }
}

/// The nodes and their two lists.
#[derive(Debug, Default)]
pub struct Placement {
    slab: Vec<Option<Node>>,
    free_slots: Vec<usize>,
    index: HashMap<Uuid, usize>,
    compute: List,
    network: List,
}

impl Placement {
    /// No nodes.
    pub fn new() -> Placement {
        Placement::default()
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// A node by UUID.
    pub fn node(&self, uuid: Uuid) -> Option<&Node> {
        self.index.get(&uuid).and_then(|&i| self.slab[i].as_ref())
    }

    /// Every node, compute list order first, then network-only nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.slab.iter().flatten()
    }

    /// Adds a node that just connected (no READY yet), at the end of its lists. A node already
    /// there is removed first: a reconnecting node joins at the end.
    pub fn add(&mut self, uuid: Uuid, compute: bool, network: bool) {
        self.remove(uuid);
        let node = Node {
            uuid,
            hostname: String::new(),
            zone: DEFAULT_ZONE.to_string(),
            status: None,
            free: Capacity::default(),
            compute,
            network,
        };
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slab[i] = Some(node);
                i
            }
            None => {
                self.slab.push(Some(node));
                self.slab.len() - 1
            }
        };
        self.index.insert(uuid, idx);
        if compute {
            self.compute.order.push(idx);
        }
        if network {
            self.network.order.push(idx);
        }
    }

    /// Removes a node; `false` if it was not there.
    pub fn remove(&mut self, uuid: Uuid) -> bool {
        let Some(idx) = self.index.remove(&uuid) else {
            return false;
        };
        self.compute.remove(idx);
        self.network.remove(idx);
        self.slab[idx] = None;
        self.free_slots.push(idx);
        true
    }

    /// Gives back what a placement reserved on `uuid` (the START never reached it).
    pub fn release(&mut self, uuid: Uuid, req: &Requirements) {
        if let Some(node) = self.index.get(&uuid).and_then(|&i| self.slab[i].as_mut()) {
            node.free.mem_mb = node.free.mem_mb.saturating_add(req.mem_mb);
            node.free.disk_mb = node.free.disk_mb.saturating_add(req.disk_mb);
            node.free.vcpus = node.free.vcpus.saturating_add(req.vcpus);
        }
    }

    /// A status from the node (READY, FULL, MAINTENANCE, OFFLINE); READY-shaped figures, when
    /// given, replace the node's free resources (and with them every reservation).
    pub fn update(&mut self, uuid: Uuid, status: NodeState, figures: Option<&NodeStatus>) -> bool {
        let Some(node) = self.index.get(&uuid).and_then(|&i| self.slab[i].as_mut()) else {
            return false;
        };
        node.status = Some(status);
        if let Some(f) = figures {
            node.hostname.clone_from(&f.hostname);
            f.zone_name().clone_into(&mut node.zone);
            node.free = Capacity {
                mem_mb: f.mem_available_mb,
                disk_mb: f.disk_available_mb,
                vcpus: f.vcpus_available,
            };
        }
        true
    }

    /// Picks a node for a START and reserves its requirements there.
    pub fn place(&mut self, req: &Requirements) -> Result<Uuid, StartFailureReason> {
        self.place_excluding(req, None)
    }

    /// As [`Placement::place`], never choosing `exclude` (a node that could not take the START).
    pub fn place_excluding(
        &mut self,
        req: &Requirements,
        exclude: Option<Uuid>,
    ) -> Result<Uuid, StartFailureReason> {
        self.place_with(req, exclude, None)
    }

    /// Where a START with `restart` goes: the node it is pinned to (`node_id`), which keeps the
    /// instance stopped and with it the instance's resources (they are in the node's figures
    /// already). So nothing is reserved and its free figures are not weighed: a node that is
    /// ready or full may take it; the node itself admits what a resize adds. A node that is
    /// not connected, not in the request's list, not announced, in maintenance or offline
    /// cannot (`node_maintenance` or `full_cloud`, with the cause in words).
    pub fn place_restart(&self, req: &Requirements) -> Result<Uuid, (StartFailureReason, String)> {
        let Some(pin) = req.node_id else {
            return Err((
                StartFailureReason::InvalidData,
                "a restart names no node (node_id)".to_string(),
            ));
        };
        let list = if req.network_node {
            &self.network
        } else {
            &self.compute
        };
        let node = self
            .index
            .get(&pin)
            .filter(|idx| list.order.contains(idx))
            .and_then(|&idx| self.slab[idx].as_ref());
        let Some(node) = node else {
            return Err((
                StartFailureReason::FullCloud,
                format!("node {pin}, which keeps the instance, is not connected"),
            ));
        };
        let (reason, state) = match node.status {
            Some(NodeState::Ready | NodeState::Full) => return Ok(node.uuid),
            Some(NodeState::Maintenance) => (StartFailureReason::NodeMaintenance, "in maintenance"),
            Some(NodeState::Offline) => (StartFailureReason::FullCloud, "offline"),
            None => (StartFailureReason::FullCloud, "not ready yet"),
        };
        Err((
            reason,
            format!("node {pin}, which keeps the instance, is {state}"),
        ))
    }

    /// Whether some node could take `req` as it stands (no group weighed, nothing reserved).
    pub fn could_take(&self, req: &Requirements) -> bool {
        let list = if req.network_node {
            &self.network
        } else {
            &self.compute
        };
        let avoid: HashSet<Uuid> = req.avoid_nodes.iter().copied().collect();
        list.order.iter().any(|&idx| {
            self.slab[idx].as_ref().is_some_and(|node| {
                node.fits(req)
                    && !avoid.contains(&node.uuid)
                    && req.node_id.is_none_or(|pin| pin == node.uuid)
            })
        })
    }

    /// As [`Placement::place_excluding`], for a member of a server group whose other members
    /// are on `members`' nodes: strict policies fail (`full_cloud`) where they cannot hold,
    /// soft ones fall back to any node (soft anti-affinity: one with the fewest members). A
    /// pinned request (`node_id`: a boot volume's node) goes where it is pinned if a strict
    /// policy allows it, nowhere otherwise.
    pub fn place_with(
        &mut self,
        req: &Requirements,
        exclude: Option<Uuid>,
        members: Option<Members<'_>>,
    ) -> Result<Uuid, StartFailureReason> {
        let list = if req.network_node {
            &mut self.network
        } else {
            &mut self.compute
        };
        if list.order.is_empty() {
            return Err(if req.network_node {
                StartFailureReason::NoNetCn
            } else {
                StartFailureReason::NoCn
            });
        }
        let n = list.order.len();
        let avoid: HashSet<Uuid> = req.avoid_nodes.iter().copied().collect();
        let slab = &self.slab;
        let order = &list.order;
        // The node at a list position, if it may take the request at all.
        let at = |pos: usize| {
            slab[order[pos]].as_ref().filter(|node| {
                node.fits(req) && Some(node.uuid) != exclude && !avoid.contains(&node.uuid)
            })
        };
        let start = list.mru.map_or(0, |m| m + 1);
        // The first position from the rotation's start whose node may take it and passes `pred`.
        let rotate = |pred: &dyn Fn(&Node) -> bool| {
            (0..n)
                .map(|k| (start + k) % n)
                .find(|&pos| at(pos).is_some_and(pred))
        };
        // The common case, with no predicate to call through.
        let any = || {
            (0..n)
                .map(|k| (start + k) % n)
                .find(|&pos| at(pos).is_some())
        };
        // How many members each node holds, counted once.
        let mut counts: HashMap<Uuid, usize> = HashMap::new();
        for node in members.iter().flat_map(|m| m.nodes) {
            *counts.entry(*node).or_default() += 1;
        }
        let held = |node: &Node| counts.get(&node.uuid).copied().unwrap_or(0);
        let chosen = if let Some(pin) = req.node_id {
            // Pinned: that node, if it is in this list and fits, and a strict policy allows it
            // (a boot volume pins a new member to the node holding the volume).
            let allowed = |node: &Node| match members.map(|m| m.policy) {
                Some(GroupPolicy::Affinity) => counts.is_empty() || held(node) > 0,
                Some(GroupPolicy::AntiAffinity) => held(node) == 0,
                _ => true,
            };
            self.index
                .get(&pin)
                .and_then(|idx| order.iter().position(|i| i == idx))
                .filter(|&pos| at(pos).is_some_and(allowed))
        } else {
            match members {
                None => any(),
                Some(m) => match m.policy {
                    GroupPolicy::Affinity if m.nodes.is_empty() => any(),
                    GroupPolicy::Affinity => rotate(&|node| held(node) > 0),
                    GroupPolicy::AntiAffinity => rotate(&|node| held(node) == 0),
                    GroupPolicy::SoftAffinity => rotate(&|node| held(node) > 0).or_else(any),
                    GroupPolicy::SoftAntiAffinity => {
                        rotate(&|node| held(node) == 0).or_else(|| {
                            (0..n)
                                .filter_map(|k| {
                                    let pos = (start + k) % n;
                                    at(pos).map(|node| (held(node), k, pos))
                                })
                                .min()
                                .map(|(_, _, pos)| pos)
                        })
                    }
                },
            }
        };
        let pos = chosen.ok_or(StartFailureReason::FullCloud)?;
        list.mru = Some(pos);
        let node = self.slab[list.order[pos]]
            .as_mut()
            .ok_or(StartFailureReason::FullCloud)?;
        node.free.mem_mb -= req.mem_mb;
        node.free.disk_mb -= req.disk_mb;
        node.free.vcpus -= req.vcpus;
        Ok(node.uuid)
    }
}

/// A server group's other members, as placement weighs them.
#[derive(Debug, Clone, Copy)]
pub struct Members<'a> {
    /// The group's policy.
    pub policy: GroupPolicy,
    /// The nodes its other members are on, one entry per member.
    pub nodes: &'a [Uuid],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u16) -> Uuid {
        Uuid::from_u128(u128::from(n) + 1)
    }

    fn ready(uuid: Uuid, host: &str, mem: u32, disk: u32, vcpus: u32) -> NodeStatus {
        NodeStatus {
            node_uuid: uuid,
            hostname: host.into(),
            mem_total_mb: mem,
            mem_available_mb: mem,
            disk_total_mb: disk,
            disk_available_mb: disk,
            vcpus_total: vcpus,
            vcpus_available: vcpus,
            load: 0,
            networks: vec![],
            zone: None,
        }
    }

    fn req(mem: u32, disk: u32, vcpus: u32) -> Requirements {
        Requirements {
            vcpus,
            mem_mb: mem,
            disk_mb: disk,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        }
    }

    fn cluster(n: u16) -> Placement {
        let mut p = Placement::new();
        for i in 0..n {
            p.add(u(i), true, false);
            p.update(
                u(i),
                NodeState::Ready,
                Some(&ready(u(i), &format!("n{i}"), 1000, 1000, 4)),
            );
        }
        p
    }

    #[test]
    fn an_undelivered_start_is_given_back_and_placed_elsewhere() {
        let mut p = cluster(2);
        let r = req(600, 1, 1);
        assert_eq!(p.place(&r), Ok(u(0)));
        p.release(u(0), &r);
        assert_eq!(p.node(u(0)).unwrap().free.mem_mb, 1000);
        assert_eq!(p.place_excluding(&r, Some(u(0))), Ok(u(1)));
        assert_eq!(
            p.place_excluding(&r, Some(u(0))),
            Err(StartFailureReason::FullCloud)
        );
    }

    #[test]
    fn avoided_nodes_are_never_chosen_pinned_or_not() {
        let mut p = cluster(3);
        let mut r = req(10, 1, 1);
        r.avoid_nodes = vec![u(0), u(2)];
        for _ in 0..3 {
            assert_eq!(p.place(&r), Ok(u(1)));
        }
        r.node_id = Some(u(2));
        assert_eq!(p.place(&r), Err(StartFailureReason::FullCloud));
        r.node_id = None;
        r.avoid_nodes = vec![u(0), u(1), u(2)];
        assert_eq!(p.place(&r), Err(StartFailureReason::FullCloud));
    }

    fn with(policy: GroupPolicy, nodes: &[Uuid]) -> Option<Members<'_>> {
        Some(Members { policy, nodes })
    }

    #[test]
    fn server_group_policies_weigh_the_members_nodes() {
        let mut p = Placement::new();
        for i in 0..3 {
            p.add(u(i), true, false);
            let figures = ready(u(i), &format!("n{i}"), 1000, 1000, 100);
            p.update(u(i), NodeState::Ready, Some(&figures));
        }
        let r = req(100, 1, 1);
        let on = [u(1), u(1)];
        // Affinity: only where the members are; anywhere for the first.
        for _ in 0..3 {
            let got = p.place_with(&r, None, with(GroupPolicy::Affinity, &on));
            assert_eq!(got, Ok(u(1)));
        }
        assert!(
            p.place_with(&r, None, with(GroupPolicy::Affinity, &[]))
                .is_ok()
        );
        // Anti-affinity: never where a member is; full when every node holds one.
        for _ in 0..4 {
            let got = p.place_with(&r, None, with(GroupPolicy::AntiAffinity, &[u(0), u(1)]));
            assert_eq!(got, Ok(u(2)));
        }
        let all = [u(0), u(1), u(2)];
        let got = p.place_with(&r, None, with(GroupPolicy::AntiAffinity, &all));
        assert_eq!(got, Err(StartFailureReason::FullCloud));
        // Soft ones fall back: the fewest members for soft anti-affinity.
        let crowded = [u(0), u(0), u(1), u(1), u(2)];
        let got = p.place_with(&r, None, with(GroupPolicy::SoftAntiAffinity, &crowded));
        assert_eq!(got, Ok(u(2)));
        let got = p.place_with(&r, None, with(GroupPolicy::SoftAntiAffinity, &[u(0)]));
        assert_ne!(got, Ok(u(0)));
        let got = p.place_with(&r, None, with(GroupPolicy::SoftAffinity, &[u(2)]));
        assert_eq!(got, Ok(u(2)));
        // u(2) has at most 400 MiB left (six reservations of 100 or more): soft affinity goes
        // on elsewhere, strict affinity fails.
        let big = req(500, 1, 1);
        let got = p.place_with(&big, None, with(GroupPolicy::SoftAffinity, &[u(2)]));
        assert!(matches!(got, Ok(n) if n != u(2)));
        let got = p.place_with(&big, None, with(GroupPolicy::Affinity, &[u(2)]));
        assert_eq!(got, Err(StartFailureReason::FullCloud));
        // A pinned request goes where it is pinned, if a strict policy allows it.
        let mut pinned = req(1, 1, 1);
        pinned.node_id = Some(u(0));
        let got = p.place_with(&pinned, None, with(GroupPolicy::AntiAffinity, &[u(0)]));
        assert_eq!(got, Err(StartFailureReason::FullCloud));
        let got = p.place_with(&pinned, None, with(GroupPolicy::AntiAffinity, &[u(1)]));
        assert_eq!(got, Ok(u(0)));
        let got = p.place_with(&pinned, None, with(GroupPolicy::Affinity, &[u(1)]));
        assert_eq!(got, Err(StartFailureReason::FullCloud));
        let got = p.place_with(&pinned, None, with(GroupPolicy::SoftAntiAffinity, &[u(0)]));
        assert_eq!(got, Ok(u(0)));
    }

    #[test]
    fn a_zone_keeps_a_request_to_its_nodes() {
        let mut p = cluster(3);
        let mut far = ready(u(2), "n2", 1000, 1000, 4);
        far.zone = Some("edge".into());
        p.update(u(2), NodeState::Ready, Some(&far));
        // A zone name that is not one reads as the default zone.
        let mut odd = ready(u(1), "n1", 1000, 1000, 4);
        odd.zone = Some("not a zone!".into());
        p.update(u(1), NodeState::Ready, Some(&odd));
        let mut r = req(10, 1, 1);
        r.zone = Some("edge".into());
        for _ in 0..3 {
            assert_eq!(p.place(&r), Ok(u(2)));
        }
        r.zone = Some(DEFAULT_ZONE.into());
        let picks: Vec<Uuid> = (0..4).map(|_| p.place(&r).unwrap()).collect();
        assert!(picks.iter().all(|n| *n != u(2)), "{picks:?}");
        assert!(picks.contains(&u(1)), "{picks:?}");
        r.zone = Some("moon".into());
        assert_eq!(p.place(&r), Err(StartFailureReason::FullCloud));
    }

    #[test]
    fn empty_lists_say_which() {
        let mut p = Placement::new();
        assert_eq!(p.place(&req(1, 1, 1)), Err(StartFailureReason::NoCn));
        let mut net = req(1, 1, 1);
        net.network_node = true;
        assert_eq!(p.place(&net), Err(StartFailureReason::NoNetCn));
        p.add(u(0), true, false);
        assert_eq!(p.place(&net), Err(StartFailureReason::NoNetCn));
        // Connected but no READY yet: nothing fits.
        assert_eq!(p.place(&req(1, 1, 1)), Err(StartFailureReason::FullCloud));
    }

    #[test]
    fn identical_requests_spread_over_identical_nodes() {
        let mut p = cluster(4);
        let picks: Vec<Uuid> = (0..8).map(|_| p.place(&req(10, 10, 1)).unwrap()).collect();
        assert_eq!(picks, vec![u(0), u(1), u(2), u(3), u(0), u(1), u(2), u(3)]);
    }

    #[test]
    fn reservations_prevent_over_commit_until_the_next_ready() {
        let mut p = cluster(2);
        for _ in 0..4 {
            p.place(&req(500, 10, 1)).unwrap();
        }
        // Both nodes are now at 0 MiB free: nothing more fits.
        assert_eq!(p.place(&req(1, 1, 1)), Err(StartFailureReason::FullCloud));
        // A READY replaces the figures.
        p.update(
            u(1),
            NodeState::Ready,
            Some(&ready(u(1), "n1", 600, 1000, 4)),
        );
        assert_eq!(p.place(&req(500, 1, 1)), Ok(u(1)));
        // vCPUs count too.
        let mut p = cluster(1);
        for _ in 0..4 {
            p.place(&req(1, 1, 1)).unwrap();
        }
        assert_eq!(p.place(&req(1, 1, 1)), Err(StartFailureReason::FullCloud));
    }

    #[test]
    fn only_ready_nodes_take_work() {
        let mut p = cluster(3);
        p.update(u(0), NodeState::Full, None);
        p.update(u(1), NodeState::Maintenance, None);
        for _ in 0..3 {
            assert_eq!(p.place(&req(1, 1, 1)), Ok(u(2)));
        }
        p.update(u(2), NodeState::Offline, None);
        assert_eq!(p.place(&req(1, 1, 1)), Err(StartFailureReason::FullCloud));
        // A READY brings a node back.
        p.update(u(1), NodeState::Ready, None);
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(1)));
    }

    #[test]
    fn pinning_by_node_id_and_hostname() {
        let mut p = cluster(3);
        let mut pinned = req(1, 1, 1);
        pinned.node_id = Some(u(2));
        for _ in 0..3 {
            assert_eq!(p.place(&pinned), Ok(u(2)));
        }
        pinned.node_id = Some(u(99));
        assert_eq!(p.place(&pinned), Err(StartFailureReason::FullCloud));
        let mut by_host = req(1, 1, 1);
        by_host.hostname = Some("n1".into());
        assert_eq!(p.place(&by_host), Ok(u(1)));
        assert_eq!(p.place(&by_host), Ok(u(1)));
        by_host.hostname = Some("nowhere".into());
        assert_eq!(p.place(&by_host), Err(StartFailureReason::FullCloud));
    }

    #[test]
    fn a_dual_node_serves_both_lists_from_one_account() {
        let mut p = Placement::new();
        p.add(u(0), true, true);
        p.update(
            u(0),
            NodeState::Ready,
            Some(&ready(u(0), "dual", 1000, 1000, 4)),
        );
        let mut cnci = req(600, 1, 1);
        cnci.network_node = true;
        assert_eq!(p.place(&cnci), Ok(u(0)));
        // The compute list sees the same account: 400 MiB left.
        assert_eq!(p.place(&req(500, 1, 1)), Err(StartFailureReason::FullCloud));
        assert_eq!(p.place(&req(400, 1, 1)), Ok(u(0)));
    }

    #[test]
    fn rotation_survives_nodes_leaving_and_reconnecting() {
        let mut p = cluster(4);
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(0)));
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(1)));
        // The MRU node leaves: the next search starts from the start of the list.
        p.remove(u(1));
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(0)));
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(2)));
        // A node that reconnects joins at the end and has no READY yet.
        p.add(u(0), true, false);
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(3)));
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(2)));
        p.update(
            u(0),
            NodeState::Ready,
            Some(&ready(u(0), "n0", 1000, 1000, 4)),
        );
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(3)));
        assert_eq!(p.place(&req(1, 1, 1)), Ok(u(0)));
        assert_eq!(p.len(), 3);
    }
}
