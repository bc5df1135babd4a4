//! HTTPS with the cluster CA's certificates: a token login over TLS, and the admin client
//! certificate (no SSNTP role) logging in as a cluster admin (`/metrics` included); a role
//! certificate does not.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use controller::api::server_tls_config;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use ssntp::Role;
use testkit::Leaf;
use testkit::TestPki;

use crate::support::{Client, PASSWORD, World};

pub fn client_config(ca_pem: &str, cert: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(ssntp_net::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some(leaf) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
                .map(|c| c.unwrap())
                .collect();
            let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    Arc::new(config)
}

#[tokio::test]
async fn https_with_tokens_and_the_admin_client_certificate() {
    let pki = TestPki::new();
    let server = pki.leaf(Role::CONTROLLER, Some(uuid::Uuid::new_v4()));
    let tls = server_tls_config(
        server.ca_pem.as_bytes(),
        server.cert_pem.as_bytes(),
        server.key_pem.as_bytes(),
    )
    .unwrap();
    let w = World::start_tls(Some(tls)).await;
    assert!(w.api.url.starts_with("https://"));

    // No client certificate: a token login works, and nothing else is allowed.
    let plain = Client {
        addr: w.api.addr,
        tls: Some(client_config(&server.ca_pem, None)),
        from: None,
    };
    let (status, headers, _) = plain.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::CREATED);
    let token = headers["x-subject-token"].to_str().unwrap().to_string();
    let (status, _, _) = plain
        .send(Method::GET, "/compute/v2.1/servers", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = plain
        .send(Method::GET, "/cumulo/v1/tenants", None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The admin certificate: a cluster admin without a token.
    let admin = Client {
        addr: w.api.addr,
        tls: Some(pki.admin_leaf().identity().client_config().unwrap()),
        from: None,
    };
    let (status, _, body) = admin
        .send(Method::GET, "/cumulo/v1/tenants", None, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tenants"].as_array().unwrap().len(), 3);
    let (status, _, _) = admin.send(Method::GET, "/v3/users", None, None).await;
    assert_eq!(status, StatusCode::OK);
    // The metrics are the admin's: read with the certificate, refused without it.
    let (status, _, text) = admin.send(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.as_str().unwrap().contains("cumulo_api_requests_total"));
    let (status, _, _) = plain.send(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Not admin logins: a certificate of the CA with no SSNTP role but without the admin OID
    // (an off-host launcher's libvirt credential is one), and a role certificate (an agent's).
    for (what, leaf) in [
        ("no role, no admin OID", pki.leaf(Role::empty(), None)),
        (
            "an agent's",
            pki.leaf(Role::AGENT, Some(uuid::Uuid::new_v4())),
        ),
    ] {
        let client = Client {
            addr: w.api.addr,
            tls: Some(leaf.identity().client_config().unwrap()),
            from: None,
        };
        let (status, _, _) = client
            .send(Method::GET, "/cumulo/v1/tenants", None, None)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
    }

    // A certificate from another CA: the server ends the connection, no answer.
    let stranger = TestPki::new().leaf(Role::empty(), None);
    let outsider = Client {
        addr: w.api.addr,
        tls: Some(client_config(&server.ca_pem, Some(&stranger))),
        from: None,
    };
    let result = outsider
        .try_request(Method::GET, "/cumulo/v1/tenants", &[], Vec::new())
        .await;
    assert!(result.is_err(), "{result:?}");
    w.stop().await;
}
