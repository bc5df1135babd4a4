//! Floating IPs on their CNCIs: the commands that go when the store's associations change, the
//! status the CNCI's answers give, a CNCI that comes back, an instance that goes, what is not
//! answered, and answers from the wrong CNCI.

use super::*;
use ssntp::payload::{PublicIpCommand, PublicIpEvent, PublicIpFailure, PublicIpFailureReason};
use store::{FloatingIpChange, NewFloatingIp};

use crate::cluster::FloatingStatus;

/// A world with tenant networks: one instance whose subnet's CNCI is active, and a floating IP
/// allocated (not associated). Returns the world, the instance, the CNCI and the floating IP.
fn mapped_world() -> (World, Instance, store::Cnci, store::FloatingIp) {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1).remove(0);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.event(added(&cnci));
    w.out.take();
    let ip = w
        .engine
        .store()
        .create_floating_ip(NewFloatingIp {
            tenant: w.tenant,
            pool: "192.168.233.0/24".parse().unwrap(),
            address: None,
            description: String::new(),
            port: None,
            fixed_ip: None,
        })
        .unwrap();
    let instance = w.instance(made.id);
    // The first sweep with a session sends every tenant's mappings: none yet.
    w.engine.sweep(SystemTime::now()).unwrap();
    assert!(commands(&w.out.take()).is_empty());
    (w, instance, cnci, ip)
}

fn associate(w: &World, ip: &store::FloatingIp, port: Option<Uuid>) {
    w.engine
        .store()
        .update_floating_ip(
            w.tenant,
            ip.id,
            FloatingIpChange {
                port: Some(port),
                ..FloatingIpChange::default()
            },
        )
        .unwrap();
    w.engine.floating_ips_changed(w.tenant);
}

fn commands(sent: &[Payload]) -> Vec<(bool, &PublicIpCommand)> {
    sent.iter()
        .filter_map(|p| match p {
            Payload::AssignPublicIp(c) => Some((true, c)),
            Payload::ReleasePublicIp(c) => Some((false, c)),
            _ => None,
        })
        .collect()
}

fn answer(cnci: Uuid, c: &PublicIpCommand) -> PublicIpEvent {
    PublicIpEvent {
        concentrator_uuid: cnci,
        instance_uuid: c.instance_uuid,
        public_ip: c.public_ip,
        private_ip: c.private_ip,
    }
}

#[test]
fn associating_sends_assign_to_the_instances_cnci_and_its_answer_makes_it_active() {
    let (w, instance, cnci, ip) = mapped_world();
    // Allocated only: nothing to map.
    w.engine.floating_ips_changed(w.tenant);
    assert!(commands(&w.out.take()).is_empty());
    assert_eq!(
        w.engine.floating_ip_status(ip.address, None),
        FloatingStatus::Down
    );

    associate(&w, &ip, Some(instance.id));
    let sent = w.out.take();
    let c = commands(&sent);
    assert_eq!(c.len(), 1, "{sent:?}");
    let (assign, cmd) = c[0];
    assert!(assign);
    assert_eq!(cmd.concentrator_uuid, cnci.id);
    assert_eq!(cmd.tenant_uuid, w.tenant);
    assert_eq!(cmd.instance_uuid, instance.id);
    assert_eq!(cmd.public_ip, IpAddr::V4(ip.address));
    assert_eq!(cmd.private_ip, IpAddr::V4(instance.ip));
    assert_eq!(cmd.vnic_mac, instance.mac);
    // Sent, not confirmed.
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Down
    );
    // A change that leaves it as it is sends nothing again.
    w.engine.floating_ips_changed(w.tenant);
    assert!(commands(&w.out.take()).is_empty());

    w.engine
        .handle_from(
            cnci.id,
            &Payload::PublicIpAssigned(answer(cnci.id, cmd)),
            SystemTime::now(),
        )
        .unwrap();
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Active
    );
    // Another port's view of the address is not active.
    assert_eq!(
        w.engine
            .floating_ip_status(ip.address, Some(Uuid::new_v4())),
        FloatingStatus::Down
    );

    // Disassociated: RELEASE, with what was mapped.
    associate(&w, &ip, None);
    let sent = w.out.take();
    let c = commands(&sent);
    assert_eq!(c.len(), 1, "{sent:?}");
    assert!(!c[0].0);
    assert_eq!(c[0].1.private_ip, IpAddr::V4(instance.ip));
    assert_eq!(
        w.engine.floating_ip_status(ip.address, None),
        FloatingStatus::Down
    );
    w.engine
        .handle_from(
            cnci.id,
            &Payload::PublicIpUnassigned(answer(cnci.id, c[0].1)),
            SystemTime::now(),
        )
        .unwrap();
    // Answered: the sweep sends it no more.
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(10))
        .unwrap();
    assert!(commands(&w.out.take()).is_empty());
}

#[test]
fn unanswered_commands_go_again_and_a_release_is_given_up_after_its_tries() {
    let (w, instance, _cnci, ip) = mapped_world();
    associate(&w, &ip, Some(instance.id));
    assert_eq!(commands(&w.out.take()).len(), 1);
    // Not yet due.
    w.engine.sweep(SystemTime::now()).unwrap();
    assert!(commands(&w.out.take()).is_empty());
    let later = SystemTime::now() + crate::engine::public_ip::RESEND;
    w.engine.sweep(later).unwrap();
    let sent = w.out.take();
    let c = commands(&sent);
    assert_eq!(c.len(), 1, "{sent:?}");
    assert!(c[0].0, "ASSIGN again");

    associate(&w, &ip, None);
    assert_eq!(commands(&w.out.take()).len(), 1);
    let mut t = SystemTime::now();
    let mut releases = 1;
    for _ in 0..10 {
        t += crate::engine::public_ip::RESEND;
        w.engine.sweep(t).unwrap();
        releases += commands(&w.out.take()).len();
    }
    assert_eq!(releases, crate::engine::public_ip::RELEASE_TRIES as usize);
}

#[test]
fn a_cnci_that_announces_itself_again_gets_its_mappings_again() {
    let (w, instance, cnci, ip) = mapped_world();
    associate(&w, &ip, Some(instance.id));
    let sent = w.out.take();
    let (_, cmd) = commands(&sent)[0];
    w.event(Payload::PublicIpAssigned(answer(cnci.id, cmd)));
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Active
    );
    // Its VM restarted: it lost its NAT state.
    w.event(added(&cnci));
    let sent = w.out.take();
    let c = commands(&sent);
    assert_eq!(c.len(), 1, "{sent:?}");
    assert!(c[0].0);
    assert_eq!(c[0].1.public_ip, IpAddr::V4(ip.address));
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Down
    );
}

#[test]
fn a_refusal_is_an_error_status_and_an_event_and_a_later_change_asks_again() {
    let (w, instance, cnci, ip) = mapped_world();
    associate(&w, &ip, Some(instance.id));
    let sent = w.out.take();
    let (_, cmd) = commands(&sent)[0];
    let failure = PublicIpFailure {
        concentrator_uuid: Some(cnci.id),
        tenant_uuid: Some(w.tenant),
        instance_uuid: instance.id,
        public_ip: Some(cmd.public_ip),
        private_ip: Some(cmd.private_ip),
        vnic_mac: Some(cmd.vnic_mac),
        reason: PublicIpFailureReason::AssignFailure,
    };
    w.engine
        .handle_from(
            cnci.id,
            &Payload::AssignPublicIpFailure(failure),
            SystemTime::now(),
        )
        .unwrap();
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Error
    );
    assert!(
        w.events()
            .iter()
            .any(|e| e.contains(&ip.address.to_string()) && e.contains("assign_failure")),
        "{:?}",
        w.events()
    );
    // The sweep does not hammer a CNCI that refused; the tenant's next change asks again.
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    assert!(commands(&w.out.take()).is_empty());
    w.engine.floating_ips_changed(w.tenant);
    assert_eq!(commands(&w.out.take()).len(), 1);
}

#[test]
fn an_answer_from_another_cnci_is_refused() {
    let (w, instance, cnci, ip) = mapped_world();
    associate(&w, &ip, Some(instance.id));
    let sent = w.out.take();
    let (_, cmd) = commands(&sent)[0];
    let other = Uuid::new_v4();
    // Claims to be the instance's CNCI.
    w.engine
        .handle_from(
            other,
            &Payload::PublicIpAssigned(answer(cnci.id, cmd)),
            SystemTime::now(),
        )
        .unwrap();
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Down
    );
    assert!(
        w.engine
            .reports_refused()
            .iter()
            .any(|(f, n)| *f == "PUBLIC_IP_ASSIGNED" && *n == 1)
    );
    // Its own word about itself, for a mapping it was not asked for, changes nothing either.
    w.engine
        .handle_from(
            other,
            &Payload::PublicIpAssigned(answer(other, cmd)),
            SystemTime::now(),
        )
        .unwrap();
    assert_eq!(
        w.engine.floating_ip_status(ip.address, Some(instance.id)),
        FloatingStatus::Down
    );
}

#[test]
fn a_deleted_instance_has_its_mapping_released() {
    let (w, instance, cnci, ip) = mapped_world();
    w.node_connected(NODE, NodeType::ComputeNode);
    associate(&w, &ip, Some(instance.id));
    let sent = w.out.take();
    let (_, cmd) = commands(&sent)[0];
    w.event(Payload::PublicIpAssigned(answer(cnci.id, cmd)));
    w.engine
        .delete(Scope::All, instance.id, &Caller::default())
        .unwrap();
    w.out.take();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: instance.id,
    }));
    let sent = w.out.take();
    let c = commands(&sent);
    assert_eq!(c.len(), 1, "{sent:?}");
    assert!(!c[0].0, "RELEASE");
    assert_eq!(c[0].1.instance_uuid, instance.id);
    assert!(
        w.engine
            .store()
            .floating_ips(w.tenant)
            .unwrap()
            .iter()
            .all(|f| f.port.is_none())
    );
}
