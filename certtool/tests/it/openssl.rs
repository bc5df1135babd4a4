//! `openssl x509 -text`, `openssl verify` and `openssl pkey` accept what `cumulo-cert` writes,
//! for every key type; and `--dump` reads a certificate that openssl made.

use std::path::Path;
use std::process::{Command, Output};

use crate::{cumulo_cert, ok, with_ca};

fn openssl(dir: &Path, args: &[&str]) -> Output {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl binary is needed by these tests: install the `openssl` package")
}

fn openssl_ok(dir: &Path, args: &[&str]) -> String {
    let out = openssl(dir, args);
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn openssl_reads_and_verifies_every_key_type() {
    for kind in ["p256", "p384", "ed25519", "rsa2048"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ok(
            d,
            &[
                "--anchor",
                "--host",
                "ca.test",
                "--key-type",
                kind,
                "--out",
                "ca",
            ],
        );
        ok(
            d,
            &[
                "--role",
                "agent,netagent",
                "--host",
                "node.test",
                "--ip",
                "192.0.2.5",
                "--anchor-cert",
                "ca.pem",
                "--key-type",
                kind,
                "--out",
                "node",
            ],
        );
        let ca = openssl_ok(d, &["x509", "-in", "ca.pem", "-noout", "-text"]);
        assert!(ca.contains("CA:TRUE"), "{kind}: {ca}");
        assert!(ca.contains("Certificate Sign"), "{kind}: {ca}");
        let leaf = openssl_ok(d, &["x509", "-in", "node.pem", "-noout", "-text"]);
        for needle in [
            "CA:FALSE",
            "TLS Web Server Authentication, TLS Web Client Authentication, \
             2.25.15223806111904034722754700881208103483.1, \
             2.25.15223806111904034722754700881208103483.4",
            "DNS:node.test",
            "IP Address:192.0.2.5",
            "URI:urn:uuid:",
        ] {
            assert!(leaf.contains(needle), "{kind}: lacks {needle}: {leaf}");
        }
        assert!(!leaf.contains("Any Extended Key Usage"), "{kind}");
        if kind == "p256" || kind == "rsa2048" {
            assert!(
                leaf.contains("sha256With") || leaf.contains("ecdsa-with-SHA256"),
                "{kind}"
            );
        }
        for purpose in ["sslserver", "sslclient"] {
            let out = openssl_ok(
                d,
                &[
                    "verify", "-CAfile", "ca.pem", "-purpose", purpose, "node.pem",
                ],
            );
            assert_eq!(out.trim(), "node.pem: OK", "{kind} {purpose}");
        }
        // The key files are PKCS#8 and match their certificates.
        for name in ["ca", "node"] {
            let key = openssl_ok(d, &["pkey", "-in", &format!("{name}.key"), "-pubout"]);
            let cert = openssl_ok(
                d,
                &["x509", "-in", &format!("{name}.pem"), "-noout", "-pubkey"],
            );
            assert_eq!(key, cert, "{kind} {name}");
            let der = openssl_ok(d, &["asn1parse", "-in", &format!("{name}.key")]);
            assert!(der.contains("OBJECT"), "{kind}: not PKCS#8: {der}");
        }
    }
}

#[test]
fn openssl_verifies_the_cluster_set_and_refuses_another_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
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
    for name in ["scheduler", "controller", "agent", "admin"] {
        let file = format!("pki/{name}.pem");
        let out = openssl_ok(d, &["verify", "-CAfile", "pki/ca.pem", &file]);
        assert_eq!(out.trim(), format!("{file}: OK"));
    }
    let other = with_ca();
    let ca = other.path().join("ca.pem");
    let out = openssl(
        d,
        &["verify", "-CAfile", ca.to_str().unwrap(), "pki/agent.pem"],
    );
    assert!(!out.status.success(), "another CA must not verify it");
}

#[test]
fn dump_reads_a_certificate_openssl_made() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_ok(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "foreign.key",
            "-out",
            "foreign.pem",
            "-subj",
            "/CN=foreign/O=elsewhere",
            "-days",
            "2",
            "-addext",
            "subjectAltName=DNS:foreign.test,URI:urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        ],
    );
    let text = ok(d, &["--dump", "foreign.pem"]);
    for needle in [
        "subject:            CN=foreign, O=elsewhere",
        "key type:           RSA 2048",
        "signature:          sha256WithRSAEncryption",
        "roles:              none",
        "bound UUID:         6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        "DNS names:          foreign.test",
        "is CA:              yes (self-signed root)",
    ] {
        assert!(text.contains(needle), "dump lacks {needle:?}:\n{text}");
    }
    // openssl writes PKCS#8 keys too: its CA can sign our role certificates.
    ok(
        d,
        &[
            "--role",
            "agent",
            "--host",
            "n.test",
            "--anchor-cert",
            "foreign.pem",
            "--anchor-key",
            "foreign.key",
            "--out",
            "n",
            "--verify",
        ],
    );
}

#[test]
fn openssl_reads_the_revocation_list_and_refuses_what_it_revokes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["cluster", "--host", "ctl.test", "--directory", "pki"]);
    let revoke = |cert: &str| {
        ok(
            d,
            &[
                "revoke",
                cert,
                "--crl",
                "pki/crl.pem",
                "--anchor-cert",
                "pki/ca.pem",
            ],
        )
    };
    let said = revoke("pki/agent.pem");
    assert!(said.contains("number 1: 1 certificates revoked"), "{said}");
    // Again, and another: the list keeps the first and counts up.
    revoke("pki/agent.pem");
    let said = revoke("pki/admin.pem");
    assert!(said.contains("number 3: 2 certificates revoked"), "{said}");
    let text = openssl_ok(
        d,
        &[
            "crl",
            "-in",
            "pki/crl.pem",
            "-CAfile",
            "pki/ca.pem",
            "-noout",
            "-text",
        ],
    );
    assert!(
        text.contains("X509v3 CRL Number: \n                3"),
        "{text}"
    );
    assert_eq!(text.matches("Serial Number:").count(), 2, "{text}");
    let verify = |name: &str| {
        openssl(
            d,
            &[
                "verify",
                "-crl_check",
                "-CRLfile",
                "pki/crl.pem",
                "-CAfile",
                "pki/ca.pem",
                &format!("pki/{name}.pem"),
            ],
        )
    };
    for name in ["agent", "admin"] {
        let out = verify(name);
        assert!(!out.status.success(), "{name} is revoked");
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("certificate revoked"), "{said}");
    }
    for name in ["scheduler", "controller"] {
        assert!(verify(name).status.success(), "{name} is not revoked");
    }
    // Another CA's certificate cannot go on this list; nor can this list be extended by it.
    let other = with_ca();
    let out = cumulo_cert(
        d,
        &[
            "revoke",
            "pki/agent.pem",
            "--crl",
            "pki/crl.pem",
            "--anchor-cert",
            other.path().join("ca.pem").to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("this CA"), "{err}");
}
