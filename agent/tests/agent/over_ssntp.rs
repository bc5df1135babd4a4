//! cumulo-agent over real SSNTP, on loopback TLS with certificates made at test time: the
//! daemon ([`agent::daemon::run`] in this process, or the `cumulo-agent` binary) against the
//! real scheduler with a fake controller, or against a fake scheduler (an `ssntp_net::Server`
//! in the test) where the test must speak to the agent directly. No sleeps: every wait is a
//! receive with a deadline.

use super::support::*;

/// START through the real scheduler: STATS (forwarded to the controller) shows the instance
/// pending, then active; DELETE gets INSTANCE_DELETED, a DELETE of an unknown instance
/// DELETE_FAILURE `no_instance`, and DELETE `stop: true` INSTANCE_STOPPED.
#[tokio::test]
async fn start_is_pending_then_active_and_deletes_are_answered() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = real_scheduler(&pki).await;
    let node = u(1);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let state = dir.path().join("state");
    let mut c = controller(&pki, &sched.addr).await;
    // A boot long enough for a STATS to catch the instance pending, even on a loaded machine.
    let agent = start_agent(config(
        &files,
        &sched.addr,
        &state,
        &["--sim-boot-delay", "1s"],
    ));
    let first = c.stats(node, "the agent's first STATS", |_| true).await;
    assert_eq!(first.status, NodeState::Ready);
    assert!(first.instances.is_empty());

    let a = u(0xa1);
    c.send(&start_payload(start(a, "debian")));
    c.stats(node, "a pending", |s| {
        state_in(s, a) == Some(InstanceState::Pending)
    })
    .await;
    let active = c
        .stats(node, "a active", |s| {
            state_in(s, a) == Some(InstanceState::Active)
        })
        .await;
    assert_eq!(
        active.node.vcpus_available, 63,
        "the instance's vCPU is reserved"
    );

    c.send(&delete(a, node, false));
    c.expect("INSTANCE_DELETED", |m| {
        event_from(m, node, Operand::InstanceDeleted, a).then_some(())
    })
    .await;
    c.stats(node, "a gone", |s| state_in(s, a).is_none()).await;

    let ghost = u(0x9a);
    c.send(&delete(ghost, node, false));
    let f = c
        .expect("DELETE_FAILURE", |m| match &m.payload {
            Payload::DeleteFailure(f) if m.frame.origin == node => Some(f.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        (f.instance_uuid, f.node_uuid, f.reason),
        (ghost, Some(node), DeleteFailureReason::NoInstance)
    );

    let b = u(0xb1);
    c.send(&start_payload(start(b, "debian")));
    c.stats(node, "b active", |s| {
        state_in(s, b) == Some(InstanceState::Active)
    })
    .await;
    c.send(&delete(b, node, true));
    c.expect("INSTANCE_STOPPED", |m| {
        event_from(m, node, Operand::InstanceStopped, b).then_some(())
    })
    .await;
    // Stopped and kept: still in STATS as exited; a START with restart boots it again; a
    // DELETE removes it.
    c.stats(node, "b exited", |s| {
        state_in(s, b) == Some(InstanceState::Exited)
    })
    .await;
    let mut again = start(b, "debian");
    again.restart = true;
    // Pinned to the node that keeps it, as the controller pins every restart.
    again.requirements.node_id = Some(node);
    c.send(&start_payload(again));
    c.stats(node, "b active again", |s| {
        state_in(s, b) == Some(InstanceState::Active)
    })
    .await;
    c.send(&delete(b, node, false));
    c.stats(node, "b gone", |s| s.instances.is_empty()).await;
    agent.stop().await;
    sched.stop.cancel();
}

/// Every START_FAILURE reason an agent gives reaches the sender over the wire, with the node's
/// UUID and the START's `restart` flag; and what the agent answers without its core: a DELETE
/// for another node (`invalid_data`), ATTACH_VOLUME and DETACH_VOLUME (STATS lists the volume while it is attached), EVACUATE/RESTORE for
/// another node (ignored).
#[tokio::test]
async fn every_start_failure_reason_and_misaddressed_commands() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut fake = fake_scheduler(&pki, listener).await;
    let node = u(2);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let state = dir.path().join("state");
    // Leftovers of an instance the agent has no record of, in the sim's directory.
    let leftover = u(0x1e);
    let sim_dir = state.join("sim");
    let sim = SimBackend::new(SimConfig {
        dir: Some(sim_dir),
        ..SimConfig::default()
    })
    .unwrap();
    sim.create(&wire::spec_from_start(&start(leftover, "debian")))
        .await
        .unwrap();
    drop(sim);
    let agent = start_agent(config(&files, &addr, &state, &["--vcpus", "8"]));
    fake.stats(node, "the agent's first STATS", |_| true).await;

    // Each START, and the failure it must get.
    let mut cases: Vec<(Start, StartFailureReason)> = Vec::new();
    let mut s = start(u(0x10), "debian");
    s.requirements.vcpus = 0;
    cases.push((s, StartFailureReason::InvalidData));
    let mut s = start(u(0x11), "debian");
    s.requirements.vcpus = 9;
    cases.push((s, StartFailureReason::FullCn));
    let s = start(u(0x12), sim::IMAGE_FAIL_IMAGE);
    cases.push((s, StartFailureReason::ImageFailure));
    let s = start(u(0x13), sim::IMAGE_FAIL_NETWORK);
    cases.push((s, StartFailureReason::NetworkFailure));
    let s = start(u(0x15), sim::IMAGE_FAIL_LAUNCH);
    cases.push((s, StartFailureReason::LaunchFailure));
    // A restart of an instance the node does not hold: `instance_missing`, `restart` echoed.
    let mut s = start(u(0x14), "debian");
    s.restart = true;
    cases.push((s, StartFailureReason::InstanceMissing));
    cases.push((
        start(leftover, "debian"),
        StartFailureReason::InstanceExists,
    ));
    // The same START twice: the second is a duplicate.
    fake.send(node, &start_payload(start(u(0x17), "debian")));
    cases.push((start(u(0x17), "debian"), StartFailureReason::AlreadyRunning));
    let mut expected = BTreeMap::new();
    for (s, reason) in cases {
        expected.insert(s.instance_uuid, (reason, s.restart));
        fake.send(node, &start_payload(s));
    }
    // A START whose payload holds nothing but its instance: refused by the agent's session.
    let mut bad = Frame::new(SCHED, &Payload::Heartbeat);
    bad.operand = Operand::Start;
    let mut body = vec![0xa1, 0x60 + 13];
    body.extend_from_slice(b"instance_uuid");
    body.push(0x50);
    body.extend_from_slice(u(0x18).as_bytes());
    bad.payload = body.into();
    fake.handle.send(node, &bad).unwrap();
    expected.insert(u(0x18), (StartFailureReason::InvalidPayload, false));
    // In maintenance.
    fake.send(node, &Payload::Evacuate(node_command(node)));
    fake.send(node, &start_payload(start(u(0x19), "debian")));
    expected.insert(u(0x19), (StartFailureReason::NodeMaintenance, false));

    let mut got = BTreeMap::new();
    while got.len() < expected.len() {
        let m = fake
            .message("START_FAILUREs", |m| {
                m.frame.operand == Operand::StartFailure
            })
            .await;
        let f = start_failure(&m, node).expect("from the agent");
        assert_eq!(f.node_uuid, Some(node));
        assert!(
            got.insert(f.instance_uuid, (f.reason, f.restart)).is_none(),
            "one failure per START: {f:?}"
        );
    }
    assert_eq!(got, expected);
    // The duplicate's first START was taken, and EVACUATE stopped it.
    fake.message("INSTANCE_STOPPED of the evacuated", |m| {
        event_from(m, node, Operand::InstanceStopped, u(0x17))
    })
    .await;

    // RESTORE for another node is ignored: still in maintenance.
    fake.send(node, &Payload::Restore(node_command(u(0x99))));
    fake.send(node, &start_payload(start(u(0x20), "debian")));
    let m = fake
        .message("START_FAILURE", |m| {
            m.frame.operand == Operand::StartFailure
        })
        .await;
    let f = start_failure(&m, node).unwrap();
    assert_eq!(
        (f.instance_uuid, f.reason),
        (u(0x20), StartFailureReason::NodeMaintenance)
    );
    // RESTORE for this node; EVACUATE for another is ignored: a START runs.
    fake.send(node, &Payload::Restore(node_command(node)));
    fake.send(node, &Payload::Evacuate(node_command(u(0x99))));
    fake.send(node, &start_payload(start(u(0x21), "debian")));
    fake.stats(node, "0x21 active on a restored node", |s| {
        s.status == NodeState::Ready && state_in(s, u(0x21)) == Some(InstanceState::Active)
    })
    .await;

    // A DELETE for another node is refused.
    fake.send(node, &delete(u(0x21), u(0x99), false));
    let m = fake
        .message("DELETE_FAILURE", |m| {
            m.frame.operand == Operand::DeleteFailure
        })
        .await;
    let Payload::DeleteFailure(f) = m.payload else {
        unreachable!()
    };
    assert_eq!(
        (f.instance_uuid, f.node_uuid, f.reason),
        (u(0x21), Some(node), DeleteFailureReason::InvalidData)
    );
    // ATTACH_VOLUME of a volume the node does not hold, without a size: refused with the
    // cause; with its size, made and attached: STATS lists it; DETACH_VOLUME: no longer.
    fake.send(
        node,
        &Payload::AttachVolume(AttachVolume::new(u(0x21), u(0x50), node)),
    );
    let m = fake
        .message("ATTACH_VOLUME_FAILURE", |m| {
            m.frame.operand == Operand::AttachVolumeFailure
        })
        .await;
    let Payload::AttachVolumeFailure(f) = m.payload else {
        unreachable!()
    };
    assert_eq!(
        (f.instance_uuid, f.volume_uuid, f.reason),
        (u(0x21), u(0x50), AttachVolumeFailureReason::AttachFailure)
    );
    assert!(
        f.message.as_deref().unwrap_or("").contains("no volume"),
        "{f:?}"
    );
    fake.send(
        node,
        &Payload::AttachVolume(AttachVolume {
            size_mb: Some(1024),
            ..AttachVolume::new(u(0x21), u(0x50), node)
        }),
    );
    let volumes_of = |s: &ssntp::payload::Stats| {
        s.instances
            .iter()
            .find(|i| i.instance_uuid == u(0x21))
            .map(|i| i.volumes.clone())
    };
    fake.stats(node, "0x21 with volume 0x50", |s| {
        volumes_of(s) == Some(vec![u(0x50)])
    })
    .await;
    fake.send(
        node,
        &Payload::DetachVolume(AttachVolume::new(u(0x21), u(0x50), node)),
    );
    fake.stats(node, "0x21 without volumes", |s| {
        volumes_of(s) == Some(Vec::new())
    })
    .await;
    agent.stop().await;
    fake.shut().await;
}

/// EVACUATE stops every instance, keeping it (INSTANCE_STOPPED), and puts the node in
/// MAINTENANCE, which a restart keeps; RESTORE makes it take work again and boots what the
/// evacuation stopped.
#[tokio::test]
async fn evacuate_and_restore_hold_across_a_restart() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = real_scheduler(&pki).await;
    let node = u(3);
    let files = agent_files(&pki, Role::DUAL, Some(node), dir.path());
    let state = dir.path().join("state");
    let mut c = controller(&pki, &sched.addr).await;
    let agent = start_agent(config(&files, &sched.addr, &state, &[]));
    c.stats(node, "the agent's first STATS", |_| true).await;
    let (a, b) = (u(0xa3), u(0xb3));
    c.send(&start_payload(start(a, "debian")));
    c.send(&start_payload(start(b, "debian")));
    c.stats(node, "a and b active", |s| all_active(s, &[a, b]))
        .await;

    c.send(&Payload::Evacuate(node_command(node)));
    let mut stopped = Vec::new();
    while stopped.len() < 2 {
        let i = c
            .expect("INSTANCE_STOPPED", |m| match &m.payload {
                Payload::InstanceStopped(e) if m.frame.origin == node => Some(e.instance_uuid),
                _ => None,
            })
            .await;
        stopped.push(i);
    }
    stopped.sort();
    assert_eq!(stopped, vec![a, b]);
    c.stats(node, "MAINTENANCE, a and b kept exited", |s| {
        s.status == NodeState::Maintenance
            && s.instances.len() == 2
            && [a, b]
                .iter()
                .all(|i| state_in(s, *i) == Some(InstanceState::Exited))
    })
    .await;

    agent.stop().await;
    let agent = start_agent(config(&files, &sched.addr, &state, &[]));
    c.stats(node, "MAINTENANCE after the restart", |s| {
        s.status == NodeState::Maintenance
    })
    .await;
    // The scheduler does not place on a node in maintenance.
    c.send(&start_payload(start(u(0xc3), "debian")));
    let f = c
        .expect("START_FAILURE from the scheduler", |m| match &m.payload {
            Payload::StartFailure(f) if m.frame.origin == SCHED => Some(f.clone()),
            _ => None,
        })
        .await;
    assert_eq!(f.reason, StartFailureReason::FullCloud);

    // RESTORE: the node takes work again, and boots what the evacuation stopped.
    c.send(&Payload::Restore(node_command(node)));
    c.stats(node, "READY after RESTORE, a and b active", |s| {
        s.status == NodeState::Ready && all_active(s, &[a, b])
    })
    .await;
    let d = u(0xd3);
    c.send(&start_payload(start(d, "debian")));
    c.stats(node, "d active", |s| all_active(s, &[d])).await;
    agent.stop().await;
    sched.stop.cancel();
}

/// An agent stopped and started again over the same state directory re-attaches to the sim
/// instances that still run and reports the one lost meanwhile (INSTANCE_DELETED). Its
/// certificate binds no UUID: the one kept in the state directory comes back.
#[tokio::test]
async fn a_restarted_agent_reattaches_and_reports_what_was_lost() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("debug,rustls=info")
        .with_test_writer()
        .try_init();
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = real_scheduler(&pki).await;
    let files = agent_files(&pki, Role::AGENT, None, dir.path());
    let state = dir.path().join("state");
    let mut c = controller(&pki, &sched.addr).await;
    let agent = start_agent(config(&files, &sched.addr, &state, &[]));
    let node = c
        .expect("the agent's first STATS", |m| match &m.payload {
            Payload::Stats(s) => Some(s.node.node_uuid),
            _ => None,
        })
        .await;
    let ids = [u(0xa4), u(0xb4), u(0xc4)];
    for i in ids {
        c.send(&start_payload(start(i, "debian")));
    }
    c.stats(node, "all three active", |s| all_active(s, &ids))
        .await;
    agent.stop().await;

    // While the agent is away, one instance goes (the others keep running, as VMs do).
    let sim = SimBackend::new(SimConfig {
        dir: Some(state.join("sim")),
        ..SimConfig::default()
    })
    .unwrap();
    assert_eq!(sim.counts(), (3, 3));
    sim.delete(ids[2]).await.unwrap();
    drop(sim);

    let agent = start_agent(config(&files, &sched.addr, &state, &[]));
    // Nothing of it is left on the node: INSTANCE_DELETED (not STOPPED: the node keeps nothing).
    c.expect("INSTANCE_DELETED of the lost one", |m| {
        event_from(m, node, Operand::InstanceDeleted, ids[2]).then_some(())
    })
    .await;
    let stats = c
        .stats(node, "the two re-attached, active", |s| {
            all_active(s, &ids[..2]) && state_in(s, ids[2]).is_none()
        })
        .await;
    assert_eq!(stats.instances.len(), 2);
    c.send(&delete(ids[0], node, false));
    c.expect("INSTANCE_DELETED of a re-attached instance", |m| {
        event_from(m, node, Operand::InstanceDeleted, ids[0]).then_some(())
    })
    .await;
    agent.stop().await;
    sched.stop.cancel();
}

/// The binary, killed with SIGKILL while its instances run, started again: its STATS lists
/// them (re-attached, active). Killed again in the middle of a burst of STARTs (records
/// written, instances booting): the next process reads every record, reports the instances
/// that never finished booting stopped, and keeps the others. A second process on the same
/// state directory is refused; SIGTERM stops the agent cleanly (exit 0).
#[tokio::test]
async fn after_kill_9_a_new_process_reattaches_its_instances() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = real_scheduler(&pki).await;
    let node = u(5);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let state = dir.path().join("state");
    let args = argv(&files, &sched.addr, &state, "cn", &[]);
    let mut c = controller(&pki, &sched.addr).await;
    let mut first = agent_binary(&args, &dir.path().join("first.log"));
    c.stats(node, "the first process's STATS", |_| true).await;
    let ids = [u(0xa5), u(0xb5), u(0xc5)];
    for i in ids {
        c.send(&start_payload(start(i, "debian")));
    }
    c.stats(node, "all active", |s| all_active(s, &ids)).await;
    first.signal(rustix::process::Signal::KILL);
    assert_eq!(first.exit_code().await, None, "killed by a signal");

    // Slow boots this time, to be killed in the middle of them.
    let slow = argv(
        &files,
        &sched.addr,
        &state,
        "cn",
        &["--sim-boot-delay", "3s"],
    );
    let mut second = agent_binary(&slow, &dir.path().join("second.log"));
    let stats = c
        .stats(node, "the second process's STATS, all active", |s| {
            all_active(s, &ids)
        })
        .await;
    assert_eq!(stats.instances.len(), 3);

    let (code, stderr) = run_binary(&args);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("another cumulo-agent"), "{stderr}");

    c.send(&delete(ids[0], node, false));
    c.expect("INSTANCE_DELETED", |m| {
        event_from(m, node, Operand::InstanceDeleted, ids[0]).then_some(())
    })
    .await;
    let burst: Vec<Uuid> = (0..20).map(|n| Uuid::from_u128(0xb0257 + n)).collect();
    for i in &burst {
        c.send(&start_payload(start(*i, "debian")));
    }
    // (Past the second process's earlier STATS: the third's are told apart by what they hold.)
    c.stats(node, "the burst admitted", |s| {
        burst.iter().all(|i| state_in(s, *i).is_some())
    })
    .await;
    // Kill once every burst instance has its record (STATS shows an instance pending as soon
    // as it is admitted, a moment before its record is durable): all of them are booting.
    let records = state.join("instances");
    let recorded = |i: &Uuid| records.join(format!("{i}.json")).exists();
    testkit::wait_until(T, "the burst's records", || {
        let all = burst.iter().all(recorded);
        async move { all }
    })
    .await;
    second.signal(rustix::process::Signal::KILL);
    assert_eq!(second.exit_code().await, None, "killed by a signal");

    let mut third = agent_binary(&args, &dir.path().join("third.log"));
    let (mut stopped, mut deleted) = (Vec::new(), Vec::new());
    let survivors = [ids[1], ids[2]];
    c.expect(
        "the third process's STATS: the survivors, nothing else",
        |m| {
            match &m.payload {
                Payload::InstanceStopped(e) => stopped.push(e.instance_uuid),
                Payload::InstanceDeleted(e) => deleted.push(e.instance_uuid),
                _ => {}
            }
            let s = stats_from(m, node)?;
            // A burst instance was booting when killed: kept powered off and reported stopped,
            // or, if the kill came before its backend made anything, forgotten and reported
            // deleted.
            let burst_off = burst.iter().all(|i| match state_in(s, *i) {
                Some(InstanceState::Exited) => stopped.contains(i),
                None => deleted.contains(i),
                Some(_) => false,
            });
            (burst_off && all_active(s, &survivors) && state_in(s, ids[0]).is_none()).then_some(())
        },
    )
    .await;
    third.signal(rustix::process::Signal::TERM);
    assert_eq!(third.exit_code().await, Some(0));
    sched.stop.cancel();
}

/// `cumulo-agent --help` names the subcommands and `--remote`; a subcommand named first is
/// parsed on its own (the daemon's environment variables, even broken ones, play no part).
#[test]
fn the_help_lists_the_subcommands_and_remote() {
    let help = Command::new(env!("CARGO_BIN_EXE_cumulo-agent"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    for named in [
        "clean-up-cncis",
        "check-libvirt",
        "--remote <URI>",
        "--network",
    ] {
        assert!(help.contains(named), "{named} in: {help}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cumulo-agent"))
        .args(["clean-up-cncis", "--state-dir"])
        .arg(dir.path())
        .env("CUMULO_AGENT_NETWORK", "no-such-network")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// A certificate without the role `--network` claims: the binary exits at once, status 1, with
/// one line naming the missing role; so does `--backend libvirt` with no libvirt to ask, and a
/// node endpoint whose port is taken. Usage errors exit 2.
#[tokio::test]
async fn a_certificate_without_the_claimed_role_is_refused_at_once() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Nothing listens there: the agent must not get as far as dialling.
    let nowhere = "localhost:9";
    for (roles, network, missing) in [
        (Role::AGENT, "nn", "netagent"),
        (Role::AGENT, "dual", "netagent"),
        (Role::NETAGENT, "cn", "agent"),
        (Role::NETAGENT, "none", "agent"),
        (Role::CONTROLLER, "dual", "agent|netagent"),
    ] {
        let files = agent_files(&pki, roles, None, &dir.path().join(network));
        let (code, stderr) = run_binary(&argv(&files, nowhere, &state, network, &[]));
        assert_eq!(code, Some(1), "{roles} / {network}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains(&format!("needs the {missing} role")),
            "{roles} / {network}: {stderr}"
        );
    }
    assert!(
        !state.exists(),
        "a refused agent leaves nothing behind in the state directory"
    );
    // The libvirt backend with no libvirt to ask: the agent cannot know which instances still
    // run, so it stops at once, with one line saying so.
    let files = agent_files(&pki, Role::DUAL, None, dir.path());
    let socket = dir.path().join("no-libvirtd.sock");
    let uri = format!("qemu:///system?socket={}", socket.display());
    let extra = ["--libvirt-uri", uri.as_str()];
    let mut args = argv(&files, nowhere, &state, "cn", &extra);
    let backend = args.iter().position(|a| a == "sim").unwrap();
    args[backend] = "libvirt".into();
    let error = failed_with_one_line(&args);
    assert!(
        error.contains("libvirt") && error.contains("unreachable"),
        "{error}"
    );
    // The node endpoint's port held by another process: the controller would reach that
    // process, so the agent stops at once, before it dials, with one line naming the port.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let mut args = argv(&files, nowhere, &state, "cn", &[]);
    let at = args.iter().position(|a| a == "--console-listen").unwrap();
    args[at + 1].clone_from(&taken);
    let error = failed_with_one_line(&args);
    assert!(
        error.contains(&format!("--console-listen {taken}")) && error.contains("cannot listen"),
        "{error}"
    );
    drop(holder);
    let mut args = argv(&files, nowhere, &state, "cn", &[]);
    args.push("--no-such-flag".into());
    assert_eq!(run_binary(&args).0, Some(2));
}

/// Runs the binary with `args`, which must exit with status 1 and one line of error (logs may
/// come before it); that line.
fn failed_with_one_line(args: &[String]) -> String {
    let (code, stderr) = run_binary(args);
    assert_eq!(code, Some(1), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cumulo-agent:"))
        .collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    errors[0].to_string()
}

/// The fake scheduler goes away and comes back on the same port: the agent reconnects and
/// announces itself again, its status first, then STATS with its instances, without waiting
/// for its stats interval (an hour here).
#[tokio::test]
async fn a_reconnect_re_announces_the_node_and_its_instances() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    // Two handles on one listening socket: the port stays ours between the two schedulers
    // (freed, it could become another connection's source port before the second binds).
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let kept = socket.try_clone().unwrap();
    let addr = format!("localhost:{}", socket.local_addr().unwrap().port());
    let mut fake = fake_scheduler(&pki, TcpListener::from_std(socket).unwrap()).await;
    let node = u(6);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let state = dir.path().join("state");
    let agent = start_agent(config(&files, &addr, &state, &["--stats-interval", "1h"]));
    fake.expect("the agent connects", |s| {
        matches!(s, Seen::Connected(u) if *u == node).then_some(())
    })
    .await;
    fake.stats(node, "the agent's first STATS", |_| true).await;
    let a = u(0xa6);
    fake.send(node, &start_payload(start(a, "debian")));
    fake.stats(node, "a active", |s| all_active(s, &[a])).await;
    fake.shut().await;

    // A new scheduler on the same port; meanwhile the agent's dials wait in the backlog.
    let mut fake = fake_scheduler(&pki, TcpListener::from_std(kept).unwrap()).await;
    fake.expect("the agent reconnects", |s| {
        matches!(s, Seen::Connected(u) if *u == node).then_some(())
    })
    .await;
    let m = fake.next_message().await;
    assert_eq!(m.frame.origin, node);
    let Payload::Ready(status) = m.payload else {
        panic!("the first frame is the node's status, not {:?}", m.payload)
    };
    assert_eq!(status.node_uuid, node);
    fake.stats(node, "a active, announced again", |s| all_active(s, &[a]))
        .await;
    agent.stop().await;
    fake.shut().await;
}
