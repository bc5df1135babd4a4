//! The command line: what it writes, and every bad input → one line, exit code, no files.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ssntp::cert::CertInfo;
use ssntp::{Role, Uuid, UuidBinding};

use crate::{cumulo_cert, listing, ok, with_ca};

fn first_cert(path: &Path) -> CertInfo {
    let certs = certtool::files::read_certs(path).unwrap();
    CertInfo::parse(&certs[0]).unwrap()
}

/// Runs a command that must fail with `code`, one line on stderr naming `needle`, nothing on
/// stdout, and the directory unchanged.
fn fails(dir: &Path, args: &[&str], code: i32, needle: &str) -> String {
    let before = listing(dir);
    let out = cumulo_cert(dir, args);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("cumulo-cert: "), "{err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert_eq!(listing(dir), before, "{args:?} left files behind");
    err
}

const LEAF: [&str; 6] = [
    "--host",
    "node.test",
    "--anchor-cert",
    "ca.pem",
    "--out",
    "node",
];

fn leaf_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = LEAF.to_vec();
    args.extend_from_slice(extra);
    args
}

#[test]
fn makes_a_ca_and_a_dual_role_certificate() {
    let dir = with_ca();
    let ca = first_cert(&dir.path().join("ca.pem"));
    assert!(ca.is_ca);
    assert_eq!(ca.not_after - ca.not_before, 3650 * 86400);
    let mode = |name: &str| {
        fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("ca.key"), 0o600);

    let uuid = Uuid::new_v4().to_string();
    let out = ok(
        dir.path(),
        &leaf_args(&[
            "--role",
            "agent,netagent",
            "--ip",
            "192.0.2.7,2001:db8::7",
            "--uuid",
            &uuid,
            "--email",
            "ops@example.org",
            "--verify",
        ]),
    );
    assert!(out.contains("verified"), "{out}");
    let certs = certtool::files::read_certs(&dir.path().join("node.pem")).unwrap();
    assert_eq!(certs.len(), 2, "leaf then CA");
    let leaf = CertInfo::parse(&certs[0]).unwrap();
    assert_eq!(leaf.roles, Role::DUAL);
    assert_eq!(leaf.roles.bits(), 0x14);
    assert_eq!(leaf.binding, UuidBinding::Bound(uuid.parse().unwrap()));
    assert_eq!(leaf.not_after - leaf.not_before, 365 * 86400);
    let ips: Vec<String> = leaf.ip_addresses().map(|ip| ip.to_string()).collect();
    assert_eq!(ips, ["192.0.2.7", "2001:db8::7"]);
    assert_eq!(leaf.dns_names().collect::<Vec<_>>(), ["node.test"]);
    assert_eq!(CertInfo::parse(&certs[1]).unwrap(), ca);
    assert_eq!(mode("node.key"), 0o600);
    assert_eq!(mode("node.pem"), 0o644);
}

#[test]
fn role_none_makes_a_certificate_without_role_oids() {
    // etcd's certificates: its CN is the etcd user; Go (etcd) cannot parse the role OIDs.
    let dir = with_ca();
    let out = ok(
        dir.path(),
        &[
            "--role",
            "none",
            "--host",
            "root",
            "--no-uuid",
            "--anchor-cert",
            "ca.pem",
            "--out",
            "etcd-root",
            "--verify",
        ],
    );
    assert!(out.contains("verified"), "{out}");
    let info = first_cert(&dir.path().join("etcd-root.pem"));
    assert_eq!(info.roles, Role::empty());
    assert_eq!(info.binding, UuidBinding::Unbound);
    assert_eq!(info.dns_names().collect::<Vec<_>>(), ["root"]);
}

#[test]
fn uuid_days_key_type_and_default_names() {
    let dir = with_ca();
    ok(
        dir.path(),
        &leaf_args(&["--role", "cnciagent", "--no-uuid", "--days", "7"]),
    );
    let info = first_cert(&dir.path().join("node.pem"));
    assert_eq!(info.binding, UuidBinding::Unbound);
    assert_eq!(info.roles, Role::CNCIAGENT);
    assert_eq!(info.not_after - info.not_before, 7 * 86400);

    // A fresh UUID by default; without --out, self-explaining names in --directory.
    ok(
        dir.path(),
        &[
            "--role",
            "agent,netagent",
            "--host",
            "n1.test",
            "--anchor-cert",
            "ca.pem",
            "--anchor-key",
            "ca.key",
            "--directory",
            "out",
            "--key-type",
            "ed25519",
        ],
    );
    let info = first_cert(&dir.path().join("out/cert-agent-netagent-n1.test.pem"));
    assert!(matches!(info.binding, UuidBinding::Bound(_)));
    assert_eq!(info.key.to_string(), "Ed25519");
    assert!(
        dir.path()
            .join("out/cert-agent-netagent-n1.test.key")
            .exists()
    );

    ok(
        dir.path(),
        &["--anchor", "--host", "c2.test", "--key-type", "p384"],
    );
    let ca2 = first_cert(&dir.path().join("ca-c2.test.pem"));
    assert_eq!(ca2.key.to_string(), "ECDSA P-384");
}

#[test]
fn force_replaces_and_without_it_nothing_changes() {
    let dir = with_ca();
    ok(dir.path(), &leaf_args(&["--role", "agent"]));
    let before = fs::read(dir.path().join("node.pem")).unwrap();
    fails(
        dir.path(),
        &leaf_args(&["--role", "agent"]),
        1,
        "already exists; pass --force",
    );
    assert_eq!(fs::read(dir.path().join("node.pem")).unwrap(), before);
    ok(dir.path(), &leaf_args(&["--role", "agent", "--force"]));
    assert_ne!(fs::read(dir.path().join("node.pem")).unwrap(), before);
    // The key alone existing is enough to refuse.
    fs::remove_file(dir.path().join("node.pem")).unwrap();
    fails(
        dir.path(),
        &leaf_args(&["--role", "agent"]),
        1,
        "node.key already exists",
    );
    fails(
        dir.path(),
        &["--anchor", "--host", "x", "--out", "ca"],
        1,
        "already exists",
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = with_ca();
    let d = dir.path();
    fails(
        d,
        &leaf_args(&["--role", "bogus"]),
        2,
        "unknown role \"bogus\"; valid roles:",
    );
    fails(
        d,
        &leaf_args(&["--role", ""]),
        2,
        "no role given; valid roles:",
    );
    fails(d, &leaf_args(&["--role", " , "]), 2, "no role given");
    fails(
        d,
        &leaf_args(&["--role", "agent", "--ip", "10.0.0.256"]),
        2,
        "not an IP address",
    );
    fails(
        d,
        &leaf_args(&["--role", "agent", "--ip", "10.0.0.1,"]),
        2,
        "not an IP address",
    );
    fails(
        d,
        &["--anchor", "--host", "bad host", "--out", "x"],
        2,
        "invalid host name",
    );
    fails(
        d,
        &leaf_args(&["--role", "agent", "--email", "nobody"]),
        2,
        "invalid e-mail",
    );
    fails(
        d,
        &leaf_args(&["--role", "agent", "--days", "0"]),
        2,
        "days from 1 to",
    );
    fails(
        d,
        &leaf_args(&["--role", "agent", "--key-type", "dsa"]),
        2,
        "valid key types",
    );
    fails(
        d,
        &leaf_args(&["--role", "agent", "--uuid", "nope"]),
        2,
        "--uuid",
    );
    let uuid = Uuid::new_v4().to_string();
    fails(
        d,
        &leaf_args(&["--role", "agent", "--uuid", &uuid, "--no-uuid"]),
        2,
        "cannot be used with",
    );
    fails(d, &[], 2, "nothing to do");
    fails(
        d,
        &["--role", "agent", "--anchor-cert", "ca.pem"],
        2,
        "--host",
    );
    fails(d, &["--role", "agent", "--host", "x"], 2, "--anchor-cert");
    fails(
        d,
        &["--anchor", "--role", "agent", "--host", "x"],
        2,
        "cannot be used with",
    );
    fails(d, &["--anchor", "--out", "x"], 2, "--host");
    fails(
        d,
        &["--dump", "ca.pem", "--anchor"],
        2,
        "cannot be used with",
    );
    fails(d, &["--bogus"], 2, "--bogus");
    fails(d, &["cluster", "--directory", "set"], 2, "--host");
    fails(d, &["renew", "--anchor-cert", "ca.pem"], 2, "<CERT>");
    let help = ok(d, &["--help"]);
    assert!(
        help.contains("--key-type") && help.contains("cluster"),
        "{help}"
    );
}

#[test]
fn file_errors_exit_1() {
    let dir = with_ca();
    let d = dir.path();
    ok(d, &leaf_args(&["--role", "agent"]));
    fs::write(d.join("junk.pem"), "not pem").unwrap();
    fs::create_dir(d.join("adir")).unwrap();
    fs::write(d.join("adir/inside"), "").unwrap();
    let role = ["--role", "agent", "--host", "x", "--out", "new"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = role.to_vec();
        v.extend_from_slice(extra);
        v
    };
    // Missing and unreadable files.
    fails(
        d,
        &with(&["--anchor-cert", "missing.pem"]),
        1,
        "cannot read missing.pem",
    );
    fails(
        d,
        &with(&["--anchor-cert", "ca.pem", "--anchor-key", "missing.key"]),
        1,
        "cannot read missing.key",
    );
    fails(d, &with(&["--anchor-cert", "adir"]), 1, "cannot read adir");
    fails(
        d,
        &with(&["--anchor-cert", "junk.pem", "--anchor-key", "ca.key"]),
        1,
        "holds no PEM certificate",
    );
    fails(
        d,
        &with(&["--anchor-cert", "ca.pem", "--anchor-key", "junk.pem"]),
        1,
        "no PEM private key",
    );
    fails(d, &["--dump", "missing.pem"], 1, "cannot read missing.pem");
    fails(d, &["--dump", "junk.pem"], 1, "holds no PEM certificate");
    // An anchor that is not a CA, and a key that is not the anchor's.
    fails(
        d,
        &with(&["--anchor-cert", "node.pem", "--anchor-key", "node.key"]),
        1,
        "is not a CA",
    );
    fails(
        d,
        &with(&["--anchor-cert", "ca.pem", "--anchor-key", "node.key"]),
        1,
        "does not match",
    );
    // Renewal errors.
    fails(
        d,
        &["renew", "ca.pem", "--anchor-cert", "ca.pem"],
        1,
        "is a CA",
    );
    ok(d, &["--anchor", "--host", "other.test", "--out", "other"]);
    fails(
        d,
        &["renew", "node.pem", "--anchor-cert", "other.pem"],
        1,
        "not issued by this anchor",
    );
    fails(
        d,
        &["renew", "missing.pem", "--anchor-cert", "ca.pem"],
        1,
        "cannot read missing.pem",
    );
    fails(
        d,
        &[
            "renew",
            "node.pem",
            "--anchor-cert",
            "ca.pem",
            "--out",
            "ca",
        ],
        1,
        "already exists",
    );
}

#[test]
fn dump_shows_ours_and_others() {
    let dir = with_ca();
    let d = dir.path();
    let uuid = Uuid::new_v4().to_string();
    ok(
        d,
        &leaf_args(&["--role", "scheduler", "--uuid", &uuid, "--ip", "192.0.2.1"]),
    );
    let text = ok(d, &["--dump", "node.pem"]);
    for needle in [
        "certificate 1 of 2",
        "subject:            CN=node.test, O=cumulo",
        "roles:              scheduler (0x08)",
        &format!("bound UUID:         {uuid}"),
        "DNS names:          node.test",
        "IP addresses:       192.0.2.1",
        "key type:           ECDSA P-256",
        "is CA:              no",
        "is CA:              yes (self-signed root)",
        "validity:",
        "serverAuth, clientAuth, scheduler (2.25.15223806111904034722754700881208103483.2)",
    ] {
        assert!(text.contains(needle), "dump lacks {needle:?}:\n{text}");
    }
}

#[test]
fn cluster_is_complete_idempotent_and_forced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = ok(
        d,
        &[
            "cluster",
            "--host",
            "ctl.test",
            "--ip",
            "192.0.2.1",
            "--directory",
            "pki",
        ],
    );
    assert!(
        out.starts_with("made cluster certificate set in pki"),
        "{out}"
    );
    let mut expect: Vec<String> = ["pki"].iter().map(|s| s.to_string()).collect();
    for name in ["ca", "scheduler", "controller", "agent", "admin"] {
        expect.push(format!("pki/{name}.pem"));
        expect.push(format!("pki/{name}.key"));
        assert!(out.contains(&format!("{name}.pem")), "{out}");
    }
    expect.sort();
    assert_eq!(listing(d), expect);

    let pki = d.join("pki");
    let roles = [
        ("scheduler", Role::SCHEDULER, true),
        ("controller", Role::CONTROLLER, true),
        ("agent", Role::DUAL, true),
        ("admin", Role::empty(), true),
    ];
    let ca = certtool::files::read_certs(&pki.join("ca.pem"))
        .unwrap()
        .remove(0);
    for (name, role, bound) in roles {
        let certs = certtool::files::read_certs(&pki.join(format!("{name}.pem"))).unwrap();
        let info =
            certtool::verify::verify(&certs[0], &ca, role, std::time::SystemTime::now()).unwrap();
        assert_eq!(
            matches!(info.binding, UuidBinding::Bound(_)),
            bound,
            "{name}"
        );
        // Only the admin's certificate is an API admin's.
        assert_eq!(info.is_api_admin(), name == "admin", "{name}");
    }

    let snapshot = |name: &str| fs::read(pki.join(name)).unwrap();
    let before = snapshot("agent.pem");
    let out = ok(
        d,
        &[
            "cluster",
            "--host",
            "ctl.test",
            "--ip",
            "192.0.2.1",
            "--directory",
            "pki",
        ],
    );
    assert!(
        out.starts_with("kept the valid cluster certificate set"),
        "{out}"
    );
    assert_eq!(snapshot("agent.pem"), before);

    // Another host: the set does not fit, and is left alone.
    fails(
        d,
        &["cluster", "--host", "other.test", "--directory", "pki"],
        1,
        "pass --force",
    );
    // An incomplete set is not kept either.
    fs::remove_file(pki.join("admin.key")).unwrap();
    fails(
        d,
        &["cluster", "--host", "ctl.test", "--directory", "pki"],
        1,
        "admin.key",
    );
    let out = ok(
        d,
        &[
            "cluster",
            "--host",
            "ctl.test",
            "--directory",
            "pki",
            "--force",
        ],
    );
    assert!(out.starts_with("made"), "{out}");
    assert_ne!(snapshot("agent.pem"), before);
    assert_eq!(listing(d), expect);
}

#[test]
fn an_admin_certificate_without_the_admin_oid_is_made_again() {
    // A set made before admin certificates carried their OID: `cluster` keeps the set and
    // makes only the admin's certificate again, now an API admin's.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = ["cluster", "--host", "ctl.test", "--directory", "pki"];
    ok(d, &args);
    let pki = d.join("pki");
    let now = std::time::SystemTime::now();
    let anchor = certtool::build::Anchor::from_pem(
        &fs::read(pki.join("ca.pem")).unwrap(),
        &fs::read(pki.join("ca.key")).unwrap(),
        now,
    )
    .unwrap();
    let key = certtool::key::KeyType::P256.generate().unwrap();
    let old = certtool::build::LeafProfile {
        names: certtool::build::Names::for_hosts("admin", Some("cumulo"), &[], &[], None).unwrap(),
        roles: Role::empty(),
        uuid: Some(Uuid::new_v4()),
        days: 30,
        api_admin: false,
    };
    let cert = certtool::build::issue_leaf(&old, &key, &anchor, now).unwrap();
    fs::write(
        pki.join("admin.pem"),
        format!("{}{}", cert.pem, anchor.pem()),
    )
    .unwrap();
    fs::write(pki.join("admin.key"), certtool::key::to_pem(&key)).unwrap();
    assert!(!first_cert(&pki.join("admin.pem")).is_api_admin());
    let agent = fs::read(pki.join("agent.pem")).unwrap();

    let out = ok(d, &args);
    assert!(
        out.starts_with("kept the valid cluster certificate set"),
        "{out}"
    );
    let admin = first_cert(&pki.join("admin.pem"));
    assert!(admin.is_api_admin());
    assert!(admin.roles.is_empty());
    assert_eq!(fs::read(pki.join("agent.pem")).unwrap(), agent);
    let mode = fs::metadata(pki.join("admin.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn renew_keeps_identity_in_place() {
    let dir = with_ca();
    let d = dir.path();
    let uuid = Uuid::new_v4().to_string();
    ok(
        d,
        &leaf_args(&["--role", "controller", "--uuid", &uuid, "--days", "2"]),
    );
    let old = first_cert(&d.join("node.pem"));
    let old_key = fs::read(d.join("node.key")).unwrap();
    let out = ok(
        d,
        &[
            "renew",
            "node.pem",
            "--anchor-cert",
            "ca.pem",
            "--days",
            "30",
        ],
    );
    assert!(out.contains("renewed certificate for controller"), "{out}");
    let new = first_cert(&d.join("node.pem"));
    assert_eq!(new.roles, Role::CONTROLLER);
    assert_eq!(new.binding, old.binding);
    assert_eq!(new.alt_names, old.alt_names);
    assert_eq!(new.subject, old.subject);
    assert_eq!(new.not_after - new.not_before, 30 * 86400);
    assert_ne!(fs::read(d.join("node.key")).unwrap(), old_key, "a new key");
    let key = certtool::key::load_key(&fs::read(d.join("node.key")).unwrap()).unwrap();
    assert!(certtool::key::matches(&key, &new));
}

#[test]
fn not_after_sets_the_end_of_a_role_certificate_and_of_a_renewal() {
    let dir = with_ca();
    let d = dir.path();
    ok(d, &leaf_args(&["--role", "agent", "--not-after", "+90s"]));
    let short = first_cert(&d.join("node.pem"));
    assert!(
        (85..=95).contains(&(short.not_after - short.not_before)),
        "{short:?}"
    );
    ok(
        d,
        &[
            "renew",
            "node.pem",
            "--anchor-cert",
            "ca.pem",
            "--not-after",
            "2030-01-31T12:00:00Z",
        ],
    );
    let renewed = first_cert(&d.join("node.pem"));
    assert_eq!(renewed.not_after, 1_896_091_200);
    assert_eq!(renewed.binding, short.binding);
    fails(
        d,
        &leaf_args(&["--role", "agent", "--not-after", "yesterday", "--force"]),
        2,
        "RFC 3339",
    );
    fails(
        d,
        &leaf_args(&[
            "--role",
            "agent",
            "--not-after",
            "+1h",
            "--days",
            "3",
            "--force",
        ]),
        2,
        "--days",
    );
    fails(
        d,
        &[
            "renew",
            "node.pem",
            "--anchor-cert",
            "ca.pem",
            "--not-after",
            "2001-01-01T00:00:00Z",
        ],
        1,
        "--not-after must be later than now",
    );
}
