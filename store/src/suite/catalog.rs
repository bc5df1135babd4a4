//! The suite: flavors, images and workloads ([`CatalogStore`](crate::CatalogStore)).

use uuid::Uuid;

use super::*;

pub(crate) fn catalog_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let flavor = store.flavor(Scope::All, w.flavor).unwrap();
    assert_eq!(
        (flavor.vcpus, flavor.memory_mb, flavor.disk_gb),
        (1, 512, 10)
    );
    assert!(matches!(
        store.create_flavor(NewFlavor {
            name: "zero".into(),
            vcpus: 0,
            memory_mb: 1,
            disk_gb: 0,
            is_public: true,
        }),
        Err(StoreError::Invalid(_))
    ));
    let public = store
        .create_image(NewImage {
            owner: None,
            name: "alpine".into(),
            kind: ImageKind::Raw,
            reference: "images/alpine.raw".into(),
        })
        .unwrap();
    let scope = Scope::Tenant(t.id);
    let names: Vec<String> = store
        .images(scope)
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["alpine", "debian"]);
    assert_eq!(store.image(scope, public.id).unwrap(), public);
    // A tenant sees a public image but may not delete it.
    assert!(is_not_found(store.delete_image(scope, public.id)));
    assert_eq!(store.workload(scope, w.id).unwrap(), w);
    let w2 = store
        .update_workload(
            scope,
            w.id,
            1,
            WorkloadChange {
                name: None,
                user_data: Some("#cloud-config\nhostname: x\n".into()),
            },
        )
        .unwrap();
    assert_eq!(w2.version, 2);
    assert_eq!(store.workloads(scope).unwrap(), vec![w2.clone()]);
    // In use: the flavor and the image cannot go while the workload refers to them.
    assert!(matches!(
        store.delete_flavor(w.flavor),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.delete_image(scope, w.image),
        Err(StoreError::Conflict(_))
    ));
    // Unknown flavor or image for a workload.
    let bad = store.create_workload(NewWorkload {
        owner: Some(t.id),
        name: "bad".into(),
        flavor: Uuid::new_v4(),
        image: public.id,
        user_data: String::new(),
        ephemeral: false,
    });
    assert!(is_not_found(bad));
    store.delete_workload(scope, w.id).unwrap();
    store.delete_image(scope, w.image).unwrap();
    store.delete_image(Scope::All, public.id).unwrap();
    store.delete_flavor(w.flavor).unwrap();
    assert!(store.flavors(Scope::All).unwrap().is_empty());
    assert!(store.images(Scope::All).unwrap().is_empty());
}

/// A workload's `ephemeral` mark is kept as created (false unless asked), read back alone and in
/// the list, after a change of the workload and after a reopen.
pub(crate) fn ephemeral_workloads_are_kept_as_such<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, kept) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    assert!(!kept.ephemeral, "workloads are not ephemeral unless asked");
    let scope = Scope::Tenant(t.id);
    let ephemeral = store
        .create_workload(NewWorkload {
            owner: Some(t.id),
            name: "batch".into(),
            flavor: kept.flavor,
            image: kept.image,
            user_data: String::new(),
            ephemeral: true,
        })
        .unwrap();
    assert!(ephemeral.ephemeral);
    assert_eq!(store.workload(scope, ephemeral.id).unwrap(), ephemeral);
    let renamed = store
        .update_workload(
            scope,
            ephemeral.id,
            ephemeral.version,
            WorkloadChange {
                name: Some("batch-2".into()),
                user_data: None,
            },
        )
        .unwrap();
    assert!(renamed.ephemeral, "a change keeps the mark");
    drop(store);
    let store = fx.open();
    let marks: Vec<(String, bool)> = store
        .workloads(scope)
        .unwrap()
        .into_iter()
        .map(|w| (w.name, w.ephemeral))
        .collect();
    assert_eq!(
        marks,
        [("batch-2".to_string(), true), (kept.name.clone(), false)]
    );
}

/// An image made through the Image API: queued with its fields and no reference, then saving
/// (only from queued: a second upload conflicts), then active with its data; another tenant
/// neither sees nor changes it; a change keeps what it does not name; a reopen keeps it all.
pub(crate) fn uploaded_images_go_from_queued_to_active<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, _) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let props = ImageProps {
        container_format: Some("bare".into()),
        min_disk: 1,
        min_ram: 64,
        tags: vec!["test".into()],
        properties: [("os_distro".to_string(), "tiny".to_string())].into(),
        protected: false,
    };
    let queued = store
        .create_queued_image(
            NewImage {
                owner: Some(t.id),
                name: "uploaded".into(),
                kind: ImageKind::Raw,
                reference: String::new(),
            },
            Visibility::Private,
            props.clone(),
        )
        .unwrap();
    assert_eq!(queued.status, ImageStatus::Queued);
    assert_eq!(
        (queued.props.clone(), queued.file.clone()),
        (props.clone(), None)
    );
    let scope = Scope::Tenant(t.id);
    assert_eq!(store.image(scope, queued.id).unwrap(), queued);
    // Registered images still need a reference.
    assert!(matches!(
        store.create_image(NewImage {
            owner: None,
            name: "x".into(),
            kind: ImageKind::Raw,
            reference: String::new(),
        }),
        Err(StoreError::Invalid(_))
    ));
    let saving = ImageChange {
        expect: Some(ImageStatus::Queued),
        status: Some(ImageStatus::Saving),
        ..ImageChange::default()
    };
    assert!(is_not_found(store.change_image(
        Scope::Tenant(other.id),
        queued.id,
        saving.clone()
    )));
    let s = store
        .change_image(scope, queued.id, saving.clone())
        .unwrap();
    assert_eq!(s.status, ImageStatus::Saving);
    assert!(matches!(
        store.change_image(scope, queued.id, saving),
        Err(StoreError::Conflict(_))
    ));
    let file = ImageFile {
        size: 3,
        md5: "m".into(),
        sha512: "s".into(),
    };
    let active = store
        .change_image(
            scope,
            queued.id,
            ImageChange {
                expect: Some(ImageStatus::Saving),
                status: Some(ImageStatus::Active),
                file: Some(Some(file.clone())),
                reference: Some("sha512/s".into()),
                ..ImageChange::default()
            },
        )
        .unwrap();
    assert_eq!(
        (
            active.status,
            active.file.clone(),
            active.reference.as_str()
        ),
        (ImageStatus::Active, Some(file), "sha512/s")
    );
    let renamed = store
        .change_image(
            scope,
            queued.id,
            ImageChange {
                name: Some("renamed".into()),
                ..ImageChange::default()
            },
        )
        .unwrap();
    assert_eq!(renamed.name, "renamed");
    assert_eq!(
        (renamed.props.clone(), renamed.file.clone()),
        (props, active.file.clone())
    );
    assert!(is_not_found(
        store.image(Scope::Tenant(other.id), queued.id)
    ));
    let store = fx.open();
    assert_eq!(store.image(scope, queued.id).unwrap(), renamed);
}

fn flavor_of(store: &dyn Store, name: &str, is_public: bool) -> Flavor {
    store
        .create_flavor(NewFlavor {
            name: name.into(),
            vcpus: 1,
            memory_mb: 256,
            disk_gb: 1,
            is_public,
        })
        .unwrap()
}

fn names_seen(store: &dyn Store, scope: Scope) -> Vec<String> {
    store
        .flavors(scope)
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect()
}

/// A private flavor is seen in `Scope::All` and by the tenants on its access list only (listed
/// and read alone); the list is kept in tenant order, refuses a duplicate, an unknown tenant and
/// a public flavor, survives a reopen, and loses a tenant that goes; the flavor's going takes
/// its list, so a new flavor of its name starts with none.
pub(crate) fn private_flavors_are_seen_by_their_access_list<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (a, b) = (
        tenant_with(&store, "a", Quota::default(), 24),
        tenant_with(&store, "b", Quota::default(), 24),
    );
    let public = flavor_of(&store, "public", true);
    let private = flavor_of(&store, "private", false);
    assert!(!private.is_public && public.is_public);
    assert_eq!(names_seen(&store, Scope::All), ["private", "public"]);
    assert_eq!(names_seen(&store, Scope::Tenant(a.id)), ["public"]);
    assert!(is_not_found(store.flavor(Scope::Tenant(a.id), private.id)));
    assert_eq!(store.flavor(Scope::All, private.id).unwrap(), private);
    assert_eq!(store.flavor_access(private.id).unwrap(), Vec::<Uuid>::new());
    assert_eq!(store.flavor_access(public.id).unwrap(), Vec::<Uuid>::new());

    assert_eq!(store.add_flavor_access(private.id, a.id).unwrap(), [a.id]);
    assert!(matches!(
        store.add_flavor_access(private.id, a.id),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.add_flavor_access(public.id, a.id),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.add_flavor_access(private.id, Uuid::new_v4()),
        Err(StoreError::NotFound { kind: "tenant", .. })
    ));
    assert!(matches!(
        store.add_flavor_access(Uuid::new_v4(), a.id),
        Err(StoreError::NotFound { kind: "flavor", .. })
    ));
    assert_eq!(
        names_seen(&store, Scope::Tenant(a.id)),
        ["private", "public"]
    );
    assert_eq!(
        store.flavor(Scope::Tenant(a.id), private.id).unwrap(),
        private
    );
    assert_eq!(names_seen(&store, Scope::Tenant(b.id)), ["public"]);
    assert!(is_not_found(store.flavor(Scope::Tenant(b.id), private.id)));

    let mut both = vec![a.id, b.id];
    both.sort();
    assert_eq!(store.add_flavor_access(private.id, b.id).unwrap(), both);
    assert_eq!(
        store.remove_flavor_access(private.id, b.id).unwrap(),
        [a.id]
    );
    assert!(matches!(
        store.remove_flavor_access(private.id, b.id),
        Err(StoreError::NotFound {
            kind: "flavor access",
            ..
        })
    ));
    assert!(is_not_found(store.flavor(Scope::Tenant(b.id), private.id)));
    assert_eq!(store.add_flavor_access(private.id, b.id).unwrap(), both);

    drop(store);
    let store = fx.open();
    assert_eq!(store.flavor_access(private.id).unwrap(), both);
    assert_eq!(
        store.flavor(Scope::Tenant(b.id), private.id).unwrap(),
        private
    );
    // A tenant that goes leaves the access lists.
    store.delete_tenant(b.id).unwrap();
    assert_eq!(store.flavor_access(private.id).unwrap(), [a.id]);
    // A flavor that goes takes its list.
    store.delete_flavor(private.id).unwrap();
    assert!(is_not_found(store.flavor_access(private.id)));
    assert!(is_not_found(store.flavor(Scope::All, private.id)));
    let again = flavor_of(&store, "private", false);
    assert_eq!(store.flavor_access(again.id).unwrap(), Vec::<Uuid>::new());
    assert_eq!(names_seen(&store, Scope::Tenant(a.id)), ["public"]);
    store.delete_tenant(a.id).unwrap();
    assert_eq!(names_seen(&store, Scope::All), ["private", "public"]);
}

/// Extra specs are set (added or replaced, the others kept) and removed one by one, refused
/// whole when a key or value is bad or there would be too many, read with the flavor (alone and
/// listed, by a tenant that sees it too), kept over a reopen; a workload's flavor keeps them.
pub(crate) fn flavor_extra_specs_are_set_and_removed<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let id = w.flavor;
    let specs = |pairs: &[(&str, &str)]| -> ExtraSpecs {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let f = store
        .set_flavor_extra_specs(id, specs(&[("hw:cpu_policy", "dedicated"), ("a", "1")]))
        .unwrap();
    assert_eq!(
        f.extra_specs,
        specs(&[("a", "1"), ("hw:cpu_policy", "dedicated")])
    );
    let f = store
        .set_flavor_extra_specs(id, specs(&[("a", "2"), ("b c", "")]))
        .unwrap();
    let three = specs(&[("a", "2"), ("b c", ""), ("hw:cpu_policy", "dedicated")]);
    assert_eq!(f.extra_specs, three);
    for bad in [
        specs(&[("ok", "1"), ("no/slash", "1")]),
        specs(&[("ok", "1"), ("", "1")]),
        specs(&[("ok", &"v".repeat(256))]),
    ] {
        assert!(matches!(
            store.set_flavor_extra_specs(id, bad),
            Err(StoreError::Invalid(_))
        ));
    }
    let room = Flavor::MAX_EXTRA_SPECS - three.len();
    let many: ExtraSpecs = (0..=room)
        .map(|i| (format!("k{i:03}"), "v".into()))
        .collect();
    assert!(matches!(
        store.set_flavor_extra_specs(id, many.clone()),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.flavor(Scope::All, id).unwrap().extra_specs, three);
    let full = store
        .set_flavor_extra_specs(id, many.into_iter().take(room).collect())
        .unwrap();
    assert_eq!(full.extra_specs.len(), Flavor::MAX_EXTRA_SPECS);
    for i in 0..room {
        store
            .delete_flavor_extra_spec(id, &format!("k{i:03}"))
            .unwrap();
    }
    let f = store.delete_flavor_extra_spec(id, "a").unwrap();
    let two = specs(&[("b c", ""), ("hw:cpu_policy", "dedicated")]);
    assert_eq!(f.extra_specs, two);
    assert!(matches!(
        store.delete_flavor_extra_spec(id, "a"),
        Err(StoreError::NotFound {
            kind: "extra spec",
            ..
        })
    ));
    assert!(is_not_found(
        store.set_flavor_extra_specs(Uuid::new_v4(), two.clone())
    ));
    assert!(is_not_found(
        store.delete_flavor_extra_spec(Uuid::new_v4(), "b c")
    ));
    drop(store);
    let store = fx.open();
    assert_eq!(
        store.flavor(Scope::Tenant(t.id), id).unwrap().extra_specs,
        two
    );
    assert_eq!(
        store.flavors(Scope::Tenant(t.id)).unwrap()[0].extra_specs,
        two
    );
    // The size does not change with the specs.
    let f = store.flavor(Scope::All, id).unwrap();
    assert_eq!((f.vcpus, f.memory_mb, f.disk_gb), (1, 512, 10));
}
