//! The suite: flavors, images and workloads ([`CatalogStore`](crate::CatalogStore)).

use uuid::Uuid;

use super::*;

pub(crate) fn catalog_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let flavor = store.flavor(w.flavor).unwrap();
    assert_eq!(
        (flavor.vcpus, flavor.memory_mb, flavor.disk_gb),
        (1, 512, 10)
    );
    assert!(matches!(
        store.create_flavor(NewFlavor {
            name: "zero".into(),
            vcpus: 0,
            memory_mb: 1,
            disk_gb: 0
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
    assert!(store.flavors().unwrap().is_empty());
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
