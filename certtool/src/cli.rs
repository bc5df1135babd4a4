//! The `cumulo-cert` command line: flags (clap), what each command does with the library, and
//! the one place where errors become one line and an exit code (2: the command line is wrong;
//! 1: anything else).

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand};
use ssntp::cert::{CertError, CertInfo};
use ssntp::{Role, Uuid};

use crate::build::{self, Anchor, BuildError, CaProfile, LeafProfile, Names};
use crate::cluster::{self, ClusterError, ClusterSpec, Outcome};
use crate::crl;
use crate::dump;
use crate::files::{self, Access, FileError, OutFile};
use crate::key::{KeyError, KeyType};
use crate::renew::{self, RenewError};
use crate::verify::{self, VerifyError};

/// Makes the cluster CA and the role certificates of cumulo's SSNTP endpoints.
///
/// A CA:               cumulo-cert --anchor --host NAMES [--ip IPS] --out ca
/// A role certificate: cumulo-cert --role agent,netagent --host NAMES --anchor-cert ca.pem
///                     --anchor-key ca.key --out node [--verify]
/// A whole cluster:    cumulo-cert cluster --host NAME [--ip IP] --directory DIR
#[derive(Debug, Parser)]
#[command(
    name = "cumulo-cert",
    version,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    verbatim_doc_comment
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    make: MakeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make the CA and every certificate of a single-host cluster in one directory, with fixed
    /// names (ca, scheduler, controller, agent, admin; .pem and .key). A valid
    /// existing set is kept unless --force.
    Cluster(ClusterArgs),
    /// Re-issue a role certificate with the same roles, names and UUID, a new validity and a new
    /// key. Without --out, replaces CERT and the .key beside it.
    Renew(RenewArgs),
    /// Add certificates to the CA's revocation list (made if absent; what it revoked already
    /// stays). The scheduler refuses them once it reads the list (cumulo-scheduler --crl FILE).
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
struct RevokeArgs {
    /// The certificates to revoke (PEM files; the first certificate of each).
    cert: Vec<PathBuf>,
    /// Serial numbers to revoke, in hex (bytes may be separated by `:`), comma-separated.
    #[arg(long, value_name = "HEX", value_delimiter = ',', value_parser = parse_serial)]
    serial: Vec<Vec<u8>>,
    /// The revocation list (PEM), replaced by the new one.
    #[arg(long, value_name = "FILE", required = true)]
    crl: PathBuf,
    /// The CA certificate (PEM).
    #[arg(long, value_name = "FILE", required = true)]
    anchor_cert: PathBuf,
    /// The CA's private key [default: the anchor certificate's path with .key].
    #[arg(long, value_name = "FILE")]
    anchor_key: Option<PathBuf>,
}

fn parse_serial(s: &str) -> Result<Vec<u8>, String> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    if hex.is_empty() || hex.len() > 40 || !hex.len().is_multiple_of(2) {
        return Err("give an even number of hex digits, at most 40 (20 bytes)".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| format!("{s:?} is not hex")))
        .collect()
}

#[derive(Debug, Args)]
struct MakeArgs {
    /// Make a CA (trust anchor) that signs role certificates.
    #[arg(long, conflicts_with_all = ["role", "anchor_cert", "anchor_key", "verify", "uuid", "no_uuid"], requires = "host")]
    anchor: bool,
    /// Make a role certificate with these roles, comma-separated: server, controller, agent,
    /// scheduler, netagent, cnciagent; or `none`: a plain TLS certificate without role OIDs
    /// (etcd's server and client certificates: Go before 1.22 cannot parse the role OIDs).
    #[arg(long, value_name = "ROLES", value_parser = parse_role, requires_all = ["host", "anchor_cert"])]
    role: Option<Role>,
    /// Host names (or IP addresses) the certificate names, comma-separated; the first names
    /// the subject and the default file names.
    #[arg(long, value_name = "NAMES", value_delimiter = ',', value_parser = parse_host)]
    host: Vec<String>,
    /// IP addresses the certificate names, comma-separated.
    #[arg(long, value_name = "IPS", value_delimiter = ',', value_parser = parse_ip)]
    ip: Vec<IpAddr>,
    /// The CA certificate that signs the role certificate (PEM).
    #[arg(long, value_name = "FILE")]
    anchor_cert: Option<PathBuf>,
    /// The CA's private key (PKCS#8 PEM) [default: the anchor certificate's path with .key].
    #[arg(long, value_name = "FILE", requires = "anchor_cert")]
    anchor_key: Option<PathBuf>,
    /// Check that the new certificate chains to the anchor and carries the roles asked for.
    #[arg(long, requires = "role")]
    verify: bool,
    /// An e-mail address to name in the certificate.
    #[arg(long, value_parser = parse_email)]
    email: Option<String>,
    /// The subject's organization.
    #[arg(long, default_value = "cumulo")]
    organization: String,
    /// Where files go (with --out: the directory the prefix is relative to).
    #[arg(long, value_name = "DIR", default_value = ".")]
    directory: PathBuf,
    /// Print what the certificates in a PEM file say, and make nothing.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["anchor", "role", "out", "anchor_cert", "verify", "force"])]
    dump: Option<PathBuf>,
    /// Write PREFIX.pem (the certificate; for a role certificate followed by the CA's) and
    /// PREFIX.key (its private key, mode 0600) [default: ca-HOST or cert-ROLES-HOST].
    #[arg(long, value_name = "PREFIX")]
    out: Option<PathBuf>,
    /// Validity in days [default: 365 for a role certificate, 3650 for a CA].
    #[arg(long, value_parser = parse_days)]
    days: Option<u32>,
    /// A role certificate's end of validity instead of --days: RFC 3339 (2030-01-31T12:00:00Z)
    /// or +DURATION from now (+90s, +10m, +2h).
    #[arg(long, value_name = "TIME", value_parser = parse_not_after, conflicts_with_all = ["days", "anchor"])]
    not_after: Option<NotAfter>,
    /// Key type: p256, p384, ed25519 or rsa2048.
    #[arg(long, value_name = "TYPE", default_value = "p256", value_parser = parse_key_type)]
    key_type: KeyType,
    /// The endpoint UUID to bind [default: a fresh one].
    #[arg(long, conflicts_with = "no_uuid")]
    uuid: Option<Uuid>,
    /// Bind no UUID (any endpoint UUID may then use the certificate).
    #[arg(long)]
    no_uuid: bool,
    /// Replace existing output files.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct ClusterArgs {
    /// The cluster host's names (or IP addresses), comma-separated.
    #[arg(long, value_name = "NAMES", required = true, value_delimiter = ',', value_parser = parse_host)]
    host: Vec<String>,
    /// The host's IP addresses, comma-separated.
    #[arg(long, value_name = "IPS", value_delimiter = ',', value_parser = parse_ip)]
    ip: Vec<IpAddr>,
    /// Where the set goes.
    #[arg(long, value_name = "DIR", default_value = ".")]
    directory: PathBuf,
    /// The subjects' organization.
    #[arg(long, default_value = "cumulo")]
    organization: String,
    /// Key type: p256, p384, ed25519 or rsa2048.
    #[arg(long, value_name = "TYPE", default_value = "p256", value_parser = parse_key_type)]
    key_type: KeyType,
    /// Validity of the role certificates in days (the CA's is ten years).
    #[arg(long, default_value = "365", value_parser = parse_days)]
    days: u32,
    /// Replace the set in the directory, valid or not.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct RenewArgs {
    /// The role certificate to renew (PEM).
    cert: PathBuf,
    /// The CA certificate that signed it (PEM).
    #[arg(long, value_name = "FILE", required = true)]
    anchor_cert: PathBuf,
    /// The CA's private key [default: the anchor certificate's path with .key].
    #[arg(long, value_name = "FILE")]
    anchor_key: Option<PathBuf>,
    /// Write PREFIX.pem and PREFIX.key instead of replacing CERT.
    #[arg(long, value_name = "PREFIX")]
    out: Option<PathBuf>,
    /// Validity in days.
    #[arg(long, default_value = "365", value_parser = parse_days)]
    days: u32,
    /// The end of validity instead of --days: RFC 3339 (2030-01-31T12:00:00Z) or +DURATION
    /// from now (+90s, +10m, +2h).
    #[arg(long, value_name = "TIME", value_parser = parse_not_after, conflicts_with = "days")]
    not_after: Option<NotAfter>,
    /// The new key's type [default: the old key's].
    #[arg(long, value_name = "TYPE", value_parser = parse_key_type)]
    key_type: Option<KeyType>,
    /// With --out: replace existing files.
    #[arg(long)]
    force: bool,
}

fn parse_role(s: &str) -> Result<Role, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Role::empty());
    }
    s.parse::<Role>().map_err(|e| e.to_string())
}

fn parse_host(s: &str) -> Result<String, String> {
    if s.parse::<IpAddr>().is_ok() {
        return Ok(s.to_string());
    }
    build::check_host(s).map_err(|e| e.to_string())
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| "not an IP address; write e.g. 192.0.2.10 or 2001:db8::1".to_string())
}

fn parse_email(s: &str) -> Result<String, String> {
    build::check_email(s).map_err(|e| e.to_string())
}

fn parse_days(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(days) if (1..=build::MAX_DAYS).contains(&days) => Ok(days),
        _ => Err(format!(
            "give a whole number of days from 1 to {}",
            build::MAX_DAYS
        )),
    }
}

/// `--not-after`: a point in time, or a span from the command's `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotAfter {
    At(SystemTime),
    In(std::time::Duration),
}

impl NotAfter {
    fn at(self, now: SystemTime) -> SystemTime {
        match self {
            NotAfter::At(t) => t,
            NotAfter::In(d) => now + d,
        }
    }
}

fn parse_not_after(s: &str) -> Result<NotAfter, String> {
    let bad = || {
        "give an RFC 3339 time (2030-01-31T12:00:00Z) or +DURATION (+90s, +10m, +2h)".to_string()
    };
    if let Some(span) = s.strip_prefix('+') {
        return support::units::parse_positive_duration(span)
            .map(NotAfter::In)
            .map_err(|_| bad());
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|_| bad())?;
    let secs = u64::try_from(t.unix_timestamp()).map_err(|_| bad())?;
    Ok(NotAfter::At(
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs),
    ))
}

fn parse_key_type(s: &str) -> Result<KeyType, String> {
    s.parse().map_err(|e: KeyError| e.to_string())
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// A file could not be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    /// The anchor (CA) cannot sign.
    #[error("{source} (--anchor-cert {}, --anchor-key {})", .cert.display(), .key.display())]
    Anchor {
        /// The anchor certificate file.
        cert: PathBuf,
        /// The anchor key file.
        key: PathBuf,
        /// What is wrong.
        source: BuildError,
    },
    /// A certificate could not be made.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `--verify` failed.
    #[error("{}: verification failed: {source}", .path.display())]
    Verify {
        /// The certificate that would have been written.
        path: PathBuf,
        /// Why.
        source: VerifyError,
    },
    /// A certificate in a file cannot be read.
    #[error("{}: {source}", .path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// Why.
        source: CertError,
    },
    /// `cluster` failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// `renew` failed.
    #[error("{}: {source}", .path.display())]
    Renew {
        /// The certificate to renew.
        path: PathBuf,
        /// Why.
        source: RenewError,
    },
    /// `revoke` failed.
    #[error("{}: {source}", .path.display())]
    Crl {
        /// The list, or the certificate to revoke.
        path: PathBuf,
        /// Why.
        source: crl::CrlError,
    },
    /// Standard output is gone.
    #[error("cannot write the report: {0}")]
    Output(#[from] io::Error),
}

impl CliError {
    /// 2 for a wrong command line, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Runs `cumulo-cert` with these arguments (the program name first) at `now`: reports go to
/// `out`, the one-line error to `err`. Returns the exit code.
pub fn main_with(
    args: impl IntoIterator<Item = OsString>,
    now: SystemTime,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = write!(out, "{e}");
            return 0;
        }
        Err(e) => {
            let _ = writeln!(err, "cumulo-cert: {}", one_line(&e));
            return 2;
        }
    };
    match run(cli, now, out) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "cumulo-cert: {e}");
            e.exit_code()
        }
    }
}

/// clap's message on one line, without the usage block, with a pointer to `--help`.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let joined = parts.join(" ");
    let joined = joined.strip_prefix("error: ").unwrap_or(&joined);
    format!("{joined}; see cumulo-cert --help")
}

fn run(cli: Cli, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    match cli.command {
        Some(Command::Cluster(args)) => run_cluster(args, now, out),
        Some(Command::Renew(args)) => run_renew(args, now, out),
        Some(Command::Revoke(args)) => run_revoke(args, now, out),
        None => {
            let args = cli.make;
            if let Some(path) = &args.dump {
                run_dump(path, now, out)
            } else if args.anchor {
                run_anchor(&args, now, out)
            } else if let Some(roles) = args.role {
                run_leaf(&args, roles, now, out)
            } else {
                Err(CliError::Usage(
                    "nothing to do: pass --anchor (make a CA), --role ROLES (make a role certificate), --dump FILE, or a command (cluster, renew, revoke); see cumulo-cert --help".into(),
                ))
            }
        }
    }
}

/// `--anchor-key`, or the anchor certificate's path with the `.key` extension.
fn anchor_key_path(cert: &Path, key: Option<&PathBuf>) -> PathBuf {
    key.cloned().unwrap_or_else(|| cert.with_extension("key"))
}

fn load_anchor(cert: &Path, key: Option<&PathBuf>, now: SystemTime) -> Result<Anchor, CliError> {
    let key = anchor_key_path(cert, key);
    let cert_pem = files::read(cert)?;
    let key_pem = files::read(&key)?;
    Anchor::from_pem(&cert_pem, &key_pem, now).map_err(|source| CliError::Anchor {
        cert: cert.to_path_buf(),
        key,
        source,
    })
}

fn first_host(args: &MakeArgs) -> Result<&str, CliError> {
    args.host
        .first()
        .map(String::as_str)
        .ok_or_else(|| CliError::Usage("no host given; pass --host NAME".into()))
}

fn out_prefix(args: &MakeArgs, default: String) -> PathBuf {
    let prefix = args.out.clone().unwrap_or_else(|| PathBuf::from(default));
    if args.directory == Path::new(".") {
        prefix
    } else {
        args.directory.join(prefix)
    }
}

fn cert_and_key(
    pem_path: &Path,
    pem: String,
    key_path: &Path,
    key: &rcgen::KeyPair,
) -> [OutFile; 2] {
    [
        OutFile {
            path: pem_path.to_path_buf(),
            contents: pem.into_bytes(),
            access: Access::Public,
        },
        OutFile {
            path: key_path.to_path_buf(),
            contents: crate::key::to_pem(key).into_bytes(),
            access: Access::Secret,
        },
    ]
}

fn run_anchor(args: &MakeArgs, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    let host = first_host(args)?;
    let names = Names::for_hosts(
        &format!("{} CA {host}", args.organization),
        Some(&args.organization),
        &args.host,
        &args.ip,
        args.email.as_deref(),
    )?;
    let profile = CaProfile {
        names,
        days: args.days.unwrap_or(build::CA_DAYS),
    };
    let (pem_path, key_path) = files::prefix_paths(&out_prefix(args, format!("ca-{host}")));
    if !args.force {
        files::check_absent([pem_path.as_path(), key_path.as_path()])?;
    }
    let key = args.key_type.generate()?;
    let cert = build::issue_ca(&profile, &key, now)?;
    files::write_all(
        &cert_and_key(&pem_path, cert.pem, &key_path, &key),
        args.force,
    )?;
    let info = CertInfo::parse(&cert.der).map_err(|source| CliError::Cert {
        path: pem_path.clone(),
        source,
    })?;
    writeln!(
        out,
        "wrote {} (CA certificate, {}, {} key, valid until {})",
        pem_path.display(),
        info.subject,
        info.key,
        dump::utc(info.not_after)
    )?;
    writeln!(
        out,
        "wrote {} (its private key, mode 0600)",
        key_path.display()
    )?;
    Ok(())
}

fn run_leaf(
    args: &MakeArgs,
    roles: Role,
    now: SystemTime,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let host = first_host(args)?;
    let Some(anchor_cert) = &args.anchor_cert else {
        return Err(CliError::Usage(
            "a role certificate needs its CA: pass --anchor-cert FILE".into(),
        ));
    };
    let roles_name = roles.to_string().replace('|', "-");
    let (pem_path, key_path) =
        files::prefix_paths(&out_prefix(args, format!("cert-{roles_name}-{host}")));
    if !args.force {
        files::check_absent([pem_path.as_path(), key_path.as_path()])?;
    }
    let anchor = load_anchor(anchor_cert, args.anchor_key.as_ref(), now)?;
    let uuid = match (args.no_uuid, args.uuid) {
        (true, _) => None,
        (false, Some(uuid)) => Some(uuid),
        (false, None) => Some(Uuid::new_v4()),
    };
    let profile = LeafProfile {
        names: Names::for_hosts(
            host,
            Some(&args.organization),
            &args.host,
            &args.ip,
            args.email.as_deref(),
        )?,
        roles,
        uuid,
        days: args.days.unwrap_or(build::LEAF_DAYS),
        api_admin: false,
    };
    let key = args.key_type.generate()?;
    let until = args.not_after.map(|n| n.at(now));
    let cert = build::issue_leaf_until(&profile, &key, &anchor, now, until)?;
    let info = if args.verify {
        verify::verify(&cert.der, anchor.der(), roles, now).map_err(|source| CliError::Verify {
            path: pem_path.clone(),
            source,
        })?
    } else {
        CertInfo::parse(&cert.der).map_err(|source| CliError::Cert {
            path: pem_path.clone(),
            source,
        })?
    };
    let chain = format!("{}{}", cert.pem, anchor.pem());
    files::write_all(&cert_and_key(&pem_path, chain, &key_path, &key), args.force)?;
    let bound = uuid.map_or_else(|| "no UUID".to_string(), |u| format!("UUID {u}"));
    writeln!(
        out,
        "wrote {} (certificate for {roles}, {bound}, valid until {}; followed by the CA certificate)",
        pem_path.display(),
        dump::utc(info.not_after)
    )?;
    writeln!(
        out,
        "wrote {} (its private key, mode 0600)",
        key_path.display()
    )?;
    if args.verify {
        writeln!(
            out,
            "verified: chains to {} as TLS server and client, roles {roles}",
            anchor_cert.display()
        )?;
    }
    Ok(())
}

fn run_dump(path: &Path, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    let certs = files::read_certs(path)?;
    let count = certs.len();
    for (n, der) in certs.iter().enumerate() {
        let info = CertInfo::parse(der).map_err(|source| CliError::Cert {
            path: path.to_path_buf(),
            source,
        })?;
        if n > 0 {
            writeln!(out)?;
        }
        if count > 1 {
            writeln!(
                out,
                "certificate {} of {count} in {}:",
                n + 1,
                path.display()
            )?;
        }
        write!(out, "{}", dump::render(&info, build::unix(now)))?;
    }
    Ok(())
}

fn run_cluster(args: ClusterArgs, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    let spec = ClusterSpec {
        directory: args.directory,
        hosts: args.host,
        ips: args.ip,
        organization: args.organization,
        key_type: args.key_type,
        days: args.days,
        force: args.force,
    };
    let (verb, entries) = match cluster::cluster(&spec, now)? {
        Outcome::Made(entries) => ("made", entries),
        Outcome::Kept(entries) => ("kept the valid", entries),
    };
    writeln!(
        out,
        "{verb} cluster certificate set in {}:",
        spec.directory.display()
    )?;
    for entry in entries {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let what = match entry.roles {
            None => "CA".to_string(),
            Some(roles) if roles.is_empty() => "no role (REST client)".to_string(),
            Some(roles) => roles.to_string(),
        };
        let uuid = entry
            .uuid
            .map_or_else(|| "no UUID".to_string(), |u| format!("UUID {u}"));
        writeln!(
            out,
            "  {:<15} {:<15} {what:<22} {uuid:<41} until {}",
            name(&entry.cert),
            name(&entry.key),
            dump::utc(entry.not_after)
        )?;
    }
    Ok(())
}

fn run_revoke(args: RevokeArgs, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    if args.cert.is_empty() && args.serial.is_empty() {
        return Err(CliError::Usage(
            "nothing to revoke: name certificate files or --serial".into(),
        ));
    }
    let anchor = load_anchor(&args.anchor_cert, args.anchor_key.as_ref(), now)?;
    let mut serials = args.serial.clone();
    for path in &args.cert {
        let cert = files::read_certs(path)?.swap_remove(0);
        serials.push(
            crl::serial_to_revoke(&cert, &anchor).map_err(|source| CliError::Crl {
                path: path.clone(),
                source,
            })?,
        );
    }
    let (list, _) =
        crl::update(&args.crl, &anchor, now, |_| serials).map_err(|source| CliError::Crl {
            path: args.crl.clone(),
            source,
        })?;
    writeln!(
        out,
        "wrote {} (revocation list number {}: {} certificates revoked)",
        args.crl.display(),
        list.number,
        list.revoked.len()
    )?;
    Ok(())
}

fn run_renew(args: RenewArgs, now: SystemTime, out: &mut dyn Write) -> Result<(), CliError> {
    let (pem_path, key_path, force) = match &args.out {
        Some(prefix) => {
            let (pem, key) = files::prefix_paths(prefix);
            (pem, key, args.force)
        }
        None => (args.cert.clone(), args.cert.with_extension("key"), true),
    };
    if !force {
        files::check_absent([pem_path.as_path(), key_path.as_path()])?;
    }
    let anchor = load_anchor(&args.anchor_cert, args.anchor_key.as_ref(), now)?;
    let old = files::read_certs(&args.cert)?.swap_remove(0);
    let renewed = renew::renew(
        &old,
        &anchor,
        args.key_type,
        args.days,
        args.not_after.map(|n| n.at(now)),
        now,
    )
    .map_err(|source| CliError::Renew {
        path: args.cert.clone(),
        source,
    })?;
    let chain = format!("{}{}", renewed.cert.pem, anchor.pem());
    files::write_all(
        &cert_and_key(&pem_path, chain, &key_path, &renewed.key),
        force,
    )?;
    let bound = match renewed.info.binding {
        ssntp::UuidBinding::Bound(u) => format!("UUID {u}"),
        _ => "no UUID".to_string(),
    };
    writeln!(
        out,
        "wrote {} (renewed certificate for {}, {bound}, valid until {}; followed by the CA certificate)",
        pem_path.display(),
        renewed.info.roles,
        dump::utc(renewed.info.not_after)
    )?;
    writeln!(
        out,
        "wrote {} (its new private key, mode 0600)",
        key_path.display()
    )?;
    Ok(())
}
