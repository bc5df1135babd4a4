//! Why `cumulo up` and `cumulo down` fail, and the helpers every part of them shares to say so
//! (an I/O error with its path, a binary that is not there).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::procs::ProcError;

/// Why the cluster could not be brought up or down.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    /// The certificates.
    #[error("certificates: {0}")]
    Certs(#[from] certtool::cluster::ClusterError),
    /// A process.
    #[error("{0}")]
    Proc(#[from] ProcError),
    /// A binary is missing.
    #[error(
        "{0} not found next to cumulo ({1}); build every binary first: cargo build --release --bins"
    )]
    NoBinary(String, String),
    /// A service ended while it was waited for.
    #[error("{service} exited while starting; the end of its log ({log}):\n{tail}")]
    Exited {
        /// Which.
        service: String,
        /// Its log.
        log: String,
        /// The last lines of its log.
        tail: String,
    },
    /// An instance failed.
    #[error(
        "{what} {id} failed: {cause}\nSee the agent's log: {log}\n(`cumulo down` stops what \
         this `up` started)"
    )]
    InstanceFailed {
        /// Which instance ("the first instance").
        what: String,
        /// Its UUID.
        id: String,
        /// Its fault: reason and message.
        cause: String,
        /// The agent's log.
        log: String,
    },
    /// A service did not become ready.
    #[error("{service} is not ready after {waited:?}; see its log: {log}")]
    NotReady {
        /// Which.
        service: String,
        /// How long we waited.
        waited: Duration,
        /// Its log.
        log: String,
    },
    /// A file of the cluster's directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The API.
    #[error("controller API: {0}")]
    Api(#[from] crate::client::ClientError),
    /// Tenant networks through CNCIs need root.
    #[error(
        "--tenant-network cnci needs root: the CNCIs run in network namespaces of their own and \
         the host gets a compute-network link ({0}); run cumulo up as root, or without \
         --tenant-network cnci"
    )]
    NotRoot(&'static str),
    /// The compute-network link's name is taken by a link `up` did not make.
    #[error(
        "a link {0} exists that cumulo up did not make: it is left alone; delete it \
         (ip link del {0}) or run without --tenant-network cnci"
    )]
    LinkTaken(String),
    /// Something else, said in one line.
    #[error("{0}")]
    Other(String),
}

/// An I/O error about `path`.
pub fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> UpError + '_ {
    move |source| UpError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where the cluster's binaries are: next to the running `cumulo` (cargo puts them together).
pub fn binary(name: &str) -> Result<PathBuf, UpError> {
    let exe = std::env::current_exe().map_err(|e| UpError::Other(format!("own path: {e}")))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // `cargo test` runs from target/<profile>/deps: the binaries are one level up.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(UpError::NoBinary(name.into(), dir.display().to_string()))
}
