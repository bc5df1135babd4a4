//! The suite: tenants' volumes ([`VolumeStore`](crate::VolumeStore)): scopes, limits (the
//! caller's defaults, and a tenant's own quota), changes, attachments, and what a tenant's
//! deletion does with them.

use std::time::UNIX_EPOCH;

use uuid::Uuid;

use super::*;

const NO_LIMITS: VolumeLimits = VolumeLimits {
    volumes: None,
    gigabytes: None,
};

fn new_volume(owner: Uuid, name: &str, size_gb: u32) -> NewVolume {
    NewVolume {
        owner,
        name: name.into(),
        description: String::new(),
        size_gb,
        image: None,
        bootable: false,
    }
}

fn tenant(store: &dyn Store, name: &str) -> Tenant {
    tenant_with(store, name, Quota::default(), 24)
}

fn quota_exceeded(what: QuotaKind, limit: u64) -> StoreError {
    StoreError::QuotaExceeded { what, limit }
}

fn conflict_naming<T: std::fmt::Debug>(r: Result<T>, word: &str) {
    match r {
        Err(StoreError::Conflict(m)) => assert!(m.contains(word), "{m:?} names no {word:?}"),
        other => panic!("expected a conflict naming {word:?}, got {other:?}"),
    }
}

/// `volumes` in listing order: by creation time (milliseconds: several may share one), then id.
fn by_creation(mut volumes: Vec<Volume>) -> Vec<Volume> {
    volumes.sort_by_key(|v| (v.created, v.id));
    volumes
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Invalid(_)))
}

pub(crate) fn volume_crud<F: Fixture>() {
    let fx = F::new();
    let (acme, a1, a2, b1) = {
        let store = fx.open();
        let acme = tenant(&store, "acme");
        let beta = tenant(&store, "beta");
        let image = store
            .create_image(NewImage {
                owner: None,
                name: "debian".into(),
                kind: ImageKind::Qcow2,
                reference: "images/debian.qcow2".into(),
            })
            .unwrap();
        let a1 = store
            .create_volume(new_volume(acme.id, "", 1), NO_LIMITS)
            .unwrap();
        assert_eq!((a1.owner, a1.name.as_str(), a1.size_gb), (acme.id, "", 1));
        assert_eq!(a1.status, VolumeStatus::Available);
        assert_eq!((a1.node, &a1.attachment, a1.image), (None, &None, None));
        assert_eq!(a1.created, a1.updated);
        let from_image = NewVolume {
            description: "d".repeat(Volume::MAX_TEXT),
            image: Some(image.id),
            bootable: true,
            ..new_volume(acme.id, &"n".repeat(Volume::MAX_TEXT), 20)
        };
        let a2 = store.create_volume(from_image, NO_LIMITS).unwrap();
        assert_eq!(a2.status, VolumeStatus::Available);
        assert_eq!((a2.image, a2.bootable), (Some(image.id), true));
        let b1 = store
            .create_volume(new_volume(beta.id, "b1", 3), NO_LIMITS)
            .unwrap();
        // Each tenant sees its own; another tenant's are not found, to change or delete too.
        for scope in [Scope::Tenant(acme.id), Scope::All] {
            assert_eq!(store.volume(scope, a2.id).unwrap(), a2);
        }
        assert_eq!(
            store.volumes(Scope::Tenant(acme.id)).unwrap(),
            by_creation(vec![a1.clone(), a2.clone()])
        );
        assert_eq!(
            store.volumes(Scope::Tenant(beta.id)).unwrap(),
            vec![b1.clone()]
        );
        let other = Scope::Tenant(beta.id);
        assert!(is_not_found(store.volume(other, a1.id)));
        let rename = VolumeChange {
            name: Some("mine".into()),
            ..VolumeChange::default()
        };
        assert!(is_not_found(
            store.change_volume(other, a1.id, rename, NO_LIMITS)
        ));
        assert!(is_not_found(store.delete_volume(other, a1.id)));
        assert!(is_not_found(store.volume(Scope::All, Uuid::new_v4())));
        assert!(
            store
                .volumes(Scope::Tenant(Uuid::new_v4()))
                .unwrap()
                .is_empty()
        );
        // An image the tenant does not see, and a tenant that is none.
        let private = store
            .create_image(NewImage {
                owner: Some(beta.id),
                name: "p".into(),
                kind: ImageKind::Raw,
                reference: "p.raw".into(),
            })
            .unwrap();
        let hidden = NewVolume {
            image: Some(private.id),
            ..new_volume(acme.id, "x", 1)
        };
        assert!(is_not_found(store.create_volume(hidden, NO_LIMITS)));
        assert!(is_not_found(
            store.create_volume(new_volume(Uuid::new_v4(), "x", 1), NO_LIMITS)
        ));
        // Bad input.
        let long = "x".repeat(Volume::MAX_TEXT + 1);
        assert!(is_invalid(
            store.create_volume(new_volume(acme.id, "x", 0), NO_LIMITS)
        ));
        assert!(is_invalid(
            store.create_volume(new_volume(acme.id, &long, 1), NO_LIMITS)
        ));
        let described = NewVolume {
            description: long.clone(),
            ..new_volume(acme.id, "x", 1)
        };
        assert!(is_invalid(store.create_volume(described, NO_LIMITS)));
        let renamed = VolumeChange {
            name: Some(long),
            ..VolumeChange::default()
        };
        assert!(is_invalid(store.change_volume(
            Scope::All,
            a1.id,
            renamed,
            NO_LIMITS
        )));
        assert_eq!(store.volumes(Scope::Tenant(acme.id)).unwrap().len(), 2);
        (acme, a1, a2, b1)
    };
    // Across a reopen: every volume, by creation time then id.
    let store = fx.open();
    assert_eq!(
        store.volumes(Scope::All).unwrap(),
        by_creation(vec![a1.clone(), a2, b1])
    );
    store.delete_volume(Scope::Tenant(acme.id), a1.id).unwrap();
    assert!(is_not_found(store.volume(Scope::All, a1.id)));
    assert!(is_not_found(store.delete_volume(Scope::All, a1.id)));
    assert_eq!(store.volumes(Scope::All).unwrap().len(), 2);
}

pub(crate) fn volume_quotas_count_volumes_and_gigabytes<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (0, 0));
    assert!(is_not_found(store.tenant_volume_usage(Uuid::new_v4())));
    // Two volumes at most: the second is exactly at the limit.
    let two = VolumeLimits {
        volumes: Some(2),
        gigabytes: None,
    };
    let v1 = store
        .create_volume(new_volume(acme.id, "v1", 4), two)
        .unwrap();
    store
        .create_volume(new_volume(acme.id, "v2", 6), two)
        .unwrap();
    assert_eq!(
        store.create_volume(new_volume(acme.id, "v3", 1), two),
        Err(quota_exceeded(QuotaKind::Volumes, 2))
    );
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (2, 10));
    // 12 GiB at most: 10 held, 2 more is exactly at the limit, 1 more is past it.
    let twelve = VolumeLimits {
        volumes: None,
        gigabytes: Some(12),
    };
    assert_eq!(
        store.create_volume(new_volume(acme.id, "big", 3), twelve),
        Err(quota_exceeded(QuotaKind::Gigabytes, 12))
    );
    let v3 = store
        .create_volume(new_volume(acme.id, "v3", 2), twelve)
        .unwrap();
    assert_eq!(
        store.create_volume(new_volume(acme.id, "v4", 1), twelve),
        Err(quota_exceeded(QuotaKind::Gigabytes, 12))
    );
    // Growth counts against the GiB too; staying the same size always fits.
    let grow = |size| VolumeChange {
        size_gb: Some(size),
        ..VolumeChange::default()
    };
    assert_eq!(
        store.change_volume(Scope::All, v1.id, grow(5), twelve),
        Err(quota_exceeded(QuotaKind::Gigabytes, 12))
    );
    let tight = VolumeLimits {
        volumes: Some(1),
        gigabytes: Some(1),
    };
    assert_eq!(
        store
            .change_volume(Scope::All, v1.id, grow(4), tight)
            .unwrap()
            .size_gb,
        4
    );
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (3, 12));
    // A deletion gives its GiB back.
    store.delete_volume(Scope::All, v3.id).unwrap();
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (2, 10));
    let grown = store
        .change_volume(Scope::Tenant(acme.id), v1.id, grow(6), twelve)
        .unwrap();
    assert_eq!(grown.size_gb, 6);
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (2, 12));
    // Another tenant's volumes count for it alone.
    let beta = tenant(&store, "beta");
    store
        .create_volume(new_volume(beta.id, "b", 12), twelve)
        .unwrap();
    assert_eq!(store.tenant_volume_usage(beta.id).unwrap(), (1, 12));
}

pub(crate) fn volume_changes_expect_a_status_grow_and_set_the_node_once<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    let v = store
        .create_volume(new_volume(acme.id, "v", 2), NO_LIMITS)
        .unwrap();
    let change = |c: VolumeChange| store.change_volume(Scope::Tenant(acme.id), v.id, c, NO_LIMITS);
    // The status it expects, or a conflict naming the status it is in.
    let extending = VolumeChange {
        expect: Some(VolumeStatus::InUse),
        status: Some(VolumeStatus::Extending),
        ..VolumeChange::default()
    };
    conflict_naming(change(extending.clone()), "available");
    let extending = VolumeChange {
        expect: Some(VolumeStatus::Available),
        ..extending
    };
    let changed = change(extending).unwrap();
    assert_eq!(changed.status, VolumeStatus::Extending);
    assert!(changed.updated >= v.updated);
    // It only grows.
    let size = |gb| VolumeChange {
        size_gb: Some(gb),
        ..VolumeChange::default()
    };
    assert!(is_invalid(change(size(1))));
    assert_eq!(change(size(2)).unwrap().size_gb, 2);
    assert_eq!(change(size(3)).unwrap().size_gb, 3);
    // Its node is set once: the same again is taken, another is a conflict.
    let (n1, n2) = (Uuid::new_v4(), Uuid::new_v4());
    let on = |node| VolumeChange {
        node: Some(node),
        ..VolumeChange::default()
    };
    assert_eq!(change(on(Some(n1))).unwrap().node, Some(n1));
    assert_eq!(change(on(Some(n1))).unwrap().node, Some(n1));
    conflict_naming(change(on(Some(n2))), &n1.to_string());
    // The rest of the fields; what failed changed nothing.
    let renamed = change(VolumeChange {
        name: Some("data".into()),
        description: Some("logs".into()),
        bootable: Some(true),
        status: Some(VolumeStatus::Available),
        ..VolumeChange::default()
    })
    .unwrap();
    assert_eq!(
        (renamed.name.as_str(), renamed.description.as_str()),
        ("data", "logs")
    );
    assert_eq!((renamed.size_gb, renamed.node), (3, Some(n1)));
    assert!(renamed.bootable);
    assert_eq!(store.volume(Scope::All, v.id).unwrap(), renamed);
    assert_eq!(renamed.created, v.created);
}

pub(crate) fn an_attached_volume_is_not_deleted_nor_its_tenant<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    let v = store
        .create_volume(new_volume(acme.id, "v", 1), NO_LIMITS)
        .unwrap();
    let attachment = VolumeAttachment {
        id: Uuid::new_v4(),
        instance: Uuid::new_v4(),
        device: "/dev/vdb".into(),
        attached: UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
        delete_on_termination: true,
    };
    let attach = VolumeChange {
        expect: Some(VolumeStatus::Available),
        status: Some(VolumeStatus::InUse),
        attachment: Some(Some(attachment.clone())),
        ..VolumeChange::default()
    };
    let attached = store
        .change_volume(Scope::All, v.id, attach.clone(), NO_LIMITS)
        .unwrap();
    assert_eq!(attached.status, VolumeStatus::InUse);
    assert_eq!(attached.attachment, Some(attachment.clone()));
    assert_eq!(store.volume(Scope::All, v.id).unwrap(), attached);
    // A second attachment while it has one is refused.
    let another = VolumeChange {
        attachment: Some(Some(VolumeAttachment {
            id: Uuid::new_v4(),
            ..attachment.clone()
        })),
        ..VolumeChange::default()
    };
    conflict_naming(
        store.change_volume(Scope::All, v.id, another, NO_LIMITS),
        &attachment.instance.to_string(),
    );
    conflict_naming(
        store.delete_volume(Scope::Tenant(acme.id), v.id),
        "attached",
    );
    // Its tenant is not deleted while it has volumes.
    conflict_naming(store.delete_tenant(acme.id), "volumes");
    let detach = VolumeChange {
        expect: Some(VolumeStatus::InUse),
        status: Some(VolumeStatus::Available),
        attachment: Some(None),
        ..VolumeChange::default()
    };
    let detached = store
        .change_volume(Scope::Tenant(acme.id), v.id, detach, NO_LIMITS)
        .unwrap();
    assert_eq!(
        (detached.status, detached.attachment),
        (VolumeStatus::Available, None)
    );
    conflict_naming(store.delete_tenant(acme.id), "volumes");
    store.delete_volume(Scope::Tenant(acme.id), v.id).unwrap();
    assert!(is_not_found(store.volume(Scope::All, v.id)));
    store.delete_tenant(acme.id).unwrap();
    assert!(store.volumes(Scope::All).unwrap().is_empty());
}

pub(crate) fn parallel_volume_creates_respect_the_limits<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    let beta = tenant(&store, "beta");
    // acme: at most 5 volumes; beta: at most 7 GiB, in 2 GiB volumes (3 fit).
    let limits = |t: Uuid| {
        if t == acme.id {
            VolumeLimits {
                volumes: Some(5),
                gigabytes: None,
            }
        } else {
            VolumeLimits {
                volumes: None,
                gigabytes: Some(7),
            }
        }
    };
    let results: Vec<(Uuid, Result<Volume>)> = in_parallel(6, |n| {
        let t = if n % 2 == 0 { acme.id } else { beta.id };
        (0..3)
            .map(|k| {
                let new = new_volume(t, &format!("v-{n}-{k}"), 2);
                (t, store.create_volume(new, limits(t)))
            })
            .collect()
    });
    for (tenant, made, what, limit) in [
        (acme.id, 5, QuotaKind::Volumes, 5),
        (beta.id, 3, QuotaKind::Gigabytes, 7),
    ] {
        let mine: Vec<_> = results.iter().filter(|(t, _)| *t == tenant).collect();
        assert_eq!(mine.iter().filter(|(_, r)| r.is_ok()).count(), made);
        for (_, r) in &mine {
            if let Err(e) = r {
                assert_eq!(*e, quota_exceeded(what, limit));
            }
        }
        let listed = store.volumes(Scope::Tenant(tenant)).unwrap().len();
        assert_eq!(listed, made);
    }
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (5, 10));
    assert_eq!(store.tenant_volume_usage(beta.id).unwrap(), (3, 6));
}

fn limits(volumes: Option<u32>, gigabytes: Option<u64>) -> VolumeLimits {
    VolumeLimits { volumes, gigabytes }
}

pub(crate) fn a_tenants_own_volume_quota_replaces_the_defaults<F: Fixture>() {
    let fx = F::new();
    let acme = {
        let store = fx.open();
        let acme = tenant(&store, "acme");
        let create = |name: &str, size, defaults| {
            store.create_volume(new_volume(acme.id, name, size), defaults)
        };
        let grow = |id, size, defaults| {
            let change = VolumeChange {
                size_gb: Some(size),
                ..VolumeChange::default()
            };
            store.change_volume(Scope::Tenant(acme.id), id, change, defaults)
        };
        // Until one is set: the defaults, whatever they are.
        let defaults = limits(Some(3), Some(10));
        assert_eq!(store.volume_quota(acme.id, defaults).unwrap(), defaults);
        assert_eq!(store.volume_quota(acme.id, NO_LIMITS).unwrap(), NO_LIMITS);
        assert!(is_not_found(store.volume_quota(Uuid::new_v4(), defaults)));
        assert!(is_not_found(
            store.set_volume_quota(Uuid::new_v4(), defaults)
        ));
        let v1 = create("v1", 4, defaults).unwrap();

        // Its own: 2 volumes and 6 GiB, whatever the defaults passed, for creations and growths.
        let own = limits(Some(2), Some(6));
        assert_eq!(store.set_volume_quota(acme.id, own).unwrap(), own);
        assert_eq!(store.volume_quota(acme.id, defaults).unwrap(), own);
        assert_eq!(store.volume_quota(acme.id, NO_LIMITS).unwrap(), own);
        assert_eq!(
            create("big", 3, defaults),
            Err(quota_exceeded(QuotaKind::Gigabytes, 6))
        );
        create("v2", 2, defaults).unwrap();
        assert_eq!(
            create("v3", 1, NO_LIMITS),
            Err(quota_exceeded(QuotaKind::Volumes, 2))
        );
        assert_eq!(
            grow(v1.id, 5, NO_LIMITS),
            Err(quota_exceeded(QuotaKind::Gigabytes, 6))
        );
        // Raised, the growth fits.
        store
            .set_volume_quota(acme.id, limits(Some(3), Some(7)))
            .unwrap();
        assert_eq!(grow(v1.id, 5, defaults).unwrap().size_gb, 5);

        // Unlimited: past what the defaults allow.
        store.set_volume_quota(acme.id, NO_LIMITS).unwrap();
        assert_eq!(store.volume_quota(acme.id, defaults).unwrap(), NO_LIMITS);
        create("huge", 30, defaults).unwrap();
        create("v4", 1, defaults).unwrap();
        assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (4, 38));

        // Bounded: at most VolumeLimits::MAX (itself allowed).
        assert!(is_invalid(
            store.set_volume_quota(acme.id, limits(Some(10_001), None))
        ));
        assert!(is_invalid(
            store.set_volume_quota(acme.id, limits(None, Some(1_000_001)))
        ));
        assert_eq!(
            store.set_volume_quota(acme.id, VolumeLimits::MAX).unwrap(),
            VolumeLimits::MAX
        );
        // Never below what the tenant holds (Cinder's 400); what failed changed nothing.
        for below in [limits(Some(3), None), limits(None, Some(37))] {
            match store.set_volume_quota(acme.id, below) {
                Err(StoreError::Invalid(m)) => assert!(m.contains("Current usage is"), "{m}"),
                other => panic!("{below:?} below the usage: {other:?}"),
            }
        }
        assert_eq!(
            store.volume_quota(acme.id, defaults).unwrap(),
            VolumeLimits::MAX
        );
        // Exactly the usage: nothing more fits.
        let full = limits(Some(4), Some(38));
        store.set_volume_quota(acme.id, full).unwrap();
        assert_eq!(
            create("v5", 1, NO_LIMITS),
            Err(quota_exceeded(QuotaKind::Volumes, 4))
        );
        acme
    };
    // Across a reopen.
    let store = fx.open();
    assert_eq!(
        store.volume_quota(acme.id, NO_LIMITS).unwrap(),
        limits(Some(4), Some(38))
    );
}

pub(crate) fn volume_quotas_are_per_tenant_and_go_with_the_tenant<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    let beta = tenant(&store, "beta");
    let defaults = limits(Some(2), Some(10));
    let tight = limits(Some(1), Some(1));
    store.set_volume_quota(acme.id, tight).unwrap();
    // Acme's quota is acme's: beta keeps the defaults.
    assert_eq!(store.volume_quota(beta.id, defaults).unwrap(), defaults);
    let a = store
        .create_volume(new_volume(acme.id, "a", 1), defaults)
        .unwrap();
    assert_eq!(
        store.create_volume(new_volume(acme.id, "a2", 1), defaults),
        Err(quota_exceeded(QuotaKind::Volumes, 1))
    );
    for name in ["b1", "b2"] {
        store
            .create_volume(new_volume(beta.id, name, 5), defaults)
            .unwrap();
    }
    assert_eq!(
        store.create_volume(new_volume(beta.id, "b3", 1), defaults),
        Err(quota_exceeded(QuotaKind::Volumes, 2))
    );
    // And beta's is beta's.
    let roomy = limits(None, Some(100));
    store.set_volume_quota(beta.id, roomy).unwrap();
    assert_eq!(store.volume_quota(acme.id, defaults).unwrap(), tight);
    assert_eq!(store.volume_quota(beta.id, defaults).unwrap(), roomy);

    // The quota goes with its tenant (once its volumes have gone): a tenant made again under
    // the same name starts from the defaults.
    conflict_naming(store.delete_tenant(acme.id), "volumes");
    assert_eq!(store.volume_quota(acme.id, defaults).unwrap(), tight);
    store.delete_volume(Scope::Tenant(acme.id), a.id).unwrap();
    store.delete_tenant(acme.id).unwrap();
    assert!(is_not_found(store.volume_quota(acme.id, defaults)));
    assert!(is_not_found(store.set_volume_quota(acme.id, tight)));
    let again = tenant(&store, "acme");
    assert_eq!(store.volume_quota(again.id, defaults).unwrap(), defaults);
    assert_eq!(store.volume_quota(beta.id, defaults).unwrap(), roomy);
}

pub(crate) fn parallel_volume_creates_respect_the_tenants_own_quota<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let acme = tenant(&store, "acme");
    // The callers pass no limits: the tenant's own quota bounds them, 4 volumes.
    store
        .set_volume_quota(acme.id, limits(Some(4), None))
        .unwrap();
    let results: Vec<Result<Volume>> = in_parallel(6, |n| {
        (0..2)
            .map(|k| store.create_volume(new_volume(acme.id, &format!("v-{n}-{k}"), 1), NO_LIMITS))
            .collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(*e, quota_exceeded(QuotaKind::Volumes, 4));
        }
    }
    assert_eq!(store.tenant_volume_usage(acme.id).unwrap(), (4, 4));
}
