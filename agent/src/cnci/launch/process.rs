//! CNCIs as processes: `cumulo-cnci` started in the CNCI's namespace, and the clean-up of
//! what a node leaves of its CNCIs.

use super::*;

/// Whether process `pid` runs (and is not a zombie).
pub(super) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next())
        })
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

pub(super) fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// What a node leaves of its CNCIs when it goes for good (`cumulo down`, a test's end): every
/// CNCI recorded in `dir` (the launcher's records, [`LaunchConfig::dir`]) has its process
/// stopped (SIGTERM, SIGKILL after `grace`; only a live `cumulo-cnci`), its namespace deleted
/// (only one named as this launcher names them) and its record and log removed. The agent must
/// be stopped first: it would start them again. Returns the namespaces deleted. CNCI VMs are
/// the libvirt backend's domains, stopped and undefined with the node's other domains.
pub fn clean_up(dir: &std::path::Path, grace: Duration) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut deleted = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<Uuid>().ok());
        let (Some(id), Some("json")) = (id, path.extension().and_then(|e| e.to_str())) else {
            continue;
        };
        // Records are small; anything large or unreadable is not one.
        let Some(r) = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= 64 * 1024)
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        else {
            continue;
        };
        if let Some(pid) = r.pid.filter(|p| is_cnci_process(*p)) {
            signal(pid, rustix::process::Signal::TERM);
            let until = std::time::Instant::now() + grace;
            while alive(pid) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(pid) {
                signal(pid, rustix::process::Signal::KILL);
            }
        }
        if r.ns == ns_name(id)
            && std::path::Path::new("/run/netns").join(&r.ns).exists()
            && std::process::Command::new("ip")
                .args(["netns", "del", &r.ns])
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success())
        {
            deleted.push(r.ns);
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(dir.join(format!("{id}.log")));
        credentials::remove(dir, id);
    }
    deleted
}

/// Whether `pid` is a live `cumulo-cnci` (a recorded PID may have been reused since).
fn is_cnci_process(pid: i32) -> bool {
    alive(pid)
        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "cumulo-cnci")
}

impl<B: Backend> CnciLauncher<B> {
    /// Starts a recorded CNCI: a VM through [`Self::launch_vm`], else `cumulo-cnci` in its
    /// namespace behind a relay on the namespace's loopback, its log beside its record.
    pub(super) async fn launch(&self, id: Uuid) -> Result<(), BackendError> {
        let Some(mut record) = self.lock().records.get(&id).cloned() else {
            return Err(BackendError::NotFound);
        };
        if self.lock().running.contains_key(&id) {
            return Ok(());
        }
        if record.vm {
            return self.launch_vm(id, &record).await;
        }
        let c = self.config()?;
        let (cert, key) = credentials::for_cnci(c, id).map_err(launch)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(c.dir.join(format!("{id}.log")))
            .map_err(launch)?;
        let listener = listen_in(&record.ns, (Ipv4Addr::LOCALHOST, 0)).map_err(launch)?;
        let port = listener.local_addr().map_err(launch)?.port();
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        // Its route channel, on the namespace's loopback too, stopped with the relay.
        let routes = listen_in(&record.ns, (Ipv4Addr::LOCALHOST, 0)).and_then(|l| {
            let port = l.local_addr()?.port();
            Ok((l, port))
        });
        let (routes, route_port) = match routes {
            Ok(r) => r,
            Err(e) => {
                stop_relay.cancel();
                return Err(launch(e));
            }
        };
        self.serve_routes(id, routes, stop_relay.clone())?;
        let spawned = tokio::process::Command::new("ip")
            .args(["netns", "exec", &record.ns])
            .arg(&c.binary)
            .arg("--ca-cert")
            .arg(&c.ca_cert)
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .args(["--scheduler", &c.servers.join(",")])
            .args(["--via", &format!("127.0.0.1:{port}")])
            .args(["--route-via", &format!("127.0.0.1:{route_port}")])
            .args(["--protect", &protected(c, record.ip, &node_addresses())])
            .args(["--uuid", &id.to_string()])
            .args(["--tenant", &record.tenant.to_string()])
            .args(["--ip", &record.ip.to_string()])
            .args(["--tunnel", &c.tunnel])
            .args(["--vxlan-port", &c.vxlan_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                stop_relay.cancel();
                return Err(launch(format!("{}: {e}", c.binary.display())));
            }
        };
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| launch("the CNCI exited at once"))?;
        let (tx, rx) = watch::channel(false);
        let relay_stop = stop_relay.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            tracing::info!(cnci = %id, ?status, "CNCI process exited");
            relay_stop.cancel();
            let _ = tx.send(true);
        });
        record.pid = Some(pid);
        self.save(id, &record)?;
        let mut s = self.lock();
        s.records.insert(id, record);
        s.running.insert(
            id,
            Running {
                pid: Some(pid),
                exited: rx,
                relay: stop_relay,
            },
        );
        tracing::info!(cnci = %id, pid, "CNCI process started");
        Ok(())
    }
}
