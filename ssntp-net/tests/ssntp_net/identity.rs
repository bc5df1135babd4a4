//! Who may hold a session, over real TLS on loopback: the identity a certificate proves (its role
//! claims, its CA, its validity, the UUID it binds), a second session with a live UUID, and a
//! revoked certificate. No sleeps: every wait has a deadline.

use ssntp::{Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, Routes, SendError, ServerEvent};
use std::time::Duration;
use testkit::{TestPki, recv_within};

use crate::net::*;

#[tokio::test]
async fn a_claim_outside_the_certificate_is_aborted_and_not_retried() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    // Our client refuses to claim what its certificate lacks before dialling...
    let config = ClientConfig::new(
        pki.identity(Role::AGENT, Some(u(1))),
        u(1),
        Role::CONTROLLER,
        vec![s.addr.clone()],
    );
    assert!(Client::start(config).is_err());
    // ...and a certificate without roles can claim nothing.
    let config = ClientConfig::new(
        pki.identity(Role::empty(), Some(u(2))),
        u(2),
        Role::AGENT,
        vec![s.addr.clone()],
    );
    assert!(Client::start(config).is_err());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.events.recv())
            .await
            .is_err()
    );
    assert!(s.handle.sessions().is_empty());
}

#[tokio::test]
async fn certificates_from_another_ca_or_expired_are_refused() {
    let pki = TestPki::new();
    let other = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let foreign = ClientConfig::new(
        other.identity(Role::AGENT, Some(u(1))),
        u(1),
        Role::AGENT,
        vec![s.addr.clone()],
    );
    let expired = ClientConfig::new(
        pki.expired(Role::AGENT, Some(u(2))).identity(),
        u(2),
        Role::AGENT,
        vec![s.addr.clone()],
    );
    let (h1, _e1) = Client::start(foreign).unwrap();
    let (h2, _e2) = Client::start(expired).unwrap();
    // Both keep failing the TLS handshake: the server never sees a session.
    assert!(
        tokio::time::timeout(Duration::from_millis(800), s.events.recv())
            .await
            .is_err()
    );
    assert!(!h1.is_connected() && !h2.is_connected());
    h1.close();
    h2.close();
}

#[tokio::test]
async fn a_second_connect_with_a_live_uuid_replaces_the_session() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut first = client(&pki, Role::AGENT, u(1), &s.addr);
    connected(&mut first).await;
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
    let mut second = client_with(&pki, Role::DUAL, Role::DUAL, u(1), &s.addr, |_| {});
    connected(&mut second).await;
    // The old session is reported disconnected before the new one connected.
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, role, .. } => {
            assert_eq!((uuid, role), (u(1), Role::AGENT))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server_connected(&mut s).await, (u(1), Role::DUAL));
    // The first client was told it was replaced and does not come back.
    loop {
        match recv_within(&mut first.events, T).await {
            ClientEvent::Disconnected { reason } => {
                assert!(reason.contains("replaced"), "{reason}")
            }
            ClientEvent::Stopped(e) => {
                assert!(e.to_string().contains("replaced"), "{e}");
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(s.handle.client_role(u(1)), Some(Role::DUAL));
}

#[tokio::test]
async fn a_certificate_binding_no_uuid_cannot_take_a_live_sessions_uuid() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut agent = client(&pki, Role::AGENT, u(1), &s.addr);
    connected(&mut agent).await;
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
    // A CNCI certificate binds no UUID: it may not claim the agent's (PROTOCOL.md §4 step 5).
    let config = ClientConfig::new(
        pki.identity(Role::CNCIAGENT, None),
        u(1),
        Role::CNCIAGENT,
        vec![s.addr.clone()],
    );
    let relay = CountingRelay::start(&s.addr).await;
    let (thief, mut thief_events) = Client::start(fast_backoff(config, &relay.addr)).unwrap();
    // Refused with "uuid in use" at each try; its client tries again (the holder could be a dead
    // connection, see below), and never gets in while the agent's session lives.
    relay.wait_for_connections(3).await;
    assert!(
        thief_events.try_recv().is_err(),
        "the refused client heard something"
    );
    assert!(!thief.is_connected());
    thief.close();
    // The live session is untouched: still registered, still the agent, still delivering.
    assert_eq!(s.handle.client_role(u(1)), Some(Role::AGENT));
    assert!(agent.handle.is_connected());
    agent.handle.send_payload(&instance_deleted(7)).unwrap();
    match recv_within(&mut s.events, T).await {
        ServerEvent::Frames { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("{other:?}"),
    }
    // The same unbound certificate may take a UUID nobody holds.
    let config = ClientConfig::new(
        pki.identity(Role::CNCIAGENT, None),
        u(2),
        Role::CNCIAGENT,
        vec![s.addr.clone()],
    );
    let (cnci, mut cnci_events) = Client::start(config).unwrap();
    match recv_within(&mut cnci_events, T).await {
        ClientEvent::Connected { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(server_connected(&mut s).await, (u(2), Role::CNCIAGENT));
    cnci.close();
}

#[tokio::test]
async fn a_client_told_uuid_in_use_comes_back_once_the_holder_is_gone() {
    // A CNCI whose previous session the server still holds (a dead connection not yet timed
    // out): refused while that session lives, connected as soon as it ends, never stopped.
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let unbound = |addr: &str| {
        let config = ClientConfig::new(
            pki.identity(Role::CNCIAGENT, None),
            u(3),
            Role::CNCIAGENT,
            vec![addr.to_string()],
        );
        Client::start(fast_backoff(config, addr)).unwrap()
    };
    let (ghost, mut ghost_events) = unbound(&s.addr);
    match recv_within(&mut ghost_events, T).await {
        ClientEvent::Connected { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(server_connected(&mut s).await, (u(3), Role::CNCIAGENT));
    let relay = CountingRelay::start(&s.addr).await;
    let (back, mut back_events) = unbound(&relay.addr);
    relay.wait_for_connections(2).await;
    assert!(!back.is_connected());
    // The holder goes; the next try gets the UUID.
    ghost.close();
    match recv_within(&mut back_events, T).await {
        ClientEvent::Connected { .. } => {}
        ClientEvent::Stopped(e) => panic!("the client gave up: {e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.handle.client_role(u(3)), Some(Role::CNCIAGENT));
    back.close();
}

/// Starts a client with a certificate binding `bound` (CNCI role when it binds none, agent role
/// otherwise) that claims `uuid`, and returns the reason the server gave for stopping it.
async fn refused(pki: &TestPki, s: &TestServer, bound: Option<Uuid>, uuid: Uuid) -> String {
    let role = if bound.is_some() {
        Role::AGENT
    } else {
        Role::CNCIAGENT
    };
    let config = ClientConfig::new(pki.identity(role, bound), uuid, role, vec![s.addr.clone()]);
    let (client, mut events) = Client::start(config).unwrap();
    let reason = loop {
        match recv_within(&mut events, T).await {
            ClientEvent::Stopped(e) => break e.to_string(),
            ClientEvent::Disconnected { .. } => continue,
            other => panic!("{uuid} with a certificate binding {bound:?}: {other:?}"),
        }
    };
    client.close();
    reason
}

#[tokio::test]
async fn no_certificate_can_take_the_servers_own_uuid_nor_the_nil_uuid() {
    let pki = TestPki::new();
    let server = u(0x5c);
    let mut s = server_with(&pki, server, Routes::new(), |_| {}).await;
    // The server's UUID is held by the live server itself (PROTOCOL.md §4 step 5): neither a
    // certificate that binds no UUID (a CNCI's) nor one that binds the server's may take it.
    // The nil UUID names no endpoint: refused too (docs/protocol.md §4 step 5).
    let cases = [
        (None, server, "server uuid"),
        (Some(server), server, "server uuid"),
        (None, Uuid::nil(), "nil uuid"),
        (Some(Uuid::nil()), Uuid::nil(), "nil uuid"),
    ];
    for (bound, uuid, why) in cases {
        let reason = refused(&pki, &s, bound, uuid).await;
        assert!(
            reason.contains(why),
            "{uuid} with a certificate binding {bound:?}: {reason}"
        );
        // Nothing was registered: no session, no event, and nothing addressed to the UUID
        // reaches the refused client.
        assert!(
            s.handle.sessions().is_empty(),
            "{uuid}: {:?}",
            s.handle.sessions()
        );
        assert!(s.handle.client_role(uuid).is_none());
        assert!(matches!(
            s.handle.send_payload(uuid, &instance_deleted(7)),
            Err(SendError::NotConnected)
        ));
        let frame = ssntp::frame::Frame::new(u(0xc1), &instance_deleted(7));
        let to = ssntp_net::Target::Session(uuid);
        assert_eq!(s.handle.forward(u(0xc1), &frame, to).unwrap(), 0);
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.events.recv())
            .await
            .is_err(),
        "a refused CONNECT is never reported"
    );
    // The server goes on serving the UUIDs that are free.
    let mut agent = client(&pki, Role::AGENT, u(1), &s.addr);
    assert_eq!(connected(&mut agent).await.0, server);
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
}

/// Writes `text` to `path` as a whole (a reader never sees half a file).
fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_revoked_certificate_is_refused_and_its_live_session_ended() {
    use ssntp_net::Revocations;
    use ssntp_net::revocation::{CrlFile, watch};
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        pki.leaf(Role::AGENT, Some(u(1))),
        pki.leaf(Role::AGENT, Some(u(2))),
        pki.leaf(Role::AGENT, Some(u(3))),
    );
    let (ca_path, crl_path) = (dir.path().join("ca.pem"), dir.path().join("crl.pem"));
    std::fs::write(&ca_path, pki.ca_pem()).unwrap();
    replace_file(&crl_path, &pki.crl(&[&b], 1));
    let file = CrlFile::new(&crl_path, &ca_path).unwrap();
    let revocations = Revocations::new();
    revocations.set(file.load().unwrap());
    assert_eq!(revocations.current().len(), 1);
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |config| {
        config.revocations = Some(revocations.clone());
    })
    .await;
    tokio::spawn(watch(
        file,
        revocations.clone(),
        s.handle.clone(),
        Duration::from_millis(20),
        s.stop.clone(),
    ));
    let addr = s.addr.clone();
    let start = |leaf: &testkit::Leaf, n: u8| {
        let (handle, events) = Client::start(fast_backoff(
            ClientConfig::new(leaf.identity(), u(n), Role::AGENT, vec![addr.clone()]),
            &addr,
        ))
        .unwrap();
        TestClient {
            handle,
            events,
            pending: Default::default(),
        }
    };
    let mut ca = start(&a, 1);
    connected(&mut ca).await;
    assert_eq!(server_connected(&mut s).await.0, u(1));
    let mut cc = start(&c, 3);
    connected(&mut cc).await;
    assert_eq!(server_connected(&mut s).await.0, u(3));
    // b is refused at the TLS handshake: the server never sees it.
    let cb = start(&b, 2);

    // A new list revokes a too: its live session ends, and it cannot come back.
    replace_file(&crl_path, &pki.crl(&[&a, &b], 2));
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("expected a's session to end, got {other:?}"),
    }
    assert_eq!(revocations.current().number(), &[2]);
    // An older list (a replayed file) does not lift a's revocation.
    replace_file(&crl_path, &pki.crl(&[&b], 1));
    let seen = tokio::time::timeout(Duration::from_millis(800), s.events.recv()).await;
    assert!(
        seen.is_err(),
        "nobody new connects: b and a stay refused; {seen:?}"
    );
    assert_eq!(revocations.current().number(), &[2]);
    assert!(!ca.handle.is_connected() && !cb.handle.is_connected());
    assert!(cc.handle.is_connected(), "c was never revoked");
    // Junk in the file changes nothing either.
    replace_file(&crl_path, "not a list");
    replace_file(&crl_path, &pki.crl(&[], 3));
    let mut ca2 = start(&a, 1);
    connected(&mut ca2).await;
    assert_eq!(revocations.current().number(), &[3]);
}
