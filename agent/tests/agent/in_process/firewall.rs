//! Firewall updates through the core: applied through the backend, kept in the record, a late
//! older revision ignored, and the newest applied again after a restart.

use super::*;
use agent::FirewallRefusal;
use agent::model::NicSpec;
use ssntp::payload::{Firewall, FirewallDirection, FirewallRule};

fn firewall(revision: u64, port: u16) -> Firewall {
    Firewall {
        revision,
        rules: vec![FirewallRule {
            direction: FirewallDirection::Ingress,
            protocol: Some(6),
            port_min: Some(port),
            port_max: Some(port),
            remote: None,
        }],
    }
}

fn with_nic(n: u128) -> InstanceSpec {
    let mut s = spec(n, "debian");
    s.nic = Some(NicSpec {
        mac: [2, 0, 0, 0, 0, 1],
        vnic_uuid: id(n + 100),
        concentrator_uuid: id(7),
        concentrator_ip: "198.18.0.100".parse().unwrap(),
        subnet_addr: "10.250.0.0".parse().unwrap(),
        subnet_prefix: 24,
        subnet_key: 9,
        private_ip: "10.250.0.5".parse().unwrap(),
        public_ip: false,
        firewall: Some(firewall(1, 22)),
    });
    s
}

fn recorded(dir: &Path, n: u128) -> Option<Firewall> {
    let records = Store::open(dir).unwrap().load().unwrap().records;
    let r = records.into_iter().find(|r| r.spec.instance == id(n))?;
    r.spec.nic?.firewall
}

#[tokio::test(start_paused = true)]
async fn a_newer_firewall_is_applied_kept_and_applied_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(with_nic(1)).unwrap();
    core.start(spec(2, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    wait_event(&reporter, active(2)).await;

    assert_eq!(core.set_firewall(id(1), firewall(2, 80)).await, Ok(()));
    let filtered = backend.filtered();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].1.firewall, Some(firewall(2, 80)));
    assert_eq!(recorded(dir.path(), 1), Some(firewall(2, 80)));
    // A late older (or equal) revision changes nothing.
    assert_eq!(core.set_firewall(id(1), firewall(1, 443)).await, Ok(()));
    assert_eq!(core.set_firewall(id(1), firewall(2, 443)).await, Ok(()));
    assert_eq!(backend.filtered().len(), 1);
    assert_eq!(recorded(dir.path(), 1), Some(firewall(2, 80)));

    assert_eq!(
        core.set_firewall(id(2), firewall(1, 22)).await,
        Err(FirewallRefusal::NoNic)
    );
    assert_eq!(
        core.set_firewall(id(3), firewall(1, 22)).await,
        Err(FirewallRefusal::NotFound)
    );

    core.shutdown().await.unwrap();
    let (core, _reporter) = spawn(dir.path(), &backend).await;
    wait_until("the NIC filtered again", || backend.filtered().len() == 2).await;
    let again = backend.filtered().pop().unwrap();
    assert_eq!(again, (id(1), with_nic_rev2()));
    drop(core);
}

fn with_nic_rev2() -> NicSpec {
    let mut nic = with_nic(1).nic.unwrap();
    nic.firewall = Some(firewall(2, 80));
    nic
}
