//! Fetching a console log: which instances have one, and an unreachable node's cause. (The
//! fetch from a real agent is the system tests'.)

use super::*;

fn unavailable(result: Result<String, ClusterError>) -> String {
    match result {
        Err(ClusterError::Unavailable(why)) => why,
        other => panic!("not unavailable: {other:?}"),
    }
}

#[test]
fn an_instance_on_no_node_has_no_console() {
    let w = world();
    let id = w.launch(1)[0].id;
    // Not placed: no node has it.
    assert!(matches!(
        w.engine.console(Scope::All, id, 10),
        Err(ClusterError::InvalidState { .. })
    ));
}

#[test]
fn a_node_without_an_address_or_a_controller_without_an_identity_says_so() {
    let mut w = world();
    let id = w.active();
    let why = unavailable(w.engine.console(Scope::All, id, 10));
    assert!(why.contains("no node endpoints"), "{why}");
    let pki = testkit::TestPki::new();
    w.engine.config.console_tls = Some(pki.identity(ssntp::Role::CONTROLLER, None));
    let why = unavailable(w.engine.console(Scope::All, id, 10));
    assert!(why.contains("reported no address"), "{why}");
}

#[test]
fn an_unreachable_node_is_unavailable_with_the_cause_at_once() {
    let mut w = world();
    let id = w.active();
    let pki = testkit::TestPki::new();
    w.engine.config.console_tls = Some(pki.identity(ssntp::Role::CONTROLLER, None));
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    w.engine.config.console_port = port;
    reports_localhost(&mut w, id);
    let t0 = std::time::Instant::now();
    let why = unavailable(w.engine.console(Scope::All, id, 10));
    assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
    assert!(why.contains("connect"), "{why}");
    assert!(t0.elapsed() < super::super::console::TOTAL_TIMEOUT);
}

#[test]
fn an_off_host_instance_has_no_console_log() {
    let w = world();
    w.engine
        .store()
        .create_remote_host(store::NewRemoteHost {
            name: "edge".into(),
            libvirt_uri: "qemu+tcp://edge/system".into(),
        })
        .unwrap();
    // No on-host node: the launch goes off-host.
    let id = w.launch(1)[0].id;
    assert!(w.instance(id).node.is_some());
    assert_eq!(
        w.engine.console(Scope::All, id, 10),
        Err(ClusterError::NotAvailable(
            "console log not available for off-host instances".into()
        ))
    );
}

#[test]
fn a_disk_is_copied_from_the_node_of_a_placed_instance_only() {
    let mut w = world();
    let waiting = w.launch(1)[0].id;
    assert!(matches!(
        w.engine.disk_source(Scope::All, waiting),
        Err(ClusterError::InvalidState { .. })
    ));
    let id = w.active();
    let pki = testkit::TestPki::new();
    w.engine.config.console_tls = Some(pki.identity(ssntp::Role::CONTROLLER, None));
    reports_localhost(&mut w, id);
    let source = w.engine.disk_source(Scope::All, id).unwrap();
    assert_eq!(source.node, NODE);
    assert_eq!(source.addr.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(source.addr.port(), w.engine.config.console_port);
}

/// NODE reports `id` active and 127.0.0.1 as its address.
fn reports_localhost(w: &mut World, id: uuid::Uuid) {
    let address = ssntp::payload::NodeNetwork {
        ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        mac: MacAddr([0; 6]),
    };
    w.stats_with(
        NODE,
        ssntp::payload::NodeState::Ready,
        &[(id, Reported::Active)],
        vec![address],
    );
}
