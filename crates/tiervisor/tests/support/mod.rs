//! Running `tiervisor serve` in tests, and the real clients we check it with.
#![allow(dead_code)] // each test binary uses a different subset

pub mod raw_nbd;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tiervisor"))
}

/// The tools `scripts/test.sh` installs: in CI (`CI=true`) a missing one fails the test
/// instead of skipping it.
pub const INSTALLED_BY_TEST_SH: &[&str] = &[
    "fio",
    "qemu-io",
    "qemu-img",
    "qemu-nbd",
    "nbdinfo",
    "nbdcopy",
    "nbdkit",
    "openssl",
    "qemu-system-x86_64",
    "xz",
];

/// Whether an external tool is installed; if not, the test says it is skipped (or, in CI,
/// where scripts/test.sh installs it, fails).
pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        if in_ci() && INSTALLED_BY_TEST_SH.contains(&tool) {
            panic!("{tool} is not installed, but CI=true and scripts/test.sh installs it");
        }
        skip(&format!(
            "{tool} is not installed (scripts/test.sh installs it)"
        ));
    }
    ok
}

/// `TIERVISOR_TEST_THREADS=N`: run the serve tests with N shards (issue 18).
pub fn test_threads() -> Option<String> {
    std::env::var("TIERVISOR_TEST_THREADS")
        .ok()
        .filter(|n| !n.is_empty() && n != "1")
}

/// A metrics exposition without its `shard` labels (a server with several shards labels
/// every sample with its shard; one line per shard then stays, to be summed).
pub fn unshard_metrics(body: &str) -> String {
    body.lines()
        .map(|l| {
            let mut l = l.to_string();
            while let Some(i) = l.find("shard=\"") {
                let end = l[i + 7..].find('"').map_or(l.len(), |j| i + 8 + j);
                let end = if l[end..].starts_with(',') {
                    end + 1
                } else {
                    end
                };
                l.replace_range(i..end, "");
            }
            format!("{}\n", l.replace("{}", ""))
        })
        .collect()
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Print `SKIP <test>: <why>` on the process's stderr, which the test harness does not
/// capture, so a skipped test shows in the output of a passing run.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<test>");
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// `fio` run inside `dir`, with its state files (`--verify_state_save`) kept there too,
/// so no `*-verify.state` lands in the repository.
pub fn fio(dir: &Path) -> Command {
    let mut c = Command::new("fio");
    c.current_dir(dir)
        .arg(format!("--aux-path={}", dir.display()));
    c
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }
    /// A fresh directory under `base` (e.g. a tmpfs, to test another filesystem).
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = base.join(format!("tv-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct ServerProc {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: Arc<Mutex<String>>,
}

impl ServerProc {
    /// Start `tiervisor serve` on a free port in `data_dir` with extra arguments. With a
    /// `--config`, pools are created on first start (`--format-new`); the embedded
    /// default creates them on its own in a fresh directory.
    pub fn start(data_dir: &Path, extra: &[&str]) -> ServerProc {
        let mut args = extra.to_vec();
        if extra.contains(&"--config") {
            args.push("--format-new");
        }
        Self::start_plain(data_dir, &args)
    }

    /// Start `tiervisor serve` with exactly these extra arguments (and `--threads N`
    /// when `TIERVISOR_TEST_THREADS=N` is set and the test does not choose).
    pub fn start_plain(data_dir: &Path, extra: &[&str]) -> ServerProc {
        Self::start_watching(data_dir, extra, |_| {})
    }

    /// `start_plain`, calling `on_line` with each line the server logs, from the thread
    /// that reads them: a test can act on a line logged before the server is ready.
    pub fn start_watching(
        data_dir: &Path,
        extra: &[&str],
        on_line: impl Fn(&str) + Send + 'static,
    ) -> ServerProc {
        let threads = test_threads().filter(|_| !extra.contains(&"--threads"));
        let threads: Vec<&str> = match &threads {
            Some(n) => vec!["--threads", n],
            None => vec![],
        };
        Self::spawn(data_dir, &[extra, &threads].concat(), on_line)
    }

    /// Exactly these arguments, even under `TIERVISOR_TEST_THREADS` (a test of what
    /// `serve` does when no shard count is given).
    pub fn start_as_given(data_dir: &Path, extra: &[&str]) -> ServerProc {
        Self::spawn(data_dir, extra, |_| {})
    }

    fn spawn(
        data_dir: &Path,
        extra: &[&str],
        on_line: impl Fn(&str) + Send + 'static,
    ) -> ServerProc {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tiervisor serve");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                on_line(&line);
                // Logged before the address is handed over: a test that asserts on the
                // address line right after `start` returns must find it (serve_tls did not,
                // once, when the reader was preempted between the two).
                log2.lock().unwrap().push_str(&format!("{line}\n"));
                // nbd:// or, with TLS, nbds://
                if let Some(rest) = line.split("://").nth(1)
                    && line.contains("NBD over TCP")
                {
                    let _ = tx.send(rest.split('/').next().unwrap_or("").to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("server did not start; log:\n{}", log.lock().unwrap())
            });
        ServerProc {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    pub fn uri(&self, volume: &str) -> String {
        format!("nbd://{}/{volume}", self.addr)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// kill -9: no shutdown, no final flush.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Send a signal to the server.
    pub fn signal(&self, sig: i32) {
        signal_child(&self.child, sig);
    }

    /// Wait until the log contains `what` (panics after 30 s).
    pub fn wait_log(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log().contains(what) {
            assert!(
                Instant::now() < deadline,
                "no {what:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait for the exit; returns the exit status code.
    pub fn term(self) -> Option<i32> {
        self.signal(15);
        self.wait_exit()
    }

    /// Wait for the server to exit (it must within 60 s); returns the exit status code.
    pub fn wait_exit(mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not stop after SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Send a signal to a child process.
pub fn signal_child(child: &Child, sig: i32) {
    // SAFETY: sending a signal to our own child process.
    unsafe { libc_kill(child.id() as i32, sig) };
}

/// SIGKILL a whole process group.
pub fn kill_group(pgid: u32) {
    // SAFETY: signalling a process group our test created.
    unsafe { libc_kill(-(pgid as i32), 9) };
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Run a command; panic with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("run command");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{cmd:?} failed ({}):\n{out}", o.status);
    out
}

/// Run a command and return (success, output).
pub fn try_run(cmd: &mut Command) -> (bool, String) {
    let o = cmd.output().expect("run command");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// A file of `len` pseudo-random bytes (xorshift: every 8-byte word differs).
pub fn write_random_image(path: &Path, len: usize) {
    let mut data = vec![0u8; len];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for c in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    std::fs::write(path, &data).unwrap();
}

/// A tmpfs of `size` mounted for the test, unmounted on drop; None (with a message)
/// where mounting is not permitted.
pub struct SmallFs(pub PathBuf);

impl SmallFs {
    pub fn mount(at: &Path, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)");
            return None;
        }
        Some(SmallFs(at.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fill the filesystem at `dir` until a write fails.
pub fn fill(dir: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0x55u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    let small = vec![0x55u8; 4096];
    while f.write_all(&small).is_ok() {}
}

/// Give back the space [`fill`] took: truncate the filler, then remove it. Truncating
/// frees its blocks at once; removing alone frees them only once no process holds the
/// file open, and a process another test forks while `fill` writes (the likely holder)
/// keeps it until its exec closes it (serve_space's flake at 135638b: vm1's FLUSH right after the removal
/// found the tmpfs still full, its journal write failed with ENOSPC).
pub fn unfill(dir: &Path) {
    let filler = dir.join("filler");
    let f = std::fs::OpenOptions::new().write(true).open(&filler);
    f.and_then(|f| f.set_len(0)).unwrap();
    std::fs::remove_file(&filler).unwrap();
}

/// A server config with one SSD pool file `ssd` (plus `pool_keys` lines) of `size`, and one
/// thick 16 MiB volume (plus `volume_keys` lines) on it.
pub fn one_pool_config(size: &str, pool_keys: &str, volume: &str, volume_keys: &str) -> String {
    format!(
        "chunk = \"1m\"\njournal = \"4m\"\nmetadata_pool = \"ssd\"\n\n[[pool]]\nname = \"ssd\"\npath = \"ssd.pool\"\nsize = \"{size}\"\nkind = \"ssd\"\n{pool_keys}\n\n[[volume]]\nname = \"{volume}\"\nsize = \"16m\"\npool = \"ssd\"\nprovisioning = \"thick\"\n{volume_keys}\n"
    )
}

/// Chunks a volume (one of `ctl stat --json`'s `engine.volumes`) has on `pool`.
pub fn chunks_on_pool(vol: &serde_json::Value, pool: &str) -> u64 {
    (vol["chunks_by_pool"].as_array().into_iter().flatten())
        .find(|p| p[0] == pool)
        .and_then(|p| p[1].as_u64())
        .unwrap_or(0)
}

/// Read export `name` MiB by MiB over NBD and compare each with `reference`.
pub fn check_export_by_mib(addr: &str, name: &str, reference: &[u8], when: &str) {
    const MIB: usize = 1 << 20;
    let mut s = raw_nbd::handshake(addr, name);
    for c in 0..reference.len() / MIB {
        let got = raw_nbd::read_at(&mut s, (c * MIB) as u64, MIB);
        assert!(
            got == reference[c * MIB..(c + 1) * MIB],
            "{when}: chunk {c} differs"
        );
    }
}
