//! What a tenant's guests reach, and what reaches them, in a cluster with CNCI VMs: the
//! metadata service, a floating IP and security groups on a real guest (through the API, and
//! the whole sequence through the `openstack` CLI), and the control plane kept out of reach.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::probe::{connect_from, listen};
use super::{Cluster, poll};

/// Runs the `openstack` CLI in the cluster's namespace with its login; it must succeed: its
/// output.
fn openstack_cli(cluster: &Cluster, openstack: &Path, args: &[&str]) -> String {
    let out = cluster
        .command_in_ns(openstack.to_str().unwrap(), args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openstack {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A key pair's public key (its private half was thrown away).
const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOqfE3aLzdFWx7/HOPj8pmrrrIdHLDoaIWLFn+0rVrmF cumulo-test";

/// A real guest reached the way an OpenStack user reaches one, every step through the
/// `openstack` CLI with the login `up` wrote: `keypair create --public-key`, `server create
/// --key-name --user-data --wait` (the tiny guest takes its address by DHCP, reads its ID and
/// key from the metadata service at 169.254.169.254, answers TCP on port 8083), `console log
/// show` (the metadata the guest read: its own ID, host name and key), `floating ip create
/// public`, `server add floating ip`: from the host nothing gets in while the `default` group
/// holds; `security group rule create --ingress --protocol tcp --dst-port 8083 default`: it
/// does; `server remove floating ip`: it does not; `server add floating ip` again: it does;
/// `security group rule delete`: it does not; then `floating ip delete`, `server delete --wait`,
/// `keypair delete`. The time from create to the metadata's answer is a figure.
pub fn the_openstack_cli_reaches_a_real_guest(cluster: &Cluster, openstack: &Path) {
    let cli = |args: &[&str]| openstack_cli(cluster, openstack, args);
    let json = |args: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.extend(["-f", "json"]);
        let text = cli(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    };
    let dir = cluster.dir.path();
    let key_file = dir.join("os-key.pub");
    std::fs::write(&key_file, format!("{PUBLIC_KEY}\n")).unwrap();
    let data = dir.join("os-guest-user-data");
    std::fs::write(
        &data,
        "cumulo-test: dhcp\ncumulo-test: metadata\ncumulo-test: listen 8083\n",
    )
    .unwrap();
    cli(&[
        "keypair",
        "create",
        "--public-key",
        key_file.to_str().unwrap(),
        "os-key",
    ]);
    let started = Instant::now();
    let server = json(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        "tiny",
        "--key-name",
        "os-key",
        "--user-data",
        data.to_str().unwrap(),
        "--wait",
        "os-guest",
    ]);
    let id = server["id"].as_str().unwrap().to_string();
    let log = poll(
        "the guest's metadata and listener on its console",
        Duration::from_secs(180),
        || {
            let log = cli(&["console", "log", "show", "os-guest"]);
            for failed in ["CUMULO-GUEST-NOADDR", "CUMULO-GUEST-NOMETA"] {
                assert!(!log.contains(failed), "{failed}: {log}");
            }
            (log.contains("CUMULO-GUEST-META-JSON") && log.contains("CUMULO-GUEST-LISTEN"))
                .then_some(log)
        },
    );
    eprintln!(
        "metadata: openstack server create to the guest's answer from 169.254.169.254 on its console: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        log.contains(&format!("CUMULO-GUEST-META-ID {id} {id}")),
        "the EC2 instance ID is not the guest's: {log}"
    );
    let line = log
        .lines()
        .find_map(|l| l.split_once(&format!("CUMULO-GUEST-META-JSON {id} ")))
        .map(|(_, json)| json.trim())
        .unwrap();
    let meta: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(meta["uuid"], id.as_str(), "{meta}");
    assert_eq!(meta["hostname"], "os-guest", "{meta}");
    assert_eq!(meta["public_keys"]["os-key"], PUBLIC_KEY, "{meta}");

    let fip = json(&["floating", "ip", "create", "public"]);
    let public = fip["floating_ip_address"].as_str().unwrap().to_string();
    cli(&["server", "add", "floating", "ip", "os-guest", &public]);
    let hello = format!("CUMULO-GUEST-HELLO {id}");
    let connect = || connect_from(cluster, None, &public, 8083);
    let answered = |what: &str| {
        poll(what, Duration::from_secs(30), || {
            (connect() == hello).then_some(())
        })
    };
    let refused = |what: &str| {
        poll(what, Duration::from_secs(30), || {
            connect().starts_with("failed").then_some(())
        })
    };
    refused("no way in through the default group");
    let rule = json(&[
        "security",
        "group",
        "rule",
        "create",
        "--ingress",
        "--protocol",
        "tcp",
        "--dst-port",
        "8083",
        "default",
    ]);
    answered("a way in once the rule is there");
    cli(&["server", "remove", "floating", "ip", "os-guest", &public]);
    refused("no way in once the floating IP is removed");
    cli(&["server", "add", "floating", "ip", "os-guest", &public]);
    answered("a way in once the floating IP is back");
    cli(&[
        "security",
        "group",
        "rule",
        "delete",
        rule["id"].as_str().unwrap(),
    ]);
    refused("no way in once the rule is deleted");
    cli(&["floating", "ip", "delete", &public]);
    cli(&["server", "delete", "--wait", "os-guest"]);
    cli(&["keypair", "delete", "os-key"]);
    let left = json(&["server", "list"]);
    assert!(
        !left.to_string().contains(&id),
        "the server is still listed: {left}"
    );
}

/// A real guest behind its port's firewall and its floating IP: the tiny guest takes its
/// address by DHCP from its CNCI VM and answers TCP on port 8082 (its user data asks for both).
/// From the host, through the floating IP (the node's route, the CNCI VM's DNAT, the VXLAN
/// tunnel): nothing gets in while only the `default` group's rules hold (ingress from members
/// only); a connection does once an ingress rule for the port is added, and no longer once the
/// rule is deleted (rule changes reach the node live); with the rule back, disassociating the
/// floating IP cuts it off, associating it again lets it through, and releasing it cuts it off.
/// The delays are figures.
pub fn security_groups_guard_a_real_guest(cluster: &Cluster) {
    let data = cluster.dir.path().join("listener-user-data");
    std::fs::write(&data, "cumulo-test: dhcp\ncumulo-test: listen 8082\n").unwrap();
    cluster.ok(&[
        "workload",
        "create",
        "--name",
        "listener",
        "--flavor",
        "tiny",
        "--image",
        "tiny",
        "--user-data",
        data.to_str().unwrap(),
    ]);
    let made = cluster.json(&[
        "instance",
        "create",
        "--workload",
        "listener",
        "--name",
        "listener",
        "--wait",
    ]);
    let id = made[0]["id"].as_str().unwrap().to_string();
    let private = made[0]["ip"].as_str().unwrap().to_string();
    let said = poll(
        "the listener guest's address and listener on its console",
        Duration::from_secs(120),
        || {
            let log = cluster.ok(&["instance", "console", &id, "--lines", "200"]);
            if log.contains("CUMULO-GUEST-NOADDR") {
                panic!("the guest got no address by DHCP: {log}");
            }
            log.contains("CUMULO-GUEST-LISTEN").then_some(log)
        },
    );
    assert!(
        said.contains(&format!("CUMULO-GUEST-ADDR {id} {private}")),
        "the guest's DHCP address is not its port's ({private}): {said}"
    );
    let (fip_id, public) = cluster.floating_ip();
    let fip_path = format!("/network/v2.0/floatingips/{fip_id}");
    let associate = |port: Value| {
        cluster.api("PUT", &fip_path, &json!({"floatingip": {"port_id": port}}));
    };
    associate(json!(id));
    poll("the floating IP ACTIVE", Duration::from_secs(60), || {
        let f = cluster.api("GET", &fip_path, &Value::Null);
        (f["floatingip"]["status"] == "ACTIVE").then_some(())
    });
    let hello = format!("CUMULO-GUEST-HELLO {id}");
    let connect = || connect_from(cluster, None, &public, 8082);
    // When the first answered (or refused) attempt began, from `since`: a refused attempt waits
    // out its 2 s timeout, so the time it began is what counts.
    let answered = |what: &str, since: Instant| {
        poll(what, Duration::from_secs(30), || {
            let began = since.elapsed();
            (connect() == hello).then_some(began)
        })
    };
    let refused = |what: &str, since: Instant| {
        poll(what, Duration::from_secs(30), || {
            let began = since.elapsed();
            connect().starts_with("failed").then_some(began)
        })
    };
    // The default group lets in only its members: not the host.
    for _ in 0..3 {
        let answer = connect();
        assert!(
            answer.starts_with("failed"),
            "the host reached the guest without a rule: {answer}"
        );
    }
    let groups = cluster.api("GET", "/network/v2.0/security-groups", &Value::Null);
    let default = groups["security_groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "default"))
        .unwrap_or_else(|| panic!("no default group: {groups}"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let add_rule = || {
        let rule = cluster.api(
            "POST",
            "/network/v2.0/security-group-rules",
            &json!({"security_group_rule": {"security_group_id": default, "direction": "ingress",
                "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 8082,
                "port_range_max": 8082, "remote_ip_prefix": "0.0.0.0/0"}}),
        );
        rule["security_group_rule"]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let asked = Instant::now();
    let rule = add_rule();
    let took = answered("a connection once the rule is there", asked);
    eprintln!(
        "FIGURE security group rule added -> the first answered connection to a real guest through its floating IP began {:.0} ms later",
        took.as_secs_f64() * 1000.0
    );
    let asked = Instant::now();
    cluster.api(
        "DELETE",
        &format!("/network/v2.0/security-group-rules/{rule}"),
        &Value::Null,
    );
    let took = refused("no connection once the rule is deleted", asked);
    eprintln!(
        "FIGURE security group rule deleted -> the first refused connection began {:.0} ms later",
        took.as_secs_f64() * 1000.0
    );
    add_rule();
    answered("a connection with the rule back", Instant::now());
    associate(Value::Null);
    refused(
        "no connection once the floating IP is disassociated",
        Instant::now(),
    );
    let asked = Instant::now();
    associate(json!(id));
    let took = answered(
        "a connection once the floating IP is associated again",
        asked,
    );
    eprintln!(
        "FIGURE floating IP {public} -> {private} (a real guest behind a CNCI VM): associated -> the first answered connection from the host began {:.0} ms later",
        took.as_secs_f64() * 1000.0
    );
    cluster.api("DELETE", &fip_path, &Value::Null);
    refused(
        "no connection once the floating IP is released",
        Instant::now(),
    );
}

/// From the stand-in guest `guest` (a tenant's address behind the CNCI VM): a listener on the
/// host's compute-network address (`host_ip`, where a management service would listen) is not
/// reached, one in a namespace beyond the host (the outside world, through the CNCI's NAT) is.
pub fn tenants_do_not_reach_the_control_plane(cluster: &Cluster, guest: &str, host_ip: &str) {
    let world = format!("cumulo-up-world-{}", std::process::id());
    for step in [
        vec!["netns", "add", &world],
        vec![
            "link", "add", "wv0", "type", "veth", "peer", "name", "wv1", "netns", &world,
        ],
        vec!["addr", "add", "203.0.113.1/24", "dev", "wv0"],
        vec!["link", "set", "wv0", "up"],
        vec!["-n", &world, "link", "set", "wv1", "up"],
        vec!["-n", &world, "addr", "add", "203.0.113.2/24", "dev", "wv1"],
        vec![
            "-n",
            &world,
            "route",
            "add",
            "default",
            "via",
            "203.0.113.1",
        ],
    ] {
        let out = cluster.in_ns("ip", &step);
        assert!(out.status.success(), "ip {step:?}: {out:?}");
    }
    let host = listen(cluster, None, 8081, "the host");
    let outside = listen(cluster, Some(&world), 8081, "the outside");
    // The host itself reaches both (the listeners work).
    assert_eq!(connect_from(cluster, None, host_ip, 8081), "the host");
    assert_eq!(
        connect_from(cluster, None, "203.0.113.2", 8081),
        "the outside"
    );
    // The guest reaches the outside through the CNCI's NAT...
    let said = poll(
        "the guest reaching the outside",
        Duration::from_secs(30),
        || {
            let said = connect_from(cluster, Some(guest), "203.0.113.2", 8081);
            (said == "the outside").then_some(said)
        },
    );
    assert_eq!(said, "the outside");
    // ...and not the host's management address, nor the CNCI's relay.
    let refused = connect_from(cluster, Some(guest), host_ip, 8081);
    assert!(
        refused.starts_with("failed"),
        "the guest reached the host: {refused}"
    );
    let relay = connect_from(cluster, Some(guest), "169.254.0.1", 8443);
    assert!(
        relay.starts_with("failed"),
        "the guest reached the relay: {relay}"
    );
    eprintln!("tenant guest: outside reached, {host_ip}:8081 {refused}, relay {relay}");
    for mut child in [host, outside] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = cluster.in_ns("ip", &["netns", "del", &world]);
    let _ = cluster.in_ns("ip", &["link", "del", "wv0"]);
}

/// A container on the tenant network (the agent runs containers, `--containers`): a busybox
/// root file system uploaded with the `openstack` CLI as a container image
/// (`--disk-format raw --container-format docker`), a server of it whose script pings the
/// subnet's gateway (the CNCI VM, over the tunnel) and `neighbour` (on the subnet's bridge)
/// and says so on its console; then it is deleted.
pub fn a_container_reaches_its_tenant_network(
    cluster: &Cluster,
    openstack: &Path,
    gateway: &str,
    neighbour: &str,
) {
    let cli = |args: &[&str]| openstack_cli(cluster, openstack, args);
    let dir = cluster.dir.path();
    let tarball = testkit::containers::busybox_tarball(dir, "ct-busybox");
    let upload = super::common::container_image_create(&tarball, "ct-busybox");
    cli(&upload.iter().map(String::as_str).collect::<Vec<_>>());
    let script = dir.join("ct-script");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nip -o addr show eth0\n\
             until ping -c 1 -W 2 {gateway} >/dev/null; do sleep 1; done; echo CUMULO-CT-GATEWAY\n\
             until ping -c 1 -W 2 {neighbour} >/dev/null; do sleep 1; done; echo CUMULO-CT-NEIGHBOUR\n\
             trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done\n"
        ),
    )
    .unwrap();
    let started = Instant::now();
    cli(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        "ct-busybox",
        "--user-data",
        script.to_str().unwrap(),
        "--wait",
        "ct-guest",
    ]);
    let log = poll(
        "the container's pings on its console",
        Duration::from_secs(90),
        || {
            let log = cli(&["console", "log", "show", "ct-guest"]);
            (log.contains("CUMULO-CT-GATEWAY") && log.contains("CUMULO-CT-NEIGHBOUR"))
                .then_some(log)
        },
    );
    eprintln!(
        "container: openstack server create to its pings through the tenant network: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(log.contains("eth0"), "{log}");
    cli(&["server", "delete", "--wait", "ct-guest"]);
    cli(&["image", "delete", "ct-busybox"]);
}
