//! The agent's integration tests, in one binary: the core in process ([`in_process`]: recording
//! fakes, paused clock) and the daemon over real SSNTP ([`over_ssntp`]: loopback TLS, the real
//! scheduler or a fake one, the `cumulo-agent` binary), and tenant networking in network namespaces
//! ([`netns`]: root; real bridges, tunnels, taps and pings).

mod in_process;
mod netns;
mod over_ssntp;
mod support;
