//! The guest's initramfs, generated at test time: busybox (static), the
//! kernel's modules, and a tiny `/init` that loads them, mounts the host's
//! root (9p, read-only) with tmpfs on /tmp and /run, mounts the control
//! directory at /tmp/ctl, and switches to the host's /bin/sh running the
//! agent there.

use std::path::Path;

use crate::Kernel;

/// The 9p tags of the host's root and of the guest's control directory.
pub(crate) const ROOT_TAG: &str = "hostroot";
pub(crate) const CTL_TAG: &str = "ctl";

/// `/init`: busybox sh. Failures are printed on the console (the serial
/// log) and the agent never starts: [`crate::Guest::boot`] then reports
/// the log.
fn init_script() -> String {
    format!(
        r#"#!/bin/busybox sh
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin /proc /sys /dev /newroot
/bin/busybox --install -s
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
echo /bin/true > /proc/sys/kernel/modprobe
for m in $(cat /m/order); do insmod /m/$m.ko || echo "roce-kernel-peer: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 {ROOT_TAG} /newroot || echo "roce-kernel-peer: 9p root mount failed"
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mount -t tmpfs tmpfs /newroot/run
mkdir -p /newroot/tmp/ctl
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=512000 {CTL_TAG} /newroot/tmp/ctl || echo "roce-kernel-peer: 9p ctl mount failed"
mount --move /dev /newroot/dev
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
exec switch_root /newroot /bin/sh /tmp/ctl/agent.sh
echo "roce-kernel-peer: switch_root failed"
"#
    )
}

/// One newc (SVR4, no CRC) cpio archive, written entry by entry.
pub(crate) struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    pub(crate) fn new() -> Cpio {
        Cpio {
            buf: Vec::new(),
            ino: 1,
        }
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    pub(crate) fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[], (0, 0));
    }

    pub(crate) fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | mode, data, (0, 0));
    }

    pub(crate) fn char_dev(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020_600, &[], (major, minor));
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        while self.buf.len() % 512 != 0 {
            self.buf.push(0);
        }
        self.buf
    }
}

/// Write the initramfs for `kernel` to `out`.
pub(crate) fn write(kernel: &Kernel, out: &Path) -> Result<(), String> {
    let busybox = std::fs::read("/bin/busybox")
        .map_err(|e| format!("/bin/busybox (Debian busybox-static): {e}"))?;
    let mut c = Cpio::new();
    for d in ["bin", "dev", "m", "newroot", "proc", "sys"] {
        c.dir(d);
    }
    c.char_dev("dev/console", 5, 1);
    c.file("bin/busybox", 0o755, &busybox);
    c.file("init", 0o755, init_script().as_bytes());
    let mut order = String::new();
    for m in &kernel.modules {
        let name = m
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or("module name")?;
        let data = std::fs::read(m).map_err(|e| format!("{}: {e}", m.display()))?;
        c.file(&format!("m/{name}.ko"), 0o644, &data);
        order.push_str(name);
        order.push('\n');
    }
    c.file("m/order", 0o644, order.as_bytes());
    std::fs::write(out, c.finish()).map_err(|e| format!("{}: {e}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_entries_are_aligned_and_end_in_a_trailer() {
        let mut c = Cpio::new();
        c.dir("bin");
        c.file("init", 0o755, b"#!/bin/sh\n");
        let a = c.finish();
        assert_eq!(a.len() % 512, 0);
        assert!(a.starts_with(b"070701"));
        // ino 1, mode 040755, ..., namesize 4 ("bin\0"), check 0.
        assert_eq!(&a[6..14], b"00000001");
        assert_eq!(&a[14..22], b"000041ed");
        assert_eq!(&a[94..102], b"00000004");
        // header 110 + "bin\0" = 114 -> padded to 116: the next entry.
        assert_eq!(&a[116..122], b"070701");
        let s = String::from_utf8_lossy(&a);
        assert!(s.contains("TRAILER!!!"));
        assert!(s.contains("#!/bin/sh\n"));
    }
}
