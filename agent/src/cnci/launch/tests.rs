use super::*;
use crate::backend::fake::FakeBackend;

fn config(dir: &std::path::Path) -> LaunchConfig {
    LaunchConfig {
        binary: "cumulo-cnci".into(),
        ca_cert: "ca.pem".into(),
        shared: Some(("c.pem".into(), "c.key".into())),
        uplink: "u0".into(),
        addresses: "198.18.0.128/30".parse().unwrap(),
        prefix: 24,
        servers: vec!["localhost:8888".into()],
        tunnel: "vxlan".into(),
        vxlan_port: 4789,
        dir: dir.to_owned(),
        vm_image: None,
        tap_netns: None,
        floating: "192.168.233.0/24".parse().unwrap(),
        protect: vec!["10.9.0.0/16".parse().unwrap()],
    }
}

#[test]
fn addresses_are_the_lowest_free_hosts_of_the_pool_and_records_are_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let l = CnciLauncher::new(FakeBackend::default(), Some(config(dir.path()))).unwrap();
    let (a, b, c) = (Uuid::from_u128(7), Uuid::from_u128(8), Uuid::from_u128(9));
    assert_eq!(l.allocate(a).unwrap(), Ipv4Addr::new(198, 18, 0, 129));
    // Reserved for its owner: asking again for it gives it again, another gets the next.
    assert_eq!(l.allocate(a).unwrap(), Ipv4Addr::new(198, 18, 0, 129));
    let r = Record {
        tenant: Uuid::from_u128(1),
        ns: ns_name(a),
        ip: Ipv4Addr::new(198, 18, 0, 129),
        pid: None,
        vm: false,
        seeded: None,
    };
    l.save(a, &r).unwrap();
    l.lock().records.insert(a, r.clone());
    assert_eq!(l.allocate(b).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
    assert!(
        matches!(l.allocate(c), Err(BackendError::Network(_))),
        "a /30 has two hosts"
    );
    // A released owner's address is free again.
    l.release(b);
    assert_eq!(l.allocate(c).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
    std::fs::write(dir.path().join("junk.json"), b"{").unwrap();
    std::fs::write(dir.path().join("x.log"), b"log").unwrap();
    let again = CnciLauncher::new(FakeBackend::default(), Some(config(dir.path()))).unwrap();
    assert_eq!(again.lock().records.get(&a), Some(&r));
    assert_eq!(again.lock().records.len(), 1);
    // The recorded CNCI's address is held again after the restart.
    assert_eq!(again.allocate(b).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
    assert!(ns_name(a).len() <= 24);
}

/// Two launchers sharing one reservation store (as off-host launchers share etcd) never
/// hand out one address twice; a launcher whose recorded address another holds refuses
/// to start.
#[test]
fn launchers_sharing_reservations_never_take_one_address_twice() {
    let shared: Arc<dyn ReservationStore> = Arc::new(MemoryReservations::new());
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let l1 = CnciLauncher::new(FakeBackend::default(), Some(config(d1.path())))
        .unwrap()
        .with_reservations(shared.clone())
        .unwrap();
    let l2 = CnciLauncher::new(FakeBackend::default(), Some(config(d2.path())))
        .unwrap()
        .with_reservations(shared.clone())
        .unwrap();
    let first = l1.allocate(Uuid::from_u128(1)).unwrap();
    let second = l2.allocate(Uuid::from_u128(2)).unwrap();
    assert_ne!(first, second);
    assert!(l1.allocate(Uuid::from_u128(3)).is_err(), "the /30 is full");
    let held = shared.reservations(ADDRESS_POOL).unwrap();
    assert_eq!(held.len(), 2);
    // A record of d1 whose address is held by another owner in the shared store.
    let r = Record {
        tenant: Uuid::from_u128(1),
        ns: ns_name(Uuid::from_u128(4)),
        ip: second,
        pid: None,
        vm: false,
        seeded: None,
    };
    std::fs::write(
        d1.path().join(format!("{}.json", Uuid::from_u128(4))),
        serde_json::to_vec(&r).unwrap(),
    )
    .unwrap();
    let clash = CnciLauncher::new(FakeBackend::default(), Some(config(d1.path())))
        .unwrap()
        .with_reservations(shared);
    assert!(matches!(clash, Err(BackendError::Network(_))));
}

/// The clean-up removes the records and logs, but signals only a live `cumulo-cnci` and
/// deletes only a namespace named as the launcher names them.
#[test]
fn the_clean_up_touches_only_what_the_records_name_as_ours() {
    let dir = tempfile::tempdir().unwrap();
    let id = Uuid::from_u128(0xc1);
    // A live process that is not a CNCI under the recorded PID (reused since).
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let r = Record {
        tenant: Uuid::from_u128(1),
        // Not this CNCI's namespace name: never deleted.
        ns: "not-ours".into(),
        ip: Ipv4Addr::new(198, 18, 0, 129),
        pid: Some(i32::try_from(other.id()).unwrap()),
        vm: false,
        seeded: None,
    };
    let record = dir.path().join(format!("{id}.json"));
    std::fs::write(&record, serde_json::to_vec(&r).unwrap()).unwrap();
    std::fs::write(dir.path().join(format!("{id}.log")), b"log").unwrap();
    // Not records: left alone.
    let big = dir.path().join(format!("{}.json", Uuid::from_u128(0xc2)));
    std::fs::write(&big, vec![b' '; 100 * 1024]).unwrap();
    std::fs::write(dir.path().join("notes.json"), b"{}").unwrap();
    assert_eq!(
        clean_up(dir.path(), Duration::from_millis(100)),
        Vec::<String>::new()
    );
    assert!(!record.exists() && !dir.path().join(format!("{id}.log")).exists());
    assert!(big.exists() && dir.path().join("notes.json").exists());
    assert_eq!(other.try_wait().unwrap(), None, "not a CNCI: not signalled");
    other.kill().unwrap();
    other.wait().unwrap();
    assert!(clean_up(&dir.path().join("missing"), Duration::ZERO).is_empty());
}

/// The same over a real etcd (skipped without one unless `CUMULO_REQUIRE_ETCD=1`): every
/// reservation is an etcd transaction, so launchers in different processes agree too.
#[test]
fn launchers_sharing_an_etcd_store_never_take_one_address_twice() {
    let Some(etcd) = testkit::etcd::shared() else {
        return;
    };
    let prefix = format!("cnci-{}", Uuid::new_v4().simple());
    let open = || -> Arc<dyn ReservationStore> {
        let tls = store::EtcdTransport::Tls(etcd.identity("cumulo-launcher"));
        Arc::new(store::EtcdStore::connect(&[etcd.endpoint()], &prefix, &tls).unwrap())
    };
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let launchers: Vec<_> = dirs
        .iter()
        .map(|d| {
            CnciLauncher::new(FakeBackend::default(), Some(config(d.path())))
                .unwrap()
                .with_reservations(open())
                .unwrap()
        })
        .collect();
    let got: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = launchers
            .iter()
            .enumerate()
            .map(|(n, l)| s.spawn(move || l.allocate(Uuid::from_u128(n as u128 + 1))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    assert_ne!(got[0], got[1]);
    let held = open().reservations(ADDRESS_POOL).unwrap();
    assert_eq!(held.len(), 2);
    launchers[0].release(Uuid::from_u128(1));
    assert_eq!(open().reservations(ADDRESS_POOL).unwrap().len(), 1);
}

#[test]
fn a_vm_gets_its_settings_and_credentials_in_its_user_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    for (name, text) in [("ca.pem", "CA\n"), ("c.pem", "CERT"), ("c.key", "KEY\n\n")] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    c.ca_cert = dir.path().join("ca.pem");
    c.shared = Some((dir.path().join("c.pem"), dir.path().join("c.key")));
    let r = Record {
        tenant: Uuid::from_u128(1),
        ns: ns_name(Uuid::from_u128(7)),
        ip: Ipv4Addr::new(198, 18, 0, 129),
        pid: None,
        vm: true,
        seeded: None,
    };
    let text = vm_user_data(&c, Uuid::from_u128(7), &r).unwrap();
    // What it protects: its compute network, this machine's own addresses (which vary), the
    // configured network.
    let protect = text
        .lines()
        .find_map(|l| l.strip_prefix("CUMULO_CNCI_PROTECT="))
        .expect("CUMULO_CNCI_PROTECT")
        .to_string();
    assert_eq!(protect, protected(&c, r.ip, &node_addresses()));
    assert!(protect.contains("198.18.0.0/24"), "{protect}");
    assert!(protect.contains("10.9.0.0/16"), "{protect}");
    let text = text.replace(&format!("CUMULO_CNCI_PROTECT={protect}\n"), "");
    assert_eq!(
        text,
        "#cumulo-cnci\n\
         CUMULO_CNCI_UUID=00000000-0000-0000-0000-000000000007\n\
         CUMULO_CNCI_TENANT=00000000-0000-0000-0000-000000000001\n\
         CUMULO_CNCI_IP=198.18.0.129\n\
         CUMULO_CNCI_PREFIX=24\n\
         CUMULO_CNCI_LINK_ADDR=169.254.0.2/24\n\
         CUMULO_CNCI_SCHEDULER=localhost:8888\n\
         CUMULO_CNCI_VIA=169.254.0.1:8443\n\
         CUMULO_CNCI_ROUTE_VIA=169.254.0.1:8444\n\
         CUMULO_CNCI_TUNNEL=vxlan\n\
         CUMULO_CNCI_VXLAN_PORT=4789\n\
         --- file ca.pem\nCA\n--- file cert.pem\nCERT\n--- file key.pem\nKEY\n"
    );
    assert_eq!(vm_mac(r.ip), [2, 0xcc, 198, 18, 0, 129]);
    // A value the guest's shell would have to quote is refused, not passed on.
    c.servers = vec!["localhost:8888; reboot".into()];
    assert!(matches!(
        vm_user_data(&c, Uuid::from_u128(7), &r),
        Err(BackendError::Launch(_))
    ));
    c.servers = vec!["localhost:8888".into()];
    // The CNCI's own credentials, from its START, win over the node's shared ones.
    let (own_cert, own_key) = credentials::paths(dir.path(), Uuid::from_u128(7));
    std::fs::write(&own_cert, "OWN CERT\n").unwrap();
    std::fs::write(&own_key, "OWN KEY\n").unwrap();
    let text = vm_user_data(&c, Uuid::from_u128(7), &r).unwrap();
    assert!(
        text.ends_with("--- file cert.pem\nOWN CERT\n--- file key.pem\nOWN KEY\n"),
        "{text}"
    );
    assert!(
        vm_user_data(&c, Uuid::from_u128(8), &r)
            .unwrap()
            .contains("\nCERT\n")
    );
    // Neither its own nor shared ones: refused with why.
    c.shared = None;
    let err = vm_user_data(&c, Uuid::from_u128(8), &r).unwrap_err();
    assert!(err.to_string().contains("no --cnci-cert"), "{err}");
    c.shared = Some((dir.path().join("c.pem"), dir.path().join("missing.key")));
    assert!(vm_user_data(&c, Uuid::from_u128(8), &r).is_err());
}

#[test]
fn the_protected_networks_are_the_compute_network_the_nodes_addresses_and_the_configured() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    let node = [Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(203, 0, 113, 9)];
    // 198.18.0.1 is inside the compute network: one interval, not two.
    assert_eq!(
        protected(&c, Ipv4Addr::new(198, 18, 0, 129), &node),
        "10.9.0.0/16,198.18.0.0/24,203.0.113.9/32"
    );
    let text = "1: lo    inet 127.0.0.1/8 scope host lo\n\
                2: eth0    inet 203.0.113.9/24 brd 203.0.113.255 scope global eth0\n\
                3: cumulo0    inet 198.18.0.1/24 scope global cumulo0\n\
                3: cumulo0    inet 198.18.0.1/24 scope global secondary cumulo0\n";
    assert_eq!(parse_addresses(text), node);
}

#[test]
fn only_cnci_starts_are_intercepted() {
    let mut meta = BTreeMap::new();
    meta.insert(ssntp::payload::ROLE_KEY.to_string(), "cnci".to_string());
    let spec = |role, meta_data| InstanceSpec {
        instance: Uuid::from_u128(7),
        tenant: Uuid::from_u128(1),
        workload: Uuid::nil(),
        kind: crate::model::VmKind::Sim,
        role,
        firmware: crate::model::Firmware::Legacy,
        image: "x".into(),
        resources: crate::model::Resources::default(),
        nic: None,
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: None,
        meta_data,
        restart: false,
        kernel: None,
    };
    assert!(is_cnci(&spec(InstanceRole::Cnci, meta.clone())));
    assert!(!is_cnci(&spec(InstanceRole::Workload, BTreeMap::new())));
    // The role is the spec's: meta data alone does not make a CNCI once the role is read...
    assert!(!is_cnci(&spec(InstanceRole::Workload, meta.clone())));
    // ...except in a record written before the field existed, which the store settles.
    let mut old = serde_json::to_value(spec(InstanceRole::Workload, meta)).unwrap();
    old.as_object_mut().unwrap().remove("role");
    let mut record: InstanceSpec = serde_json::from_value(old).unwrap();
    assert_eq!(record.role, InstanceRole::Workload);
    record.settle_role();
    assert!(is_cnci(&record));
    let mut workload = spec(InstanceRole::Workload, BTreeMap::new());
    workload.settle_role();
    assert!(!is_cnci(&workload));
}
