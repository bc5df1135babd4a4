//! The agent's integration tests, in one binary: the core in process ([`in_process`]: recording
//! fakes, paused clock) and the daemon over real SSNTP ([`over_ssntp`]: loopback TLS, the real
//! scheduler or a fake one, the `cumulo-agent` binary), tenant networking in network namespaces
//! ([`netns`]: root; real bridges, tunnels, taps and pings), and real VMs through the daemon
//! ([`libvirt`]: skipped without `CUMULO_LIBVIRT_URI`), and the daemon with tenant networking
//! over a fake kernel ([`tenants`]), `cumulo-cnci` in a network namespace ([`cnci`]: root),
//! two hosts' agents pinging through a CNCI over SSNTP ([`overlay`]: root), and the CNCI's DHCP,
//! outbound NAT and public IPs for those hosts' guests ([`edge`]: root), and the CNCI as a real
//! VM on a network node ([`cnci_vm`]: root and libvirtd), and containers through runc
//! ([`containers`]: root).

mod cnci;
mod cnci_vm;
mod containers;
mod edge;
mod in_process;
mod libvirt;
mod netns;
mod over_ssntp;
mod overlay;
mod support;
mod tenants;
