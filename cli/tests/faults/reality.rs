//! The fault harness's ([`super`]) view of what the nodes really hold, read behind the API's back:
//! the sim agents' files, libvirt's domains and their owners, the agents' state directories and VM
//! files.

use super::*;

impl Cluster {
    /// What the sim agents hold: instance → (agent host name, running, boots), from each
    /// agent's sim directory (files that outlive the agent process, as VMs do).
    pub fn sim_reality(&self) -> HashMap<String, (String, bool, u64)> {
        let mut found = HashMap::new();
        let procs = self.procs.lock().unwrap().clone();
        for (name, proc) in &procs {
            let Some(host) = proc.flag("--hostname") else {
                continue;
            };
            let Some(state) = proc.flag("--state-dir") else {
                continue;
            };
            let sim = Path::new(&state).join("sim");
            let Ok(entries) = std::fs::read_dir(&sim) else {
                continue;
            };
            for entry in entries.flatten() {
                let file = entry.file_name().to_string_lossy().into_owned();
                if file.parse::<uuid::Uuid>().is_err() {
                    continue;
                }
                let Ok(bytes) = std::fs::read(entry.path()) else {
                    continue;
                };
                let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                let previous = found.insert(
                    file.clone(),
                    (
                        host.clone(),
                        v["running"].as_bool().unwrap_or(false),
                        v["boots"].as_u64().unwrap_or(0),
                    ),
                );
                assert!(
                    previous.is_none(),
                    "instance {file} exists on two agents ({name} and {previous:?})"
                );
            }
        }
        found
    }

    /// Node id → host name.
    pub fn hosts(&self) -> HashMap<String, String> {
        routes::items(&self.admin.get(routes::NODES).unwrap())
            .iter()
            .map(|n| {
                (
                    n["id"].as_str().unwrap().to_string(),
                    n["hostname"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Runs `virsh -c <uri> <args>` for a libvirt cluster; its stdout when it succeeds.
    fn virsh(&self, args: &[&str]) -> Option<String> {
        let uri = self.libvirt.as_deref()?;
        let out = Command::new("virsh")
            .args(["-q", "-c", uri])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The libvirt domains of this cluster: those named `cumulo-<uuid>` whose definition points
    /// into this cluster's directory (the agents put each instance's files there). Domains of
    /// anyone else on the same libvirtd are not listed (and never touched). Instance UUID →
    /// running.
    pub fn domains(&self) -> HashMap<String, bool> {
        self.domain_owners()
            .into_iter()
            .map(|(id, (running, _))| (id, running))
            .collect()
    }

    /// As [`Cluster::domains`], with the node each domain's metadata names as its owner
    /// (`<cumulo:node>`). Retried until two listings in a row agree (a domain may go between
    /// the list and its definition).
    pub fn domain_owners(&self) -> HashMap<String, (bool, Option<String>)> {
        let root = self.root().display().to_string();
        let once = || -> Option<HashMap<String, (bool, Option<String>)>> {
            let all = self.virsh(&["list", "--all", "--name"])?;
            let running = self.virsh(&["list", "--state-running", "--name"])?;
            let running: Vec<&str> = running.lines().map(str::trim).collect();
            let mut found = HashMap::new();
            for name in all.lines().map(str::trim) {
                let Some(id) = name.strip_prefix("cumulo-") else {
                    continue;
                };
                if id.parse::<uuid::Uuid>().is_err() {
                    continue;
                }
                // Undefined since the list: gone.
                let Some(xml) = self.virsh(&["dumpxml", "--inactive", name]) else {
                    continue;
                };
                if xml.contains(&root) {
                    let node = xml
                        .split_once("<cumulo:node>")
                        .and_then(|(_, rest)| rest.split_once('<'))
                        .map(|(node, _)| node.trim().to_string());
                    found.insert(id.to_string(), (running.contains(&name), node));
                }
            }
            Some(found)
        };
        wait_for(
            "two equal listings of libvirt's domains",
            Duration::from_secs(30),
            || {
                let first = once()?;
                (once()? == first).then_some(first)
            },
        )
    }

    /// The agents' state directories: host name → state directory.
    pub fn agent_dirs(&self) -> BTreeMap<String, PathBuf> {
        self.procs
            .lock()
            .unwrap()
            .values()
            .filter_map(|p| Some((p.flag("--hostname")?, PathBuf::from(p.flag("--state-dir")?))))
            .collect()
    }

    /// What the libvirt agents hold on disk: instance → (host name, has an instance directory
    /// with its VM's files, has an agent record, times the guest's boot marker is on its
    /// console).
    pub fn vm_files(&self) -> HashMap<String, Vec<(String, bool, bool, usize)>> {
        let mut found: HashMap<String, Vec<(String, bool, bool, usize)>> = HashMap::new();
        for (host, state) in self.agent_dirs() {
            let mut ids: std::collections::BTreeSet<String> = Default::default();
            let vms = state.join("libvirt").join("instances");
            let records = state.join("instances");
            for dir in [&vms, &records] {
                for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let id = name.strip_suffix(".json").unwrap_or(&name);
                    if id.parse::<uuid::Uuid>().is_ok() {
                        ids.insert(id.to_string());
                    }
                }
            }
            for id in ids {
                let console = vms.join(&id).join("console.log");
                let marker = format!("CUMULO-GUEST-UP {id}");
                let boots = std::fs::read_to_string(&console)
                    .map(|log| log.matches(&marker).count())
                    .unwrap_or(0);
                found.entry(id.clone()).or_default().push((
                    host.clone(),
                    vms.join(&id).is_dir(),
                    records.join(format!("{id}.json")).is_file(),
                    boots,
                ));
            }
        }
        found
    }

    /// Destroys and undefines this cluster's domains (see [`Cluster::domains`]) and no other.
    pub(super) fn remove_domains(&self) {
        if self.libvirt.is_none() {
            return;
        }
        let root = self.root().display().to_string();
        let Some(all) = self.virsh(&["list", "--all", "--name"]) else {
            return;
        };
        for name in all.lines().map(str::trim) {
            let ours = name
                .strip_prefix("cumulo-")
                .is_some_and(|id| id.parse::<uuid::Uuid>().is_ok())
                && self
                    .virsh(&["dumpxml", "--inactive", name])
                    .is_some_and(|xml| xml.contains(&root));
            if ours {
                let _ = self.virsh(&["destroy", name]);
                let _ = self.virsh(&["undefine", name]);
            }
        }
    }
}
