//! The suite: off-host hosts, the operation queue, claims and fenced writes
//! ([`OperationQueue`](crate::OperationQueue)).

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use super::*;

/// A lease that does not run out during a test.
const LONG: Duration = Duration::from_secs(3600);

fn remote_host(store: &dyn Store, name: &str) -> RemoteHost {
    store
        .create_remote_host(NewRemoteHost {
            name: name.into(),
            libvirt_uri: format!("qemu+tcp://{name}/system"),
        })
        .unwrap()
}

fn enqueue(store: &dyn Store, host: Uuid, instance: Uuid, kind: OperationKind) -> Operation {
    store
        .enqueue_operation(NewOperation {
            host,
            instance,
            kind,
            payload: format!("{kind:?} {instance}").into_bytes(),
        })
        .unwrap()
}

fn token_of(op: &Operation) -> u64 {
    op.claim.as_ref().expect("a claim").token
}

fn is_fenced<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Fenced { .. }))
}

pub(crate) fn remote_host_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let b = remote_host(&store, "beta");
    let a = remote_host(&store, "alpha");
    assert_eq!(store.remote_host(b.id).unwrap(), b);
    assert_eq!(b.libvirt_uri, "qemu+tcp://beta/system");
    assert_eq!(store.remote_hosts().unwrap(), vec![a.clone(), b.clone()]);
    assert!(matches!(
        store.create_remote_host(NewRemoteHost {
            name: "alpha".into(),
            libvirt_uri: "qemu+tls://x/system".into(),
        }),
        Err(StoreError::Conflict(_))
    ));
    for bad in ["", "no-scheme", "://x", "qemu+tcp://a b/system"] {
        let r = store.create_remote_host(NewRemoteHost {
            name: "gamma".into(),
            libvirt_uri: bad.into(),
        });
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad:?}: {r:?}");
    }
    // A host with an unfinished operation stays; once it is finished, the host may go.
    let op = enqueue(&store, a.id, Uuid::new_v4(), OperationKind::Stop);
    assert!(matches!(
        store.delete_remote_host(a.id),
        Err(StoreError::Conflict(_))
    ));
    let claimed = store.claim_operation("r1", LONG).unwrap().unwrap();
    assert_eq!(claimed.id, op.id);
    assert!(matches!(
        store.delete_remote_host(a.id),
        Err(StoreError::Conflict(_))
    ));
    store
        .fail_operation(op.id, token_of(&claimed), "no such domain")
        .unwrap();
    store.delete_remote_host(a.id).unwrap();
    assert!(is_not_found(store.remote_host(a.id)));
    assert!(is_not_found(store.delete_remote_host(a.id)));
    assert_eq!(store.remote_hosts().unwrap(), vec![b.clone()]);
    // The finished operation is kept; a new one needs an existing host.
    assert_eq!(
        store.operation(op.id).unwrap().state,
        OperationState::Failed
    );
    assert!(is_not_found(store.enqueue_operation(NewOperation {
        host: a.id,
        instance: Uuid::new_v4(),
        kind: OperationKind::Start,
        payload: Vec::new(),
    })));
    // The name is free again.
    remote_host(&store, "alpha");
}

pub(crate) fn operations_are_claimed_in_fifo_order<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    assert_eq!(store.claim_operation("r1", LONG).unwrap(), None);
    let h1 = remote_host(&store, "h1");
    let h2 = remote_host(&store, "h2");
    let queued: Vec<Operation> = [
        (h1.id, OperationKind::Start),
        (h2.id, OperationKind::Stop),
        (h1.id, OperationKind::Delete),
    ]
    .into_iter()
    .map(|(host, kind)| enqueue(&store, host, Uuid::new_v4(), kind))
    .collect();
    for op in &queued {
        assert_eq!(op.state, OperationState::Queued);
        assert_eq!(op.claim, None);
        assert_eq!(op.result, None);
        assert_eq!(store.operation(op.id).unwrap(), *op);
    }
    assert!(matches!(
        store.claim_operation(" ", LONG),
        Err(StoreError::Invalid(_))
    ));
    // Reopening keeps the queue.
    drop(store);
    let store = fx.open();
    let all = store.operations(OperationFilter::default()).unwrap();
    assert_eq!(all, queued);
    let on_h1 = store
        .operations(OperationFilter {
            state: None,
            host: Some(h1.id),
        })
        .unwrap();
    assert_eq!(on_h1, vec![queued[0].clone(), queued[2].clone()]);

    let mut last_token = 0;
    for (n, want) in queued.iter().enumerate() {
        let owner = format!("replica-{n}");
        let got = store.claim_operation(&owner, LONG).unwrap().unwrap();
        assert_eq!(got.id, want.id, "claim {n} takes the oldest");
        assert_eq!(got.state, OperationState::Claimed);
        assert_eq!(got.payload, want.payload);
        assert_eq!(got.kind, want.kind);
        let claim = got.claim.clone().unwrap();
        assert_eq!(claim.owner, owner);
        assert!(claim.token > last_token, "tokens increase");
        assert!(claim.expires > SystemTime::now() + LONG / 2);
        last_token = claim.token;
        assert_eq!(store.operation(got.id).unwrap(), got);
    }
    assert_eq!(store.claim_operation("r1", LONG).unwrap(), None);
    let claimed = store
        .operations(OperationFilter {
            state: Some(OperationState::Claimed),
            host: None,
        })
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(
        store
            .operations(OperationFilter {
                state: Some(OperationState::Queued),
                host: None,
            })
            .unwrap()
            .is_empty()
    );
}

pub(crate) fn parallel_claims_take_each_operation_once<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let total = 24;
    for _ in 0..total {
        enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Start);
    }
    let claims: Vec<Operation> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|n| {
                let store = &store;
                s.spawn(move || {
                    let owner = format!("replica-{n}");
                    let mut mine = Vec::new();
                    while let Some(op) = store.claim_operation(&owner, LONG).unwrap() {
                        mine.push(op);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(claims.len(), total, "every operation claimed");
    let ids: HashSet<Uuid> = claims.iter().map(|op| op.id).collect();
    assert_eq!(ids.len(), total, "no operation claimed twice");
    let tokens: HashSet<u64> = claims.iter().map(token_of).collect();
    assert_eq!(tokens.len(), total, "every claim has its own token");
    for op in &claims {
        let done = store.complete_operation(op.id, token_of(op), "ok").unwrap();
        assert_eq!(done.state, OperationState::Done);
    }
    let done = store
        .operations(OperationFilter {
            state: Some(OperationState::Done),
            host: Some(host.id),
        })
        .unwrap();
    assert_eq!(done.len(), total);
}

pub(crate) fn batch_claims_take_each_operation_once_in_instance_order<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let other = remote_host(&store, "other");
    // Forty instances with a start then a stop each, and five starts for another host.
    let mut starts = std::collections::HashMap::new();
    for _ in 0..40 {
        let instance = Uuid::new_v4();
        let start = enqueue(&store, host.id, instance, OperationKind::Start);
        enqueue(&store, host.id, instance, OperationKind::Stop);
        starts.insert(instance, start.id);
    }
    for _ in 0..5 {
        enqueue(&store, other.id, Uuid::new_v4(), OperationKind::Start);
    }
    assert_eq!(store.unfinished_operations(host.id).unwrap(), 80);
    assert_eq!(store.unfinished_operations(other.id).unwrap(), 5);
    // One batch: at most MAX_CLAIM_BATCH, of this host, one per instance, each its start.
    let first = store
        .claim_operations_on("a", LONG, Some(host.id), 1000)
        .unwrap();
    assert_eq!(first.len(), MAX_CLAIM_BATCH);
    let instances: HashSet<Uuid> = first.iter().map(|op| op.instance).collect();
    assert_eq!(instances.len(), first.len(), "one operation per instance");
    for op in &first {
        assert_eq!(op.host, host.id);
        assert_eq!(op.kind, OperationKind::Start);
        assert_eq!(op.state, OperationState::Claimed);
        assert_eq!(op.claim.as_ref().unwrap().owner, "a");
        assert_eq!(store.operation(op.id).unwrap(), *op);
    }
    // The rest, by six claimers in batches of eight, each finishing what it claims at once: every
    // operation claimed once, and an instance's stop only after its start is done.
    let rest: Vec<Operation> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|n| {
                let (store, starts, host) = (&store, &starts, host.id);
                s.spawn(move || {
                    let owner = format!("replica-{n}");
                    let mut mine = Vec::new();
                    // Until every operation is finished (the stops of claimer "a"'s instances
                    // are free only once it finished their starts), within a deadline.
                    let deadline = std::time::Instant::now() + Duration::from_secs(60);
                    while store.unfinished_operations(host).unwrap() > 0 {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "the queue never drained"
                        );
                        let batch = store
                            .claim_operations_on(&owner, LONG, Some(host), 8)
                            .unwrap();
                        if batch.is_empty() {
                            std::thread::yield_now();
                        }
                        for op in batch {
                            if op.kind == OperationKind::Stop {
                                let start = store.operation(starts[&op.instance]).unwrap();
                                assert_eq!(start.state, OperationState::Done, "stop after start");
                            }
                            store
                                .complete_operation(op.id, token_of(&op), "ok")
                                .unwrap();
                            mine.push(op);
                        }
                    }
                    mine
                })
            })
            .collect();
        // Claimer "a" finishes its batch meanwhile, which frees those instances' stops.
        for op in &first {
            store.complete_operation(op.id, token_of(op), "ok").unwrap();
        }
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let ids: HashSet<Uuid> = rest.iter().map(|op| op.id).collect();
    assert_eq!(ids.len(), rest.len(), "no operation claimed twice");
    assert_eq!(rest.len() + first.len(), 80, "every operation claimed");
    assert!(rest.iter().all(|op| op.host == host.id));
    assert_eq!(store.unfinished_operations(host.id).unwrap(), 0);
    assert_eq!(store.unfinished_operations(other.id).unwrap(), 5);
    // The other host's: a claim of no host takes them; `max` 0 counts as one.
    let one = store.claim_operations_on("b", LONG, None, 0).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].host, other.id);
}

pub(crate) fn an_expired_claim_is_taken_over_and_the_old_token_fenced<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let op = enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Start);
    // A lease of zero has run out as soon as it is taken: the replica "died".
    let first = store
        .claim_operation("slow", Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(first.id, op.id);
    let old = token_of(&first);
    let second = store.claim_operation("fast", LONG).unwrap().unwrap();
    assert_eq!(second.id, op.id, "the expired claim is taken over");
    let new = token_of(&second);
    assert!(new > old, "the takeover's token {new} is above {old}");
    assert_eq!(second.claim.as_ref().unwrap().owner, "fast");
    // A live claim is not taken.
    assert_eq!(store.claim_operation("third", LONG).unwrap(), None);
    // The slow replica's late writes are refused.
    assert!(is_fenced(store.renew_claim(op.id, old, LONG)));
    assert!(is_fenced(store.complete_operation(op.id, old, "late")));
    assert!(is_fenced(store.fail_operation(op.id, old, "late")));
    assert_eq!(store.operation(op.id).unwrap(), second);
    let err = store.complete_operation(op.id, old, "late").unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
    // The new holder completes it, once.
    let done = store
        .complete_operation(op.id, new, "domain running")
        .unwrap();
    assert_eq!(done.state, OperationState::Done);
    assert_eq!(done.result.as_deref(), Some("domain running"));
    assert_eq!(token_of(&done), new);
    assert_eq!(done.claim.as_ref().unwrap().owner, "fast");
    assert_eq!(store.operation(op.id).unwrap(), done);
    assert!(is_fenced(store.complete_operation(op.id, new, "again")));
    assert!(is_fenced(store.fail_operation(op.id, new, "again")));
    assert!(is_fenced(store.renew_claim(op.id, new, LONG)));
    assert!(is_fenced(store.complete_operation(op.id, old, "late")));
    assert_eq!(store.claim_operation("third", LONG).unwrap(), None);
    assert!(is_not_found(store.complete_operation(
        Uuid::new_v4(),
        new,
        "x"
    )));
}

pub(crate) fn a_renewed_claim_is_kept<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let op = enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Stop);
    let claimed = store
        .claim_operation("r1", Duration::ZERO)
        .unwrap()
        .unwrap();
    let token = token_of(&claimed);
    // Run out but not taken over: still the holder's, and renewing keeps the token.
    let renewed = store.renew_claim(op.id, token, LONG).unwrap();
    assert_eq!(token_of(&renewed), token);
    assert!(renewed.claim.as_ref().unwrap().expires > claimed.claim.unwrap().expires);
    assert_eq!(store.operation(op.id).unwrap(), renewed);
    assert_eq!(store.claim_operation("r2", LONG).unwrap(), None);
    assert!(is_fenced(store.renew_claim(op.id, token + 1000, LONG)));
    let failed = store
        .fail_operation(op.id, token, "libvirt refused")
        .unwrap();
    assert_eq!(failed.state, OperationState::Failed);
    assert_eq!(failed.result.as_deref(), Some("libvirt refused"));
}

pub(crate) fn one_operation_per_instance_at_a_time<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let (x, y) = (Uuid::new_v4(), Uuid::new_v4());
    let stop_x = enqueue(&store, host.id, x, OperationKind::Stop);
    let delete_x = enqueue(&store, host.id, x, OperationKind::Delete);
    let start_y = enqueue(&store, host.id, y, OperationKind::Start);
    let first = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(first.id, stop_x.id);
    let second = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(second.id, start_y.id, "x's delete waits for its stop");
    assert_eq!(store.claim_operation("r", LONG).unwrap(), None);
    store
        .complete_operation(first.id, token_of(&first), "stopped")
        .unwrap();
    let third = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(third.id, delete_x.id);
}

pub(crate) fn reports_in_a_batch_are_each_written_or_refused_on_their_own<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let (tenant, workload) = tenant_and_workload(&store, "t", Quota::default(), 24);
    // Twenty instances (more than one etcd batch), each with a claimed start.
    let mut claimed = Vec::new();
    for n in 0..20 {
        let instance = store
            .create_instance(new_instance(&tenant, &workload, &format!("vm{n}")))
            .unwrap();
        enqueue(&store, host.id, instance.id, OperationKind::Start);
        claimed.extend(
            store
                .claim_operations_on("r", LONG, Some(host.id), 1)
                .unwrap(),
        );
    }
    assert_eq!(claimed.len(), 20);
    let active = InstanceWrite::Update(
        FieldMask::of(["state", "placement.node"]).unwrap(),
        InstanceFacts {
            state: InstanceState::Active,
            placement: Placement {
                node: Some(host.id),
                cnci: None,
            },
            fault: None,
        },
    );
    let done = Some((OperationState::Done, "running".to_string()));
    let mut reports: Vec<FencedWrite> = claimed
        .iter()
        .map(|op| FencedWrite {
            id: op.id,
            token: token_of(op),
            write: active.clone(),
            finish: done.clone(),
        })
        .collect();
    // Report 3 names a stale token; report 5 does not finish; report 7's instance is gone
    // (deleted under the replica); report 9 removes its instance.
    reports[3].token += 1000;
    reports[5].finish = None;
    store
        .delete_instance(Scope::All, claimed[7].instance)
        .unwrap();
    reports[9].write = InstanceWrite::Remove;
    let results = store.fenced_writes(&reports);
    assert_eq!(results.len(), 20);
    for (n, (op, result)) in claimed.iter().zip(&results).enumerate() {
        match n {
            3 => assert!(is_fenced(result.clone()), "{result:?}"),
            5 => {
                let op = result.clone().unwrap();
                assert_eq!(op.state, OperationState::Claimed);
                assert_eq!(token_of(&op), token_of(&claimed[5]));
            }
            7 => assert!(
                matches!(result, Err(StoreError::NotFound { .. })),
                "{result:?}"
            ),
            9 => {
                assert_eq!(result.clone().unwrap().state, OperationState::Done);
                assert!(store.instance(Scope::All, op.instance).is_err());
            }
            _ => {
                let written = result.clone().unwrap();
                assert_eq!(written.state, OperationState::Done);
                assert_eq!(written.result.as_deref(), Some("running"));
                let i = store.instance(Scope::All, op.instance).unwrap();
                assert_eq!((i.state, i.node), (InstanceState::Active, Some(host.id)));
            }
        }
    }
    // What was refused wrote nothing: those operations are still claimed, and can be finished.
    for n in [3, 7] {
        assert_eq!(
            store.operation(claimed[n].id).unwrap().state,
            OperationState::Claimed
        );
    }
    store
        .complete_operation(claimed[3].id, token_of(&claimed[3]), "ok")
        .unwrap();
    assert_eq!(store.unfinished_operations(host.id).unwrap(), 2);
}

pub(crate) fn fenced_writes_apply_masked_fields_and_refuse_stale_tokens<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let (tenant, workload) = tenant_and_workload(&store, "t", Quota::default(), 24);
    let instance = store
        .create_instance(new_instance(&tenant, &workload, "vm"))
        .unwrap();
    let cnci = Uuid::new_v4();
    store
        .update_instance(
            Scope::All,
            instance.id,
            instance.version,
            InstanceChange {
                cnci: Some(Some(cnci)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    let op = enqueue(&store, host.id, instance.id, OperationKind::Start);
    let slow = store
        .claim_operation("slow", Duration::ZERO)
        .unwrap()
        .unwrap();
    let old = token_of(&slow);
    // A masked update: only the state and the node; the CNCI stays.
    let facts = InstanceFacts {
        state: InstanceState::Active,
        placement: Placement {
            node: Some(host.id),
            cnci: None,
        },
        fault: None,
    };
    let mask = FieldMask::of(["state", "placement.node"]).unwrap();
    let still = store
        .fenced_write(
            op.id,
            old,
            &InstanceWrite::Update(mask.clone(), facts.clone()),
            None,
        )
        .unwrap();
    assert_eq!(still.state, OperationState::Claimed);
    assert_eq!(token_of(&still), old);
    let now = store.instance(Scope::All, instance.id).unwrap();
    assert_eq!(now.state, InstanceState::Active);
    assert_eq!(now.node, Some(host.id));
    assert_eq!(now.cnci, Some(cnci), "a field outside the mask is kept");
    // Another replica takes the operation over (the lease ran out).
    let fast = store.claim_operation("fast", LONG).unwrap().unwrap();
    let new = token_of(&fast);
    let exited = InstanceFacts {
        state: InstanceState::Exited,
        placement: Placement::default(),
        fault: None,
    };
    // The stale replica's late write changes nothing.
    let late = InstanceWrite::Update(FieldMask::all(), exited.clone());
    assert!(is_fenced(store.fenced_write(
        op.id,
        old,
        &late,
        Some((OperationState::Done, "late"))
    )));
    assert!(is_fenced(store.fenced_write(
        op.id,
        old,
        &InstanceWrite::Remove,
        None
    )));
    assert_eq!(store.instance(Scope::All, instance.id).unwrap(), now);
    // The parent field means the whole sub-record: placement cleared, node and CNCI.
    let parent = FieldMask::of(["state", "placement"]).unwrap();
    let done = store
        .fenced_write(
            op.id,
            new,
            &InstanceWrite::Update(parent, exited),
            Some((OperationState::Done, "stopped")),
        )
        .unwrap();
    assert_eq!(done.state, OperationState::Done);
    assert_eq!(done.result.as_deref(), Some("stopped"));
    let after = store.instance(Scope::All, instance.id).unwrap();
    assert_eq!(after.state, InstanceState::Exited);
    assert_eq!((after.node, after.cnci), (None, None));
    // Finished: even the right token is refused now.
    assert!(is_fenced(store.fenced_write(
        op.id,
        new,
        &InstanceWrite::Nothing,
        None
    )));
    // A removal under a live claim takes the record; a second one (instance gone) is fine.
    let del = enqueue(&store, host.id, instance.id, OperationKind::Delete);
    let claim = store.claim_operation("fast", LONG).unwrap().unwrap();
    assert_eq!(claim.id, del.id);
    let t = token_of(&claim);
    store
        .fenced_write(del.id, t, &InstanceWrite::Remove, None)
        .unwrap();
    assert!(is_not_found(store.instance(Scope::All, instance.id)));
    let gone = store
        .fenced_write(
            del.id,
            t,
            &InstanceWrite::Remove,
            Some((OperationState::Done, "deleted")),
        )
        .unwrap();
    assert_eq!(gone.state, OperationState::Done);
    // A replica of one host takes only that host's operations.
    let other = remote_host(&store, "other");
    let theirs = enqueue(&store, other.id, Uuid::new_v4(), OperationKind::Start);
    assert_eq!(
        store.claim_operation_on("r", LONG, Some(host.id)).unwrap(),
        None
    );
    let got = store
        .claim_operation_on("r", LONG, Some(other.id))
        .unwrap()
        .unwrap();
    assert_eq!(got.id, theirs.id);
}

/// Launcher credentials: a clear private key is refused; a sealed one is stored and read back as
/// it was, and nothing in the storage holds the clear key.
pub(crate) fn launcher_keys_are_stored_sealed_only<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "edge");
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAsecretsecret\n-----END PRIVATE KEY-----\n";
    let host_key = crate::sealed::MasterKey::derive(b"the CA key").host_key(host.id);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let creds = |sealed_key: &str| LauncherCreds {
        host: host.id,
        cert_pem: cert.into(),
        sealed_key: sealed_key.into(),
        ca_pem: cert.into(),
        not_after: now + LONG,
        issued: now,
    };
    for refused in [key, "", "sealed:v1:nonsense"] {
        assert!(
            matches!(
                store.put_launcher_creds(creds(refused)),
                Err(StoreError::Invalid(_))
            ),
            "{refused}"
        );
    }
    assert!(is_not_found(store.launcher_creds(host.id)));
    let sealed = creds(&host_key.seal(cert, key).unwrap());
    store.put_launcher_creds(sealed.clone()).unwrap();
    let read = store.launcher_creds(host.id).unwrap();
    assert_eq!(read, sealed);
    assert_eq!(
        host_key
            .open(read.host, &read.cert_pem, &read.sealed_key)
            .unwrap(),
        key
    );
    drop(store);
    let raw = String::from_utf8_lossy(&fx.raw()).into_owned();
    assert!(
        raw.contains("MIIBcert"),
        "the storage dump holds the record"
    );
    assert!(!raw.contains("PRIVATE KEY") && !raw.contains("secretsecret"));
}
