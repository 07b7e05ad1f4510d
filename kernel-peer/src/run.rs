//! A server/client pair of programs (perftest, the pingpongs), each side on
//! the host (in the namespace, with its own environment: `LD_PRELOAD` of
//! the stack's library, `ROCE_BACKEND`, ...) or in a guest; both bounded
//! in time and killed at the deadline.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::guest::shell_line;
use crate::{Done, Guest, Job};

/// Where one side of a pair runs.
pub enum Side<'a> {
    /// On the host: under the command prefix `wrap` (`ip netns exec NS`),
    /// with `env` added.
    Host {
        /// The command prefix.
        wrap: Vec<String>,
        /// Variables added to the environment.
        env: Vec<(String, String)>,
    },
    /// In a guest (Debian's binaries on the kernel's rxe).
    Guest(&'a Guest),
}

/// The outcome of a pair run.
#[derive(Debug, Clone)]
pub struct PairRun {
    /// The server.
    pub server: Done,
    /// The client.
    pub client: Done,
    /// Seconds from starting the server to the end of both.
    pub secs: f64,
}

impl PairRun {
    /// Both sides exited 0.
    pub fn ok(&self) -> bool {
        self.server.ok() && self.client.ok()
    }

    /// Both outputs, for messages.
    pub fn report(&self, what: &str) -> String {
        format!(
            "{what}: server {:?}, client {:?} ({:.1} s)\n--- server:\n{}\n--- client:\n{}",
            self.server.code,
            self.client.code,
            self.secs,
            self.server.out.trim_end(),
            self.client.out.trim_end()
        )
    }
}

enum Running<'a> {
    Host(Child, PathBuf),
    Guest(Job<'a>),
}

fn start<'a>(side: &Side<'a>, prog: &str, args: &[String], tag: &str) -> Running<'a> {
    match side {
        Side::Host { wrap, env } => {
            let out = std::env::temp_dir().join(format!(
                "roce-kernel-peer-{}-{tag}-{}.out",
                std::process::id(),
                unique()
            ));
            let f = std::fs::File::create(&out).expect("output file");
            let f2 = f.try_clone().expect("output file");
            let mut c = match wrap.split_first() {
                None => Command::new(format!("/usr/bin/{prog}")),
                Some((first, rest)) => {
                    let mut c = Command::new(first);
                    c.args(rest).arg(format!("/usr/bin/{prog}"));
                    c
                }
            };
            c.args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::from(f))
                .stderr(Stdio::from(f2));
            for (k, v) in env {
                c.env(k, v);
            }
            Running::Host(c.spawn().unwrap_or_else(|e| panic!("{prog}: {e}")), out)
        }
        Side::Guest(g) => {
            let mut line = vec![prog];
            line.extend(args.iter().map(String::as_str));
            Running::Guest(g.spawn(&format!("exec {}", shell_line(&line))))
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Running<'_> {
    fn finished(&mut self) -> bool {
        match self {
            Running::Host(c, _) => !matches!(c.try_wait(), Ok(None)),
            Running::Guest(j) => j.finished(),
        }
    }

    fn wait(self, deadline: Instant) -> Done {
        match self {
            Running::Host(mut c, out) => {
                let code = loop {
                    match c.try_wait() {
                        Ok(Some(s)) => break s.code(),
                        Ok(None) if Instant::now() >= deadline => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break None;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                        Err(_) => break None,
                    }
                };
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                let _ = std::fs::remove_file(&out);
                Done { code, out: text }
            }
            Running::Guest(j) => j.wait(deadline),
        }
    }

    /// Whether the process listens on TCP `port` (in its own namespace).
    fn listening(&mut self, side: &Side<'_>, port: u16) -> bool {
        match (self, side) {
            (Running::Host(c, _), _) => listening_in(&format!("/proc/{}/net", c.id()), port),
            (Running::Guest(_), Side::Guest(g)) => g
                .run(
                    &format!("ss -Hltn 'sport = :{port}' | grep -q LISTEN"),
                    Duration::from_secs(30),
                )
                .ok(),
            _ => false,
        }
    }
}

fn listening_in(dir: &str, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("{dir}/{f}")).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && cols[3] == "0A"
                    && cols[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
        })
    })
}

/// Run `prog server_args -p port` at `server` and, once it listens, `prog
/// client_args -p port connect_to` at `client`; both killed at `timeout`
/// (the server gets 20 s more after the client ends, to finish its side;
/// the client 30 s after the server ends).
/// `ready` runs between the two (a capture's start, say).
#[allow(clippy::too_many_arguments)]
pub fn run_pair(
    server: &Side<'_>,
    client: &Side<'_>,
    prog: &str,
    server_args: &[&str],
    client_args: &[&str],
    connect_to: &str,
    port: u16,
    timeout: Duration,
) -> PairRun {
    let t0 = Instant::now();
    let deadline = t0 + timeout;
    let mut sa: Vec<String> = server_args.iter().map(|s| s.to_string()).collect();
    sa.extend(["-p".to_string(), port.to_string()]);
    let mut ca: Vec<String> = client_args.iter().map(|s| s.to_string()).collect();
    ca.extend(["-p".to_string(), port.to_string(), connect_to.to_string()]);
    let mut s = start(server, prog, &sa, "server");
    while !s.listening(server, port) && !s.finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = start(client, prog, &ca, "client");
    // A server that has ended (perftest's server ends on an error
    // completion) leaves its client waiting for ever: 30 s more, then the
    // client is killed.
    let mut client_deadline = deadline;
    while !c.finished() && Instant::now() < client_deadline {
        if s.finished() {
            client_deadline = client_deadline.min(Instant::now() + Duration::from_secs(30));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let client_done = c.wait(client_deadline);
    let server_done = s.wait(deadline.max(Instant::now() + Duration::from_secs(20)));
    PairRun {
        server: server_done,
        client: client_done,
        secs: t0.elapsed().as_secs_f64(),
    }
}

/// The numbers of the perftest result row that starts with `bytes`.
pub fn perftest_row(out: &str, bytes: u64) -> Option<Vec<f64>> {
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&bytes.to_string().as_str()))
            .then(|| f.iter().filter_map(|x| x.parse::<f64>().ok()).collect())
    })
}
