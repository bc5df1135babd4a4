//! The certificate set of a single-host cluster, made by one command (`cumulo-cert cluster`).
//!
//! Fixed file names in one directory, which `cumulo up` relies on:
//!
//! | files | certificate | roles | names | bound UUID |
//! |---|---|---|---|---|
//! | `ca.pem`, `ca.key` | the cluster CA | – | hosts, IPs | – |
//! | `scheduler.pem`, `.key` | the scheduler | SCHEDULER | hosts, IPs | fresh |
//! | `controller.pem`, `.key` | the controller (SSNTP client and REST server) | CONTROLLER | hosts, IPs | fresh |
//! | `agent.pem`, `.key` | the dual-role launcher | AGENT, NETAGENT | hosts, IPs | fresh |
//! | `admin.pem`, `.key` | the REST API's admin client | none | – | fresh |
//!
//! There is no CNCI certificate: the controller issues each CNCI its own, bound to its UUID, in
//! its START (it holds `ca.key`; `controller/src/cnci_creds.rs`), so no certificate is shared by
//! CNCIs. The admin certificate has no SSNTP role on purpose: it authenticates a person to the
//! REST API and cannot connect to the scheduler.
//!
//! Idempotent: a complete set that is valid now, for these hosts, is kept as it is.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rcgen::KeyPair;
use rustls::pki_types::CertificateDer;
use ssntp::cert::{AltName, CertError, CertInfo};
use ssntp::{Role, Uuid, UuidBinding};

use crate::build::{self, Anchor, BuildError, CaProfile, LeafProfile, Names};
use crate::files::{self, Access, FileError, OutFile};
use crate::key::{self, KeyError, KeyType};
use crate::verify;

/// One role certificate of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// File name without extension, and the subject's common name.
    pub name: &'static str,
    /// Its SSNTP roles.
    pub roles: Role,
    /// Whether it binds a fresh UUID.
    pub bound: bool,
    /// Whether it names the cluster's hosts and IPs.
    pub host_names: bool,
    /// Whether it is the REST API admin's ([`ssntp::api_admin_oid`]).
    pub api_admin: bool,
}

/// The CA's file name without extension.
pub const CA: &str = "ca";

/// The role certificates of the set, in the order they are written.
pub const MEMBERS: [Member; 4] = [
    Member {
        name: "scheduler",
        roles: Role::SCHEDULER,
        bound: true,
        host_names: true,
        api_admin: false,
    },
    Member {
        name: "controller",
        roles: Role::CONTROLLER,
        bound: true,
        host_names: true,
        api_admin: false,
    },
    Member {
        name: "agent",
        roles: Role::DUAL,
        bound: true,
        host_names: true,
        api_admin: false,
    },
    Member {
        name: "admin",
        roles: Role::empty(),
        bound: true,
        host_names: false,
        api_admin: true,
    },
];

/// What to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Where the files go.
    pub directory: PathBuf,
    /// The cluster's host names (DNS names or IP addresses), at least one.
    pub hosts: Vec<String>,
    /// More IP addresses of the host.
    pub ips: Vec<IpAddr>,
    /// The subjects' organization.
    pub organization: String,
    /// The key type of every key.
    pub key_type: KeyType,
    /// Validity of the role certificates in days (the CA gets [`build::CA_DAYS`]).
    pub days: u32,
    /// Replace an existing set, valid or not.
    pub force: bool,
}

/// One certificate of the set, as written or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The certificate file.
    pub cert: PathBuf,
    /// The key file.
    pub key: PathBuf,
    /// `None` for the CA, else the roles.
    pub roles: Option<Role>,
    /// The bound UUID.
    pub uuid: Option<Uuid>,
    /// End of validity, Unix seconds.
    pub not_after: i64,
}

/// What `cluster` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new set was written.
    Made(Vec<Entry>),
    /// A valid set was there and was kept.
    Kept(Vec<Entry>),
}

/// Why no set was made.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No host given.
    #[error("no host given; pass --host NAME")]
    NoHost,
    /// Files of a set are there, but not a valid set for these hosts.
    #[error(
        "{} holds a certificate set that is not valid ({reason}); pass --force to replace it",
        .directory.display()
    )]
    Invalid {
        /// The directory.
        directory: PathBuf,
        /// The first problem found.
        reason: String,
    },
    /// Bad names or a failure to make a certificate.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A certificate just made cannot be read back.
    #[error("a new certificate cannot be read back: {0}")]
    ReadBack(#[from] CertError),
    /// The files could not be written.
    #[error(transparent)]
    File(#[from] FileError),
}

/// The certificate and key paths of a set member.
pub fn paths(directory: &Path, name: &str) -> (PathBuf, PathBuf) {
    files::prefix_paths(&directory.join(name))
}

/// Makes the set, or keeps a valid one: see the module documentation.
pub fn cluster(spec: &ClusterSpec, now: SystemTime) -> Result<Outcome, ClusterError> {
    if spec.hosts.is_empty() {
        return Err(ClusterError::NoHost);
    }
    let ca_names = Names::for_hosts(
        &format!("{} CA", spec.organization),
        Some(&spec.organization),
        &spec.hosts,
        &spec.ips,
        None,
    )?;
    let all_paths: Vec<PathBuf> = std::iter::once(CA)
        .chain(MEMBERS.iter().map(|m| m.name))
        .flat_map(|name| {
            let (cert, key) = paths(&spec.directory, name);
            [cert, key]
        })
        .collect();
    let any_there = all_paths.iter().any(|p| p.symlink_metadata().is_ok());
    if any_there && !spec.force {
        return check_existing(spec, &ca_names, now)
            .map(Outcome::Kept)
            .map_err(|reason| ClusterError::Invalid {
                directory: spec.directory.clone(),
                reason,
            });
    }

    let ca_key = spec.key_type.generate()?;
    let ca_profile = CaProfile {
        names: ca_names,
        days: build::CA_DAYS,
    };
    let ca_cert = build::issue_ca(&ca_profile, &ca_key, now)?;
    let mut out = Vec::new();
    let (ca_pem, ca_key_path) = paths(&spec.directory, CA);
    out.push(public(&ca_pem, ca_cert.pem.clone()));
    out.push(secret(&ca_key_path, &ca_key));
    let anchor = Anchor::new(ca_cert.der, ca_key, now)?;
    let mut entries = vec![entry(ca_pem, ca_key_path, None, anchor.info())];

    for member in MEMBERS {
        let (files, info) = issue_member(&member, spec, &anchor, now)?;
        let (pem_path, key_path) = paths(&spec.directory, member.name);
        out.extend(files);
        entries.push(entry(pem_path, key_path, Some(member.roles), &info));
    }
    files::write_all(&out, spec.force)?;
    Ok(Outcome::Made(entries))
}

/// Makes a member's certificate and key again, replacing its files.
fn remake(
    member: &Member,
    spec: &ClusterSpec,
    anchor: &Anchor,
    now: SystemTime,
) -> Result<CertInfo, ClusterError> {
    let (out, info) = issue_member(member, spec, anchor, now)?;
    files::write_all(&out, true)?;
    Ok(info)
}

/// A member's certificate (with the CA's after it) and key, fresh, as files to write.
fn issue_member(
    member: &Member,
    spec: &ClusterSpec,
    anchor: &Anchor,
    now: SystemTime,
) -> Result<([OutFile; 2], CertInfo), ClusterError> {
    let key = spec.key_type.generate()?;
    let profile = LeafProfile {
        names: member_names(member, spec)?,
        roles: member.roles,
        uuid: member.bound.then(Uuid::new_v4),
        days: spec.days,
        api_admin: member.api_admin,
    };
    let cert = build::issue_leaf(&profile, &key, anchor, now)?;
    let info = CertInfo::parse(&cert.der)?;
    let (pem_path, key_path) = paths(&spec.directory, member.name);
    let files = [
        public(&pem_path, format!("{}{}", cert.pem, anchor.pem())),
        secret(&key_path, &key),
    ];
    Ok((files, info))
}

fn member_names(member: &Member, spec: &ClusterSpec) -> Result<Names, BuildError> {
    let (hosts, ips): (&[String], &[IpAddr]) = if member.host_names {
        (&spec.hosts, &spec.ips)
    } else {
        (&[], &[])
    };
    Names::for_hosts(member.name, Some(&spec.organization), hosts, ips, None)
}

fn public(path: &Path, pem: String) -> OutFile {
    OutFile {
        path: path.to_path_buf(),
        contents: pem.into_bytes(),
        access: Access::Public,
    }
}

fn secret(path: &Path, key: &KeyPair) -> OutFile {
    OutFile {
        path: path.to_path_buf(),
        contents: crate::key::to_pem(key).into_bytes(),
        access: Access::Secret,
    }
}

fn entry(cert: PathBuf, key: PathBuf, roles: Option<Role>, info: &CertInfo) -> Entry {
    Entry {
        cert,
        key,
        roles,
        uuid: match info.binding {
            UuidBinding::Bound(uuid) => Some(uuid),
            _ => None,
        },
        not_after: info.not_after,
    }
}

/// The existing set, if it is complete and valid now for the spec's hosts; else the first
/// problem, naming the file.
fn check_existing(
    spec: &ClusterSpec,
    ca_names: &Names,
    now: SystemTime,
) -> Result<Vec<Entry>, String> {
    let (ca_pem, ca_key) = paths(&spec.directory, CA);
    let read = |path: &Path| files::read(path).map_err(|e| e.to_string());
    let anchor = Anchor::from_pem(&read(&ca_pem)?, &read(&ca_key)?, now)
        .map_err(|e| format!("{}: {e}", ca_pem.display()))?;
    missing_names(anchor.info(), &ca_names.alt_names)
        .map_err(|e| format!("{}: {e}", ca_pem.display()))?;
    let mut entries = vec![entry(ca_pem, ca_key, None, anchor.info())];
    for member in MEMBERS {
        let (pem_path, key_path) = paths(&spec.directory, member.name);
        let problem = |e: String| format!("{}: {e}", pem_path.display());
        let cert = files::read_certs(&pem_path)
            .map_err(|e| e.to_string())?
            .swap_remove(0);
        let mut info =
            check_member(&member, spec, &cert, &read(&key_path)?, &anchor, now).map_err(problem)?;
        if member.api_admin && !info.is_api_admin() {
            // A set made before admin certificates carried their OID (2026-12-02): the API
            // no longer takes this one as an admin's, so it is made again (new key, new UUID).
            info = remake(&member, spec, &anchor, now).map_err(|e| problem(e.to_string()))?;
        }
        entries.push(entry(pem_path, key_path, Some(member.roles), &info));
    }
    Ok(entries)
}

fn check_member(
    member: &Member,
    spec: &ClusterSpec,
    cert: &CertificateDer<'_>,
    key_pem: &[u8],
    anchor: &Anchor,
    now: SystemTime,
) -> Result<CertInfo, String> {
    let info = verify::verify(cert, anchor.der(), member.roles, now).map_err(|e| e.to_string())?;
    let key = key::load_key(key_pem).map_err(|e| e.to_string())?;
    if !key::matches(&key, &info) {
        return Err("its .key file holds another key".to_string());
    }
    match (member.bound, info.binding) {
        (true, UuidBinding::Bound(_)) | (false, UuidBinding::Unbound) => {}
        (_, binding) => return Err(format!("unexpected UUID binding {binding:?}")),
    }
    if member.host_names {
        missing_names(
            &info,
            &member_names(member, spec)
                .map_err(|e| e.to_string())?
                .alt_names,
        )?;
    }
    Ok(info)
}

fn missing_names(info: &CertInfo, wanted: &[AltName]) -> Result<(), String> {
    match wanted.iter().find(|n| !info.alt_names.contains(n)) {
        Some(name) => Err(format!("it does not name {name}")),
        None => Ok(()),
    }
}
