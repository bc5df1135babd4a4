//! The cap on a launch: no more instances than the connected compute nodes could hold at all,
//! checked before any instance record is written.
//!
//! A node's capacity for one size is how many instances of it its total memory, disk and vCPUs
//! (from its latest STATS, used or not) hold: the scheduler reserves all three per instance.
//! The cluster's is the sum over its connected compute nodes. It is not known (and nothing is
//! refused, as before the cap: the scheduler answers what it cannot place) while no compute
//! node is connected, while a connected one has sent no STATS yet, or when off-host hosts take
//! instances too (the engine does not know their size).
//!
//! Pure over [`Node`]s: the engine asks it of its node table, the API tests' fake cluster of its
//! list.

use store::Flavor;

use crate::cluster::{Node, NodeStatus};

/// How many instances of `flavor` the `nodes` could hold at all; `None` when not known.
pub fn capacity(nodes: &[&Node], flavor: &Flavor) -> Option<u64> {
    let compute: Vec<&&Node> = nodes
        .iter()
        .filter(|n| n.kinds.compute && n.status != NodeStatus::Disconnected)
        .collect();
    if compute.is_empty() || compute.iter().any(|n| n.last_stats.is_none()) {
        return None;
    }
    let disk_mb = flavor.disk_gb.saturating_mul(1024);
    let fits = |total: u32, each: u64| match each {
        0 => u64::MAX,
        each => u64::from(total) / each,
    };
    let total = compute.iter().fold(0u64, |sum, n| {
        let one = fits(n.mem_total_mb, flavor.memory_mb)
            .min(fits(n.disk_total_mb, disk_mb))
            .min(fits(n.vcpus_total, u64::from(flavor.vcpus)));
        sum.saturating_add(one)
    });
    Some(total)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use uuid::Uuid;

    use super::*;
    use crate::cluster::NodeKinds;

    fn node(mem: u32, disk: u32, vcpus: u32, stats: bool) -> Node {
        Node {
            id: Uuid::new_v4(),
            kinds: NodeKinds {
                compute: true,
                network: false,
            },
            status: NodeStatus::Ready,
            hostname: "n".into(),
            mem_total_mb: mem,
            mem_available_mb: 0,
            disk_total_mb: disk,
            disk_available_mb: 0,
            vcpus_total: vcpus,
            vcpus_available: 0,
            load: 0,
            instances: 0,
            ips: Vec::new(),
            connected: SystemTime::UNIX_EPOCH,
            last_stats: stats.then_some(SystemTime::UNIX_EPOCH),
            zone: ssntp::payload::DEFAULT_ZONE.into(),
        }
    }

    fn flavor(vcpus: u32, memory_mb: u64, disk_gb: u64) -> Flavor {
        Flavor {
            id: Uuid::nil(),
            name: "f".into(),
            vcpus,
            memory_mb,
            disk_gb,
            is_public: true,
            extra_specs: Default::default(),
        }
    }

    #[test]
    fn the_scarcest_resource_of_each_node_counts_and_nodes_add_up() {
        let a = node(4096, 10_240, 8, true);
        let b = node(1024, 100_000, 64, true);
        // a: memory 16, disk 10, vCPUs 8 → 8; b: memory 4 → 4.
        assert_eq!(capacity(&[&a, &b], &flavor(1, 256, 1)), Some(12));
        // No disk, no vCPUs asked: memory alone.
        assert_eq!(capacity(&[&a, &b], &flavor(0, 1024, 0)), Some(5));
        // Too big for any node.
        assert_eq!(capacity(&[&a], &flavor(16, 256, 1)), Some(0));
    }

    #[test]
    fn unknown_without_connected_compute_nodes_with_stats() {
        let f = flavor(1, 256, 1);
        assert_eq!(capacity(&[], &f), None);
        let fresh = node(4096, 10_240, 8, false);
        let known = node(4096, 10_240, 8, true);
        assert_eq!(capacity(&[&known, &fresh], &f), None);
        let mut gone = node(4096, 10_240, 8, true);
        gone.status = NodeStatus::Disconnected;
        assert_eq!(capacity(&[&known, &gone], &f), Some(8));
        let mut network = node(4096, 10_240, 8, false);
        network.kinds = NodeKinds {
            compute: false,
            network: true,
        };
        assert_eq!(capacity(&[&known, &network], &f), Some(8));
    }
}
