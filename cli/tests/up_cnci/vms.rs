//! The VM variant of the CNCI test (see the crate's documentation): `cumulo up --backend
//! libvirt --tenant-network cnci` in a network namespace and a private `/run`, each subnet's
//! CNCI a VM of its own, the first instance booted through it.

use super::*;

/// Whether the libvirt tests may run here: `CUMULO_LIBVIRT_URI` says the machine is set up for
/// them (`scripts/test.sh`), and the tools are there. Else skipped with the reason, or failed
/// under `CUMULO_LIBVIRT_REQUIRED=1`.
fn libvirt_or_skip() -> bool {
    let tools = [
        "libvirtd",
        "virtlogd",
        "virsh",
        "qemu-system-x86_64",
        "nsenter",
        "unshare",
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let have = |t: &str| {
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/usr/bin"].map(PathBuf::from))
            .any(|d| d.join(t).is_file())
    };
    let missing: Vec<&str> = tools.into_iter().filter(|t| !have(t)).collect();
    let why = if std::env::var_os("CUMULO_LIBVIRT_URI").is_none() {
        "CUMULO_LIBVIRT_URI is not set (scripts/test.sh sets it up)".to_string()
    } else if !missing.is_empty() {
        format!("{missing:?} not installed")
    } else {
        return true;
    };
    assert!(
        std::env::var("CUMULO_LIBVIRT_REQUIRED").as_deref() != Ok("1"),
        "CUMULO_LIBVIRT_REQUIRED=1 but {why}"
    );
    eprintln!("SKIPPED: {why}");
    false
}

#[test]
fn up_libvirt_with_cnci_vms_in_a_namespace() {
    if !common::binaries_or_skip(BINS) || !netns_or_skip() || !libvirt_or_skip() {
        return;
    }
    // The CNCI guest once out here, where its packages can be fetched (the first time): `up`
    // builds it again inside the namespace, from the cache.
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let warm = tempfile::tempdir().unwrap();
    let cnci_bin = Path::new(CUMULO).parent().unwrap().join("cumulo-cnci");
    let built = Command::new("bash")
        .arg(scripts.join("cnci-guest.sh"))
        .arg(&cnci_bin)
        .arg(warm.path().join("cnci"))
        .output()
        .unwrap();
    assert!(built.status.success(), "cnci-guest.sh: {built:?}");
    let mut cluster = Cluster::with_private_run("vm");
    // Containers beside the VMs, on the same tenant networks.
    let containers = testkit::containers::missing().is_none();
    if containers {
        cluster
            .env
            .insert("CUMULO_AGENT_CONTAINERS".into(), "true".into());
    }
    let root = cluster.root();
    let started = Instant::now();
    let shown = cluster.ok(&[
        "up",
        "--backend",
        "libvirt",
        "--tenant-network",
        "cnci",
        "--dir",
        &root,
    ]);
    eprintln!(
        "cumulo up --backend libvirt --tenant-network cnci: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The first instance booted (its console said so): its CNCI, a VM, came up first.
    assert!(shown.contains("cumulo is up (libvirt backend)"), "{shown}");
    assert!(shown.contains("a private libvirtd started"), "{shown}");
    assert!(shown.contains("CNCI guest image"), "{shown}");
    assert!(shown.contains("active, booted"), "{shown}");
    assert!(shown.contains("Tenant networks: through CNCIs"), "{shown}");
    let env = std::fs::read_to_string(cluster.dir.path().join("env")).unwrap();
    for line in env.lines() {
        if let Some((k, v)) = line.trim_start_matches("export ").split_once('=') {
            cluster.env.insert(k.to_string(), v.to_string());
        }
    }
    let services = cluster.pids();
    let cncis = cluster.json(&["cnci", "list"]);
    let cnci = cncis["cncis"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["state"] == "active").cloned())
        .unwrap_or_else(|| panic!("no active CNCI: {cncis}"));
    assert!(
        cnci["ip"].as_str().unwrap().starts_with("198.18.255."),
        "{cnci}"
    );
    let records = cluster.cnci_records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].1, None, "a VM, not a process: {records:?}");

    // The tenant's data path: a stand-in guest on the subnet's bridge (where the instance's tap
    // is) reaches the CNCI VM, its gateway, over the VXLAN tunnel.
    let cidr = cnci["cidr"].as_str().unwrap();
    let (net, _) = cidr.split_once('/').unwrap();
    let base: std::net::Ipv4Addr = net.parse().unwrap();
    let gateway = std::net::Ipv4Addr::from(u32::from(base) + 1).to_string();
    let guest_ip = format!("{}/{}", std::net::Ipv4Addr::from(u32::from(base) + 250), 24);
    let links = cluster.in_ns("ip", &["-o", "link", "show", "type", "bridge"]);
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    let bridge = links
        .split_whitespace()
        .map(|w| w.trim_end_matches(':'))
        .find(|w| w.starts_with("cb-"))
        .unwrap_or_else(|| panic!("no tenant bridge: {links}"))
        .to_string();
    let guest = format!("cumulo-up-guest-{}", std::process::id());
    for step in [
        vec!["netns", "add", &guest],
        vec![
            "link", "add", "gv0", "type", "veth", "peer", "name", "gv1", "netns", &guest,
        ],
        vec!["link", "set", "gv0", "master", &bridge, "up"],
        vec!["-n", &guest, "link", "set", "gv1", "up"],
        vec!["-n", &guest, "addr", "add", &guest_ip, "dev", "gv1"],
    ] {
        let out = cluster.in_ns("ip", &step);
        assert!(out.status.success(), "ip {step:?}: {out:?}");
    }
    let out = cluster.in_ns(
        "ip",
        &["-n", &guest, "route", "replace", "default", "via", &gateway],
    );
    assert!(
        out.status.success(),
        "the stand-in's default route: {out:?}"
    );
    poll("the CNCI VM answers ping", Duration::from_secs(60), || {
        cluster
            .in_ns(
                "ip",
                &[
                    "netns", "exec", &guest, "ping", "-c", "1", "-W", "2", &gateway,
                ],
            )
            .status
            .success()
            .then_some(())
    });
    tenants_do_not_reach_the_control_plane(&cluster, &guest, "198.18.255.1");
    if let Some(openstack) = common::openstack_or_skip() {
        the_openstack_cli_reaches_a_real_guest(&cluster, &openstack);
        let neighbour = std::net::Ipv4Addr::from(u32::from(base) + 250).to_string();
        if testkit::containers::can_run("up_libvirt_with_cnci_vms_in_a_namespace (containers)") {
            a_container_reaches_its_tenant_network(&cluster, &openstack, &gateway, &neighbour);
        }
    }
    security_groups_guard_a_real_guest(&cluster);
    let _ = cluster.in_ns("ip", &["netns", "del", &guest]);

    let down = cluster.ok(&["down", "--dir", &root, "--purge"]);
    // The first instance, its CNCI, and the listener guest.
    assert!(down.contains("powered off 3 VM(s)"), "{down}");
    assert!(down.contains("deleted link cumulo0"), "{down}");
    // The agent's tenant bridges, tunnels and taps, and its port filters, go too.
    assert!(
        down.contains("deleted tenant network link(s) ct-"),
        "{down}"
    );
    let links = cluster.in_ns("ip", &["-o", "link", "show"]);
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    for prefix in [": cb-", ": cv-", ": ct-", ": cm-"] {
        assert!(!links.contains(prefix), "{prefix} left after down: {links}");
    }
    // The metadata responders' namespaces go with their links.
    let spaces = cluster.in_ns("ip", &["netns", "list"]);
    let spaces = String::from_utf8_lossy(&spaces.stdout).into_owned();
    assert!(!spaces.contains("cumulo-md-"), "{spaces}");
    let tables = cluster.in_ns("nft", &["list", "tables"]);
    let tables = String::from_utf8_lossy(&tables.stdout).into_owned();
    assert!(!tables.contains("cumulo_ports"), "{tables}");
    for (pid, program) in &services {
        assert!(!alive(*pid), "{program} (pid {pid}) still runs after down");
    }
    // No QEMU of the cluster's left (a CNCI stopped while the controller ran would have been
    // started again).
    let domain = format!("guest=cumulo-{}", cnci["id"].as_str().unwrap());
    let qemus: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&domain))
        .collect();
    assert!(
        qemus.is_empty(),
        "the CNCI's QEMU runs after down: {qemus:?}"
    );
    let listed = cluster.in_ns("ip", &["netns", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(!listed.contains("cumulo-cnci-"), "{listed}");
    let link = cluster.in_ns("ip", &["link", "show", "dev", "cumulo0"]);
    assert!(!link.status.success(), "cumulo0 left after down");
}
