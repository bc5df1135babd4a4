//! CNCI lifecycle: the first instance of a subnet launches its CNCI, one that never comes or exits,
//! restarts of the engine, START retries with a backoff, and the driver's timing.

use super::*;

#[test]
fn the_first_instance_of_a_subnet_launches_its_cnci_and_waits_for_it() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(2);
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 1, "only the CNCI starts first");
    assert!(s[0].requirements.network_node);
    let cncis = w.engine.store().cncis(Scope::All).unwrap();
    assert_eq!(cncis.len(), 1);
    assert_eq!(cncis[0].state, CnciState::Pending);
    assert_eq!(s[0].instance_uuid, cncis[0].id);

    w.event(added(&cncis[0]));
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 2);
    let net = s[0].networking.as_ref().unwrap();
    assert_eq!(net.concentrator_uuid, cncis[0].id);
    assert_eq!(net.concentrator_ip, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
    assert_eq!(net.vnic_mac, made[0].mac);
    assert_eq!(net.private_ip, IpAddr::V4(made[0].ip));
    assert!(
        sent.iter()
            .any(|p| matches!(p, Payload::RefreshCnci(r) if r.cnci_uuid == cncis[0].id))
    );
    assert_eq!(w.instance(made[0].id).cnci, Some(cncis[0].id));

    // A later instance of the same subnet starts at once.
    w.launch(1);
    let sent = w.out.take();
    assert_eq!(starts(&sent).len(), 1);
    assert!(starts(&sent)[0].networking.is_some());
}

/// What the CNCI credentials of a START say: the roles and UUID of the certificate (which the
/// key matches), or `None` without credentials.
fn credentials_of(start: &Start) -> Option<(ssntp::Role, ssntp::UuidBinding, String)> {
    let meta = start.meta_data.as_ref()?;
    let cert = meta.get(ssntp::payload::CNCI_CERT_KEY)?;
    let key = meta.get(ssntp::payload::CNCI_KEY_KEY)?;
    let own = ssntp_net::TlsIdentity::from_pem(
        ISSUER_PKI.with(|p| p.ca_pem().to_string()).as_bytes(),
        cert.as_bytes(),
        key.as_bytes(),
    )
    .unwrap()
    .own();
    Some((own.roles, own.binding, cert.clone()))
}

thread_local! {
    static ISSUER_PKI: testkit::TestPki = testkit::TestPki::new();
}

#[test]
fn every_cnci_start_carries_new_credentials_of_its_own_and_workload_starts_none() {
    let issuer = ISSUER_PKI.with(|p| {
        crate::cnci_creds::CnciIssuer::from_pem(
            p.ca_pem(),
            &p.ca_key_pem(),
            Duration::from_secs(3600),
        )
        .unwrap()
    });
    let w = world_configured(TenantNetwork::Cnci, Quota::default(), |c| {
        c.cnci_creds = Some(Arc::new(issuer));
    });
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    let sent = w.out.take();
    let (roles, binding, first) = credentials_of(starts(&sent)[0]).expect("credentials");
    assert_eq!(roles, ssntp::Role::CNCIAGENT);
    assert_eq!(binding, ssntp::UuidBinding::Bound(cnci.id));
    // Its workloads' STARTs carry none.
    w.event(added(&cnci));
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s[0].instance_uuid, made[0].id);
    assert!(credentials_of(s[0]).is_none());
    // Started again after it exited: new ones.
    w.node_connected(NET_NODE, NodeType::NetworkNode);
    w.stats(NET_NODE, &[(cnci.id, Reported::Active)]);
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: cnci.id,
    }));
    w.engine.sweep(SystemTime::now()).unwrap();
    let sent = w.out.take();
    let (_, binding, again) = credentials_of(starts(&sent)[0]).expect("credentials");
    assert_eq!(binding, ssntp::UuidBinding::Bound(cnci.id));
    assert_ne!(again, first);
    // Without an issuer, a CNCI's START carries none (its node's --cnci-cert serves it).
    let plain = world_with(TenantNetwork::Cnci, Quota::default());
    plain.launch(1);
    assert!(credentials_of(starts(&plain.out.take())[0]).is_none());
}

#[test]
fn a_cnci_that_never_comes_fails_its_instances() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(121))
        .unwrap();
    assert_eq!(
        w.engine.store().cncis(Scope::All).unwrap()[0].state,
        CnciState::Failed
    );
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(r) if r.starts_with("network_failure"))
    );
}

#[test]
fn an_exited_cnci_is_started_again_and_an_idle_one_removed() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.event(added(&cnci));
    w.node_connected(NET_NODE, NodeType::NetworkNode);
    w.stats(NET_NODE, &[(cnci.id, Reported::Active)]);
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().node,
        Some(NET_NODE)
    );
    w.out.take();
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: cnci.id,
    }));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Exited
    );
    w.engine.sweep(SystemTime::now()).unwrap();
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 1);
    assert!(s[0].restart && s[0].requirements.network_node);

    // The subnet empties: the CNCI goes after the linger time.
    w.event(added(&cnci));
    w.stats(NET_NODE, &[(cnci.id, Reported::Active)]);
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(made[0].id, Reported::Active)]);
    w.engine
        .delete(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: made[0].id,
    }));
    assert!(w.gone(made[0].id));
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.engine.store().cncis(Scope::All).unwrap().len(), 1);
    w.out.take();
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert!(w.engine.store().cncis(Scope::All).unwrap().is_empty());
    let sent = w.out.take();
    assert_eq!(deletes(&sent)[0].instance_uuid, cnci.id);
}

#[test]
fn a_restarted_engine_keeps_waiting_for_confirmations() {
    let w = world();
    let id = w.active();
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
}

/// A CNCI launched before its network node is READY meets `full_cloud` (or `no_net_cn` before
/// it connects): its START goes again, 200 ms then twice as long each time, and the subnet comes
/// up when one is placed.
#[test]
fn a_cnci_start_without_room_goes_again_with_a_backoff() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
    let t0 = cnci.updated;
    let ms = |n: u64| t0 + Duration::from_millis(n);

    w.engine
        .handle_at(&start_failure(cnci.id, StartFailureReason::NoNetCn), ms(10))
        .unwrap();
    assert_eq!(w.engine.next_cnci_retry(), Some(ms(210)));
    w.engine.sweep(ms(200)).unwrap();
    assert!(w.out.take().is_empty(), "not before 200 ms");
    w.engine.sweep(ms(210)).unwrap();
    assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
    assert_eq!(
        w.engine.next_cnci_retry(),
        None,
        "sent: waiting for its answer"
    );

    w.engine
        .handle_at(
            &start_failure(cnci.id, StartFailureReason::FullCloud),
            ms(220),
        )
        .unwrap();
    assert_eq!(w.engine.next_cnci_retry(), Some(ms(620)), "400 ms");
    w.engine.retry_cncis(ms(619)).unwrap();
    assert!(w.out.take().is_empty());
    w.engine.retry_cncis(ms(620)).unwrap();
    let sent = w.out.take();
    assert_eq!(starts_of(&sent, cnci.id), 1);
    assert!(starts(&sent)[0].requirements.network_node);
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Pending
    );
    assert_eq!(w.state(made[0].id), InstanceState::Pending);

    // Placed this time: it announces itself, and the instance waiting for it starts.
    w.event(added(&cnci));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Active
    );
    let sent = w.out.take();
    assert_eq!(starts_of(&sent, made[0].id), 1);
    assert!(starts(&sent).iter().all(|s| s.instance_uuid != cnci.id));
    assert_eq!(w.engine.next_cnci_retry(), None);
    assert_eq!(
        w.events()
            .iter()
            .filter(|e| e.contains("sent again in"))
            .count(),
        1,
        "one event per CNCI, not one per retry"
    );
}

/// A CNCI that never finds room fails at the CNCI timeout, with the START's reason, and so do
/// the instances waiting for it; the wait between STARTs stops growing at 2 s.
#[test]
fn a_cnci_that_never_finds_room_fails_at_the_timeout() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    let timeout = Duration::from_secs(120);
    let mut now = cnci.updated;
    let mut waits = Vec::new();
    loop {
        w.engine
            .handle_at(&start_failure(cnci.id, StartFailureReason::FullCloud), now)
            .unwrap();
        let Some(due) = w.engine.next_cnci_retry() else {
            break;
        };
        waits.push(due.duration_since(now).unwrap());
        if due.duration_since(cnci.updated).unwrap() >= timeout {
            break;
        }
        w.engine.sweep(due).unwrap();
        assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
        assert_eq!(w.state(made[0].id), InstanceState::Pending);
        now = due;
    }
    assert_eq!(
        &waits[..5],
        &[200, 400, 800, 1600, 2000].map(Duration::from_millis)
    );
    assert!(waits.iter().all(|d| *d <= Duration::from_secs(2)));
    // The sweep at the timeout gives up.
    w.engine.sweep(cnci.updated + timeout).unwrap();
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );
    assert!(starts_of(&w.out.take(), cnci.id) == 0);
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(ref r)
            if r == "network_failure: the subnet's CNCI failed: START failed: full_cloud"),
        "{:?}",
        w.state(made[0].id)
    );
    assert_eq!(w.engine.next_cnci_retry(), None);
}

/// Other reasons fail a CNCI at once, and an ordinary instance's `full_cloud` is an error at
/// once, as before.
#[test]
fn other_start_failures_are_not_retried() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    w.event(start_failure(cnci.id, StartFailureReason::ImageFailure));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );
    assert_eq!(w.engine.next_cnci_retry(), None);
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(ref r) if r.ends_with("START failed: image_failure"))
    );

    // Past its timeout, even full_cloud fails it at once.
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.engine
        .handle_at(
            &start_failure(cnci.id, StartFailureReason::FullCloud),
            cnci.updated + Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );

    let w = world();
    let id = w.launch(1)[0].id;
    w.event(start_failure(id, StartFailureReason::FullCloud));
    assert_eq!(w.state(id), InstanceState::Error("full_cloud".into()));
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(1))
        .unwrap();
    assert!(starts(&w.out.take()).len() == 1, "only the first START");
}

/// The driver sends a CNCI's START again when it is due, not at the next sweep (an hour away
/// here); virtual time.
#[tokio::test(start_paused = true)]
async fn the_driver_sends_a_cnci_start_again_when_due() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    let World {
        engine, out, _dir, ..
    } = w;
    let engine = Arc::new(engine);
    let (tx, stop, driver) = drive(&engine);
    // The scheduler's own START_FAILURE: its origin is the scheduler of the session.
    tx.send(origin::connected(SCHEDULER)).await.unwrap();
    let failure = start_failure(cnci.id, StartFailureReason::FullCloud);
    tx.send(origin::frames(SCHEDULER, vec![failure]))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), async {
        while starts_of(&out.take(), cnci.id) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the START went again before the next sweep");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(engine.next_cnci_retry(), None);
    stop.cancel();
    driver.await.unwrap();
}
