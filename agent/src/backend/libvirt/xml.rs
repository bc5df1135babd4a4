//! The libvirt domain XML of one instance, generated from a [`DomainSpec`]: a pure function,
//! tested against golden files (`golden/*.xml` beside this file; `CUMULO_BLESS=1 cargo test`
//! rewrites them after a deliberate change).
//!
//! Every domain we make carries our mark: a `<metadata>` element in our own namespace
//! ([`NAMESPACE`]). The backend lists, stops and removes only domains that carry it.

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
    /// A kernel and initrd given to QEMU directly.
    Kernel {
        /// The kernel.
        kernel: PathBuf,
        /// The instance's initrd (the image's, with the instance's seed appended).
        initrd: PathBuf,
        /// The kernel command line.
        cmdline: String,
    },
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
    /// The file the serial console is written to.
    pub console: PathBuf,
    /// The instance's NIC, if it has one: a virtio NIC with this MAC on this tap (made by the
    /// agent's tenant networking, `crate::net`).
    pub nic: Option<(String, [u8; 6])>,
    /// Recorded in our metadata: the tenant.
    pub tenant: Uuid,
    /// Recorded in our metadata: the image name.
    pub image: String,
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
        let _ = writeln!(
            x,
            "    <{PREFIX}:instance xmlns:{PREFIX}='{NAMESPACE}'>\n      <{PREFIX}:tenant>{}</{PREFIX}:tenant>\n      <{PREFIX}:image>{}</{PREFIX}:image>\n    </{PREFIX}:instance>",
            self.tenant,
            escape(&self.image)
        );
        x.push_str("  </metadata>\n");
        let _ = writeln!(x, "  <memory unit='MiB'>{}</memory>", self.mem_mb);
        let _ = writeln!(x, "  <vcpu>{}</vcpu>", self.vcpus);
        x.push_str("  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n");
        match &self.boot {
            Boot::Disk { .. } => x.push_str("    <boot dev='hd'/>\n"),
            Boot::Kernel {
                kernel,
                initrd,
                cmdline,
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
            Boot::Disk { .. } => "restart",
            Boot::Kernel { .. } => "destroy",
        };
        let _ = writeln!(x, "  <on_reboot>{on_reboot}</on_reboot>");
        x.push_str("  <on_crash>destroy</on_crash>\n  <devices>\n");
        if let Boot::Disk { overlay } = &self.boot {
            let _ = writeln!(
                x,
                "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      <source file='{}'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>",
                path(overlay)
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
            "    <serial type='file'>\n      <source path='{}'/>\n      <target port='0'/>\n    </serial>",
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
            },
            seed: "/state/libvirt/instances/x/seed.iso".into(),
            console: "/state/libvirt/instances/x/console.log".into(),
            nic: None,
            tenant: Uuid::from_u128(7),
            image: "tiny".into(),
        }
    }

    #[test]
    fn kernel_image_under_tcg() {
        golden("kernel-tcg.xml", &base().render());
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
        golden("disk-kvm-nic.xml", &spec.render());
    }

    #[test]
    fn text_is_escaped() {
        let mut spec = base();
        spec.image = "a<b>&'\"".into();
        spec.console = "/tmp/it's here/console.log".into();
        let xml = spec.render();
        assert!(xml.contains("<cumulo:image>a&lt;b&gt;&amp;&apos;&quot;</cumulo:image>"));
        assert!(xml.contains("<source path='/tmp/it&apos;s here/console.log'/>"));
    }
}
