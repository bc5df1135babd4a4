//! `cumulo-cnci`, the tenant network's concentrator (CNCI), as a library: an SSNTP client with
//! the CNCIAGENT role whose UUID is its instance UUID ([`run()`]). It announces itself with
//! CONCENTRATOR_INSTANCE_ADDED and ends the compute nodes' tunnels of its tenant's subnets on one
//! bridge per subnet as TENANT_ADDED and TENANT_REMOVED come ([`Hub`]: a VXLAN hub with a flood
//! entry per node and hairpin, or a GRE-tap per node; `docs/networking.md`, "What the CNCI must
//! do").
//!
//! The kernel is behind [`CnciOps`] ([`RtCnciOps`] over rtnetlink, `FakeCnciOps` (`testing` feature) for tests).
//! The same binary runs inside a CNCI VM or, where no VMs are wanted, as a process in its own
//! network namespace on a network node.
//!
//! Every subnet also gets the gateway address on its bridge, a DHCP server with fixed leases
//! ([`dhcp`]) and outbound NAT; ASSIGN/RELEASE_PUBLIC_IP map public IPs 1:1 ([`edge`], [`nat`]:
//! nftables); REFRESH_CNCI routes the tenant's other subnets via their concentrators.

pub mod announce;
pub mod cli;
pub mod dhcp;
pub mod edge;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod hub;
pub mod launch;
pub mod nat;
pub mod ops;
pub mod run;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "testing"))]
pub use fake::FakeCnciOps;
pub use hub::{Hub, HubConfig, HubError, NodeSubnet, Outcome, Rebuilt};
pub use ops::{CnciOps, HubSpec, RtCnciOps};
pub use run::{CnciConfig, CnciError, EXIT_CERTIFICATE_EXPIRED, run, run_with};
