//! The libvirt domain XML of one instance, generated from a [`DomainSpec`]: a pure function,
//! tested against golden files (`golden/*.xml` beside this file; `CUMULO_BLESS=1 cargo test`
//! rewrites them after a deliberate change).
//!
//! Every domain we make carries our mark: a `<metadata>` element in our own namespace
//! ([`NAMESPACE`]), naming the node that owns it (`<cumulo:node>`: the agent's UUID, or the
//! off-host host's). The backend lists, stops and removes only domains that carry it, and of
//! those only its own node's ([`owner_of`]): several agents may share one libvirt.

use std::fmt::Write as _;
use std::path::PathBuf;
use uuid::Uuid;

/// Our XML namespace in a domain's `<metadata>`: what marks a domain as ours.
pub const NAMESPACE: &str = "urn:x-cumulo:instance:1";
/// The prefix of our metadata element.
pub const PREFIX: &str = "cumulo";

/// The accelerator a domain runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainType {
    /// Hardware virtualisation (`<domain type='kvm'>`, host CPU passed through).
    Kvm,
    /// QEMU's emulation, TCG (`<domain type='qemu'>`).
    Qemu,
}

/// How a domain boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// From a disk: the instance's qcow2 overlay.
    Disk {
        /// The overlay.
        overlay: PathBuf,
    },
    /// From an ISO image, as a CD-ROM (read only), with the instance's data disk beside it.
    Cdrom {
        /// The ISO.
        iso: PathBuf,
        /// The instance's data disk, if it has one (the guest's `vda`).
        data: Option<PathBuf>,
    },
    /// A kernel and initrd given to QEMU directly.
    Kernel {
        /// The kernel.
        kernel: PathBuf,
        /// The instance's initrd (the image's, with the instance's seed appended).
        initrd: PathBuf,
        /// The kernel command line.
        cmdline: String,
        /// The instance's data disk, if it has one: a blank qcow2 of the flavor's disk size,
        /// made with the instance and kept with it (the guest sees it as `vda`).
        data: Option<PathBuf>,
    },
}

impl Boot {
    /// The instance's writable disk (`vda`): a disk image's overlay, a kernel image's data disk.
    pub fn disk(&self) -> Option<&PathBuf> {
        match self {
            Boot::Disk { overlay } => Some(overlay),
            Boot::Kernel { data, .. } | Boot::Cdrom { data, .. } => data.as_ref(),
        }
    }
}

/// Everything that goes into one instance's domain XML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSpec {
    /// The domain's name ([`domain_name`]).
    pub name: String,
    /// The domain's UUID: the instance's.
    pub uuid: Uuid,
    /// The accelerator.
    pub kind: DomainType,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, MiB.
    pub mem_mb: u32,
    /// How it boots.
    pub boot: Boot,
    /// The NoCloud seed (an ISO labelled `cidata`), attached as a CD-ROM.
    pub seed: PathBuf,
    /// The file the serial console is written to: appended to, so that it keeps what came
    /// before a power cycle (libvirt's virtlogd, where it writes the file, rotates it).
    pub console: PathBuf,
    /// The instance's NIC, if it has one: a virtio NIC with this MAC on this tap (made by the
    /// agent's tenant networking, `crate::net`).
    pub nic: Option<(String, [u8; 6])>,
    /// Recorded in our metadata: the tenant.
    pub tenant: Uuid,
    /// Recorded in our metadata: the image name.
    pub image: String,
    /// Recorded in our metadata: the node that owns the domain (`None`: not recorded).
    pub owner: Option<Uuid>,
}

/// Whose a domain is, from our metadata element's text (as libvirt gives it back, whatever
/// prefix it chose): `Some(node)` when it names its node, `None` when it names none (a domain
/// made before owners were recorded) or the name is not a UUID.
pub fn owner_of(metadata: &str) -> Option<Uuid> {
    // The first element whose local name is `node`: `<cumulo:node>` or `<node>`.
    let mut rest = metadata;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>')?;
        let tag = &rest[..end];
        let local = tag.rsplit(':').next().unwrap_or(tag);
        if local == "node" {
            let body = &rest[end + 1..];
            let text = &body[..body.find('<')?];
            return Uuid::parse_str(text.trim()).ok();
        }
    }
    None
}

/// A domain's XML (as libvirt gives back an inactive definition) with new vCPUs and memory:
/// the `<vcpu>`, `<memory>` and `<currentMemory>` elements' values replaced (memory in MiB).
/// `None` when the XML has no `<vcpu>` or `<memory>` element.
pub fn resized(xml: &str, vcpus: u32, mem_mb: u32) -> Option<String> {
    let xml = replace_element(xml, "vcpu", &vcpus.to_string(), None)?;
    let mem = mem_mb.to_string();
    let xml = replace_element(&xml, "memory", &mem, Some("unit='MiB'"))?;
    Some(replace_element(&xml, "currentMemory", &mem, Some("unit='MiB'")).unwrap_or(xml))
}

/// `xml` with the first `<name ...>text</name>` element's text replaced by `value` (and its
/// attributes by `attrs`, when given).
fn replace_element(xml: &str, name: &str, value: &str, attrs: Option<&str>) -> Option<String> {
    let close = format!("</{name}>");
    let mut from = 0;
    let start = loop {
        let at = from + xml[from..].find(&format!("<{name}"))?;
        let next = xml[at + 1 + name.len()..].chars().next()?;
        if next == '>' || next == ' ' {
            break at;
        }
        from = at + 1;
    };
    let open_end = start + xml[start..].find('>')?;
    let end = open_end + xml[open_end..].find(&close)?;
    let open = match attrs {
        Some(attrs) => format!("<{name} {attrs}>"),
        None => xml[start..=open_end].to_string(),
    };
    Some(format!("{}{open}{value}{}", &xml[..start], &xml[end..]))
}

/// The name of an instance's domain.
pub fn domain_name(instance: Uuid) -> String {
    format!("cumulo-{instance}")
}

/// Text escaped for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn path(p: &std::path::Path) -> String {
    escape(&p.to_string_lossy())
}

impl DomainSpec {
    /// The domain XML.
    pub fn render(&self) -> String {
        let mut x = String::new();
        let kind = match self.kind {
            DomainType::Kvm => "kvm",
            DomainType::Qemu => "qemu",
        };
        // `write!` into a String cannot fail.
        let _ = writeln!(x, "<domain type='{kind}'>");
        let _ = writeln!(x, "  <name>{}</name>", escape(&self.name));
        let _ = writeln!(x, "  <uuid>{}</uuid>", self.uuid);
        x.push_str("  <metadata>\n");
        let _ = writeln!(x, "    <{PREFIX}:instance xmlns:{PREFIX}='{NAMESPACE}'>");
        let _ = writeln!(
            x,
            "      <{PREFIX}:tenant>{}</{PREFIX}:tenant>",
            self.tenant
        );
        let _ = writeln!(
            x,
            "      <{PREFIX}:image>{}</{PREFIX}:image>",
            escape(&self.image)
        );
        if let Some(owner) = self.owner {
            let _ = writeln!(x, "      <{PREFIX}:node>{owner}</{PREFIX}:node>");
        }
        let _ = writeln!(x, "    </{PREFIX}:instance>");
        x.push_str("  </metadata>\n");
        let _ = writeln!(x, "  <memory unit='MiB'>{}</memory>", self.mem_mb);
        let _ = writeln!(x, "  <vcpu>{}</vcpu>", self.vcpus);
        x.push_str("  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n");
        match &self.boot {
            Boot::Disk { .. } => x.push_str("    <boot dev='hd'/>\n"),
            // Boot order per device (below): the CD-ROM, then the data disk.
            Boot::Cdrom { .. } => {}
            Boot::Kernel {
                kernel,
                initrd,
                cmdline,
                ..
            } => {
                let _ = writeln!(x, "    <kernel>{}</kernel>", path(kernel));
                let _ = writeln!(x, "    <initrd>{}</initrd>", path(initrd));
                let _ = writeln!(x, "    <cmdline>{}</cmdline>", escape(cmdline));
            }
        }
        x.push_str("  </os>\n  <features>\n    <acpi/>\n  </features>\n");
        if self.kind == DomainType::Kvm {
            x.push_str("  <cpu mode='host-passthrough'/>\n");
        }
        x.push_str("  <on_poweroff>destroy</on_poweroff>\n");
        // A kernel image that panics (or reboots) stops: it is reported exited rather than
        // looping; a disk image reboots as a VM does.
        let on_reboot = match self.boot {
            Boot::Disk { .. } | Boot::Cdrom { .. } => "restart",
            Boot::Kernel { .. } => "destroy",
        };
        let _ = writeln!(x, "  <on_reboot>{on_reboot}</on_reboot>");
        x.push_str("  <on_crash>destroy</on_crash>\n  <devices>\n");
        // With a CD-ROM to boot from, each device says where it comes in the boot order.
        let (first, second) = match &self.boot {
            Boot::Cdrom { .. } => ("\n      <boot order='1'/>", "\n      <boot order='2'/>"),
            _ => ("", ""),
        };
        if let Boot::Cdrom { iso, .. } = &self.boot {
            let _ = writeln!(
                x,
                "    <disk type='file' device='cdrom'>\n      <driver name='qemu' type='raw'/>\n      <source file='{}'/>\n      <target dev='hda' bus='ide'/>\n      <readonly/>{first}\n    </disk>",
                path(iso)
            );
        }
        if let Some(disk) = self.boot.disk() {
            let _ = writeln!(
                x,
                "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      <source file='{}'/>\n      <target dev='vda' bus='virtio'/>{second}\n    </disk>",
                path(disk)
            );
        }
        let _ = writeln!(
            x,
            "    <disk type='file' device='cdrom'>\n      <driver name='qemu' type='raw'/>\n      <source file='{}'/>\n      <target dev='hdc' bus='ide'/>\n      <readonly/>\n    </disk>",
            path(&self.seed)
        );
        if let Some((tap, mac)) = &self.nic {
            let [a, b, c, d, e, f] = *mac;
            let _ = writeln!(
                x,
                "    <interface type='ethernet'>\n      <mac address='{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}'/>\n      <target dev='{}' managed='no'/>\n      <model type='virtio'/>\n    </interface>",
                escape(tap)
            );
        }
        let _ = writeln!(
            x,
            "    <serial type='file'>\n      <source path='{}' append='on'/>\n      <target port='0'/>\n    </serial>",
            path(&self.console)
        );
        x.push_str("    <memballoon model='none'/>\n  </devices>\n</domain>\n");
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/backend/libvirt/golden");

    /// Compares with `golden/<name>`; rewrites it instead when `CUMULO_BLESS` is set.
    fn golden(name: &str, text: &str) {
        let file = Path::new(GOLDEN).join(name);
        if std::env::var_os("CUMULO_BLESS").is_some() {
            std::fs::write(&file, text).unwrap();
        }
        let want = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            want,
            "{} differs (CUMULO_BLESS=1 rewrites it)",
            file.display()
        );
    }

    fn base() -> DomainSpec {
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        DomainSpec {
            name: domain_name(id),
            uuid: id,
            kind: DomainType::Qemu,
            vcpus: 1,
            mem_mb: 256,
            boot: Boot::Kernel {
                kernel: "/state/images/tiny/kernel".into(),
                initrd: "/state/libvirt/instances/x/initrd".into(),
                cmdline: format!("console=ttyS0 panic=1 cumulo.instance={id}"),
                data: None,
            },
            seed: "/state/libvirt/instances/x/seed.iso".into(),
            console: "/state/libvirt/instances/x/console.log".into(),
            nic: None,
            tenant: Uuid::from_u128(7),
            image: "tiny".into(),
            owner: None,
        }
    }

    #[test]
    fn kernel_image_under_tcg() {
        golden("kernel-tcg.xml", &base().render());
    }

    #[test]
    fn a_resize_replaces_vcpus_and_memory() {
        let xml = "<domain type='qemu'>\n  <name>x</name>\n  <memory unit='KiB'>262144</memory>\n  \
                   <currentMemory unit='KiB'>262144</currentMemory>\n  <vcpu placement='static'>1</vcpu>\n  \
                   <vcpus><vcpu id='0'/></vcpus>\n</domain>\n";
        let out = resized(xml, 4, 2048).unwrap();
        assert!(out.contains("<memory unit='MiB'>2048</memory>"), "{out}");
        assert!(
            out.contains("<currentMemory unit='MiB'>2048</currentMemory>"),
            "{out}"
        );
        assert!(out.contains("<vcpu placement='static'>4</vcpu>"), "{out}");
        assert!(out.contains("<vcpus><vcpu id='0'/></vcpus>"), "{out}");
        let ours = base().render();
        let out = resized(&ours, 2, 512).unwrap();
        assert!(out.contains("<vcpu>2</vcpu>") && out.contains("<memory unit='MiB'>512</memory>"));
        assert_eq!(resized("<domain/>", 1, 1), None);
    }

    #[test]
    fn kernel_image_with_a_data_disk() {
        let mut spec = base();
        if let Boot::Kernel { data, .. } = &mut spec.boot {
            *data = Some("/state/libvirt/instances/x/disk.qcow2".into());
        }
        golden("kernel-data-disk.xml", &spec.render());
    }

    #[test]
    fn iso_image_as_a_cdrom_with_a_data_disk() {
        let mut spec = base();
        spec.boot = Boot::Cdrom {
            iso: "/state/images/sha512/abc".into(),
            data: Some("/state/libvirt/instances/x/disk.qcow2".into()),
        };
        golden("iso-cdrom.xml", &spec.render());
    }

    #[test]
    fn disk_image_under_kvm_with_a_nic() {
        let mut spec = base();
        spec.kind = DomainType::Kvm;
        spec.vcpus = 4;
        spec.mem_mb = 2048;
        spec.boot = Boot::Disk {
            overlay: "/state/libvirt/instances/x/disk.qcow2".into(),
        };
        spec.nic = Some(("cmt0123456789ab".into(), [0x02, 0, 0xac, 0x10, 0, 5]));
        spec.image = "debian-12".into();
        spec.owner = Some(Uuid::from_u128(0xa9));
        golden("disk-kvm-nic.xml", &spec.render());
    }

    #[test]
    fn the_owner_is_read_back_whatever_the_prefix() {
        let node = Uuid::from_u128(0xa9);
        let mut spec = base();
        spec.owner = Some(node);
        let xml = spec.render();
        let start = xml.find("<cumulo:instance").unwrap();
        let end = xml.find("</cumulo:instance>").unwrap() + "</cumulo:instance>".len();
        assert_eq!(owner_of(&xml[start..end]), Some(node));
        // libvirt may give the element back with another prefix, or none.
        let other = format!(
            "<x:instance xmlns:x=\"{NAMESPACE}\">\n  <x:tenant>t</x:tenant>\n  <x:node> {node} </x:node>\n</x:instance>"
        );
        assert_eq!(owner_of(&other), Some(node));
        let bare = format!("<instance xmlns=\"{NAMESPACE}\"><node>{node}</node></instance>");
        assert_eq!(owner_of(&bare), Some(node));
        // None recorded (a domain from before owners), or garbage: no owner.
        assert_eq!(
            owner_of(
                &{
                    let mut s = base();
                    s.owner = None;
                    s
                }
                .render()
            ),
            None
        );
        for bad in [
            "",
            "<",
            "<cumulo:node>",
            "<cumulo:node>nope</cumulo:node>",
            "<node>1<",
        ] {
            assert_eq!(owner_of(bad), None, "{bad:?}");
        }
        // Another element whose name ends in "node" is not it.
        assert_eq!(
            owner_of(&format!("<cumulo:nodes>{node}</cumulo:nodes>")),
            None
        );
    }

    #[test]
    fn text_is_escaped() {
        let mut spec = base();
        spec.image = "a<b>&'\"".into();
        spec.console = "/tmp/it's here/console.log".into();
        let xml = spec.render();
        assert!(xml.contains("<cumulo:image>a&lt;b&gt;&amp;&apos;&quot;</cumulo:image>"));
        assert!(xml.contains("<source path='/tmp/it&apos;s here/console.log' append='on'/>"));
    }
}
