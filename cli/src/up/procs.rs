//! The cluster's processes: started detached (own process group, logs to files, PID files), found
//! again by PID file (checked against /proc so that a reused PID is not ours), stopped by PID:
//! SIGTERM, then SIGKILL after a grace period.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// A process to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its service name (`scheduler`, `controller`, `agent`, `libvirtd`).
    pub name: String,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

/// Why a process could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// Spawning, or its files.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// It did not stop, even after SIGKILL.
    #[error("{0} (pid {1}) does not stop")]
    Stuck(String, i32),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProcError {
    let what = what.into();
    move |source| ProcError::Io { what, source }
}

/// A process found by its PID file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Its PID.
    pub pid: i32,
    /// The program it runs (file name).
    pub program: String,
}

/// Starts `spec` detached: a new process group, stdin from /dev/null, stdout and stderr
/// appended to `log` (mode 0600 whatever the umask: a service may log what it was sent);
/// writes `pid_file` ("PID PROGRAM-FILE-NAME", mode 0644 at most).
pub fn spawn(spec: &Spec, log: &Path, pid_file: &Path) -> Result<Running, ProcError> {
    for dir in [log.parent(), pid_file.parent()].into_iter().flatten() {
        std::fs::create_dir_all(dir).map_err(io(format!("{}", dir.display())))?;
    }
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .and_then(|f| {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            Ok(f)
        })
        .map_err(io(format!("{}", log.display())))?;
    let err = out.try_clone().map_err(io(format!("{}", log.display())))?;
    let child = Command::new(&spec.program)
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(io(format!("starting {}", spec.program.display())))?;
    let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let program = file_name(&spec.program);
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o644)
        .open(pid_file)
        .map_err(io(format!("{}", pid_file.display())))?;
    writeln!(f, "{pid} {program}").map_err(io(format!("{}", pid_file.display())))?;
    // The child is not waited for: `up` exits and leaves it running (init reaps it later).
    drop(child);
    Ok(Running { pid, program })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// The process a PID file names, if it still runs that program.
pub fn running(pid_file: &Path) -> Option<Running> {
    let text = std::fs::read_to_string(pid_file).ok()?;
    let mut words = text.split_whitespace();
    let pid: i32 = words.next()?.parse().ok()?;
    let program = words.next()?.to_string();
    alive(pid, &program).then_some(Running { pid, program })
}

/// Whether `pid` is a live (not zombie) process running `program`.
pub fn alive(pid: i32, program: &str) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    if matches!(state, Some("Z" | "X")) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    file_name(Path::new(argv0.as_ref())) == program
}

/// Whether the process `pid` (a child of ours, not waited for) has ended: gone, or a zombie.
/// Unlike [`alive`], it does not look at the program, which a child that is still starting
/// has not yet exec'd.
pub fn ended(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("Z" | "X"))
}

/// Stops the process of `pid_file` (SIGTERM, then SIGKILL after `grace`) and removes the file.
/// `Ok(false)`: it was not running.
pub fn stop(name: &str, pid_file: &Path, grace: Duration) -> Result<bool, ProcError> {
    let Some(process) = running(pid_file) else {
        let _ = std::fs::remove_file(pid_file);
        return Ok(false);
    };
    let stopped = stop_process(name, &process, grace)?;
    let _ = std::fs::remove_file(pid_file);
    Ok(stopped)
}

/// Stops `process` (SIGTERM, then SIGKILL after `grace`). `Ok(false)`: not a valid PID.
pub fn stop_process(name: &str, process: &Running, grace: Duration) -> Result<bool, ProcError> {
    let Some(pid) = Pid::from_raw(process.pid) else {
        return Ok(false);
    };
    let _ = kill_process(pid, Signal::TERM);
    if !wait_gone(process, grace) {
        let _ = kill_process(pid, Signal::KILL);
        if !wait_gone(process, Duration::from_secs(5)) {
            return Err(ProcError::Stuck(name.to_string(), process.pid));
        }
    }
    Ok(true)
}

/// Polls until the process is gone, at most `within`.
fn wait_gone(process: &Running, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !alive(process.pid, &process.program) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_process_is_found_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            name: "sleeper".into(),
            program: "/bin/sleep".into(),
            args: vec!["30".into()],
            env: vec![],
        };
        let pid_file = dir.path().join("run/sleeper.pid");
        let started = spawn(&spec, &dir.path().join("logs/sleeper.log"), &pid_file).unwrap();
        // spawn returns once the kernel has begun the exec; /proc/PID/cmdline shows the new
        // program's arguments a moment later.
        let deadline = Instant::now() + Duration::from_secs(5);
        while running(&pid_file).as_ref() != Some(&started) {
            assert!(
                Instant::now() < deadline,
                "{started:?} never showed in /proc"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stop("sleeper", &pid_file, Duration::from_secs(5)).unwrap());
        assert!(!alive(started.pid, "sleep"));
        assert!(!pid_file.exists());
        assert!(!stop("sleeper", &pid_file, Duration::from_secs(1)).unwrap());
    }

    #[test]
    fn a_pid_file_naming_another_program_is_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("x.pid");
        // This test process is alive, but it is not "cumulo-scheduler".
        std::fs::write(
            &pid_file,
            format!("{} cumulo-scheduler\n", std::process::id()),
        )
        .unwrap();
        assert_eq!(running(&pid_file), None);
        std::fs::write(&pid_file, "garbage").unwrap();
        assert_eq!(running(&pid_file), None);
    }
}
