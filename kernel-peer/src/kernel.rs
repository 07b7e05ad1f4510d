//! Debian's kernel package, downloaded at test time into a cache outside
//! the repository and reduced to what a guest needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::sh;

/// The modules a peer guest loads (their dependencies are added from each
/// module's `depends=`): virtio PCI, network and 9p; rxe and the verbs and
/// RDMA-CM stack above it. `crc32_generic` is rxe's ICRC (`crypto-crc32`,
/// which the kernel would otherwise ask modprobe for), loaded before it.
pub(crate) const ROOT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "crc32_generic",
    "ib_uverbs",
    "rdma_rxe",
    "ib_cm",
    "rdma_cm",
    "rdma_ucm",
];

/// The kernel image and its modules, ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The Debian package the files came from (`linux-image-6.1.0-57-amd64`).
    pub package: String,
    /// The kernel release (`6.1.0-57-amd64`).
    pub release: String,
    /// The bzImage.
    pub vmlinuz: PathBuf,
    /// The modules to load, in load order (dependencies first).
    pub modules: Vec<PathBuf>,
}

/// Where downloaded kernels are kept: `$ROCE_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/roce-kernel-peer`, else `~/.cache/roce-kernel-peer`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ROCE_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("roce-kernel-peer")
}

/// An exclusive lock on `path` (flock), held while the value lives.
struct Lock(std::fs::File);

impl Lock {
    fn take(path: &Path) -> Result<Lock, String> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: a valid descriptor owned by `f`.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!("flock {}", path.display()));
        }
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor owned by `self.0`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Kernel {
    /// Debian's current kernel (`ROCE_KERNEL_PACKAGE`, default the
    /// `linux-image-amd64` metapackage, resolved to the image package it
    /// depends on), from the cache or downloaded with `apt-get download`
    /// (after `apt-get update` if the download fails) and unpacked with
    /// `dpkg-deb`. Concurrent callers share one download (a lock file).
    ///
    /// # Errors
    /// A line saying which step failed.
    pub fn debian() -> Result<Kernel, String> {
        let meta =
            std::env::var("ROCE_KERNEL_PACKAGE").unwrap_or_else(|_| "linux-image-amd64".into());
        let cache = cache_dir();
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        let _lock = Lock::take(&cache.join("lock"))?;
        let package = match image_package(&meta) {
            Ok(p) => p,
            Err(e) => {
                // Offline, or no package lists: any kernel already cached.
                if let Some(k) = cached_any(&cache) {
                    return Ok(k);
                }
                return Err(e);
            }
        };
        let dir = cache.join(format!("{package}-{}", modules_key()));
        if dir.join(".complete").exists() {
            return load(&dir, &package);
        }
        let work = cache.join(format!("work-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        let result = fetch_into(&work, &package, &dir);
        let _ = std::fs::remove_dir_all(&work);
        result?;
        load(&dir, &package)
    }
}

/// A stable key of [`ROOT_MODULES`] (FNV-1a), so a changed list unpacks
/// the package again.
fn modules_key() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ROOT_MODULES.join(",").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", h as u32)
}

/// The image package a metapackage depends on (itself if it is one).
fn image_package(meta: &str) -> Result<String, String> {
    // linux-image-6.1.0-57-amd64, not linux-image-amd64.
    let versioned = |p: &str| {
        p.strip_prefix("linux-image-")
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    };
    if versioned(meta) {
        return Ok(meta.to_string());
    }
    let out = sh(&[
        "apt-cache",
        "depends",
        "--no-recommends",
        "--no-suggests",
        meta,
    ])?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(|p| p.trim().trim_start_matches('<').trim_end_matches('>'))
        .find(|p| versioned(p))
        .map(str::to_string)
        .ok_or_else(|| {
            format!("apt-cache depends {meta}: no linux-image package (run apt-get update)")
        })
}

/// The newest complete kernel in the cache.
fn cached_any(cache: &Path) -> Option<Kernel> {
    let key = modules_key();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.join(".complete").exists()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(&key))
        })
        .collect();
    dirs.sort();
    let dir = dirs.pop()?;
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let package = name.strip_suffix(&format!("-{key}"))?.to_string();
    load(&dir, &package).ok()
}

/// Download `package` into `work`, unpack it there, and copy the image and
/// the module closure into `dest` (then marked complete).
fn fetch_into(work: &Path, package: &str, dest: &Path) -> Result<(), String> {
    let download = |w: &Path| {
        std::process::Command::new("apt-get")
            .args(["download", "-qq", package])
            .current_dir(w)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("apt-get download: {e}"))
            .and_then(|o| {
                if o.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "apt-get download {package}: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
            })
    };
    if download(work).is_err() {
        sh(&["apt-get", "update", "-qq"])?;
        download(work)?;
    }
    let deb = std::fs::read_dir(work)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    let root = work.join("x");
    sh(&[
        "dpkg-deb",
        "-x",
        deb.to_str().ok_or("path")?,
        root.to_str().ok_or("path")?,
    ])?;
    let boot = root.join("boot");
    let vmlinuz = std::fs::read_dir(&boot)
        .map_err(|e| format!("{}: {e}", boot.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .ok_or("no boot/vmlinuz-* in the package")?;
    let release = vmlinuz
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("vmlinuz-")
        .to_string();
    let mods = root.join("lib/modules").join(&release);
    let order = module_order(&mods)?;
    let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("modules")).map_err(|e| e.to_string())?;
    std::fs::copy(&vmlinuz, tmp.join("vmlinuz")).map_err(|e| e.to_string())?;
    std::fs::write(tmp.join("release"), &release).map_err(|e| e.to_string())?;
    let mut list = String::new();
    for (name, path) in &order {
        std::fs::copy(path, tmp.join("modules").join(format!("{name}.ko")))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        list.push_str(name);
        list.push('\n');
    }
    std::fs::write(tmp.join("modules/order"), list).map_err(|e| e.to_string())?;
    std::fs::write(
        tmp.join(".complete"),
        deb.file_name().unwrap().to_string_lossy().as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(dest);
    std::fs::rename(&tmp, dest).map_err(|e| format!("{}: {e}", dest.display()))
}

/// A cached kernel directory.
fn load(dir: &Path, package: &str) -> Result<Kernel, String> {
    let release = std::fs::read_to_string(dir.join("release")).map_err(|e| e.to_string())?;
    let order = std::fs::read_to_string(dir.join("modules/order")).map_err(|e| e.to_string())?;
    Ok(Kernel {
        package: package.to_string(),
        release: release.trim().to_string(),
        vmlinuz: dir.join("vmlinuz"),
        modules: order
            .lines()
            .map(|n| dir.join("modules").join(format!("{n}.ko")))
            .collect(),
    })
}

/// A module's `depends=` (from its `.modinfo` strings), names normalized
/// to underscores.
fn depends(ko: &[u8]) -> Vec<String> {
    let key = b"\0depends=";
    ko.windows(key.len())
        .position(|w| w == key)
        .map(|i| {
            let rest = &ko[i + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// [`ROOT_MODULES`] and their dependencies under `mods` (the package's
/// `lib/modules/RELEASE`), dependencies first.
fn module_order(mods: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![mods.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
                if let Some(stem) = n.strip_suffix(".ko") {
                    files.insert(stem.replace('-', "_"), p.clone());
                }
            }
        }
    }
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    fn visit(
        name: &str,
        files: &BTreeMap<String, PathBuf>,
        done: &mut BTreeSet<String>,
        order: &mut Vec<(String, PathBuf)>,
        depth: usize,
    ) -> Result<(), String> {
        if done.contains(name) {
            return Ok(());
        }
        if depth > 32 {
            return Err(format!("module dependency loop at {name}"));
        }
        let path = files
            .get(name)
            .ok_or_else(|| format!("module {name} is not in the package"))?;
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for d in depends(&bytes) {
            visit(&d, files, done, order, depth + 1)?;
        }
        done.insert(name.to_string());
        order.push((name.to_string(), path.clone()));
        Ok(())
    }
    for m in ROOT_MODULES {
        visit(m, &files, &mut done, &mut order, 0)?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_reads_the_modinfo_string() {
        let ko = b"\x7fELF...\0license=GPL\0depends=ib_core,udp-tunnel\0vermagic=6.1\0";
        assert_eq!(depends(ko), ["ib_core", "udp_tunnel"]);
        assert!(depends(b"\0depends=\0").is_empty());
        assert!(depends(b"nothing").is_empty());
    }
}

#[cfg(test)]
mod fetch_tests {
    /// Downloads ~70 MB: `cargo test -p roce-kernel-peer -- --ignored`.
    #[test]
    #[ignore = "downloads Debian's kernel package"]
    fn debian_kernel_is_fetched_and_reduced() {
        let k = super::Kernel::debian().unwrap();
        assert!(k.vmlinuz.exists());
        assert!(k.modules.iter().any(|m| m.ends_with("rdma_rxe.ko")));
        eprintln!("{k:?}");
    }
}
