//! What the metadata service answers: the request line read from a bounded request, and the
//! answer to a path for the instance that asked (pure, so that every path is tested without a
//! socket).
//!
//! Two trees, as cloud-init's OpenStack and EC2 data sources read them:
//!
//! - OpenStack: `/openstack` lists the versions ([`OPENSTACK_VERSIONS`], every one the same
//!   data); `/openstack/<v>/` lists `meta_data.json`, `network_data.json`, `vendor_data.json`,
//!   `vendor_data2.json` and `user_data` (when there is some);
//! - EC2: `/` lists the versions ([`EC2_VERSIONS`]); `/<v>/` lists `meta-data/` and
//!   `user-data`; `/<v>/meta-data/` lists `ami-launch-index`, `hostname`, `instance-id`,
//!   `local-hostname`, `local-ipv4`, `mac` and `public-keys/` (when the instance has a key),
//!   each a text file; `/<v>/meta-data/public-keys/` lists `0=<name>`, ...;
//!   `/<v>/meta-data/public-keys/<i>/openssh-key` is the key.
//!
//! A path that is not there is a 404, a method other than GET or HEAD a 405, and a request from
//! an address no instance on the network has a 404 that says so.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use uuid::Uuid;

use crate::model::InstanceSpec;

/// The OpenStack metadata versions listed (each serves the same data).
pub const OPENSTACK_VERSIONS: [&str; 6] = [
    "2012-08-10",
    "2013-04-04",
    "2013-10-17",
    "2016-06-30",
    "2018-08-27",
    "latest",
];
/// The EC2 metadata versions listed (each serves the same data).
pub const EC2_VERSIONS: [&str; 3] = ["1.0", "2009-04-04", "latest"];

/// What the service knows of one instance: from its START, kept while its port is plugged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The instance.
    pub instance: Uuid,
    /// Its tenant (OpenStack's `project_id`).
    pub tenant: Uuid,
    /// Its host name.
    pub hostname: String,
    /// Its address on the tenant network.
    pub ip: Ipv4Addr,
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its user data, if any.
    pub user_data: Option<String>,
    /// Its public keys, by name, in order.
    pub public_keys: Vec<(String, String)>,
}

impl Entry {
    /// The entry of an instance with a tenant NIC (`None` without one, or with an IPv6 address:
    /// tenant subnets are IPv4). The host name and keys come from the START's meta data
    /// (`hostname`, `public-keys`: one key a line, `key-name`: the first key's name).
    pub fn of(spec: &InstanceSpec) -> Option<Entry> {
        let nic = spec.nic.as_ref()?;
        let std::net::IpAddr::V4(ip) = nic.private_ip else {
            return None;
        };
        let meta = &spec.meta_data;
        let hostname = meta
            .get("hostname")
            .or_else(|| meta.get("local-hostname"))
            .cloned()
            .unwrap_or_else(|| format!("cumulo-{}", &spec.instance.simple().to_string()[..8]));
        Some(Entry {
            instance: spec.instance,
            tenant: spec.tenant,
            hostname,
            ip,
            mac: nic.mac,
            user_data: spec.user_data.clone(),
            public_keys: public_keys(meta),
        })
    }

    fn mac_text(&self) -> String {
        crate::net::names::mac_text(&self.mac)
    }

    /// OpenStack's `meta_data.json`.
    fn meta_data_json(&self) -> serde_json::Value {
        let keys: serde_json::Map<String, serde_json::Value> = self
            .public_keys
            .iter()
            .map(|(n, k)| (n.clone(), serde_json::Value::from(k.as_str())))
            .collect();
        let key_list: Vec<serde_json::Value> = self
            .public_keys
            .iter()
            .map(|(n, k)| serde_json::json!({"name": n, "type": "ssh", "data": k}))
            .collect();
        serde_json::json!({
            "uuid": self.instance.to_string(),
            "name": self.hostname,
            "hostname": self.hostname,
            "launch_index": 0,
            "project_id": self.tenant.to_string(),
            "public_keys": keys,
            "keys": key_list,
            "meta": {},
            "devices": [],
        })
    }

    /// OpenStack's `network_data.json`: one link, configured by DHCP.
    fn network_data_json(&self) -> serde_json::Value {
        serde_json::json!({
            "links": [{
                "id": "tap0",
                "type": "phy",
                "ethernet_mac_address": self.mac_text(),
            }],
            "networks": [{
                "id": "network0",
                "type": "ipv4_dhcp",
                "link": "tap0",
            }],
            "services": [],
        })
    }
}

/// The keys in `public-keys` (one a line), the first named as `key-name` says (`default`
/// without), the others after it with their position.
fn public_keys(meta: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let name = meta
        .get("key-name")
        .map(String::as_str)
        .unwrap_or("default");
    meta.get("public-keys")
        .map(|keys| {
            keys.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .enumerate()
                .map(|(i, k)| {
                    let n = if i == 0 {
                        name.to_string()
                    } else {
                        format!("{name}-{i}")
                    };
                    (n, k.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The content type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    fn text(body: impl Into<String>) -> Reply {
        Reply {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    fn json(value: &serde_json::Value) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }

    fn status(status: u16, why: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{why}\n").into_bytes(),
        }
    }

    /// A request that is not one (not HTTP/1.x, too long, or cut short).
    pub fn bad_request() -> Reply {
        Reply::status(400, "not an HTTP/1.x request of at most 8 KiB")
    }

    /// The whole HTTP/1.1 response (the connection closes after it); `head`: no body (HEAD).
    pub fn to_bytes(&self, head: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !head {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// A request line: its method and path (without a query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GET, HEAD, ...
    pub method: String,
    /// The path, query removed.
    pub path: String,
}

/// The request line of a request's head (the bytes up to the blank line); `None` for one that
/// is not HTTP/1.x.
pub fn request_line(head: &[u8]) -> Option<Request> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some(Request {
        method: method.to_string(),
        path: path.to_string(),
    })
}

fn listing(items: &[&str]) -> Reply {
    Reply::text(items.join("\n"))
}

/// The answer to `request` from the instance `entry` (`None`: no instance on the network has
/// the address that asked).
pub fn answer(entry: Option<&Entry>, request: &Request) -> Reply {
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        return Reply::status(405, "only GET and HEAD are served");
    }
    let Some(e) = entry else {
        return Reply::status(
            404,
            "no instance on this network has the address that asked",
        );
    };
    let not_found = || Reply::status(404, "not found");
    let parts: Vec<&str> = request.path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [] => listing(&EC2_VERSIONS),
        ["openstack"] => listing(&OPENSTACK_VERSIONS),
        ["openstack", v, rest @ ..] if OPENSTACK_VERSIONS.contains(v) => match rest {
            [] => {
                let mut items = vec![
                    "meta_data.json",
                    "network_data.json",
                    "vendor_data.json",
                    "vendor_data2.json",
                ];
                if e.user_data.is_some() {
                    items.push("user_data");
                }
                listing(&items)
            }
            ["meta_data.json"] => Reply::json(&e.meta_data_json()),
            ["network_data.json"] => Reply::json(&e.network_data_json()),
            ["vendor_data.json" | "vendor_data2.json"] => Reply::json(&serde_json::json!({})),
            ["user_data"] => user_data(e),
            _ => not_found(),
        },
        [v, rest @ ..] if EC2_VERSIONS.contains(v) => match rest {
            [] => {
                if e.user_data.is_some() {
                    listing(&["meta-data/", "user-data"])
                } else {
                    listing(&["meta-data/"])
                }
            }
            ["user-data"] => user_data(e),
            ["meta-data", rest @ ..] => ec2_meta(e, rest),
            _ => not_found(),
        },
        _ => not_found(),
    }
}

fn user_data(e: &Entry) -> Reply {
    match &e.user_data {
        Some(u) => Reply {
            status: 200,
            content_type: "application/octet-stream",
            body: u.clone().into_bytes(),
        },
        None => Reply::status(404, "the instance has no user data"),
    }
}

fn ec2_meta(e: &Entry, rest: &[&str]) -> Reply {
    match rest {
        [] => {
            let mut items = vec![
                "ami-launch-index",
                "hostname",
                "instance-id",
                "local-hostname",
                "local-ipv4",
                "mac",
            ];
            if !e.public_keys.is_empty() {
                items.push("public-keys/");
            }
            listing(&items)
        }
        ["ami-launch-index"] => Reply::text("0"),
        ["hostname" | "local-hostname"] => Reply::text(e.hostname.clone()),
        ["instance-id"] => Reply::text(e.instance.to_string()),
        ["local-ipv4"] => Reply::text(e.ip.to_string()),
        ["mac"] => Reply::text(e.mac_text()),
        ["public-keys"] if !e.public_keys.is_empty() => Reply::text(
            e.public_keys
                .iter()
                .enumerate()
                .map(|(i, (n, _))| format!("{i}={n}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        ["public-keys", i, rest @ ..] => {
            let Some((_, key)) = i.parse::<usize>().ok().and_then(|i| e.public_keys.get(i)) else {
                return Reply::status(404, "no such key");
            };
            match rest {
                [] => Reply::text("openssh-key"),
                ["openssh-key"] => Reply::text(key.clone()),
                _ => Reply::status(404, "not found"),
            }
        }
        _ => Reply::status(404, "not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user_data: Option<&str>, keys: &[(&str, &str)]) -> Entry {
        Entry {
            instance: Uuid::from_u128(0xabc),
            tenant: Uuid::from_u128(0xdef),
            hostname: "web-1".into(),
            ip: Ipv4Addr::new(172, 16, 0, 5),
            mac: [0x02, 0, 0, 0, 0, 0x05],
            user_data: user_data.map(str::to_string),
            public_keys: keys
                .iter()
                .map(|(n, k)| (n.to_string(), k.to_string()))
                .collect(),
        }
    }

    fn get(e: Option<&Entry>, path: &str) -> Reply {
        answer(
            e,
            &Request {
                method: "GET".into(),
                path: path.into(),
            },
        )
    }

    fn body(r: &Reply) -> String {
        String::from_utf8(r.body.clone()).unwrap()
    }

    #[test]
    fn request_lines_are_read_or_refused() {
        assert_eq!(
            request_line(b"GET /openstack/latest/meta_data.json?x=1 HTTP/1.1\r\nHost: a\r\n"),
            Some(Request {
                method: "GET".into(),
                path: "/openstack/latest/meta_data.json".into()
            })
        );
        assert_eq!(request_line(b"GET / HTTP/1.0\r\n").unwrap().path, "/");
        for bad in [
            &b"GET /\r\n"[..],
            b"GET / HTTP/2\r\n",
            b"GET x HTTP/1.1\r\n",
            b"GET / HTTP/1.1 extra\r\n",
            b"\xff\xfe / HTTP/1.1\r\n",
            b"",
        ] {
            assert_eq!(request_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn openstack_tree() {
        let e = entry(
            Some("#cloud-config\n"),
            &[("mykey", "ssh-ed25519 AAAA me@x")],
        );
        assert_eq!(
            body(&get(Some(&e), "/openstack")),
            OPENSTACK_VERSIONS.join("\n")
        );
        assert!(body(&get(Some(&e), "/openstack/latest/")).contains("user_data"));
        let m = get(Some(&e), "/openstack/2013-10-17/meta_data.json");
        assert_eq!(m.content_type, "application/json");
        let v: serde_json::Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(v["uuid"], Uuid::from_u128(0xabc).to_string());
        assert_eq!(v["hostname"], "web-1");
        assert_eq!(v["public_keys"]["mykey"], "ssh-ed25519 AAAA me@x");
        assert_eq!(v["keys"][0]["type"], "ssh");
        assert_eq!(v["project_id"], Uuid::from_u128(0xdef).to_string());
        let n: serde_json::Value =
            serde_json::from_slice(&get(Some(&e), "/openstack/latest/network_data.json").body)
                .unwrap();
        assert_eq!(n["links"][0]["ethernet_mac_address"], "02:00:00:00:00:05");
        assert_eq!(n["networks"][0]["type"], "ipv4_dhcp");
        assert_eq!(
            body(&get(Some(&e), "/openstack/latest/user_data")),
            "#cloud-config\n"
        );
        assert_eq!(
            body(&get(Some(&e), "/openstack/latest/vendor_data.json")),
            "{}"
        );
        assert_eq!(
            get(Some(&e), "/openstack/1999-01-01/meta_data.json").status,
            404
        );
        assert_eq!(get(Some(&e), "/openstack/latest/nothing").status, 404);
        // No user data: not listed, and a 404.
        let bare = entry(None, &[]);
        assert!(!body(&get(Some(&bare), "/openstack/latest")).contains("user_data"));
        assert_eq!(get(Some(&bare), "/openstack/latest/user_data").status, 404);
    }

    #[test]
    fn ec2_tree() {
        let e = entry(Some("hello"), &[("k", "ssh-rsa AAAB k@x")]);
        assert_eq!(body(&get(Some(&e), "/")), "1.0\n2009-04-04\nlatest");
        assert_eq!(body(&get(Some(&e), "/latest/")), "meta-data/\nuser-data");
        let index = body(&get(Some(&e), "/2009-04-04/meta-data/"));
        assert!(
            index.contains("instance-id") && index.contains("public-keys/"),
            "{index}"
        );
        for (path, want) in [
            (
                "/latest/meta-data/instance-id",
                Uuid::from_u128(0xabc).to_string(),
            ),
            ("/latest/meta-data/hostname", "web-1".into()),
            ("/latest/meta-data/local-ipv4", "172.16.0.5".into()),
            ("/latest/meta-data/mac", "02:00:00:00:00:05".into()),
            ("/latest/meta-data/public-keys", "0=k".into()),
            ("/latest/meta-data/public-keys/0/", "openssh-key".into()),
            (
                "/latest/meta-data/public-keys/0/openssh-key",
                "ssh-rsa AAAB k@x".into(),
            ),
            ("/latest/user-data", "hello".into()),
        ] {
            let r = get(Some(&e), path);
            assert_eq!((r.status, body(&r)), (200, want), "{path}");
        }
        assert_eq!(
            get(Some(&e), "/latest/meta-data/public-keys/1/openssh-key").status,
            404
        );
        assert_eq!(get(Some(&e), "/latest/meta-data/public-keys/x").status, 404);
        let bare = entry(None, &[]);
        assert!(!body(&get(Some(&bare), "/latest/meta-data/")).contains("public-keys"));
        assert_eq!(
            get(Some(&bare), "/latest/meta-data/public-keys").status,
            404
        );
        assert_eq!(get(Some(&bare), "/latest/user-data").status, 404);
        assert_eq!(body(&get(Some(&bare), "/latest")), "meta-data/");
    }

    #[test]
    fn strangers_and_other_methods_are_refused() {
        let r = get(None, "/openstack/latest/meta_data.json");
        assert_eq!(r.status, 404);
        assert!(body(&r).contains("no instance"));
        let e = entry(None, &[]);
        let post = answer(
            Some(&e),
            &Request {
                method: "POST".into(),
                path: "/".into(),
            },
        );
        assert_eq!(post.status, 405);
        let head = get(Some(&e), "/latest/meta-data/hostname").to_bytes(true);
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains("Content-Length: 5\r\n") && text.ends_with("\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn keys_come_from_the_start_meta_data() {
        let meta = BTreeMap::from([
            ("key-name".to_string(), "laptop".to_string()),
            (
                "public-keys".to_string(),
                "ssh-a A\n\nssh-b B\n".to_string(),
            ),
        ]);
        assert_eq!(
            public_keys(&meta),
            vec![
                ("laptop".to_string(), "ssh-a A".to_string()),
                ("laptop-1".to_string(), "ssh-b B".to_string())
            ]
        );
        let meta = BTreeMap::from([("public-keys".to_string(), "ssh-a A".to_string())]);
        assert_eq!(public_keys(&meta)[0].0, "default");
        assert!(public_keys(&BTreeMap::new()).is_empty());
    }
}
