//! [`EtcdArgs`]: the etcd TLS flags of the daemons that open a store (`cumulo-controller`,
//! `cumulo-agent --remote`), flattened into their command lines.

use std::path::PathBuf;

use super::EtcdTransport;
use crate::StoreLocation;
use crate::{Result, StoreError};

/// How a daemon reaches an etcd store: TLS with an etcd client certificate (its CN is the
/// daemon's etcd user), or plain text when explicitly asked (development).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdArgs {
    /// etcd store: the CA that issued etcd's server certificate (PEM).
    #[arg(long, env = "CUMULO_ETCD_CA", requires_all = ["etcd_cert", "etcd_key"])]
    pub etcd_ca: Option<PathBuf>,
    /// etcd store: this daemon's etcd client certificate (PEM; its subject CN is its etcd user;
    /// `cumulo-cert --role none --host USER`, see docs/etcd-store.md).
    #[arg(long, env = "CUMULO_ETCD_CERT", requires_all = ["etcd_ca", "etcd_key"])]
    pub etcd_cert: Option<PathBuf>,
    /// etcd store: the key of --etcd-cert (PEM).
    #[arg(long, env = "CUMULO_ETCD_KEY", requires_all = ["etcd_ca", "etcd_cert"])]
    pub etcd_key: Option<PathBuf>,
    /// etcd store: plain HTTP, no TLS, no client certificate. Development only: anyone on the
    /// path reads and changes the cluster's state.
    #[arg(long, env = "CUMULO_ETCD_PLAINTEXT", conflicts_with_all = ["etcd_ca", "etcd_cert", "etcd_key"])]
    pub etcd_plaintext: bool,
}

impl EtcdArgs {
    /// The transport for the store at `location` (a path or an `etcd://` URL): `None` for an
    /// SQLite store; for etcd, TLS with the files given, or plain text when asked; neither is an
    /// error saying what to give.
    pub fn transport(&self, location: &str) -> Result<Option<EtcdTransport>> {
        if !matches!(StoreLocation::parse(location)?, StoreLocation::Etcd { .. }) {
            return Ok(None);
        }
        match (&self.etcd_ca, &self.etcd_cert, &self.etcd_key) {
            (Some(ca), Some(cert), Some(key)) => EtcdTransport::tls_files(ca, cert, key).map(Some),
            _ if self.etcd_plaintext => Ok(Some(EtcdTransport::Plaintext)),
            _ => Err(StoreError::Invalid(format!(
                "{location}: an etcd store needs --etcd-ca, --etcd-cert and --etcd-key (TLS with \
                 an etcd client certificate), or --etcd-plaintext (development only)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_store_needs_tls_files_or_plaintext_asked_for() {
        let none = EtcdArgs::default();
        assert!(none.transport("/var/lib/cumulo/c.db").unwrap().is_none());
        let err = none.transport("etcd://127.0.0.1:2379").unwrap_err();
        assert!(err.to_string().contains("--etcd-plaintext"), "{err}");
        let plain = EtcdArgs {
            etcd_plaintext: true,
            ..EtcdArgs::default()
        };
        assert!(matches!(
            plain.transport("etcd://127.0.0.1:2379"),
            Ok(Some(EtcdTransport::Plaintext))
        ));
        let missing = EtcdArgs {
            etcd_ca: Some("/nonexistent/ca.pem".into()),
            etcd_cert: Some("/nonexistent/c.pem".into()),
            etcd_key: Some("/nonexistent/c.key".into()),
            etcd_plaintext: false,
        };
        let err = missing.transport("etcd://127.0.0.1:2379").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }
}
