//! An image the user uploads boots on a node that fetches it once; a snapshot boots too.

use super::*;

#[test]
fn the_openstack_cli_uploads_an_image_that_the_node_fetches_once_and_boots() {
    let Some(disk) = common::tiny_disk_or_skip() else {
        return;
    };
    let Some(up) = Up::start_or_skip("an uploaded image on real VMs") else {
        return;
    };

    let disk = disk.to_str().unwrap();
    let (image_id, hash) = up.upload(disk, "qcow2", "tiny-disk", &[]);
    // The node's image cache holds nothing yet.
    let cache = up.dir.join("agent/images/sha512");
    assert!(!cache.join(&hash).exists(), "not fetched before a START");

    // The first START fetches the image (its time includes the fetch), the second finds it.
    let mut booted = Vec::new();
    for name in ["disk-a", "disk-b"] {
        let started = Instant::now();
        let server = up.json(&[
            "server", "create", "--flavor", "tiny", "--image", &image_id, "--wait", name,
        ]);
        let active = started.elapsed();
        assert_eq!(server["status"], "ACTIVE", "{server}");
        let id = server["id"].as_str().unwrap().to_string();
        // The guest on the disk has no meta-data of its own: it names itself from its kernel
        // command line (scripts/tiny-disk.sh).
        up.wait_console(&id, "CUMULO-GUEST-UP 00000000-0000-4000-8000-00000000d15c");
        // Its own disk, first boot: the guest counts in the disk's spare sector.
        up.wait_console(
            &id,
            "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 1",
        );
        println!(
            "{name}: ACTIVE {} ms after server create, guest up after {} ms",
            active.as_millis(),
            started.elapsed().as_millis()
        );
        booted.push(id);
    }
    let data = std::fs::read(cache.join(&hash)).unwrap();
    assert_eq!(
        data,
        std::fs::read(disk).unwrap(),
        "the node keeps the data it was sent"
    );
    let log = std::fs::read_to_string(up.dir.join("logs/agent.log")).unwrap();
    let fetches: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("image data fetched"))
        .collect();
    assert_eq!(
        fetches.len(),
        1,
        "one fetch for two STARTs; the agent's log:\n{log}"
    );
    println!("{}", fetches[0]);
    // The node's time from START to a running VM: the first with the fetch, the second without.
    for id in &booted {
        let launched = log
            .lines()
            .find(|l| l.contains("launched") && l.contains(id.as_str()));
        println!("{}", launched.unwrap_or("(no launch line)"));
    }

    // A snapshot of the running disk-a (paused for the copy): what its guest counted on its
    // disk (boot 1) is in the image, and a server booted from it counts boot 2.
    let snap = up.json(&[
        "server", "image", "create", "--name", "snap", "--wait", &booted[0],
    ]);
    let snap_id = snap["id"].as_str().unwrap().to_string();
    let shown = up.json(&["image", "show", &snap_id]);
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["disk_format"], "qcow2", "{shown}");
    let props = shown["properties"].to_string();
    assert!(
        props.contains("snapshot") && props.contains(&booted[0]),
        "{shown}"
    );
    up.wait_status(&booted[0], "ACTIVE");
    let server = up.json(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        &snap_id,
        "--wait",
        "from-snap",
    ]);
    let from_snap = server["id"].as_str().unwrap().to_string();
    up.wait_console(
        &from_snap,
        "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 2",
    );
    booted.push(from_snap);

    // In use, the image stays in the cache; the servers go, then the images.
    for id in &booted {
        up.ok(&["server", "delete", "--wait", id]);
    }
    up.delete_images(&[&image_id, &snap_id]);
}

#[test]
fn the_openstack_cli_boots_a_kernel_image_with_its_initrd_and_a_snapshot_boots_that_kernel() {
    let Some(guest) = common::tiny_guest_or_skip() else {
        return;
    };
    let Some(up) = Up::start_or_skip("a kernel image on real VMs") else {
        return;
    };
    // The tiny guest's kernel and initrd, uploaded as Glance's kernel (aki) and ramdisk (ari)
    // images; the kernel names its initrd.
    let file = |name: &str| guest.join(name).display().to_string();
    let (initrd, initrd_hash) = up.upload(&file("initrd"), "ari", "tiny-initrd", &[]);
    let ramdisk = format!("ramdisk_id={initrd}");
    let (kernel, kernel_hash) = up.upload(
        &file("kernel"),
        "aki",
        "tiny-kernel",
        &["--property", &ramdisk],
    );
    let hashes = [kernel_hash, initrd_hash];

    // The kernel image boots with its initrd (which carries the node's seed: the guest names
    // itself from it) and a blank data disk, on which the guest counts its first boot.
    let first = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", &kernel, "--wait", "kernel-a",
    ]);
    assert_eq!(first["status"], "ACTIVE", "{first}");
    let first = first["id"].as_str().unwrap().to_string();
    up.wait_console(&first, &format!("CUMULO-GUEST-UP {first}"));
    up.wait_console(&first, &format!("CUMULO-DISK-WROTE {first} 1"));
    // The node fetched both, once each, and keeps them while the server is there.
    let log = std::fs::read_to_string(up.dir.join("logs/agent.log")).unwrap();
    for hash in &hashes {
        let fetched = log
            .lines()
            // (The log names data by its hash's first 16 digits.)
            .filter(|l| l.contains("image data fetched") && l.contains(&hash[..16]))
            .count();
        assert_eq!(fetched, 1, "{hash}: the agent's log:\n{log}");
        assert!(up.dir.join("agent/images/sha512").join(hash).is_file());
    }

    // Its snapshot is the data disk, and names the kernel and initrd: booted, the kernel comes
    // up with the snapshot as its root disk, where the guest finds its first boot counted.
    let snap = up.json(&[
        "server",
        "image",
        "create",
        "--name",
        "kernel-snap",
        "--wait",
        &first,
    ]);
    let snap = snap["id"].as_str().unwrap().to_string();
    let shown = up.json(&["image", "show", &snap]);
    assert_eq!(shown["disk_format"], "qcow2", "{shown}");
    let props = &shown["properties"];
    assert_eq!(props["kernel_id"], kernel.as_str(), "{shown}");
    assert_eq!(props["ramdisk_id"], initrd.as_str(), "{shown}");
    up.wait_status(&first, "ACTIVE");
    let second = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", &snap, "--wait", "kernel-b",
    ]);
    let second = second["id"].as_str().unwrap().to_string();
    up.wait_console(&second, &format!("CUMULO-GUEST-UP {second}"));
    up.wait_console(&second, &format!("CUMULO-DISK-WROTE {second} 2"));

    // An initrd does not boot by itself: refused before anything is made.
    let out = up.openstack(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        &initrd,
        "initrd-only",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("is an initrd"), "{}", text(&out));

    for id in [&first, &second] {
        up.ok(&["server", "delete", "--wait", id]);
    }
    up.delete_images(&[&snap, &kernel, &initrd]);
}
