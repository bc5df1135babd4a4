//! rustls (ring, TLS 1.3 only) accepts the tool's server and client certificates in a real mutual
//! handshake, in memory with its sans-IO connections, and refuses certificates of another CA.
//! The peer certificate's roles and UUID are then read with `ssntp::cert`, as endpoints will.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, Error, RootCertStore, ServerConfig,
    ServerConnection,
};
use ssntp::cert::{CertInfo, peer_certificate};
use ssntp::{Role, UuidBinding};

use crate::ok;

struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

fn identity(dir: &Path, name: &str) -> Identity {
    let chain = certtool::files::read_certs(&dir.join(format!("{name}.pem"))).unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap();
    Identity { chain, key }
}

fn roots(dir: &Path) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certtool::files::read_certs(&dir.join("ca.pem")).unwrap() {
        roots.add(cert).unwrap();
    }
    Arc::new(roots)
}

fn server_config(ca_dir: &Path, me: Identity) -> Arc<ServerConfig> {
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots(ca_dir), certtool::verify::provider())
            .build()
            .unwrap();
    let config = ServerConfig::builder_with_provider(certtool::verify::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(me.chain, me.key)
        .unwrap();
    Arc::new(config)
}

fn client_config(ca_dir: &Path, me: Identity) -> Arc<ClientConfig> {
    let config = ClientConfig::builder_with_provider(certtool::verify::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots(ca_dir))
        .with_client_auth_cert(me.chain, me.key)
        .unwrap();
    Arc::new(config)
}

/// Moves TLS records between the two ends until neither has anything to say; the first error
/// either end raises is returned, with the side that raised it.
fn pump(
    client: &mut ClientConnection,
    server: &mut ServerConnection,
) -> Result<(), (&'static str, Error)> {
    loop {
        let mut moved = false;
        let mut buf = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            moved = true;
            server.read_tls(&mut buf.as_slice()).unwrap();
            server.process_new_packets().map_err(|e| ("server", e))?;
        }
        let mut buf = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            moved = true;
            client.read_tls(&mut buf.as_slice()).unwrap();
            client.process_new_packets().map_err(|e| ("client", e))?;
        }
        if !moved {
            return Ok(());
        }
    }
}

fn connect(
    ca_dir: &Path,
    server: Identity,
    client: Identity,
    name: &str,
) -> (
    ClientConnection,
    ServerConnection,
    Result<(), (&'static str, Error)>,
) {
    let mut s = ServerConnection::new(server_config(ca_dir, server)).unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    let mut c = ClientConnection::new(client_config(ca_dir, client), name).unwrap();
    let result = pump(&mut c, &mut s);
    (c, s, result)
}

fn cluster(host: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &[
            "cluster",
            "--host",
            host,
            "--ip",
            "127.0.0.1",
            "--directory",
            ".",
        ],
    );
    dir
}

#[test]
fn mutual_tls13_with_roles_and_uuids() {
    let dir = cluster("ctl.test");
    let d = dir.path();
    for (client_name, roles) in [("agent", Role::DUAL), ("controller", Role::CONTROLLER)] {
        for server_name in ["ctl.test", "127.0.0.1"] {
            let (mut c, mut s, result) = connect(
                d,
                identity(d, "scheduler"),
                identity(d, client_name),
                server_name,
            );
            result.unwrap();
            assert!(!c.is_handshaking() && !s.is_handshaking());
            assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));

            // What the scheduler learns of the client, and the client of the scheduler.
            let client_cert = &s.peer_certificates().unwrap()[0];
            let peer = peer_certificate(client_cert).unwrap();
            assert_eq!(peer.roles, roles, "{client_name}");
            let file = &identity(d, client_name).chain[0];
            assert_eq!(peer.binding, CertInfo::parse(file).unwrap().binding);
            let server_peer = peer_certificate(&c.peer_certificates().unwrap()[0]).unwrap();
            assert_eq!(server_peer.roles, Role::SCHEDULER);
            assert!(matches!(server_peer.binding, UuidBinding::Bound(_)));

            // Application data both ways.
            c.writer().write_all(b"CONNECT").unwrap();
            pump(&mut c, &mut s).unwrap();
            let mut got = [0u8; 7];
            s.reader().read_exact(&mut got).unwrap();
            assert_eq!(&got, b"CONNECT");
            s.writer().write_all(b"CONNECTED").unwrap();
            pump(&mut c, &mut s).unwrap();
            let mut got = [0u8; 9];
            c.reader().read_exact(&mut got).unwrap();
            assert_eq!(&got, b"CONNECTED");
        }
    }
    // The admin certificate authenticates a REST client (it has no SSNTP role), and the
    // controller's certificate serves the REST API.
    let (_, s, result) = connect(
        d,
        identity(d, "controller"),
        identity(d, "admin"),
        "ctl.test",
    );
    result.unwrap();
    let admin = peer_certificate(&s.peer_certificates().unwrap()[0]).unwrap();
    assert_eq!(admin.roles, Role::empty());
}

#[test]
fn every_key_type_handshakes() {
    for kind in ["p384", "ed25519", "rsa2048"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ok(
            d,
            &[
                "cluster",
                "--host",
                "ctl.test",
                "--directory",
                ".",
                "--key-type",
                kind,
            ],
        );
        let (_, _, result) = connect(
            d,
            identity(d, "scheduler"),
            identity(d, "agent"),
            "ctl.test",
        );
        result.unwrap_or_else(|e| panic!("{kind}: {e:?}"));
    }
}

#[test]
fn refuses_certificates_of_another_ca() {
    let ours = cluster("ctl.test");
    let theirs = cluster("ctl.test");
    let (o, t) = (ours.path(), theirs.path());

    // A client certificate from another CA (with the same CA name): the server refuses it.
    let (_, _, result) = connect(
        o,
        identity(o, "scheduler"),
        identity(t, "agent"),
        "ctl.test",
    );
    let (side, error) = result.unwrap_err();
    assert_eq!(side, "server");
    assert!(
        matches!(
            error,
            Error::InvalidCertificate(
                CertificateError::BadSignature | CertificateError::UnknownIssuer
            )
        ),
        "{error:?}"
    );

    // A server certificate from another CA: the client refuses it.
    let (_, _, result) = connect(
        o,
        identity(t, "scheduler"),
        identity(o, "agent"),
        "ctl.test",
    );
    let (side, error) = result.unwrap_err();
    assert_eq!(side, "client");
    assert!(matches!(error, Error::InvalidCertificate(_)), "{error:?}");

    // A server certificate for another name: the client refuses it.
    let (_, _, result) = connect(
        o,
        identity(o, "scheduler"),
        identity(o, "agent"),
        "elsewhere.test",
    );
    let (side, error) = result.unwrap_err();
    assert_eq!(side, "client");
    assert!(
        matches!(
            error,
            Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
        ),
        "{error:?}"
    );
}
