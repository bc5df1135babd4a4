//! The `sim` backend: simulated instances for tests and scale runs (ciao's `-simulation`).
//! No privileges, no processes: an instance is an entry in a table (and, optionally, a small
//! file, so that instances outlive the agent process like real VMs do).
//!
//! - Boot takes [`SimConfig::boot_delay`] (tokio time: virtual under a paused test clock).
//! - Failure injection by image name: [`IMAGE_FAIL_IMAGE`] fails create with an image error,
//!   [`IMAGE_FAIL_NETWORK`] with a network error, [`IMAGE_FAIL_LAUNCH`] fails boot (each with
//!   a message that says it is simulated, which reaches the user as the START_FAILURE's),
//!   [`IMAGE_FAIL_STOP`] fails every stop, [`IMAGE_EXIT_AFTER_BOOT`] boots and exits at once.
//! - Failure injection per call: [`SimBackend::fail_next`]; an instance dies on its own with
//!   [`SimBackend::kill`].
//! - Usage: memory and disk are [`SimConfig::usage_percent`] of the reservation; CPU is a
//!   fixed figure from the instance's UUID.
//! - Lifecycle as a VM's: a stop powers off and keeps the instance, its simulated disk
//!   ([`SimBackend::write_disk`], [`SimBackend::disk`]: text that survives stops, actions and,
//!   with a directory, the agent process) included; pause, suspend (saved), resume and reboots
//!   change its power state; only delete removes it.
//! - Volumes: made on first attach (of the size the attach gives), attached to one instance at a
//!   time, freed when that instance is deleted, kept with the instances' files
//!   ([`SimBackend::write_volume`], [`SimBackend::volume_data`]: what a guest wrote).

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

use crate::backend::Op;
use crate::backend::console::last_lines;
use crate::backend::{Backend, BackendError, ConsoleError, Existing, Power};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage, VolumeSpec};

/// An image whose create fails with an image error (`image_failure`).
pub const IMAGE_FAIL_IMAGE: &str = "fail-image";
/// An image whose create fails with a network error (`network_failure`).
pub const IMAGE_FAIL_NETWORK: &str = "fail-network";
/// An image whose boot fails (`launch_failure`).
pub const IMAGE_FAIL_LAUNCH: &str = "fail-launch";
/// An image whose instances cannot be stopped (they end `exit_failed` on DELETE).
pub const IMAGE_FAIL_STOP: &str = "fail-stop";
/// An image whose instances exit on their own as soon as they have booted.
pub const IMAGE_EXIT_AFTER_BOOT: &str = "exit-after-boot";

/// How the simulation behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// How long a boot takes.
    pub boot_delay: Duration,
    /// Memory and disk in use, as a percentage of what the instance reserved.
    pub usage_percent: u32,
    /// Where to keep one small file per instance so that instances survive the agent process
    /// (`None`: in memory only, gone with the process).
    pub dir: Option<PathBuf>,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            boot_delay: Duration::ZERO,
            usage_percent: 25,
            dir: None,
        }
    }
}

/// A simulation backend call that failed to set up.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The simulation's directory could not be read or made.
    #[error("sim directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What the simulation keeps of one instance (also its file's content).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SimFile {
    image: String,
    resources: Resources,
    /// Whether it runs (files written before `power` existed say only this).
    #[serde(default)]
    running: bool,
    #[serde(default)]
    power: Option<Power>,
    /// How many times it was booted (a test's check that nothing starts twice).
    #[serde(default)]
    boots: u32,
    /// What the simulated guest wrote to its disk.
    #[serde(default)]
    disk: String,
}

struct SimInstance {
    image: String,
    resources: Resources,
    power: watch::Sender<Power>,
    boots: u32,
    disk: String,
}

/// A simulated volume: its size, what a guest wrote to it, and where it is attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SimVolume {
    size_mb: u32,
    /// The instance it is attached to, and as which device.
    attached: Option<(Uuid, String)>,
    /// What a guest wrote to it.
    data: String,
}

/// The file (in the simulation's directory) that keeps its volumes.
const VOLUMES_FILE: &str = "volumes.json";

#[derive(Default)]
struct State {
    instances: HashMap<Uuid, SimInstance>,
    volumes: HashMap<Uuid, SimVolume>,
    failures: HashMap<Op, VecDeque<BackendError>>,
    firewalls: HashMap<Uuid, ssntp::payload::Firewall>,
}

/// The simulation backend.
pub struct SimBackend {
    config: SimConfig,
    state: Mutex<State>,
}

impl SimBackend {
    /// A simulation; with a directory, the instances recorded there are back (as they were).
    pub fn new(config: SimConfig) -> Result<SimBackend, SimError> {
        SimBackend::load(config, None)
    }

    /// As [`SimBackend::new`], with only `instance` of the directory's instances back (if it is
    /// there): an off-host operation's view of the shared simulated host, which reads one file
    /// rather than every instance's.
    pub fn for_instance(config: SimConfig, instance: Uuid) -> Result<SimBackend, SimError> {
        SimBackend::load(config, Some(instance))
    }

    fn load(config: SimConfig, only: Option<Uuid>) -> Result<SimBackend, SimError> {
        let mut state = State::default();
        if let Some(dir) = &config.dir {
            let err = |source| SimError::Dir {
                path: dir.clone(),
                source,
            };
            support::private::dir(dir).map_err(err)?;
            let ids = match only {
                Some(id) => vec![id],
                None => {
                    let mut ids = Vec::new();
                    for entry in std::fs::read_dir(dir).map_err(err)? {
                        let name = entry.map_err(err)?.file_name();
                        ids.extend(name.to_str().and_then(|n| n.parse::<Uuid>().ok()));
                    }
                    ids
                }
            };
            for id in ids {
                let Ok(bytes) = std::fs::read(dir.join(id.to_string())) else {
                    continue;
                };
                if let Ok(f) = serde_json::from_slice::<SimFile>(&bytes) {
                    let power = f.power.unwrap_or(if f.running {
                        Power::Running
                    } else {
                        Power::Off
                    });
                    state.instances.insert(
                        id,
                        SimInstance {
                            image: f.image,
                            resources: f.resources,
                            power: watch::Sender::new(power),
                            boots: f.boots,
                            disk: f.disk,
                        },
                    );
                }
            }
        }
        if let Some(dir) = &config.dir
            && let Ok(bytes) = std::fs::read(dir.join(VOLUMES_FILE))
        {
            state.volumes = serde_json::from_slice(&bytes).unwrap_or_default();
        }
        Ok(SimBackend {
            config,
            state: Mutex::new(state),
        })
    }

    /// The instance and device a volume is attached to, if the simulation has it attached.
    pub fn volume_attachment(&self, volume: Uuid) -> Option<(Uuid, String)> {
        self.lock()
            .volumes
            .get(&volume)
            .and_then(|v| v.attached.clone())
    }

    /// The simulated guest of the instance the volume is attached to writes `text` to it.
    pub fn write_volume(&self, volume: Uuid, text: &str) -> Result<(), BackendError> {
        let mut state = self.lock();
        let v = state
            .volumes
            .get_mut(&volume)
            .filter(|v| v.attached.is_some())
            .ok_or_else(|| BackendError::Other("sim: the volume is not attached".into()))?;
        v.data = text.to_string();
        self.save_volumes(&state)
    }

    /// What is on a simulated volume, if the simulation has it.
    pub fn volume_data(&self, volume: Uuid) -> Option<String> {
        self.lock().volumes.get(&volume).map(|v| v.data.clone())
    }

    /// Writes the volumes' file, if the simulation keeps files.
    fn save_volumes(&self, state: &State) -> Result<(), BackendError> {
        let Some(dir) = &self.config.dir else {
            return Ok(());
        };
        let path = dir.join(VOLUMES_FILE);
        let temp = path.with_extension("tmp");
        let bytes = serde_json::to_vec(&state.volumes)
            .map_err(|e| BackendError::Other(format!("sim: volumes: {e}")))?;
        support::private::write(&temp, bytes)
            .and_then(|()| std::fs::rename(&temp, &path))
            .map_err(|e| BackendError::Other(format!("sim: saving {}: {e}", path.display())))
    }

    /// Its directory, if it keeps one.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.config.dir.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the next call of `op` fail with `error`. Several queue up.
    pub fn fail_next(&self, op: Op, error: BackendError) {
        self.lock().failures.entry(op).or_default().push_back(error);
    }

    /// Makes a running instance exit on its own (a crash, a shutdown from inside).
    pub fn kill(&self, instance: Uuid) {
        let mut state = self.lock();
        if let Some(i) = state.instances.get_mut(&instance) {
            i.power.send_replace(Power::Off);
            let _ = self.save(instance, i);
        }
    }

    /// The simulated guest writes `text` to its disk (only while it runs, as a guest would).
    pub fn write_disk(&self, instance: Uuid, text: &str) -> Result<(), BackendError> {
        let mut state = self.lock();
        let i = state
            .instances
            .get_mut(&instance)
            .ok_or(BackendError::NotFound)?;
        if *i.power.borrow() != Power::Running {
            return Err(BackendError::Other("sim: the instance does not run".into()));
        }
        i.disk = text.to_string();
        self.save(instance, i)
    }

    /// What is on the instance's simulated disk, if the simulation has it.
    pub fn disk(&self, instance: Uuid) -> Option<String> {
        self.lock().instances.get(&instance).map(|i| i.disk.clone())
    }

    /// The firewall `instance`'s NIC was last filtered with ([`Backend::filter_port`]).
    pub fn firewall(&self, instance: Uuid) -> Option<ssntp::payload::Firewall> {
        self.lock().firewalls.get(&instance).cloned()
    }

    /// How many times `instance` was booted, if the simulation has it.
    pub fn boots(&self, instance: Uuid) -> Option<u32> {
        self.lock().instances.get(&instance).map(|i| i.boots)
    }

    /// How many instances the simulation has, and how many of them run.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        let running = state
            .instances
            .values()
            .filter(|i| *i.power.borrow() == Power::Running)
            .count();
        (state.instances.len(), running)
    }

    /// Whether the instance exists, and its power state.
    pub fn status(&self, instance: Uuid) -> Option<Power> {
        self.lock()
            .instances
            .get(&instance)
            .map(|i| *i.power.borrow())
    }

    fn injected(&self, op: Op) -> Result<(), BackendError> {
        match self
            .lock()
            .failures
            .get_mut(&op)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn path(&self, instance: Uuid) -> Option<PathBuf> {
        self.config
            .dir
            .as_deref()
            .map(|d| d.join(instance.to_string()))
    }

    /// Writes the instance's file, if the simulation keeps files. A simulated VM that cannot
    /// be written (a full disk) fails the call, as a real one that cannot be made would.
    fn save(&self, instance: Uuid, i: &SimInstance) -> Result<(), BackendError> {
        let Some(path) = self.path(instance) else {
            return Ok(());
        };
        let power = *i.power.borrow();
        let file = SimFile {
            image: i.image.clone(),
            resources: i.resources,
            running: power == Power::Running,
            power: Some(power),
            boots: i.boots,
            disk: i.disk.clone(),
        };
        write_file(&path, &file).map_err(|e| {
            tracing::warn!(path = %path.display(), error = %e, "sim: saving an instance");
            BackendError::Other(format!("sim: saving {}: {e}", path.display()))
        })
    }
}

fn write_file(path: &Path, file: &SimFile) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    // The simulated disk holds what the guest wrote: for this user alone, as a real disk.
    let written = support::private::write(
        &temp,
        serde_json::to_vec(file).map_err(std::io::Error::other)?,
    );
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    std::fs::rename(temp, path)
}

impl Backend for SimBackend {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        self.injected(Op::Create)?;
        match spec.image.as_str() {
            IMAGE_FAIL_IMAGE => {
                return Err(BackendError::Image(format!(
                    "simulated: the image {IMAGE_FAIL_IMAGE} is refused"
                )));
            }
            IMAGE_FAIL_NETWORK => {
                return Err(BackendError::Network(
                    "simulated: the instance's network could not be set up".into(),
                ));
            }
            _ => {}
        }
        let mut state = self.lock();
        if state.instances.contains_key(&spec.instance) {
            return Err(BackendError::Exists);
        }
        // A boot volume: made on first use, the instance's own while it lives.
        if let Some(d) = spec.disks.iter().find(|d| d.boot && !d.ephemeral) {
            let v = state.volumes.entry(d.id).or_insert(SimVolume {
                size_mb: d.size_mb,
                attached: None,
                data: String::new(),
            });
            if let Some((other, _)) = &v.attached {
                return Err(BackendError::Launch(format!(
                    "boot volume {} is in use by instance {other}",
                    d.id
                )));
            }
            v.attached = Some((spec.instance, "vda".into()));
            self.save_volumes(&state)?;
        }
        let i = SimInstance {
            image: spec.image.clone(),
            resources: spec.resources,
            power: watch::Sender::new(Power::Off),
            boots: 0,
            disk: String::new(),
        };
        self.save(spec.instance, &i)?;
        state.instances.insert(spec.instance, i);
        Ok(())
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        self.injected(Op::Start)?;
        let image = match self.lock().instances.get(&instance) {
            Some(i) => i.image.clone(),
            None => return Err(BackendError::NotFound),
        };
        if image == IMAGE_FAIL_LAUNCH {
            return Err(BackendError::Launch(format!(
                "simulated: the image {IMAGE_FAIL_LAUNCH} never boots"
            )));
        }
        if !self.config.boot_delay.is_zero() {
            tokio::time::sleep(self.config.boot_delay).await;
        }
        let mut state = self.lock();
        let i = state
            .instances
            .get_mut(&instance)
            .ok_or(BackendError::NotFound)?;
        let before = *i.power.borrow();
        // A resume goes on where the instance was: not a boot.
        if before != Power::Saved {
            i.boots = i.boots.saturating_add(1);
        }
        let running = image != IMAGE_EXIT_AFTER_BOOT;
        i.power
            .send_replace(if running { Power::Running } else { Power::Off });
        if let Err(e) = self.save(instance, i) {
            if before != Power::Saved {
                i.boots = i.boots.saturating_sub(1);
            }
            i.power.send_replace(before);
            return Err(e);
        }
        Ok(())
    }

    async fn wait_exit(&self, instance: Uuid) {
        let rx = self
            .lock()
            .instances
            .get(&instance)
            .map(|i| i.power.subscribe());
        if let Some(mut rx) = rx {
            // An error means the instance was deleted: it does not run either way.
            let _ = rx.wait_for(|power| !power.is_active()).await;
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        self.injected(Op::Stop)?;
        let state = self.lock();
        if let Some(i) = state.instances.get(&instance) {
            if i.image == IMAGE_FAIL_STOP {
                return Err(BackendError::Other("sim: stop refused".into()));
            }
            i.power.send_replace(Power::Off);
            // Stopped either way; a file that still says running is corrected at the next save.
            let _ = self.save(instance, i);
        }
        Ok(())
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        let mut state = self.lock();
        let i = state
            .instances
            .get_mut(&instance)
            .ok_or(BackendError::NotFound)?;
        // A disk is never shrunk.
        let disk_mb = resources.disk_mb.max(i.resources.disk_mb);
        i.resources = Resources {
            disk_mb,
            ..resources
        };
        Ok(())
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        let mut state = self.lock();
        let i = state
            .instances
            .get_mut(&instance)
            .ok_or(BackendError::NotFound)?;
        let before = *i.power.borrow();
        let after = match action {
            Action::Reboot | Action::RebootHard => {
                i.boots = i.boots.saturating_add(1);
                Power::Running
            }
            Action::Pause => Power::Paused,
            Action::Unpause | Action::Resume => Power::Running,
            Action::Suspend => Power::Saved,
        };
        i.power.send_replace(after);
        if let Err(e) = self.save(instance, i) {
            i.power.send_replace(before);
            return Err(e);
        }
        Ok(())
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        self.injected(Op::Delete)?;
        let removed = {
            let mut state = self.lock();
            state.firewalls.remove(&instance);
            // Its volumes are free again (their data stays).
            let mut freed = false;
            for v in state.volumes.values_mut() {
                if v.attached.as_ref().is_some_and(|(i, _)| *i == instance) {
                    v.attached = None;
                    freed = true;
                }
            }
            if freed {
                let _ = self.save_volumes(&state);
            }
            state.instances.remove(&instance)
        };
        if let Some(i) = removed {
            i.power.send_replace(Power::Off);
            if let Some(path) = self.path(instance)
                && let Err(e) = std::fs::remove_file(&path)
            {
                tracing::warn!(path = %path.display(), error = %e, "sim: removing an instance");
            }
        }
        Ok(())
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        let pct = self.config.usage_percent.min(100);
        let part = |v: u32| u32::try_from(u64::from(v) * u64::from(pct) / 100).unwrap_or(v);
        self.lock()
            .instances
            .iter()
            .filter(|(_, i)| i.power.borrow().is_active())
            .map(|(id, i)| {
                let usage = Usage {
                    mem_mb: part(i.resources.mem_mb),
                    disk_mb: part(i.resources.disk_mb),
                    cpu_percent: Some(u32::from(id.as_bytes()[15]) % 50),
                };
                (*id, usage)
            })
            .collect()
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        Ok(self
            .lock()
            .instances
            .iter()
            .map(|(id, i)| Existing {
                instance: *id,
                power: *i.power.borrow(),
            })
            .collect())
    }

    /// A made-up serial log: two lines per boot, the second the tiny guest's own marker
    /// (`CUMULO-GUEST-UP <uuid>`). Only the boots the lines asked for can show are written.
    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        let (image, boots) = match self.lock().instances.get(&instance) {
            Some(i) => (i.image.clone(), i.boots),
            None => return Err(ConsoleError::NotFound),
        };
        let shown = u32::try_from(lines / 2 + 1).unwrap_or(u32::MAX);
        let log: String = (boots.saturating_sub(shown) + 1..=boots)
            .map(|boot| {
                format!(
                    "sim: booting {instance} from image {image} (boot {boot})\nCUMULO-GUEST-UP {instance}\n"
                )
            })
            .collect();
        Ok(last_lines(log.as_bytes(), lines))
    }

    /// Attaches the volume (made blank of `size_mb` if the simulation has none).
    async fn attach_volume(&self, instance: Uuid, volume: &VolumeSpec) -> Result<(), BackendError> {
        self.injected(Op::Attach)?;
        let mut state = self.lock();
        if !state.instances.contains_key(&instance) {
            return Err(BackendError::NotFound);
        }
        let v = match state.volumes.get_mut(&volume.id) {
            Some(v) => v,
            None if volume.size_mb == 0 => {
                return Err(BackendError::Other(format!(
                    "the node holds no volume {} and was not told its size",
                    volume.id
                )));
            }
            None => state.volumes.entry(volume.id).or_insert(SimVolume {
                size_mb: volume.size_mb,
                attached: None,
                data: String::new(),
            }),
        };
        match &v.attached {
            Some((other, _)) if *other != instance => {
                return Err(BackendError::Other(format!(
                    "volume {} is in use by instance {other}",
                    volume.id
                )));
            }
            _ => v.attached = Some((instance, volume.device.clone())),
        }
        self.save_volumes(&state)
    }

    /// Detaches the volume (a simulated guest always releases it).
    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
        _force: bool,
    ) -> Result<(), BackendError> {
        self.injected(Op::Detach)?;
        let mut state = self.lock();
        if let Some(v) = state.volumes.get_mut(&volume.id)
            && v.attached.as_ref().is_some_and(|(i, _)| *i == instance)
        {
            v.attached = None;
            self.save_volumes(&state)?;
        }
        Ok(())
    }

    /// Removes a volume that is attached to nothing.
    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        let mut state = self.lock();
        if let Some(v) = state.volumes.get(&volume) {
            if let Some((instance, _)) = &v.attached {
                return Err(BackendError::Other(format!(
                    "volume {volume} is in use by instance {instance}"
                )));
            }
            state.volumes.remove(&volume);
            self.save_volumes(&state)?;
        }
        Ok(())
    }

    /// Keeps the newest firewall of each instance it has ([`SimBackend::firewall`]).
    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        let mut state = self.lock();
        if !state.instances.contains_key(&instance) {
            return Err(BackendError::NotFound);
        }
        match &nic.firewall {
            Some(fw) => state.firewalls.insert(instance, fw.clone()),
            None => state.firewalls.remove(&instance),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Firmware, VmKind};

    fn spec(n: u128, image: &str) -> InstanceSpec {
        InstanceSpec {
            instance: Uuid::from_u128(n),
            tenant: Uuid::nil(),
            workload: Uuid::nil(),
            kind: VmKind::Sim,
            role: crate::model::InstanceRole::Workload,
            firmware: Firmware::Efi,
            image: image.into(),
            resources: Resources {
                vcpus: 2,
                mem_mb: 1_000,
                disk_mb: 400,
            },
            nic: None,
            disks: Vec::new(),
            volumes: Vec::new(),
            user_data: None,
            meta_data: Default::default(),
            restart: false,
            kernel: None,
        }
    }

    #[tokio::test]
    async fn a_nic_filter_is_recorded_until_the_instance_goes() {
        let sim = SimBackend::new(SimConfig::default()).unwrap();
        let id = Uuid::from_u128(1);
        let nic = NicSpec {
            mac: [2, 0, 0, 0, 0, 1],
            vnic_uuid: Uuid::from_u128(2),
            concentrator_uuid: Uuid::from_u128(3),
            concentrator_ip: "198.18.0.100".parse().unwrap(),
            subnet_addr: "10.250.0.0".parse().unwrap(),
            subnet_prefix: 24,
            subnet_key: 7,
            private_ip: "10.250.0.5".parse().unwrap(),
            public_ip: false,
            firewall: Some(ssntp::payload::Firewall {
                revision: 3,
                rules: Vec::new(),
            }),
        };
        assert_eq!(sim.filter_port(id, &nic).await, Err(BackendError::NotFound));
        sim.create(&spec(1, "debian")).await.unwrap();
        sim.filter_port(id, &nic).await.unwrap();
        assert_eq!(sim.firewall(id), nic.firewall);
        sim.delete(id).await.unwrap();
        assert_eq!(sim.firewall(id), None);
    }

    #[tokio::test]
    async fn the_console_shows_each_boot_and_its_marker() {
        let sim = SimBackend::new(SimConfig::default()).unwrap();
        let id = Uuid::from_u128(1);
        assert_eq!(sim.console(id, 10).await, Err(ConsoleError::NotFound));
        sim.create(&spec(1, "debian")).await.unwrap();
        assert_eq!(sim.console(id, 10).await.unwrap(), "");
        sim.start(id).await.unwrap();
        sim.action(id, Action::Reboot).await.unwrap();
        let log = sim.console(id, 100).await.unwrap();
        assert_eq!(log.lines().count(), 4, "{log}");
        assert!(
            log.ends_with(&format!("(boot 2)\nCUMULO-GUEST-UP {id}\n")),
            "{log}"
        );
        assert_eq!(
            sim.console(id, 1).await.unwrap(),
            format!("CUMULO-GUEST-UP {id}\n")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn boots_take_the_boot_delay_and_exits_are_seen() {
        let sim = SimBackend::new(SimConfig {
            boot_delay: Duration::from_secs(4),
            ..SimConfig::default()
        })
        .unwrap();
        let id = Uuid::from_u128(1);
        sim.create(&spec(1, "debian")).await.unwrap();
        assert_eq!(sim.status(id), Some(Power::Off));
        let t0 = tokio::time::Instant::now();
        sim.start(id).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(4));
        assert_eq!(sim.status(id), Some(Power::Running));
        let stats = sim.stats().await;
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].1.mem_mb, stats[0].1.disk_mb), (250, 100));
        sim.kill(id);
        sim.wait_exit(id).await;
        assert!(sim.stats().await.is_empty());
        assert_eq!(
            sim.create(&spec(1, "debian")).await,
            Err(BackendError::Exists)
        );
        sim.delete(id).await.unwrap();
        sim.wait_exit(id).await;
        assert_eq!(sim.counts(), (0, 0));
    }

    #[tokio::test]
    async fn failures_by_image_and_by_call() {
        let sim = SimBackend::new(SimConfig::default()).unwrap();
        assert!(matches!(
            sim.create(&spec(1, IMAGE_FAIL_IMAGE)).await,
            Err(BackendError::Image(_))
        ));
        assert!(matches!(
            sim.create(&spec(2, IMAGE_FAIL_NETWORK)).await,
            Err(BackendError::Network(_))
        ));
        sim.create(&spec(3, IMAGE_FAIL_LAUNCH)).await.unwrap();
        let id3 = Uuid::from_u128(3);
        let failed = sim.start(id3).await.unwrap_err();
        assert!(matches!(failed, BackendError::Launch(_)));
        // The message the user reads says what failed and that it was simulated.
        assert_eq!(
            failed.message(),
            "simulated: the image fail-launch never boots"
        );
        sim.create(&spec(4, IMAGE_FAIL_STOP)).await.unwrap();
        let id4 = Uuid::from_u128(4);
        sim.start(id4).await.unwrap();
        assert!(sim.stop(id4).await.is_err());
        sim.create(&spec(5, IMAGE_EXIT_AFTER_BOOT)).await.unwrap();
        sim.start(Uuid::from_u128(5)).await.unwrap();
        assert_eq!(sim.status(Uuid::from_u128(5)), Some(Power::Off));
        sim.fail_next(Op::Delete, BackendError::Other("once".into()));
        assert!(sim.delete(id3).await.is_err());
        sim.delete(id3).await.unwrap();
        assert_eq!(sim.start(id3).await, Err(BackendError::NotFound));
    }

    /// With a directory, instances outlive the process that made them (as VMs outlive a
    /// killed agent): a new simulation over the same directory has them, as they were.
    #[tokio::test]
    async fn instances_in_a_directory_outlive_the_backend() {
        let dir = tempfile::tempdir().unwrap();
        let config = SimConfig {
            dir: Some(dir.path().to_owned()),
            ..SimConfig::default()
        };
        let sim = SimBackend::new(config.clone()).unwrap();
        for n in 1..=3 {
            sim.create(&spec(n, "debian")).await.unwrap();
        }
        sim.start(Uuid::from_u128(1)).await.unwrap();
        sim.start(Uuid::from_u128(2)).await.unwrap();
        sim.kill(Uuid::from_u128(2));
        sim.delete(Uuid::from_u128(3)).await.unwrap();
        drop(sim);
        std::fs::write(dir.path().join("not-an-instance"), b"x").unwrap();
        let again = SimBackend::new(config).unwrap();
        assert_eq!(again.boots(Uuid::from_u128(1)), Some(1));
        assert_eq!(again.boots(Uuid::from_u128(2)), Some(1));
        let mut listed = again.list().await.unwrap();
        listed.sort_by_key(|e| e.instance);
        assert_eq!(
            listed,
            vec![
                Existing {
                    instance: Uuid::from_u128(1),
                    power: Power::Running
                },
                Existing {
                    instance: Uuid::from_u128(2),
                    power: Power::Off
                },
            ]
        );
    }

    /// A simulated VM whose file cannot be written (a full disk, a vanished directory) is not
    /// made: create fails with a clear error instead of a VM that would not survive a restart.
    #[tokio::test]
    async fn an_unwritable_directory_fails_create_and_start() {
        let dir = tempfile::tempdir().unwrap();
        let sim_dir = dir.path().join("sim");
        let sim = SimBackend::new(SimConfig {
            dir: Some(sim_dir.clone()),
            ..SimConfig::default()
        })
        .unwrap();
        sim.create(&spec(1, "debian")).await.unwrap();
        std::fs::remove_dir_all(&sim_dir).unwrap();
        let err = sim.create(&spec(2, "debian")).await.unwrap_err();
        assert!(
            matches!(&err, BackendError::Other(m) if m.contains("sim: saving")),
            "{err}"
        );
        assert_eq!(sim.counts(), (1, 0));
        assert!(sim.start(Uuid::from_u128(1)).await.is_err());
        assert_eq!(sim.boots(Uuid::from_u128(1)), Some(0));
        assert_eq!(sim.status(Uuid::from_u128(1)), Some(Power::Off));
        // Space is back: it boots.
        std::fs::create_dir_all(&sim_dir).unwrap();
        sim.start(Uuid::from_u128(1)).await.unwrap();
        assert_eq!(sim.boots(Uuid::from_u128(1)), Some(1));
    }
}
