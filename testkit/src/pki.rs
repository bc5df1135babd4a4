//! A test PKI: a CA and role certificates for `localhost` / 127.0.0.1, made in memory.

use certtool::build::{Anchor, CaProfile, LeafProfile, Names, issue_ca, issue_leaf};
use certtool::key::{KeyType, to_pem};
use ssntp::Role;
use ssntp_net::TlsIdentity;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// A cluster CA that issues role certificates.
pub struct TestPki {
    anchor: Anchor,
    ca_pem: String,
}

/// A role certificate with its key, in PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The CA's certificate.
    pub ca_pem: String,
    /// The certificate, followed by the CA's.
    pub cert_pem: String,
    /// The PKCS#8 private key.
    pub key_pem: String,
}

impl Leaf {
    /// The TLS identity of this certificate.
    pub fn identity(&self) -> TlsIdentity {
        TlsIdentity::from_pem(
            self.ca_pem.as_bytes(),
            self.cert_pem.as_bytes(),
            self.key_pem.as_bytes(),
        )
        .expect("a test certificate loads")
    }

    /// Writes `ca.pem`, `<name>.pem` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
        std::fs::create_dir_all(dir).expect("test directory");
        let paths = (
            dir.join("ca.pem"),
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&paths.0, &self.ca_pem).expect("write CA");
        std::fs::write(&paths.1, &self.cert_pem).expect("write certificate");
        std::fs::write(&paths.2, &self.key_pem).expect("write key");
        paths
    }
}

fn names(common_name: &str) -> Names {
    let hosts = vec!["localhost".to_string()];
    let ips = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    Names::for_hosts(common_name, Some("cumulo tests"), &hosts, &ips, None).expect("valid names")
}

impl TestPki {
    /// A new CA, valid from an hour ago for a year.
    pub fn new() -> TestPki {
        let now = SystemTime::now() - Duration::from_secs(3600);
        let key = KeyType::P256.generate().expect("key");
        let ca = issue_ca(
            &CaProfile {
                names: names("cumulo test CA"),
                days: 365,
            },
            &key,
            now,
        )
        .expect("CA");
        let anchor = Anchor::new(ca.der.clone(), key, SystemTime::now()).expect("anchor");
        TestPki {
            anchor,
            ca_pem: ca.pem,
        }
    }

    /// A certificate with `roles`, binding `uuid` when given, valid now.
    pub fn leaf(&self, roles: Role, uuid: Option<Uuid>) -> Leaf {
        self.leaf_at(roles, uuid, SystemTime::now() - Duration::from_secs(60), 30)
    }

    /// A certificate that expired yesterday.
    pub fn expired(&self, roles: Role, uuid: Option<Uuid>) -> Leaf {
        // The CA itself is only an hour old: make one that starts before it and ends at once.
        self.leaf_at(
            roles,
            uuid,
            SystemTime::now() - Duration::from_secs(3 * 86_400),
            1,
        )
    }

    /// A certificate issued at `from`, valid for `days`.
    pub fn leaf_at(&self, roles: Role, uuid: Option<Uuid>, from: SystemTime, days: u32) -> Leaf {
        self.issue(&format!("test {roles}"), roles, uuid, from, days, false)
    }

    /// A REST API admin's client certificate, as `cumulo-cert cluster` makes `admin.pem`: no
    /// SSNTP role, the API admin OID, a UUID of its own.
    pub fn admin_leaf(&self) -> Leaf {
        let from = SystemTime::now() - Duration::from_secs(60);
        self.issue(
            "test admin",
            Role::empty(),
            Some(Uuid::new_v4()),
            from,
            30,
            true,
        )
    }

    /// A certificate with `roles` whose subject CN is `common_name` (etcd's user name for a
    /// client certificate), valid now, naming `localhost` and 127.0.0.1.
    pub fn leaf_named(&self, common_name: &str, roles: Role) -> Leaf {
        let from = SystemTime::now() - Duration::from_secs(60);
        self.issue(common_name, roles, None, from, 30, false)
    }

    fn issue(
        &self,
        common_name: &str,
        roles: Role,
        uuid: Option<Uuid>,
        from: SystemTime,
        days: u32,
        api_admin: bool,
    ) -> Leaf {
        let key = KeyType::P256.generate().expect("key");
        let profile = LeafProfile {
            names: names(common_name),
            roles,
            uuid,
            days,
            api_admin,
        };
        let cert = issue_leaf(&profile, &key, &self.anchor, from).expect("leaf");
        Leaf {
            ca_pem: self.ca_pem.clone(),
            cert_pem: format!("{}{}", cert.pem, self.ca_pem),
            key_pem: to_pem(&key),
        }
    }

    /// The CA's certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA's private key (PEM): what a controller that issues certificates holds.
    pub fn ca_key_pem(&self) -> String {
        to_pem(self.anchor.key())
    }

    /// A revocation list of this CA (PEM) numbered `number`, revoking `leaves`.
    pub fn crl(&self, leaves: &[&Leaf], number: u64) -> String {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let serials: Vec<Vec<u8>> = leaves
            .iter()
            .map(|leaf| {
                let der = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
                    .next()
                    .expect("a certificate")
                    .expect("PEM");
                certtool::crl::serial_to_revoke(&der, &self.anchor).expect("one of ours")
            })
            .collect();
        let list = certtool::crl::List {
            number: number.saturating_sub(1),
            revoked: Vec::new(),
        };
        certtool::crl::extend(list, &serials, &self.anchor, SystemTime::now())
            .expect("a revocation list")
            .1
    }

    /// The TLS identity of a new certificate with `roles` and `uuid`.
    pub fn identity(&self, roles: Role, uuid: Option<Uuid>) -> TlsIdentity {
        self.leaf(roles, uuid).identity()
    }
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").finish_non_exhaustive()
    }
}

impl Default for TestPki {
    fn default() -> TestPki {
        TestPki::new()
    }
}
