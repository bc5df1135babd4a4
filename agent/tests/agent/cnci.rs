//! `cumulo-cnci` for real (root only): the binary in a network namespace of its own, the real
//! scheduler in process (on that namespace's loopback: the test certificates name localhost),
//! a fake controller that sees the CNCI's CONCENTRATOR_INSTANCE_ADDED, and two fake compute
//! nodes whose TENANT_ADDED and TENANT_REMOVED make and remove their tunnel ends: a VXLAN hub on
//! the subnet's bridge with hairpin, and a flood entry per node; a restarted CNCI rebuilds its
//! view from the kernel and still removes them.
//!
//! Skipped like [`crate::netns`] without root or `ip` (a failure under
//! `CUMULO_REQUIRE_NETNS=1`).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::netns::{Netns, can_run};
use crate::support::*;
use ssntp::payload::{Cidr, MacAddr, TenantEvent};

const CNCI: Uuid = Uuid::from_bytes([0xcc; 16]);
const TENANT: Uuid = Uuid::from_bytes([0x7e; 16]);
const KEY: u32 = 0x7001;
const CNCI_IP: &str = "198.18.0.100";
const CNCI_MAC: &str = "02:00:c6:12:00:64";

fn tenant_event(agent: Uuid, agent_ip: &str) -> TenantEvent {
    TenantEvent {
        agent_uuid: agent,
        agent_ip: agent_ip.parse().unwrap(),
        tenant_uuid: TENANT,
        tenant_subnet: Cidr {
            addr: "10.250.0.0".parse().unwrap(),
            prefix: 24,
        },
        concentrator_uuid: CNCI,
        concentrator_ip: CNCI_IP.parse().unwrap(),
        subnet_key: KEY,
    }
}

/// A fake compute node: an SSNTP client with the AGENT role, connected.
async fn fake_agent(
    pki: &TestPki,
    addr: &str,
    uuid: Uuid,
) -> (ClientHandle, mpsc::Receiver<ClientEvent>) {
    let config = ClientConfig::new(
        pki.identity(Role::AGENT, Some(uuid)),
        uuid,
        Role::AGENT,
        vec![addr.to_string()],
    );
    let (handle, mut events) = Client::start(config).unwrap();
    let deadline = Instant::now() + T;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(ClientEvent::Connected { .. })) => return (handle, events),
            Ok(Some(ClientEvent::Stopped(e))) => panic!("fake agent stopped: {e}"),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("the fake agent did not connect"),
        }
    }
}

/// `bridge fdb show dev DEV` in the namespace.
fn fdb(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "bridge", "fdb", "show", "dev", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `check` (every 20 ms) until it holds, for at most [`T`].
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {T:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn scenario(ns: String, dir: PathBuf) {
    let pki = TestPki::new();
    let sched = real_scheduler(&pki).await;
    let mut c = controller(&pki, &sched.addr).await;
    let (ca, cert, key) = pki.leaf(Role::CNCIAGENT, Some(CNCI)).write(&dir, "cnci");
    let log = dir.join("cnci.log");
    let spawn = || {
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_cumulo-cnci")])
            .args(["--ca-cert", ca.to_str().unwrap()])
            .args(["--cert", cert.to_str().unwrap()])
            .args(["--key", key.to_str().unwrap()])
            .args(["--scheduler", &sched.addr])
            .args(["--uuid", &CNCI.to_string(), "--tenant", &TENANT.to_string()])
            .args(["--ip", CNCI_IP, "--mac", CNCI_MAC, "--tunnel", "vxlan"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        Process(child)
    };
    let mut cnci = spawn();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    let hello = c
        .expect("CONCENTRATOR_INSTANCE_ADDED", |m| match &m.payload {
            Payload::ConcentratorInstanceAdded(a) if m.frame.origin == CNCI => Some(a.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        (
            hello.instance_uuid,
            hello.tenant_uuid,
            hello.concentrator_ip
        ),
        (CNCI, TENANT, CNCI_IP.parse().unwrap())
    );
    assert_eq!(hello.concentrator_mac, CNCI_MAC.parse::<MacAddr>().unwrap());

    let (a1, a2) = (u(0xa1), u(0xa2));
    let (n1, _e1) = fake_agent(&pki, &sched.addr, a1).await;
    let (n2, _e2) = fake_agent(&pki, &sched.addr, a2).await;
    n1.send_payload(&Payload::TenantAdded(tenant_event(a1, "198.18.0.1")))
        .unwrap();
    n2.send_payload(&Payload::TenantAdded(tenant_event(a2, "198.18.0.2")))
        .unwrap();
    let (bridge, hub) = (format!("kb-{KEY:08x}"), format!("kv-{KEY:08x}"));
    let netns = Netns { name: ns.clone() };
    until("both nodes' flood entries", || {
        let f = fdb(&ns, &hub);
        f.contains("dst 198.18.0.1") && f.contains("dst 198.18.0.2")
    })
    .await;
    let link = netns.link(&hub).unwrap();
    assert!(link.contains(&format!("id {KEY}")), "{link}");
    assert!(link.contains(&format!("local {CNCI_IP}")), "{link}");
    assert!(link.contains(&format!("master {bridge}")), "{link}");
    assert!(link.contains("hairpin on"), "{link}");
    assert!(netns.link(&bridge).is_some());

    // A restart of the CNCI: it announces itself again and rebuilds its view from the kernel,
    // which it leaves as it is; a node's TENANT_REMOVED still finds that node's end.
    let index = |l: &str| l.split(':').next().unwrap_or("").to_string();
    let hub_index = index(&link);
    cnci.signal(rustix::process::Signal::TERM);
    assert_eq!(cnci.exit_code().await, Some(0), "{}", logs());
    cnci = spawn();
    c.expect("CONCENTRATOR_INSTANCE_ADDED again", |m| {
        matches!(m.payload, Payload::ConcentratorInstanceAdded(_)).then_some(())
    })
    .await;
    assert_eq!(index(&netns.link(&hub).unwrap()), hub_index);
    n1.send_payload(&Payload::TenantRemoved(tenant_event(a1, "198.18.0.1")))
        .unwrap();
    until("node 1's flood entry gone", || {
        let f = fdb(&ns, &hub);
        !f.contains("dst 198.18.0.1") && f.contains("dst 198.18.0.2")
    })
    .await;
    n2.send_payload(&Payload::TenantRemoved(tenant_event(a2, "198.18.0.2")))
        .unwrap();
    until("the subnet's hub and bridge gone", || {
        netns.link(&hub).is_none() && netns.link(&bridge).is_none()
    })
    .await;
    // The namespace is the caller's to delete.
    std::mem::forget(netns);

    cnci.signal(rustix::process::Signal::TERM);
    assert_eq!(cnci.exit_code().await, Some(0), "{}", logs());
    n1.close();
    n2.close();
    sched.stop.cancel();
}

#[test]
fn a_cnci_announces_itself_and_ends_the_nodes_tunnels() {
    if !can_run("a_cnci_announces_itself_and_ends_the_nodes_tunnels") {
        return;
    }
    let ns = Netns::new("cnci");
    let dir = tempfile::tempdir().unwrap();
    let (name, path) = (ns.name.clone(), dir.path().to_owned());
    // Everything SSNTP runs on the namespace's loopback, from a thread (and its runtime's
    // threads) moved into it.
    let thread = std::thread::spawn(move || {
        let file = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(scenario(name, path));
    });
    let result = thread.join();
    drop(ns);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
