//! The metadata service for real: [`Metadata`] responders on a host namespace's tenant
//! bridges, with the port filters that send requests to them. Three "VMs" (guest namespaces on
//! veth pairs named like their taps): A and B on tenant A's bridge, C on tenant B's with A's
//! very address. Each asks 169.254.169.254 through its gateway (a next hop that does not
//! exist: the filter rewrites the destination MAC) and gets its own data, on the OpenStack and
//! the EC2 paths; a guest that takes another's address gets nothing (anti-spoofing); a port
//! unregistered is answered 404; the subnet's last one takes the responder's namespace and
//! link with it.

use super::*;
use agent::net::metadata::{self, Entry, Metadata};

/// `GET path` to the metadata service from guest `g` (from its address `from`, if given):
/// the status and body, or the error.
fn fetch(g: &Netns, path: &str, from: Option<&str>) -> Result<(u16, String), String> {
    let source = from.map_or("None".to_string(), |a| format!("('{a}', 0)"));
    let script = format!(
        "import http.client\n\
         c=http.client.HTTPConnection('169.254.169.254',80,timeout=3,source_address={source})\n\
         try:\n    c.request('GET','{path}')\n    r=c.getresponse()\n    \
         print(r.status)\n    print(r.read().decode(),end='')\n\
         except Exception as e:\n    print('ERR',e)\n"
    );
    let out = run(Command::new("ip").args(["netns", "exec", &g.name, "python3", "-c", &script]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (first, body) = text.split_once('\n').unwrap_or((&text, ""));
    match first.parse::<u16>() {
        Ok(status) => Ok((status, body.to_string())),
        Err(_) => Err(text),
    }
}

fn entry(vnic: &Vnic, ip: &str, name: &str) -> Entry {
    Entry {
        instance: vnic.instance,
        tenant: vnic.subnet.tenant,
        hostname: name.into(),
        ip: ip.parse().unwrap(),
        mac: vnic.mac,
        user_data: Some(format!("#!/bin/sh\necho {name}\n")),
        public_keys: vec![(format!("{name}-key"), format!("ssh-ed25519 AAAA{name} u@h"))],
    }
}

/// Deletes the responders' namespaces on drop, also when the test fails (the `Host`'s
/// namespace takes their links with it).
struct Responders(Vec<String>);

impl Drop for Responders {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

#[test]
fn each_instance_gets_its_own_metadata() {
    if !can_run("each_instance_gets_its_own_metadata") {
        return;
    }
    if !tools_or_skip(&["nft", "python3", "bridge"]) {
        return;
    }
    let h = Netns::new("md");
    h.ip(&["addr", "add", "198.18.0.1/32", "dev", "lo"]);
    let host = Host::new(&h);
    let net = host.network_with("198.18.0.1", true);
    let md = Arc::new(Metadata::new(Uuid::new_v4()));
    let _responders = Responders(vec![md.netns(KEY_A), md.netns(KEY_B)]);
    let (sa, sb) = (
        subnet(TENANT_A, KEY_A, "198.18.0.7"),
        subnet(TENANT_B, KEY_B, "198.18.0.7"),
    );
    let plan = [
        (1, sa, "10.250.0.1", "alpha"),
        (2, sa, "10.250.0.2", "bravo"),
        (3, sb, "10.250.0.1", "charlie"),
    ];
    let mut guests = Vec::new();
    for (n, s, ip, name) in plan {
        let v = vnic(n, s);
        host.attach(&net, v);
        let tap = tap_name(v.instance);
        let bridge = bridge_name(s.key);
        h.ip(&["link", "del", &tap]);
        let g = guest(&h, &bridge, &tap, &v, &format!("{ip}/24"));
        // The guest's way out: a gateway that is not there (a MAC nobody has).
        g.ip(&[
            "neigh",
            "replace",
            "10.250.0.254",
            "lladdr",
            "02:00:00:00:00:fe",
            "dev",
            "eth0",
        ]);
        g.ip(&["route", "add", "default", "via", "10.250.0.254"]);
        let (net, md, nic, e) = (
            net.clone(),
            md.clone(),
            super::filter::nic(&v, ip, None),
            entry(&v, ip, name),
        );
        host.run(async move {
            md.register(&bridge, s.key, e).await?;
            net.lock()
                .await
                .filter(v.instance, &nic)
                .await
                .map_err(|e| e.to_string())
        })
        .unwrap();
        guests.push((g, v, ip, name));
    }
    // The responders' ports are on their bridges, with their static forwarding entries.
    for key in [KEY_A, KEY_B] {
        let link = h.link(&metadata::link_name(key)).unwrap();
        assert!(
            link.contains(&format!("master {}", bridge_name(key))),
            "{link}"
        );
    }

    for (g, v, ip, name) in &guests {
        let (status, body) = fetch(g, "/openstack/latest/meta_data.json", None).unwrap();
        assert_eq!(status, 200, "{name}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["uuid"], v.instance.to_string(), "{name}");
        assert_eq!(json["hostname"], *name);
        assert_eq!(
            json["public_keys"][format!("{name}-key")],
            format!("ssh-ed25519 AAAA{name} u@h")
        );
        let (status, body) = fetch(g, "/latest/meta-data/local-ipv4", None).unwrap();
        assert_eq!((status, body.as_str()), (200, *ip), "{name}");
        let (_, body) = fetch(g, "/openstack/latest/user_data", None).unwrap();
        assert_eq!(body, format!("#!/bin/sh\necho {name}\n"));
    }

    // A takes B's address as well and asks from it: the anti-spoofing drops it.
    let (a, b) = (&guests[0].0, &guests[1]);
    a.ip(&["addr", "add", "10.250.0.2/24", "dev", "eth0"]);
    let spoofed = fetch(a, "/latest/meta-data/instance-id", Some("10.250.0.2"));
    assert!(
        spoofed.is_err(),
        "a spoofed request was answered: {spoofed:?}"
    );
    a.ip(&["addr", "del", "10.250.0.2/24", "dev", "eth0"]);

    // A leaves (not the last on its subnet): its address is answered 404 from then on.
    let (md2, id_a) = (md.clone(), guests[0].1.instance);
    host.run(async move { md2.unregister(KEY_A, id_a, false).await });
    let (status, body) = fetch(a, "/latest/meta-data/instance-id", None).unwrap();
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        fetch(&b.0, "/latest/meta-data/instance-id", None).unwrap(),
        (200, b.1.instance.to_string())
    );

    // The subnets' last ports leave: their responders go, namespace and link.
    for (key, instance) in [(KEY_A, b.1.instance), (KEY_B, guests[2].1.instance)] {
        let md2 = md.clone();
        host.run(async move { md2.unregister(key, instance, true).await });
        assert!(h.link(&metadata::link_name(key)).is_none());
        let listing = run(Command::new("ip").args(["netns", "list"]));
        assert!(
            !String::from_utf8_lossy(&listing.stdout).contains(&md.netns(key)),
            "{}",
            String::from_utf8_lossy(&listing.stdout)
        );
    }
}
