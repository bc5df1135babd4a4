//! TLS for SSNTP: rustls configurations from PEM (TLS 1.3 only, mutual authentication, chain to
//! the cluster CA), and what a peer's certificate proves once the TLS handshake is done.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ssntp::cert::{CertError, peer_certificate};
use ssntp::handshake::PeerCertificate;

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

    /// A server configuration: TLS 1.3 only, a client certificate chaining to the CA required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
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

/// What the peer's end-entity certificate proves, once rustls has verified its chain.
pub fn peer_of(state: &rustls::CommonState) -> Result<PeerCertificate, CertError> {
    match state.peer_certificates().and_then(|c| c.first()) {
        Some(der) => peer_certificate(der),
        None => Err(CertError::Malformed("the peer sent no certificate".into())),
    }
}
