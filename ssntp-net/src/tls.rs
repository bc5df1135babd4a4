//! TLS for SSNTP: rustls configurations from PEM (TLS 1.3 only, mutual authentication, chain to
//! the cluster CA), and what a peer's certificate proves once the TLS handshake is done.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    ServerConfig, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uuid::Uuid;

use ssntp::Role;
use ssntp::cert::{CertError, peer_certificate};
use ssntp::handshake::{PeerCertificate, UuidBinding};

use crate::revocation::Revocations;

/// Why TLS material could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("{what}: {detail}")]
    Pem {
        /// Which item (e.g. "CA certificate in ca.pem").
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// Our own certificate could not be read back.
    #[error("our certificate: {0}")]
    OwnCertificate(CertError),
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The client verifier could not be built from the CA.
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// The cluster CA, our certificate chain and key, and what our certificate proves.
#[derive(Debug)]
pub struct TlsIdentity {
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    own: PeerCertificate,
}

impl Clone for TlsIdentity {
    fn clone(&self) -> TlsIdentity {
        TlsIdentity {
            roots: self.roots.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            own: self.own,
        }
    }
}

/// The one crypto provider of the workspace.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

impl TlsIdentity {
    /// Loads the CA certificate(s), our certificate chain and our PKCS#8 (or PKCS#1/SEC1) key.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<TlsIdentity, TlsError> {
        TlsIdentity::from_pem(&read(ca)?, &read(cert)?, &read(key)?)
    }

    /// As [`TlsIdentity::load`], from PEM bytes.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<TlsIdentity, TlsError> {
        let pem = |what: &str, detail: String| TlsError::Pem {
            what: what.into(),
            detail,
        };
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(ca) {
            let der = der.map_err(|e| pem("CA certificate", e.to_string()))?;
            roots
                .add(der)
                .map_err(|e| pem("CA certificate", e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(pem("CA certificate", "no certificate found".into()));
        }
        let chain: Vec<_> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| pem("certificate", e.to_string()))?;
        let first = chain
            .first()
            .ok_or_else(|| pem("certificate", "no certificate found".into()))?;
        let own = peer_certificate(first).map_err(TlsError::OwnCertificate)?;
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|e| pem("private key", e.to_string()))?;
        Ok(TlsIdentity {
            roots: Arc::new(roots),
            chain,
            key,
            own,
        })
    }

    /// What our own certificate proves: its roles and bound UUID.
    pub fn own(&self) -> PeerCertificate {
        self.own
    }

    /// When our own certificate expires (its notAfter, in seconds since the Unix epoch), if it
    /// can be read (it could when the identity was loaded).
    pub fn not_after(&self) -> Option<i64> {
        let first = self.chain.first()?;
        ssntp::cert::CertInfo::parse(first)
            .ok()
            .map(|i| i.not_after)
    }

    /// A server configuration: TLS 1.3 only, a client certificate chaining to the CA required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        self.server_config_revoking(None)
    }

    /// [`TlsIdentity::server_config`], refusing, besides, a client certificate that the list in
    /// force in `revoked` revokes (read at each handshake: a new list applies at once).
    pub fn server_config_revoking(
        &self,
        revoked: Option<&Revocations>,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let webpki = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let verifier: Arc<dyn ClientCertVerifier> = match revoked {
            None => webpki,
            Some(revoked) => Arc::new(RevokingVerifier {
                inner: webpki,
                revoked: revoked.clone(),
            }),
        };
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        if revoked.is_some() {
            // A resumed session skips the client certificate's verification, and so the
            // revocation check: every connection does a full handshake.
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    }

    /// A client configuration: TLS 1.3 only, the server verified against the CA (and the name
    /// dialled), our certificate presented.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())?;
        Ok(Arc::new(config))
    }
}

/// What a client expects of the server it dials outside SSNTP (the controller of an agent's
/// console endpoint), besides a chain to the cluster CA: its certificate carries `role`, and,
/// if the certificate binds a UUID, it is `uuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// A role the server's certificate must carry.
    pub role: Role,
    /// The server's UUID, when the client knows it. A certificate that binds this UUID is
    /// accepted whatever address was dialled (the binding names the peer better than an
    /// address: nodes are dialled at the address they report, which their certificates need
    /// not list); a certificate that binds another UUID is refused; one that binds none must
    /// name the address dialled.
    pub uuid: Option<Uuid>,
}

impl TlsIdentity {
    /// A client configuration for dialling a server that is not an SSNTP server (an agent's
    /// console endpoint): TLS 1.3 only, our certificate presented, the server's chain verified
    /// against the CA and its certificate checked against `expected` ([`Expected`]).
    pub fn client_config_for(&self, expected: Expected) -> Result<Arc<ClientConfig>, TlsError> {
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let verifier = Arc::new(RoleVerifier { inner, expected });
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())?;
        Ok(Arc::new(config))
    }
}

/// The CA's chain check (webpki), then the role and UUID checks of an [`Expected`].
#[derive(Debug)]
struct RoleVerifier {
    inner: Arc<WebPkiServerVerifier>,
    expected: Expected,
}

impl ServerCertVerifier for RoleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let peer = peer_certificate(end_entity)
            .map_err(|e| rustls::Error::General(format!("the server's certificate: {e}")))?;
        let bound = match (peer.binding, self.expected.uuid) {
            (UuidBinding::Ambiguous, _) => {
                return Err(rustls::Error::General(
                    "the server's certificate binds more than one UUID".into(),
                ));
            }
            (UuidBinding::Bound(theirs), Some(ours)) if theirs != ours => {
                return Err(rustls::Error::General(format!(
                    "the server's certificate binds {theirs}, not {ours}"
                )));
            }
            (UuidBinding::Bound(_), Some(_)) => true,
            _ => false,
        };
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(_) => {}
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if bound => {}
            Err(e) => return Err(e),
        }
        if !peer.roles.contains(self.expected.role) {
            return Err(rustls::Error::General(format!(
                "the server's certificate does not carry the {} role (it carries: {})",
                self.expected.role, peer.roles
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The CA's chain check (webpki), then the serial number against the revocation list in force.
#[derive(Debug)]
struct RevokingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    revoked: Revocations,
}

impl ClientCertVerifier for RevokingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let serial = crate::revocation::serial_of(end_entity).ok_or(
            rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
        )?;
        if self.revoked.revokes(&serial) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What the peer's end-entity certificate proves, once rustls has verified its chain.
pub fn peer_of(state: &rustls::CommonState) -> Result<PeerCertificate, CertError> {
    match state.peer_certificates().and_then(|c| c.first()) {
        Some(der) => peer_certificate(der),
        None => Err(CertError::Malformed("the peer sent no certificate".into())),
    }
}
