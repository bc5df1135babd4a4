//! A server create's `block_device_mapping_v2`, read into what the server boots from
//! ([`Root`]), as `openstack server create` sends it:
//!
//! - `--image IMAGE`: `imageRef`, and (newer clients) one mapping `{source_type: image,
//!   destination_type: local, boot_index: 0, uuid: IMAGE}`, the image itself: a server booted
//!   from its image, as without a mapping;
//! - `--volume VOLUME`: `{source_type: volume, destination_type: volume, boot_index: 0, uuid:
//!   VOLUME}`, `imageRef` empty or absent: an existing volume of the project is the root disk
//!   (`delete_on_termination` false unless said);
//! - `--image IMAGE --boot-from-volume N`: `{source_type: image, destination_type: volume,
//!   boot_index: 0, uuid: IMAGE, volume_size: N}`, `imageRef` empty: a new volume of N GiB made
//!   from the image is the root disk (`delete_on_termination` false unless said, as Nova's).
//!
//! Anything else is a 400 that names what is not supported: more than one mapping (swap,
//! ephemeral and data disks), `snapshot` and `blank` sources, a `local` destination other than
//! the image itself, a `boot_index` other than 0, `volume_type`, `guest_format`, and the legacy
//! `block_device_mapping`. Keys are read as Nova's schema allows them (`boot_index` and
//! `volume_size` as numbers or their text, `delete_on_termination` as a boolean or its text).

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::ApiError;

/// What a server's root disk is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// Its image (a local disk made from it).
    Image(Uuid),
    /// An existing volume.
    Volume {
        /// The volume.
        id: Uuid,
        /// Whether it goes with the server.
        delete_on_termination: bool,
    },
    /// A new volume made from an image.
    NewVolume {
        /// The image.
        image: Uuid,
        /// Its size, GiB.
        size_gb: u32,
        /// Whether it goes with the server.
        delete_on_termination: bool,
    },
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

/// A 400 in Nova's words for an invalid mapping.
fn invalid(details: impl std::fmt::Display) -> ApiError {
    bad(format!("Block Device Mapping is Invalid: {details}"))
}

/// The keys a mapping may have (Nova's schema; some only with the values cumulo supports).
const KEYS: [&str; 11] = [
    "source_type",
    "destination_type",
    "uuid",
    "boot_index",
    "volume_size",
    "delete_on_termination",
    "device_name",
    "device_type",
    "disk_bus",
    "guest_format",
    "tag",
];

/// A whole number given as a number or its text (`None` for `null` or absent).
fn integer(map: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    let wrong = |v: &Value| {
        bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. It is not an integer"
        ))
    };
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| wrong(v)),
        Some(v @ Value::String(s)) => s.trim().parse::<i64>().map(Some).map_err(|_| wrong(v)),
        Some(v) => Err(wrong(v)),
    }
}

/// A boolean given as one or as its text (`None` for `null` or absent).
fn boolean(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v @ Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" | "y" | "on" => Ok(Some(true)),
            "false" | "f" | "0" | "no" | "n" | "off" => Ok(Some(false)),
            _ => Err(bad(format!(
                "Invalid input for field/attribute {key}. Value: {v}. It is not a boolean"
            ))),
        },
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. It is not a boolean"
        ))),
    }
}

/// A text key (`None` for `null` or absent).
fn text<'a>(map: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. It is not a string"
        ))),
    }
}

/// The id the mapping's `uuid` names.
fn uuid(map: &Map<String, Value>, what: &str) -> Result<Uuid, ApiError> {
    let text =
        text(map, "uuid")?.ok_or_else(|| invalid(format!("a {what} source needs its uuid")))?;
    Uuid::parse_str(text.trim()).map_err(|_| {
        bad(format!(
            "Invalid input for field/attribute uuid. Value: {text}. It is not a {what} id"
        ))
    })
}

/// What a server create boots from: `image` (its `imageRef`, read; `None` when absent or empty)
/// and `block_device_mapping_v2` (and the legacy `block_device_mapping`, refused), as the module
/// docs say.
pub fn root(
    image: Option<Uuid>,
    mappings: Option<&Value>,
    legacy: Option<&Value>,
) -> Result<Root, ApiError> {
    match legacy {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => {
            return Err(bad(
                "block_device_mapping (the legacy format) is not supported: use \
                 block_device_mapping_v2",
            ));
        }
    }
    let mappings = match mappings {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute block_device_mapping_v2. Value: {v}. It is \
                 not an array"
            )));
        }
    };
    let mapping = match mappings {
        [] => {
            return image.map(Root::Image).ok_or_else(|| {
                bad(
                    "imageRef is required unless the server boots from a volume \
                     (block_device_mapping_v2)",
                )
            });
        }
        [one] => one.as_object().ok_or_else(|| {
            bad("Invalid input for field/attribute block_device_mapping_v2: each must be an object")
        })?,
        more => {
            return Err(invalid(format!(
                "{} block devices given: only one is supported, the boot device (boot_index 0); \
                 swap, ephemeral and further volumes are not supported",
                more.len()
            )));
        }
    };
    for key in mapping.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        match key.as_str() {
            // A `volume_type` of `null` says nothing.
            "volume_type" if mapping[key].is_null() => {}
            "volume_type" => {
                return Err(invalid(
                    "volume_type is not supported: there are no volume types",
                ));
            }
            _ => {
                return Err(bad(format!(
                    "Invalid input for field/attribute block_device_mapping_v2: additional \
                     properties are not allowed ('{key}' was unexpected)"
                )));
            }
        }
    }
    root_of(image, mapping)
}

/// The root disk one mapping (the only one) asks for.
fn root_of(image: Option<Uuid>, mapping: &Map<String, Value>) -> Result<Root, ApiError> {
    match integer(mapping, "boot_index")? {
        Some(0) => {}
        other => {
            return Err(invalid(format!(
                "boot_index {} is not supported: the one block device is the boot device, \
                 boot_index 0",
                other.map_or_else(|| "null".into(), |i| i.to_string())
            )));
        }
    }
    if text(mapping, "guest_format")?.is_some() {
        return Err(invalid("guest_format is not supported"));
    }
    if let Some(device) = text(mapping, "device_name")?
        && !matches!(device, "vda" | "/dev/vda")
    {
        return Err(invalid(format!(
            "device_name {device} is not supported: the boot device is /dev/vda"
        )));
    }
    if let Some(kind) = text(mapping, "device_type")?
        && kind != "disk"
    {
        return Err(invalid(format!(
            "device_type {kind} is not supported: the boot device is a disk"
        )));
    }
    if let Some(bus) = text(mapping, "disk_bus")?
        && bus != "virtio"
    {
        return Err(invalid(format!(
            "disk_bus {bus} is not supported: disks are virtio"
        )));
    }
    text(mapping, "tag")?;
    let delete_on_termination = boolean(mapping, "delete_on_termination")?;
    let source = text(mapping, "source_type")?
        .ok_or_else(|| bad("Invalid input: 'source_type' is a required property"))?;
    let destination = text(mapping, "destination_type")?;
    match (source, destination) {
        ("volume", None | Some("volume")) => Ok(Root::Volume {
            id: uuid(mapping, "volume")?,
            delete_on_termination: delete_on_termination.unwrap_or(false),
        }),
        ("image", None | Some("local")) => {
            let own = uuid(mapping, "image")?;
            match image {
                Some(i) if i != own => Err(invalid(format!(
                    "a local disk from image {own} is supported only as the server's own image \
                     (imageRef {i})"
                ))),
                _ => Ok(Root::Image(own)),
            }
        }
        ("image", Some("volume")) => {
            let size = integer(mapping, "volume_size")?.unwrap_or(0);
            if size <= 0 {
                return Err(invalid(
                    "Images with destination_type 'volume' need to have a non-zero size \
                     specified",
                ));
            }
            let size_gb = u32::try_from(size)
                .map_err(|_| invalid(format!("volume_size {size} is too large")))?;
            Ok(Root::NewVolume {
                image: uuid(mapping, "image")?,
                size_gb,
                delete_on_termination: delete_on_termination.unwrap_or(false),
            })
        }
        ("snapshot" | "blank", _) => Err(invalid(format!(
            "source_type {source} is not supported: a server boots from its image, from a \
             volume, or from a new volume made from an image"
        ))),
        ("volume", Some(d)) => Err(invalid(format!(
            "source_type volume with destination_type {d} is not supported: a volume is \
             attached as a volume"
        ))),
        (_, Some(d)) if !matches!(d, "local" | "volume") => Err(bad(format!(
            "Invalid input for field/attribute destination_type. Value: {d}. It is not one of \
             local, volume"
        ))),
        _ => Err(bad(format!(
            "Invalid input for field/attribute source_type. Value: {source}. It is not one of \
             volume, image, snapshot, blank"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(image: Value, mappings: Value) -> Result<Root, ApiError> {
        let image = image
            .as_str()
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap());
        root(image, Some(&mappings), None)
    }

    #[test]
    fn the_clients_shapes_are_read() {
        let (i, v) = (Uuid::new_v4(), Uuid::new_v4());
        // --image: imageRef, and the image itself as the boot device.
        assert_eq!(
            read(json!(i.to_string()), json!(null)).unwrap(),
            Root::Image(i)
        );
        let itself = json!([{"uuid": i, "boot_index": 0, "source_type": "image",
            "destination_type": "local", "delete_on_termination": true}]);
        assert_eq!(
            read(json!(i.to_string()), itself.clone()).unwrap(),
            Root::Image(i)
        );
        assert_eq!(read(json!(""), itself).unwrap(), Root::Image(i));
        // --volume.
        let volume = json!([{"uuid": v, "boot_index": 0, "source_type": "volume",
            "destination_type": "volume"}]);
        assert_eq!(
            read(json!(""), volume).unwrap(),
            Root::Volume {
                id: v,
                delete_on_termination: false
            }
        );
        assert_eq!(
            root(
                None,
                Some(
                    &json!([{"uuid": v, "boot_index": "0", "source_type": "volume",
                    "delete_on_termination": "true"}])
                ),
                Some(&json!([]))
            )
            .unwrap(),
            Root::Volume {
                id: v,
                delete_on_termination: true
            }
        );
        // --image --boot-from-volume 2.
        let new = json!([{"uuid": i, "boot_index": 0, "source_type": "image",
            "destination_type": "volume", "volume_size": 2}]);
        assert_eq!(
            read(json!(""), new).unwrap(),
            Root::NewVolume {
                image: i,
                size_gb: 2,
                delete_on_termination: false
            }
        );
        let new = json!([{"uuid": i, "boot_index": 0, "source_type": "image",
            "destination_type": "volume", "volume_size": "3", "delete_on_termination": true,
            "device_name": "vda", "volume_type": null, "tag": "root"}]);
        assert_eq!(
            read(json!(""), new).unwrap(),
            Root::NewVolume {
                image: i,
                size_gb: 3,
                delete_on_termination: true
            }
        );
    }

    #[test]
    fn other_shapes_are_refused_naming_what() {
        let (i, v) = (Uuid::new_v4(), Uuid::new_v4());
        let boot = |extra: Value| {
            let mut m = json!({"uuid": v, "boot_index": 0, "source_type": "volume",
                "destination_type": "volume"});
            for (k, x) in extra.as_object().unwrap() {
                m[k] = x.clone();
            }
            m
        };
        for (image, mappings, says) in [
            (json!(""), json!(null), "imageRef is required"),
            (
                json!(""),
                json!([boot(json!({})), boot(json!({}))]),
                "only one",
            ),
            (
                json!(""),
                json!([boot(json!({"boot_index": 1}))]),
                "boot_index 1",
            ),
            (
                json!(""),
                json!([boot(json!({"boot_index": null}))]),
                "boot_index null",
            ),
            (
                json!(""),
                json!([boot(json!({"source_type": "blank"}))]),
                "blank",
            ),
            (
                json!(""),
                json!([boot(json!({"source_type": "snapshot"}))]),
                "snapshot",
            ),
            (
                json!(""),
                json!([boot(json!({"destination_type": "local"}))]),
                "destination_type local",
            ),
            (
                json!(""),
                json!([boot(json!({"volume_type": "ssd"}))]),
                "volume_type",
            ),
            (
                json!(""),
                json!([boot(json!({"guest_format": "swap"}))]),
                "guest_format",
            ),
            (
                json!(""),
                json!([boot(json!({"device_name": "/dev/vdb"}))]),
                "/dev/vdb",
            ),
            (json!(""), json!([boot(json!({"other": 1}))]), "'other'"),
            (json!(""), json!([boot(json!({"uuid": "x"}))]), "uuid"),
            (
                json!(""),
                json!([boot(json!({"delete_on_termination": "maybe"}))]),
                "boolean",
            ),
            (
                json!(""),
                json!([boot(json!({"source_type": "image",
                "destination_type": "volume", "uuid": i}))]),
                "non-zero size",
            ),
            (
                json!(i.to_string()),
                json!([boot(json!({"source_type": "image",
                "destination_type": "local", "uuid": Uuid::new_v4()}))]),
                "own image",
            ),
            (json!(""), json!({}), "not an array"),
        ] {
            let e = read(image, mappings.clone()).unwrap_err();
            assert_eq!(e.status().as_u16(), 400, "{mappings}");
            assert!(e.to_string().contains(says), "{mappings}: {e}");
        }
        let legacy = root(None, None, Some(&json!([{"volume_id": v}]))).unwrap_err();
        assert!(legacy.to_string().contains("legacy"), "{legacy}");
    }
}
