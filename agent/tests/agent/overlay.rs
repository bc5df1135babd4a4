//! Tenant networking end to end over SSNTP (root only): two compute "hosts" each with an agent
//! daemon ([`daemon::run_networked`]: the sim backend, real bridges, tunnels and taps through
//! [`RtNetOps`] in the host's namespace), the `cumulo-cnci` binary in a namespace of its own,
//! the real scheduler and a controller in a fourth. A START with networking on each host makes
//! the host's TENANT_ADDED reach the CNCI through the scheduler; guests (veths standing in for
//! the VMs) then ping each other through the CNCI; a delete's TENANT_REMOVED removes the host
//! from the CNCI's hub.
//!
//! The test certificates name only localhost, so each namespace reaches the scheduler through
//! a proxy: a listener on the namespace's loopback (bound by a thread moved there) whose
//! connections the test forwards to the scheduler's namespace.
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::netns::{Netns, can_run, guest, underlay};
use crate::support::*;
use agent::net::names::bridge_name;
use agent::net::{Cidr as NetCidr, NetConfig, Network, RtNetOps, SubnetId, TunnelKind, Vnic};
use ssntp::payload::{Cidr, MacAddr, Networking};

const CNCI: Uuid = Uuid::from_bytes([0xcc; 16]);
const TENANT: Uuid = Uuid::from_bytes([0x7e; 16]);
const KEY: u32 = 0x7003;
const CNCI_IP: &str = "198.18.0.100";

/// Moves the calling thread into a namespace.
pub(crate) fn enter(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&file),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap();
}

/// Runs `test` to its end on a thread moved into namespace `ns`, on a two-thread runtime made
/// there (its threads start in `ns` too); the thread's outcome (a panic in `test` as `Err`).
pub(crate) fn run_in<F>(ns: &str, test: F) -> std::thread::Result<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(test)
    })
    .join()
}

/// The ports `listeners` listen on.
pub(crate) fn ports(listeners: &[std::net::TcpListener]) -> Vec<u16> {
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Compute node `node`'s agent configuration: its certificate under `<dir>/a<i>`, its state in
/// `<dir>/state<i>`, the scheduler at `localhost:<port>` (a relay in its namespace).
pub(crate) fn compute_config(
    pki: &TestPki,
    dir: &std::path::Path,
    i: usize,
    node: Uuid,
    port: u16,
) -> DaemonConfig {
    let files = agent_files(pki, Role::AGENT, Some(node), &dir.join(format!("a{i}")));
    let state = dir.join(format!("state{i}"));
    config(&files, &format!("localhost:{port}"), &state, &[])
}

/// A listener on a namespace's loopback.
pub(crate) fn listen_in(ns: &str) -> std::net::TcpListener {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        l
    })
    .join()
    .unwrap()
}

/// Forwards every connection to `listener` to `to` (connected from this runtime's namespace).
pub(crate) fn proxy(listener: std::net::TcpListener, to: String) {
    let listener = TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// `bridge fdb show dev DEV` in a namespace.
pub(crate) fn fdb(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "bridge", "fdb", "show", "dev", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `check` (every 20 ms) until it holds, for at most [`T`].
pub(crate) async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {T:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent daemon in a host's namespace, on its own thread and runtime.
pub(crate) struct HostAgent {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<Result<(), DaemonError>>>,
}

impl HostAgent {
    pub(crate) fn start(ns: &str, node_ip: &str, config: DaemonConfig) -> HostAgent {
        let (ns, node_ip) = (ns.to_string(), node_ip.parse().unwrap());
        let stop = CancellationToken::new();
        let token = stop.clone();
        let thread = std::thread::spawn(move || {
            enter(&ns);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let network = Network::new(
                    RtNetOps::new().unwrap(),
                    NetConfig {
                        node_ip,
                        tunnel: TunnelKind::Vxlan,
                        vxlan_port: 4789,
                        metadata: false,
                    },
                );
                let backend = SimBackend::new(config.sim.clone()).unwrap();
                daemon::run_networked(config, backend, network, token).await
            })
        });
        HostAgent {
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn stop(mut self) {
        self.stop.cancel();
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn networking(n: u8) -> Networking {
    Networking {
        vnic_mac: MacAddr([2, 0, 0, 0, 0xee, n]),
        vnic_uuid: u(0x50 + n),
        concentrator_uuid: CNCI,
        concentrator_ip: CNCI_IP.parse().unwrap(),
        subnet: Cidr {
            addr: "10.250.0.0".parse().unwrap(),
            prefix: 24,
        },
        subnet_key: KEY,
        private_ip: format!("10.250.0.{n}").parse().unwrap(),
        public_ip: false,
        firewall: None,
    }
}

/// The guest's stand-in [`Vnic`] (only its MAC matters to [`guest`]).
fn stand_in(n: u8) -> Vnic {
    Vnic {
        veth: false,
        instance: u(0xa0 + n),
        mac: [2, 0, 0, 0, 0xee, n],
        subnet: SubnetId {
            tenant: TENANT,
            subnet: NetCidr {
                addr: "10.250.0.0".parse().unwrap(),
                prefix: 24,
            },
            key: KEY,
            cnci: CNCI,
            cnci_ip: CNCI_IP.parse().unwrap(),
        },
    }
}

#[test]
fn two_hosts_ping_through_a_cnci_over_ssntp() {
    if !can_run("two_hosts_ping_through_a_cnci_over_ssntp") {
        return;
    }
    let (switch, h1, h2, cnci, ctl) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("h2"),
        Netns::new("cnci"),
        Netns::new("ctl"),
    );
    underlay(
        &switch,
        &[(&h1, "198.18.0.1"), (&h2, "198.18.0.2"), (&cnci, CNCI_IP)],
    );
    let listeners = [
        listen_in(&h1.name),
        listen_in(&h2.name),
        listen_in(&cnci.name),
    ];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (n1, n2) = (u(1), u(2));
    let mut agents = Vec::new();
    for (i, (n, (ns, ip))) in [(n1, (&h1, "198.18.0.1")), (n2, (&h2, "198.18.0.2"))]
        .into_iter()
        .enumerate()
    {
        let cfg = compute_config(&pki, dir.path(), i, n, ports[i]);
        agents.push((ns.name.clone(), ip.to_string(), cfg));
    }
    let (ctl_name, cnci_name) = (ctl.name.clone(), cnci.name.clone());
    let dir_path = dir.path().to_owned();
    let h1_name = h1.name.clone();
    let h2_name = h2.name.clone();
    let result = run_in(&ctl_name, async move {
        let sched = real_scheduler(&pki).await;
        let [l1, l2, l3] = listeners;
        for l in [l1, l2, l3] {
            let to = sched.addr.replace("localhost", "127.0.0.1");
            proxy(l, to);
        }
        let mut c = controller(&pki, &sched.addr).await;
        let running: Vec<HostAgent> = agents
            .into_iter()
            .map(|(ns, ip, cfg)| HostAgent::start(&ns, &ip, cfg))
            .collect();
        let (ca, cert, key) = pki
            .leaf(Role::CNCIAGENT, Some(CNCI))
            .write(&dir_path, "cnci");
        let log = dir_path.join("cnci.log");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &cnci_name,
                env!("CARGO_BIN_EXE_cumulo-cnci"),
            ])
            .args(["--ca-cert", ca.to_str().unwrap()])
            .args(["--cert", cert.to_str().unwrap()])
            .args(["--key", key.to_str().unwrap()])
            .args(["--scheduler", &format!("localhost:{}", ports[2])])
            .args(["--uuid", &CNCI.to_string(), "--tenant", &TENANT.to_string()])
            // No --mac: the CNCI finds that of the link holding --ip.
            .args(["--ip", CNCI_IP, "--tunnel", "vxlan"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut cnci_process = Process(child);
        let logs = || std::fs::read_to_string(&log).unwrap_or_default();
        let hello = c
            .expect("CONCENTRATOR_INSTANCE_ADDED", |m| match &m.payload {
                Payload::ConcentratorInstanceAdded(a) => Some(a.clone()),
                _ => None,
            })
            .await;
        let u0 = Netns {
            name: cnci_name.clone(),
        };
        let shown = u0.ip(&["link", "show", "u0"]);
        std::mem::forget(u0);
        let text = hello
            .concentrator_mac
            .0
            .map(|b| format!("{b:02x}"))
            .join(":");
        assert!(
            shown.contains(&format!("link/ether {text}")),
            "{text}: {shown}"
        );
        for n in [n1, n2] {
            c.stats(n, "the agent's first STATS", |_| true).await;
        }

        // One instance of the tenant on each host, pinned there.
        let (i1, i2) = (u(0xa1), u(0xa2));
        for (i, node, k) in [(i1, n1, 1), (i2, n2, 2)] {
            start_active(&mut c, i, node, TENANT, networking(k)).await;
        }
        let hub = format!("kv-{KEY:08x}");
        until("both hosts at the CNCI", || {
            let f = fdb(&cnci_name, &hub);
            f.contains("dst 198.18.0.1") && f.contains("dst 198.18.0.2")
        })
        .await;
        let bridge = bridge_name(KEY);
        let (v1, v2) = (stand_in(1), stand_in(2));
        let h1 = Netns { name: h1_name };
        let h2 = Netns { name: h2_name };
        let g1 = guest(&h1, &bridge, "vh-1", &v1, "10.250.0.1/24");
        let g2 = guest(&h2, &bridge, "vh-2", &v2, "10.250.0.2/24");
        let reached = tokio::task::spawn_blocking(move || {
            let ok = g1.reaches("10.250.0.2") && g2.reaches("10.250.0.1");
            (ok, g1, g2)
        })
        .await
        .unwrap();
        assert!(reached.0, "host 1 to host 2 through the CNCI\n{}", logs());
        drop(reached);

        // The delete of host 2's instance: its TENANT_REMOVED takes it off the hub.
        c.send(&delete(i2, n2, false));
        until("host 2 gone from the CNCI", || {
            let f = fdb(&cnci_name, &hub);
            !f.contains("dst 198.18.0.2") && f.contains("dst 198.18.0.1")
        })
        .await;
        assert!(h2.link(&bridge).is_none(), "host 2's subnet is gone");
        // The namespaces are the main thread's to delete.
        std::mem::forget(h1);
        std::mem::forget(h2);

        cnci_process.signal(rustix::process::Signal::TERM);
        assert_eq!(cnci_process.exit_code().await, Some(0), "{}", logs());
        tokio::task::spawn_blocking(move || {
            for a in running {
                a.stop();
            }
        })
        .await
        .unwrap();
        sched.stop.cancel();
    });
    drop((switch, h1, h2, cnci, ctl));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
