//! Hosts joining a running cluster (issue 28, `docs/deploy.md`): an admin makes a join token
//! (`cumulo node token create`); a new host proves it once (`cumulo join`) and is given a role
//! certificate for a key it made itself (it sends a certificate signing request: the private key
//! never leaves the host), bound to a fresh UUID; removing the host revokes that certificate (a
//! revocation list the scheduler reads, `--crl`).
//!
//! A token is `<id>.<secret>.<ca>`: its id (a UUID, 32 hex digits), 32 random bytes (64 hex
//! digits; only their SHA-256 is stored) and the SHA-256 of the cluster CA's certificate (64 hex
//! digits), with which the new host checks that the controller it reached is this cluster's
//! before it sends the secret.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use certtool::build::{Anchor, LeafProfile, Names, issue_leaf_until};
use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};
use ssntp::Role;
use store::{JoinToken, JoinedNode};
use uuid::Uuid;

/// How long a joined host's certificate is valid.
pub const NODE_CERT_LIFETIME: Duration = Duration::from_secs(365 * 86_400);
/// The longest a join token may live.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(7 * 86_400);
/// The roles a join token may give (a node's: compute, network, or both).
pub const JOINABLE: Role = Role::AGENT.union(Role::NETAGENT);

/// Why a join could not be done.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The CA certificate or key is unusable.
    #[error("join CA: {0}")]
    Ca(String),
    /// The token text is not a token.
    #[error("not a join token (it is <id>.<secret>.<ca>, 32, 64 and 64 hex digits)")]
    TokenFormat,
    /// The token names another CA.
    #[error("the join token names another cluster's CA")]
    OtherCa,
    /// The signing request is unusable.
    #[error("the certificate signing request: {0}")]
    Csr(String),
    /// The host name is not one.
    #[error("the host name: {0}")]
    Hostname(String),
    /// Issuing failed.
    #[error("issuing the certificate: {0}")]
    Issue(String),
    /// The revocation list could not be written.
    #[error("the revocation list {path}: {why}")]
    Crl {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// A token's parts as the new host gives them back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenParts {
    /// The token's id.
    pub id: Uuid,
    /// SHA-256 of its secret.
    pub secret_hash: [u8; 32],
    /// SHA-256 of the CA certificate it names.
    pub ca: [u8; 32],
}

/// Reads `<id>.<secret>.<ca>`.
pub fn parse_token(text: &str) -> Result<TokenParts, JoinError> {
    let mut parts = text.trim().split('.');
    let (Some(id), Some(secret), Some(ca), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JoinError::TokenFormat);
    };
    let id = (id.len() == 32)
        .then(|| Uuid::try_parse(id).ok())
        .flatten()
        .ok_or(JoinError::TokenFormat)?;
    let secret = hex32(secret).ok_or(JoinError::TokenFormat)?;
    let ca = hex32(ca).ok_or(JoinError::TokenFormat)?;
    Ok(TokenParts {
        id,
        secret_hash: sha256(&secret),
        ca,
    })
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

/// Makes join tokens and the certificates of the hosts that use them; keeps the revocation
/// list of the certificates it revokes.
pub struct JoinIssuer {
    anchor: Anchor,
    ca_fingerprint: [u8; 32],
    crl: PathBuf,
    schedulers: Vec<String>,
    image_server: Option<String>,
    store: Option<String>,
    tenant_network: String,
    revocations: ssntp_net::Revocations,
}

impl std::fmt::Debug for JoinIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinIssuer")
            .field("crl", &self.crl)
            .finish_non_exhaustive()
    }
}

impl JoinIssuer {
    /// From the CA's certificate and key (PEM); the revocation list goes to `crl`; joined hosts
    /// are told `schedulers`.
    pub fn from_pem(
        ca_pem: &str,
        ca_key_pem: &str,
        crl: &Path,
        schedulers: Vec<String>,
    ) -> Result<JoinIssuer, JoinError> {
        let anchor = Anchor::from_pem(ca_pem.as_bytes(), ca_key_pem.as_bytes(), SystemTime::now())
            .map_err(|e| JoinError::Ca(e.to_string()))?;
        let ca_fingerprint = sha256(anchor.der());
        let crl_err = |why: String| JoinError::Crl {
            path: crl.to_path_buf(),
            why,
        };
        // The list, made empty if there is none yet, so that a scheduler given it starts.
        if !crl.exists() {
            if let Some(dir) = crl.parent() {
                std::fs::create_dir_all(dir).map_err(|e| crl_err(e.to_string()))?;
            }
            certtool::crl::update(crl, &anchor, SystemTime::now(), |_| Vec::new())
                .map_err(|e| crl_err(e.to_string()))?;
        }
        let bytes = std::fs::read(crl).map_err(|e| crl_err(e.to_string()))?;
        let list = ssntp_net::RevocationList::parse(&bytes, anchor.der())
            .map_err(|e| crl_err(e.to_string()))?;
        let revocations = ssntp_net::Revocations::new();
        revocations.set(list);
        Ok(JoinIssuer {
            anchor,
            ca_fingerprint,
            crl: crl.to_path_buf(),
            schedulers,
            image_server: None,
            store: None,
            tenant_network: "none".into(),
            revocations,
        })
    }

    /// Joined hosts are told the node image endpoint (`host:port`, the controller's
    /// `--image-listen`) too.
    pub fn with_image_server(mut self, at: Option<String>) -> JoinIssuer {
        self.image_server = at;
        self
    }

    /// Joined controllers are told the cluster's shared store (an `etcd://` URL: a SQLite file
    /// is this controller's alone, so no controller may join then) and its tenant network mode.
    pub fn with_cluster(mut self, store: &str, tenant_network: &str) -> JoinIssuer {
        self.store = store.starts_with("etcd://").then(|| store.to_string());
        self.tenant_network = tenant_network.to_string();
        self
    }

    /// The shared store a joined controller uses, if the cluster has one.
    pub fn shared_store(&self) -> Option<&str> {
        self.store.as_deref()
    }

    /// The tenant network mode (`none`, `cnci`) a joined controller runs with.
    pub fn tenant_network(&self) -> &str {
        &self.tenant_network
    }

    /// The node image endpoint a joined host is told, if it is on.
    pub fn image_server(&self) -> Option<&str> {
        self.image_server.as_deref()
    }

    /// The CA's certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.anchor.pem()
    }

    /// The schedulers a joined host is told.
    pub fn schedulers(&self) -> &[String] {
        &self.schedulers
    }

    /// Where the revocation list is.
    pub fn crl_path(&self) -> &Path {
        &self.crl
    }

    /// A new token for `roles`, valid for `ttl` from `now`: its record and its text (shown once).
    pub fn new_token(
        &self,
        roles: Role,
        ttl: Duration,
        now: SystemTime,
    ) -> Result<(JoinToken, String), JoinError> {
        let rng = SystemRandom::new();
        let mut secret = [0u8; 32];
        let mut id = [0u8; 16];
        rng.fill(&mut secret)
            .and_then(|()| rng.fill(&mut id))
            .map_err(|_| JoinError::Issue("no randomness".into()))?;
        let id = uuid::Builder::from_random_bytes(id).into_uuid();
        let text = format!(
            "{}.{}.{}",
            id.simple(),
            hex::encode(secret),
            hex::encode(self.ca_fingerprint)
        );
        let token = JoinToken {
            id,
            secret_hash: sha256(&secret),
            roles: roles.bits(),
            created: now,
            expires: now + ttl,
            used: None,
        };
        Ok((token, text))
    }

    /// Checks that a token names this cluster's CA.
    pub fn check_ca(&self, token: &TokenParts) -> Result<(), JoinError> {
        if token.ca != self.ca_fingerprint {
            return Err(JoinError::OtherCa);
        }
        Ok(())
    }

    /// The certificate (PEM, followed by the CA's) of a new node `id` named `hostname` with
    /// `roles`, for the public key of `csr_pem` (the request's names and extensions are not
    /// used: the controller decides them), and the node's record.
    pub fn issue(
        &self,
        csr_pem: &str,
        hostname: &str,
        roles: Role,
        id: Uuid,
        now: SystemTime,
    ) -> Result<(String, JoinedNode), JoinError> {
        if csr_pem.len() > 16 * 1024 {
            return Err(JoinError::Csr("larger than 16 KiB".into()));
        }
        let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| JoinError::Csr(e.to_string()))?;
        let host = certtool::build::check_host(hostname)
            .map_err(|e| JoinError::Hostname(e.to_string()))?;
        // The host name is the subject's common name only: no DNS or IP name, which a token
        // holder could pick to pass as the controller or another host to a TLS client that
        // checks names. The node is known by its bound UUID (the controller dials its console
        // endpoint by UUID).
        let names = Names::for_hosts(&host, Some("cumulo"), &[], &[], None)
            .map_err(|e| JoinError::Hostname(e.to_string()))?;
        let profile = LeafProfile {
            names,
            roles,
            uuid: Some(id),
            days: 1,
            api_admin: false,
        };
        let start = now - Duration::from_secs(60);
        let issued = issue_leaf_until(
            &profile,
            &csr.public_key,
            &self.anchor,
            start,
            Some(now + NODE_CERT_LIFETIME),
        )
        .map_err(|e| JoinError::Issue(e.to_string()))?;
        let info = ssntp::cert::CertInfo::parse(&issued.der)
            .map_err(|e| JoinError::Issue(e.to_string()))?;
        let serial = x509_serial(&issued.der)?;
        let node = JoinedNode {
            id,
            hostname: host,
            roles: roles.bits(),
            serial,
            not_after: SystemTime::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(info.not_after).unwrap_or(0)),
            joined: now,
            revoked: None,
        };
        Ok((format!("{}{}", issued.pem, self.anchor.pem()), node))
    }

    /// Writes the revocation list: what the file revokes already (another list of this CA's,
    /// `cumulo-cert revoke`) and every revoked node of `nodes`, numbered above both the file's
    /// and the time in milliseconds (so that lists written later are newer), under the file's
    /// lock; the new list is then in force for [`JoinIssuer::revocations`].
    pub fn write_crl(&self, nodes: &[JoinedNode], now: SystemTime) -> Result<(), JoinError> {
        let crl_err = |why: String| JoinError::Crl {
            path: self.crl.clone(),
            why,
        };
        let millis = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let (_, pem) = certtool::crl::update(&self.crl, &self.anchor, now, |list| {
            list.number = list.number.max(millis);
            nodes
                .iter()
                .filter(|n| n.revoked.is_some())
                .map(|n| n.serial.clone())
                .collect()
        })
        .map_err(|e| crl_err(e.to_string()))?;
        let list = ssntp_net::RevocationList::parse(pem.as_bytes(), self.anchor.der())
            .map_err(|e| crl_err(e.to_string()))?;
        self.revocations.set(list);
        Ok(())
    }

    /// The revocation list in force for this controller's own TLS servers (the node image
    /// endpoint): the file's at start, then each list it writes.
    pub fn revocations(&self) -> &ssntp_net::Revocations {
        &self.revocations
    }
}

fn x509_serial(der: &[u8]) -> Result<Vec<u8>, JoinError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| JoinError::Issue(e.to_string()))?;
    Ok(cert.raw_serial().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(dir: &Path) -> JoinIssuer {
        let pki = testkit::TestPki::new();
        JoinIssuer::from_pem(
            pki.ca_pem(),
            &pki.ca_key_pem(),
            &dir.join("crl.pem"),
            vec!["localhost:8888".into()],
        )
        .unwrap()
    }

    #[test]
    fn a_token_reads_back_and_names_its_ca() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = issuer(dir.path());
        let now = SystemTime::now();
        let (token, text) = issuer
            .new_token(JOINABLE, Duration::from_secs(60), now)
            .unwrap();
        let parts = parse_token(&text).unwrap();
        assert_eq!((parts.id, parts.secret_hash), (token.id, token.secret_hash));
        issuer.check_ca(&parts).unwrap();
        let other_dir = tempfile::tempdir().unwrap();
        let other = self::issuer(other_dir.path());
        assert!(matches!(other.check_ca(&parts), Err(JoinError::OtherCa)));
        for bad in [
            "",
            "a.b.c",
            &text[1..],
            &format!("{text}.x"),
            &text.replace('.', ","),
        ] {
            assert!(
                matches!(parse_token(bad), Err(JoinError::TokenFormat)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_node_gets_a_certificate_for_its_own_key_and_a_revoked_one_goes_on_the_list() {
        use rustls::pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        let issuer = issuer(dir.path());
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["evil.example".into()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let id = Uuid::from_u128(7);
        let now = SystemTime::now();
        let (pem, node) = issuer.issue(&csr, "host2", JOINABLE, id, now).unwrap();
        let identity = ssntp_net::TlsIdentity::from_pem(
            issuer.ca_pem().as_bytes(),
            pem.as_bytes(),
            key.serialize_pem().as_bytes(),
        )
        .unwrap();
        let own = identity.own();
        assert_eq!(own.roles, JOINABLE);
        assert_eq!(own.binding, ssntp::UuidBinding::Bound(id));
        let info = ssntp::cert::CertInfo::parse(
            &rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap(),
        )
        .unwrap();
        assert!(!info.is_ca, "the request's extensions are not used");
        assert_eq!(info.dns_names().count(), 0, "no name a token holder picks");
        assert_eq!(info.ip_addresses().count(), 0);
        assert!(info.subject.contains("host2"), "{}", info.subject);
        assert!(issuer.issue(&csr, "bad name!", JOINABLE, id, now).is_err());
        assert!(issuer.issue("junk", "host2", JOINABLE, id, now).is_err());
        // Revoked: the scheduler's reader finds its serial on the list.
        let revoked = JoinedNode {
            revoked: Some(now),
            ..node
        };
        issuer
            .write_crl(std::slice::from_ref(&revoked), now)
            .unwrap();
        let file = ssntp_net::revocation::CrlFile::new(issuer.crl_path(), &{
            let p = dir.path().join("ca.pem");
            std::fs::write(&p, issuer.ca_pem()).unwrap();
            p
        })
        .unwrap();
        let list = file.load().unwrap();
        assert!(list.revokes(&revoked.serial));
        // Written again later: a newer list, the same revocation.
        issuer
            .write_crl(std::slice::from_ref(&revoked), now + Duration::from_secs(1))
            .unwrap();
        let again = file.load().unwrap();
        assert!(list.is_older_than(&again) && again.revokes(&revoked.serial));
        assert_eq!(again.len(), 1);
    }
}
