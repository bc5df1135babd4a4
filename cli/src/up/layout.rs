//! Where `cumulo up` keeps a cluster: one directory with certificates, state, logs and PID files.

use std::path::{Path, PathBuf};

/// The scheduler's default SSNTP address.
pub const SCHEDULER_ADDR: &str = "127.0.0.1:8888";
/// The controller's default API address.
pub const API_ADDR: &str = "127.0.0.1:8889";
/// The agent's default console endpoint address (the controller fetches console logs there).
pub const CONSOLE_ADDR: &str = "127.0.0.1:8890";
/// The controller's default node image endpoint address (the agent fetches uploaded images
/// there).
pub const IMAGES_ADDR: &str = "127.0.0.1:8891";
/// The default directory as root.
pub const SYSTEM_ROOT: &str = "/var/lib/cumulo";
/// libvirt's system daemon (as root): QEMU runs as libvirt's own user.
pub const SYSTEM_URI: &str = "qemu:///system";
/// The user's own libvirt daemon (not root): QEMU runs as the user.
pub const SESSION_URI: &str = "qemu:///session";

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes `text` to `path`, a file anyone may read but only this user write (0644 at most,
/// whatever the umask lets through).
fn write_public(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o644)
        .open(path)?
        .write_all(text.as_bytes())
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> Option<&str> {
    let (host, _) = addr.rsplit_once(':')?;
    Some(host.trim_start_matches('[').trim_end_matches(']'))
}

/// The host part of `host:port` (`[v6]:port` too), or the whole when it has no port.
pub fn host_part(addr: &str) -> &str {
    host_of(addr).unwrap_or(addr)
}

/// A host's address, if it is one (bracketed or not).
fn host_ip(host: &str) -> Option<std::net::IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Whether a host (a name or an address, bracketed or not) is a loopback one: `localhost` or a
/// loopback address.
pub fn loopback_host(host: &str) -> bool {
    host == "localhost" || host_ip(host).is_some_and(|ip| ip.is_loopback())
}

/// Whether a host is this host's own as a listening address names it: a loopback one, or the
/// unspecified address (which listens on every address, loopback included).
pub fn own_host(host: &str) -> bool {
    loopback_host(host) || host_ip(host).is_some_and(|ip| ip.is_unspecified())
}

/// Whether a listening address is a loopback one (`localhost` too).
pub fn is_loopback(addr: &str) -> bool {
    host_of(addr).is_some_and(loopback_host)
}

/// How this host dials one of its own listening addresses: `localhost:PORT` for a loopback or
/// unspecified one (the certificates name localhost), else the address itself.
pub fn dial(addr: &str) -> String {
    let port = addr.rsplit(':').next().unwrap_or_default();
    if host_of(addr).is_none_or(own_host) {
        format!("localhost:{port}")
    } else {
        addr.to_string()
    }
}

/// The files of one local cluster, and where its services listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The cluster's directory.
    pub root: PathBuf,
    /// The scheduler's SSNTP address (`127.0.0.1:8888`).
    pub scheduler: String,
    /// The controller's API address (`127.0.0.1:8889`).
    pub api: String,
    /// The agent's console endpoint (`127.0.0.1:8890`).
    pub console: String,
    /// The controller's node image endpoint (`127.0.0.1:8891`).
    pub images: String,
}

impl Layout {
    /// The layout under `root`, with the addresses a previous `up` recorded there (or the
    /// defaults).
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        let root = root.into();
        let recorded = std::fs::read_to_string(root.join("addresses")).unwrap_or_default();
        let mut lines = recorded.lines().map(str::trim).filter(|l| !l.is_empty());
        let scheduler = lines.next().unwrap_or(SCHEDULER_ADDR).to_string();
        let api = lines.next().unwrap_or(API_ADDR).to_string();
        let console = lines.next().unwrap_or(CONSOLE_ADDR).to_string();
        let images = lines.next().unwrap_or(IMAGES_ADDR).to_string();
        Layout {
            root,
            scheduler,
            api,
            console,
            images,
        }
    }

    /// Records the addresses for later `status`, `down` and `up`.
    pub fn save_addresses(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        write_public(
            &self.root.join("addresses"),
            &format!(
                "{}\n{}\n{}\n{}\n",
                self.scheduler, self.api, self.console, self.images
            ),
        )
    }

    /// The API's URL: plain HTTP on a loopback address; HTTPS with the controller's certificate
    /// anywhere else (other hosts reach it), at `localhost` when it listens on every address.
    pub fn api_url(&self) -> String {
        if is_loopback(&self.api) {
            format!("http://{}", self.api)
        } else {
            format!("https://{}", dial(&self.api))
        }
    }

    /// The scheduler, the API and the image endpoint listen on `ip` (at their ports): the address
    /// other hosts reach this one at (`cumulo up --address`).
    pub fn listen_on(&mut self, ip: std::net::IpAddr) {
        for addr in [&mut self.scheduler, &mut self.api, &mut self.images] {
            let port = addr.rsplit(':').next().unwrap_or_default().to_string();
            *addr = std::net::SocketAddr::new(ip, port.parse().unwrap_or(0)).to_string();
        }
    }

    /// The CA that signed the API's HTTPS certificate, when the API speaks HTTPS.
    pub fn api_ca(&self) -> Option<PathBuf> {
        (!is_loopback(&self.api)).then(|| self.ca())
    }

    /// The addresses other hosts reach this one at: the IP addresses the scheduler, the API and
    /// the image endpoint listen on, but loopback and unspecified ones (the certificates name
    /// them).
    pub fn public_ips(&self) -> Vec<std::net::IpAddr> {
        let mut ips = Vec::new();
        for addr in [&self.scheduler, &self.api, &self.images] {
            if let Some(ip) = host_of(addr).and_then(|h| h.parse::<std::net::IpAddr>().ok())
                && !ip.is_loopback()
                && !ip.is_unspecified()
                && !ips.contains(&ip)
            {
                ips.push(ip);
            }
        }
        ips
    }

    /// The default directory: as root, `/var/lib/cumulo` (where system services keep their
    /// state, and where QEMU, which libvirt runs as another user, can reach the instances'
    /// files); otherwise `$XDG_DATA_HOME/cumulo`, else `~/.local/share/cumulo`.
    pub fn default_root() -> PathBuf {
        if rustix::process::geteuid().is_root() {
            return PathBuf::from(SYSTEM_ROOT);
        }
        if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            return PathBuf::from(data).join("cumulo");
        }
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
        home.join(".local/share/cumulo")
    }

    /// Makes the cluster's directory and its private parts, each with the mode its content
    /// needs: the directory itself searchable by others but not listable (0711: QEMU, which
    /// runs as another user, goes through it to the agent's instance files, which the agent
    /// opens to QEMU's group alone), certificates, logs, PID files and the controller's and
    /// scheduler's state for this user alone (0700). A non-root cluster is this user's alone.
    pub fn make_dirs(&self) -> std::io::Result<()> {
        let root_mode = if rustix::process::geteuid().is_root() {
            0o711
        } else {
            0o700
        };
        let made = !self.root.exists();
        std::fs::create_dir_all(&self.root)?;
        if made {
            set_mode(&self.root, root_mode)?;
        }
        for dir in [
            self.certs(),
            self.logs(),
            self.run(),
            self.state("controller"),
            self.state("scheduler"),
        ] {
            std::fs::create_dir_all(&dir)?;
            set_mode(&dir, 0o700)?;
        }
        Ok(())
    }

    /// The libvirt URI the cluster's agent uses (recorded by `up`; `qemu:///system` if none).
    pub fn libvirt_uri(&self) -> String {
        std::fs::read_to_string(self.root.join("libvirt-uri"))
            .ok()
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| SYSTEM_URI.to_string())
    }

    /// Records the libvirt URI for `down`, `status` and `cumulo instance console`.
    pub fn save_libvirt_uri(&self, uri: &str) -> std::io::Result<()> {
        write_public(&self.root.join("libvirt-uri"), &format!("{uri}\n"))
    }

    /// The certificate set.
    pub fn certs(&self) -> PathBuf {
        self.root.join("certs")
    }

    /// A certificate of the set and its key (`ca`, `scheduler`, `controller`, `agent`, `admin`).
    pub fn cert(&self, name: &str) -> (PathBuf, PathBuf) {
        certtool::cluster::paths(&self.certs(), name)
    }

    /// The CA's revocation list (the scheduler's `--crl`, the controller's too).
    pub fn crl(&self) -> PathBuf {
        self.certs().join("crl.pem")
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.cert("ca").0
    }

    /// The logs.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// A service's log file.
    pub fn log(&self, service: &str) -> PathBuf {
        self.logs().join(format!("{service}.log"))
    }

    /// The PID files.
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }

    /// A service's PID file.
    pub fn pid_file(&self, service: &str) -> PathBuf {
        self.run().join(format!("{service}.pid"))
    }

    /// A service's state directory.
    pub fn state(&self, service: &str) -> PathBuf {
        self.root.join(service)
    }

    /// The first admin's password.
    pub fn admin_password(&self) -> PathBuf {
        self.root.join("admin-password")
    }

    /// The demo user's password.
    pub fn demo_password(&self) -> PathBuf {
        self.root.join("demo-password")
    }

    /// The exports for the CLIs, written by `up`.
    pub fn env_file(&self) -> PathBuf {
        self.root.join("env")
    }

    /// `up`'s own lock, held while it starts the cluster.
    pub fn lock(&self) -> PathBuf {
        self.root.join("up.lock")
    }

    /// Whether `path` is inside the cluster's directory.
    pub fn owns(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_is_https_off_loopback_and_hosts_dial_their_own_addresses() {
        let mut layout = Layout::new("/nonexistent/cumulo");
        assert_eq!(layout.api_url(), "http://127.0.0.1:8889");
        assert_eq!(layout.api_ca(), None);
        assert!(layout.public_ips().is_empty());
        assert_eq!(dial(&layout.scheduler), "localhost:8888");
        layout.listen_on("10.77.0.1".parse().unwrap());
        assert_eq!(layout.scheduler, "10.77.0.1:8888");
        assert_eq!(layout.images, "10.77.0.1:8891");
        assert_eq!(layout.console, CONSOLE_ADDR);
        assert_eq!(layout.api_url(), "https://10.77.0.1:8889");
        assert_eq!(layout.api_ca(), Some(layout.ca()));
        assert_eq!(
            layout.public_ips(),
            vec!["10.77.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(dial(&layout.scheduler), "10.77.0.1:8888");
        layout.api = "0.0.0.0:9000".into();
        assert_eq!(layout.api_url(), "https://localhost:9000");
        layout.listen_on("fd00::1".parse().unwrap());
        assert_eq!(layout.scheduler, "[fd00::1]:8888");
        assert_eq!(layout.api_url(), "https://[fd00::1]:9000");
        assert!(
            is_loopback("[::1]:1") && is_loopback("localhost:1") && !is_loopback("[fd00::1]:1")
        );
    }

    #[test]
    fn hosts_are_told_loopback_own_or_other() {
        for host in ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"] {
            assert!(loopback_host(host) && own_host(host), "{host}");
        }
        for host in ["0.0.0.0", "::", "[::]"] {
            assert!(!loopback_host(host) && own_host(host), "{host}");
        }
        for host in ["10.0.0.1", "fd00::1", "[fd00::1]", "ctl.example", ""] {
            assert!(!loopback_host(host) && !own_host(host), "{host}");
        }
        assert_eq!(host_part("[fd00::1]:8888"), "fd00::1");
        assert_eq!(host_part("10.0.0.1:8888"), "10.0.0.1");
        assert_eq!(host_part("ctl"), "ctl");
        assert_eq!(dial("0.0.0.0:8888"), "localhost:8888");
        assert_eq!(dial("[::]:8888"), "localhost:8888");
    }
}
