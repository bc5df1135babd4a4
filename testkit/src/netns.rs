//! What tests with network namespaces share: whether this host can run them, and the DHCP
//! client script of the guests that stand in for instances.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why tests with network namespaces and guests cannot run here (not root, a tool missing), if
/// they cannot: `ip`, `ping`, `nft` and busybox (its `udhcpc`).
pub fn missing() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in ["ip", "ping", "nft", "busybox"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("`{tool}` is not installed (scripts/deps.sh)"));
        }
    }
    None
}

/// Writes the script `busybox udhcpc -s` runs in a guest into `dir`: it puts the lease's
/// address, MTU and default route on the interface. Returns its path.
pub fn dhcp_script(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("udhcpc.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         case \"$1\" in\n\
         bound|renew)\n\
         \tip addr flush dev \"$interface\"\n\
         \tip addr add \"$ip/$mask\" dev \"$interface\"\n\
         \t[ -n \"$mtu\" ] && ip link set dev \"$interface\" mtu \"$mtu\"\n\
         \t[ -n \"$router\" ] && ip route replace default via \"${router%% *}\" dev \"$interface\"\n\
         \t;;\n\
         esac\n",
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}
