//! A QEMU guest running Debian's kernel with rxe, and the host's way to run
//! commands in it: a 9p-shared control directory. The host writes a job
//! `q/ID.sh` (atomically, by rename); the guest's agent (the host's
//! /bin/sh, polling every 50 ms) moves it to `r/ID.sh`, runs it in a
//! session of its own with stdout and stderr in `r/ID.out`, writes its
//! process group to `r/ID.pgid` and, when it ends, its exit status to
//! `r/ID.rc`. The host asks for a kill by creating `r/ID.kill`, and for
//! shutdown by creating `stop`.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::initramfs::{self, CTL_TAG, ROOT_TAG};
use crate::{Kernel, Net};

/// How a guest is made.
#[derive(Debug, Clone)]
pub struct GuestConfig {
    /// A short name (at most 2 characters): its TAP's suffix.
    pub name: String,
    /// Its address on the namespace's subnet: `{prefix}.{host}`.
    pub host: u8,
    /// Memory, MiB.
    pub mem_mib: u32,
    /// Add rxe (`rdma link add rxe0 type rxe netdev eth0`).
    pub rxe: bool,
    /// How long the boot may take (TCG on a loaded machine).
    pub boot_timeout: Duration,
}

impl GuestConfig {
    /// Guest `name` at `.host`, 1 GiB, with rxe, 240 s to boot.
    pub fn new(name: &str, host: u8) -> GuestConfig {
        GuestConfig {
            name: name.into(),
            host,
            mem_mib: 1024,
            rxe: true,
            boot_timeout: Duration::from_secs(240),
        }
    }
}

/// A finished job or process: exit code (`None`: killed at its deadline)
/// and everything it printed (stdout, then stderr for host processes).
#[derive(Debug, Clone)]
pub struct Done {
    /// The exit code.
    pub code: Option<i32>,
    /// Its output.
    pub out: String,
}

impl Done {
    /// Exited 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A running guest; `Drop` shuts it down (and kills QEMU if it does not
/// stop) and removes its directory.
pub struct Guest {
    /// Its address.
    pub ip: String,
    /// Its TAP on the host (in the namespace).
    pub tap: String,
    /// Its MAC address.
    pub mac: String,
    /// rxe's RoCEv2 GID index of its IPv4 address (for `-g`/`-x`), if rxe.
    pub gid_index: Option<u32>,
    /// Seconds from starting QEMU to the agent's first word.
    pub boot_secs: f64,
    dir: PathBuf,
    qemu: Option<Child>,
    next: AtomicU32,
}

/// A job started in a guest.
pub struct Job<'g> {
    guest: &'g Guest,
    id: u32,
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+%@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `args` as one shell command line.
pub fn shell_line(args: &[&str]) -> String {
    args.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The agent (run by the host's /bin/sh in the guest).
fn agent_script(ip: &str, rxe: bool) -> String {
    let rxe_setup = if rxe {
        r#"rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add"
gid=""
i=0
while [ -z "$gid" ] && [ $i -lt 100 ]; do
  for n in 0 1 2 3 4 5 6 7 8 9; do
    g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)
    t=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n 2>/dev/null)
    case "$g" in 0000:0000:0000:0000:0000:ffff:*) [ "$t" = "RoCE v2" ] && gid=$n && break;; esac
  done
  [ -z "$gid" ] && sleep 0.1
  i=$((i+1))
done
[ -n "$gid" ] || fail "no RoCE v2 GID for the IPv4 address"
echo "gid_index=$gid" >> ready.tmp"#
    } else {
        ""
    };
    format!(
        r#"# roce-kernel-peer guest agent (see kernel-peer/src/guest.rs)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C
cd /tmp/ctl || exit 1
fail() {{ echo "error=$1" >> ready.tmp; mv ready.tmp ready; sleep 1; echo o > /proc/sysrq-trigger; sleep 60; }}
: > ready.tmp
# Kernel warnings (rxe's among them) on the serial console.
echo 4 > /proc/sys/kernel/printk
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip link set lo up
ip link set eth0 up || fail "eth0"
ip addr add {ip}/24 dev eth0 || fail "ip addr"
{rxe_setup}
echo "release=$(uname -r)" >> ready.tmp
mkdir -p q r
mv ready.tmp ready
while [ ! -e stop ]; do
  for f in q/*.sh; do
    [ -e "$f" ] || break
    id=${{f#q/}}; id=${{id%.sh}}
    mv "$f" "r/$id.sh" || continue
    ( setsid sh -c 'echo $$ > "r/$1.pgid.tmp"; mv "r/$1.pgid.tmp" "r/$1.pgid"; exec sh "r/$1.sh"' sh "$id" > "r/$id.out" 2>&1 < /dev/null
      echo $? > "r/$id.rc.tmp"; mv "r/$id.rc.tmp" "r/$id.rc" ) &
  done
  for k in r/*.kill; do
    [ -e "$k" ] || break
    id=${{k#r/}}; id=${{id%.kill}}
    if [ -e "r/$id.pgid" ]; then kill -9 -"$(cat "r/$id.pgid")" 2>/dev/null; rm -f "$k"
    elif [ -e "r/$id.rc" ]; then rm -f "$k"; fi
  done
  sleep 0.05
done
echo o > /proc/sysrq-trigger
# init must outlive the power-off, or the kernel panics ("Attempted to
# kill init") on the way down.
sleep 30
"#
    )
}

impl Guest {
    /// Boot `kernel` in QEMU (TCG) in `net`'s namespace, its NIC on a new
    /// TAP of the bridge, and wait for its agent.
    ///
    /// # Errors
    /// What failed, with the tail of the guest's console.
    pub fn boot(net: &Net, kernel: &Kernel, cfg: &GuestConfig) -> Result<Guest, String> {
        let tap = net.add_tap(&cfg.name)?;
        let ip = net.ip(cfg.host);
        let mac = format!("52:54:00:77:00:{:02x}", cfg.host);
        let dir =
            std::env::temp_dir().join(format!("roce-kernel-peer-{}-{}", std::process::id(), tap));
        let _ = std::fs::remove_dir_all(&dir);
        let ctl = dir.join("ctl");
        std::fs::create_dir_all(&ctl).map_err(|e| format!("{}: {e}", ctl.display()))?;
        std::fs::write(ctl.join("agent.sh"), agent_script(&ip, cfg.rxe))
            .map_err(|e| e.to_string())?;
        let initrd = dir.join("initrd.cpio");
        initramfs::write(kernel, &initrd)?;
        let console = dir.join("console.log");
        let mut g = Guest {
            ip,
            tap: tap.clone(),
            mac: mac.clone(),
            gid_index: None,
            boot_secs: 0.0,
            dir: dir.clone(),
            qemu: None,
            next: AtomicU32::new(1),
        };
        let start = Instant::now();
        let child = net
            .exec(&["qemu-system-x86_64"])
            .args(["-accel", "tcg", "-cpu", "max", "-smp", "1", "-m"])
            .arg(cfg.mem_mib.to_string())
            .args(["-nodefaults", "-display", "none", "-no-reboot", "-kernel"])
            .arg(&kernel.vmlinuz)
            .arg("-initrd")
            .arg(&initrd)
            .args([
                "-append",
                "console=ttyS0 quiet panic=-1 rdinit=/init",
                "-serial",
            ])
            .arg(format!("file:{}", console.display()))
            .arg("-virtfs")
            .arg(format!(
                "local,path=/,mount_tag={ROOT_TAG},security_model=none,readonly=on,multidevs=remap"
            ))
            .arg("-virtfs")
            .arg(format!(
                "local,path={},mount_tag={CTL_TAG},security_model=none",
                ctl.display()
            ))
            .arg("-netdev")
            .arg(format!("tap,id=n0,ifname={tap},script=no,downscript=no"))
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={mac}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.join("qemu.err"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .map_err(|e| format!("qemu-system-x86_64: {e}"))?;
        g.qemu = Some(child);
        let ready = ctl.join("ready");
        loop {
            if ready.exists() {
                break;
            }
            if let Some(Ok(Some(s))) = g.qemu.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "QEMU exited ({s}) before the agent started\n{}",
                    g.tail()
                ));
            }
            if start.elapsed() > cfg.boot_timeout {
                return Err(format!(
                    "the guest's agent did not start within {:?}\n{}",
                    cfg.boot_timeout,
                    g.tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        g.boot_secs = start.elapsed().as_secs_f64();
        let words = std::fs::read_to_string(&ready).unwrap_or_default();
        for l in words.lines() {
            if let Some(e) = l.strip_prefix("error=") {
                return Err(format!("guest set-up failed: {e}\n{}", g.tail()));
            }
            if let Some(n) = l.strip_prefix("gid_index=") {
                g.gid_index = n.trim().parse().ok();
            }
        }
        if cfg.rxe && g.gid_index.is_none() {
            return Err(format!("guest reported no GID index: {words}"));
        }
        Ok(g)
    }

    /// The last lines of the guest's serial console and QEMU's stderr.
    pub fn tail(&self) -> String {
        let mut s = String::new();
        for f in ["console.log", "qemu.err"] {
            let t = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            s.push_str(&format!("--- {f} (last lines):\n"));
            for l in &lines[lines.len().saturating_sub(30)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn ctl(&self) -> PathBuf {
        self.dir.join("ctl")
    }

    /// Start shell command `script` in the guest.
    pub fn spawn(&self, script: &str) -> Job<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let q = self.ctl().join("q");
        let tmp = q.join(format!("{id}.tmp"));
        std::fs::write(&tmp, script).expect("write a guest job");
        std::fs::rename(&tmp, q.join(format!("{id}.sh"))).expect("queue a guest job");
        Job { guest: self, id }
    }

    /// Run `script` in the guest; kill it after `timeout`.
    pub fn run(&self, script: &str, timeout: Duration) -> Done {
        self.spawn(script).wait(Instant::now() + timeout)
    }

    /// [`Guest::run`], `Err` with its output unless it exits 0.
    ///
    /// # Errors
    /// The command, its exit code and output.
    pub fn check(&self, script: &str, timeout: Duration) -> Result<String, String> {
        let d = self.run(script, timeout);
        if d.ok() {
            Ok(d.out)
        } else {
            Err(format!("guest `{script}`: {:?}\n{}", d.code, d.out))
        }
    }

    /// A file of the guest's control directory.
    fn file(&self, name: &str) -> PathBuf {
        self.ctl().join("r").join(name)
    }

    /// rxe's hardware counters (`/sys/class/infiniband/rxe0/ports/1/hw_counters`).
    pub fn rxe_counters(&self) -> Vec<(String, u64)> {
        let out = self
            .run(
                "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo \"$f $(cat $f)\"; done",
                Duration::from_secs(30),
            )
            .out;
        out.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// Whether the guest is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.qemu.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Job<'_> {
    /// Whether it has ended.
    pub fn finished(&self) -> bool {
        self.guest.file(&format!("{}.rc", self.id)).exists()
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.guest.file(&format!("{}.out", self.id))).unwrap_or_default()
    }

    /// Kill its process group (SIGKILL).
    pub fn kill(&self) {
        let _ = std::fs::write(self.guest.file(&format!("{}.kill", self.id)), b"");
    }

    /// Wait for it until `deadline`, then kill it (and wait 15 s more for
    /// the agent to report).
    pub fn wait(self, deadline: Instant) -> Done {
        let rc = self.guest.file(&format!("{}.rc", self.id));
        let mut killed = false;
        let mut hard = deadline + Duration::from_secs(15);
        loop {
            if let Ok(s) = std::fs::read_to_string(&rc) {
                if let Ok(code) = s.trim().parse::<i32>() {
                    let out = self.output();
                    return Done {
                        code: if killed { None } else { Some(code) },
                        out,
                    };
                }
            }
            let now = Instant::now();
            if now >= deadline && !killed {
                self.kill();
                killed = true;
                hard = now + Duration::from_secs(15);
            }
            if now >= hard {
                let mut out = self.output();
                out.push_str("\n[roce-kernel-peer: the guest's agent did not report]");
                return Done { code: None, out };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = std::fs::write(self.ctl().join("stop"), b"");
        if let Some(mut c) = self.qemu.take() {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::env::var_os("ROCE_KERNEL_PEER_KEEP").is_some() {
            eprintln!("guest directory kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_quote_what_the_shell_would_split() {
        assert_eq!(shell_line(&["ib_write_bw", "-s", "2"]), "ib_write_bw -s 2");
        assert_eq!(shell_line(&["a b", "it's", ""]), r"'a b' 'it'\''s' ''");
    }
}
