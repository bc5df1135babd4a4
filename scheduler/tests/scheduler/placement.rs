//! Placement over real SSNTP: spreading, reservations, pinning, the failure reasons, dual-role
//! nodes.

use super::*;

#[tokio::test]
async fn placement_spreads_reserves_pins_and_fails_with_the_right_reason() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    assert_eq!(
        place(&mut c, &mut [], start(1, 100)).await,
        Err(StartFailureReason::NoCn)
    );
    let mut a1 = agent(&pki, u(1), &s.addr, 1000).await;
    let mut a2 = agent(&pki, u(2), &s.addr, 1000).await;
    let mut a3 = agent(&pki, u(3), &s.addr, 1000).await;
    nodes_seen(&mut c, 3).await;
    let mut net = start(2, 1);
    net.requirements.network_node = true;
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], net).await,
        Err(StartFailureReason::NoNetCn)
    );
    // Spread: three identical STARTs over three identical nodes.
    let mut got = Vec::new();
    for i in 0..3 {
        got.push(
            place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(10 + i, 400))
                .await
                .unwrap(),
        );
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);
    // Reservation: each node has 600 MiB left, so a second round of 400 fits, a third does not.
    for i in 0..3 {
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(20 + i, 400))
            .await
            .unwrap();
    }
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(30, 400)).await,
        Err(StartFailureReason::FullCloud)
    );
    // A READY gives a node its room back.
    a2.send(&Payload::Ready(node_status(u(2), "host2", 1000)));
    let mut pinned = start(31, 100);
    pinned.requirements.node_id = Some(u(2));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], pinned).await,
        Ok(1)
    );
    let mut by_host = start(32, 100);
    by_host.requirements.hostname = Some("host2".into());
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], by_host).await,
        Ok(1)
    );
    let mut unknown = start(33, 1);
    unknown.requirements.node_id = Some(u(0x99));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], unknown).await,
        Err(StartFailureReason::FullCloud)
    );
    // FULL takes a node out.
    a2.send(&Payload::Full(None));
    let mut pinned = start(34, 1);
    pinned.requirements.node_id = Some(u(2));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], pinned).await,
        Err(StartFailureReason::FullCloud)
    );
    s.stop.cancel();
}

#[tokio::test]
async fn a_dual_role_node_takes_both_kinds_of_work() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut dual = peer(
        &pki,
        Role::DUAL,
        u(1),
        &s.addr,
        Some(node_status(u(1), "dual", 1000)),
    )
    .await;
    nodes_seen(&mut c, 2).await;
    let mut cnci = start(1, 600);
    cnci.requirements.network_node = true;
    assert_eq!(place(&mut c, &mut [&mut dual], cnci).await, Ok(0));
    // One account for both lists: 400 MiB left.
    assert_eq!(
        place(&mut c, &mut [&mut dual], start(2, 500)).await,
        Err(StartFailureReason::FullCloud)
    );
    assert_eq!(place(&mut c, &mut [&mut dual], start(3, 400)).await, Ok(0));
    s.stop.cancel();
}
