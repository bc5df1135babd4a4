//! A volume attached to a running VM, seen and written by its guest, moved to another.

use super::*;

/// The volume's status and the device of its attachment (if any), as `volume show` gives them.
fn volume_state(up: &Up, volume: &str) -> (String, Option<String>) {
    let shown = up.json(&["volume", "show", volume]);
    let status = shown["status"].as_str().unwrap_or_default().to_string();
    let device = shown["attachments"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|a| a["device"].as_str())
        .map(str::to_string);
    (status, device)
}

/// Waits until the volume is `want`; how long that took.
fn wait_volume(up: &Up, volume: &str, want: &str) -> Duration {
    let t0 = Instant::now();
    testkit::poll_for(Duration::from_secs(120), || {
        match volume_state(up, volume) {
            (now, _) if now == want => Ok(()),
            (now, _) => Err(format!("volume {volume} still {now}, not {want}")),
        }
    });
    t0.elapsed()
}

/// The first 20 hex digits of a volume's UUID: the serial its disk carries in the guest.
fn serial(volume: &str) -> String {
    volume.replace('-', "").chars().take(20).collect()
}

#[test]
fn the_openstack_cli_attaches_a_volume_that_guests_see_and_that_keeps_its_data() {
    let Some(up) = Up::start_or_skip("volumes on real VMs") else {
        return;
    };
    let first = up.json(&["server", "show", "first"]);
    let a = first["id"].as_str().unwrap().to_string();
    up.wait_disk_count(&a, 1);
    let second = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", "tiny", "--wait", "second",
    ]);
    let b = second["id"].as_str().unwrap().to_string();
    up.wait_disk_count(&b, 1);

    let made = up.json(&["volume", "create", "--size", "1", "data"]);
    let volume = made["id"].as_str().unwrap().to_string();
    wait_volume(&up, &volume, "available");
    let serial = serial(&volume);

    // Attach to the running first server: hot-plugged, seen blank, marked.
    let t0 = Instant::now();
    up.ok(&["server", "add", "volume", &a, &volume]);
    let api = t0.elapsed();
    wait_volume(&up, &volume, "in-use");
    let in_use = t0.elapsed();
    assert_eq!(volume_state(&up, &volume).1.as_deref(), Some("/dev/vdb"));
    up.wait_console(&a, &format!("CUMULO-VOLUME-SEEN {a} vdb {serial} blank"));
    let seen = t0.elapsed();
    up.wait_console(&a, &format!("CUMULO-VOLUME-WROTE {a} {serial}"));
    let listed = up.json(&["server", "volume", "list", &a]);
    assert!(listed.to_string().contains(&volume), "{listed}");
    let file = up.dir.join("agent/volumes").join(format!("{volume}.qcow2"));
    assert!(file.is_file(), "made on the node at the first attach");

    // Detach: the guest lets it go.
    let t0 = Instant::now();
    up.ok(&["server", "remove", "volume", &a, &volume]);
    wait_volume(&up, &volume, "available");
    let detached = t0.elapsed();
    up.wait_console(&a, &format!("CUMULO-VOLUME-GONE {a} {serial}"));

    // Attach to the second server: its guest finds the first one's mark.
    up.ok(&["server", "add", "volume", &b, &volume]);
    wait_volume(&up, &volume, "in-use");
    up.wait_console(
        &b,
        &format!("CUMULO-VOLUME-SEEN {b} vdb {serial} CUMULO-VOLUME-MARK {a}"),
    );
    // Not while attached.
    let out = up.openstack(&["volume", "delete", &volume]);
    assert!(
        !out.status.success(),
        "deleted while attached: {}",
        text(&out)
    );
    println!(
        "FIGURES: volume attach: API {} ms, in-use {} ms, seen by the guest {} ms; detach: \
         available {} ms",
        api.as_millis(),
        in_use.as_millis(),
        seen.as_millis(),
        detached.as_millis()
    );

    // The server goes: the volume is free again; deleted, its file leaves the node.
    up.ok(&["server", "delete", "--wait", &b]);
    wait_volume(&up, &volume, "available");
    up.ok(&["volume", "delete", &volume]);
    testkit::poll_for(Duration::from_secs(60), || {
        let out = up.openstack(&["volume", "show", &volume]);
        match out.status.success() {
            false => Ok(()),
            true => Err(format!("volume {volume} still shown")),
        }
    });
    assert!(!file.exists(), "the volume's file left the node");
}
