//! NBD over TLS (`NBD_OPT_STARTTLS`, X.509), checked with libnbd's and QEMU's own TLS
//! clients: certificates made with openssl in a temporary directory, laid out as qemu's
//! `tls-creds-x509` and nbdkit's `--tls-certificates` expect.

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"
tls = "require"
tls_certificates = "PKI"
unix_socket = "nbd.sock"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "256m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "1g"
kind = "hdd"

[[volume]]
name = "vm1"
size = "256m"
pool = "hdd"
provisioning = "thin"
"#;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`; and in
/// `dir/anon` the CA alone (a client without a certificate of its own).
fn make_pki(dir: &Path) {
    let sh = r#"set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 2 -subj "/CN=tiervisor test CA"
openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj "/CN=localhost"
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" > server.ext
openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile server.ext
openssl req -newkey rsa:2048 -nodes -keyout client-key.pem -out client.csr -subj "/CN=client"
printf "extendedKeyUsage=clientAuth\n" > client.ext
openssl x509 -req -in client.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out client-cert.pem -days 2 -extfile client.ext
mkdir anon && cp ca-cert.pem anon/
"#;
    run(Command::new("sh").arg("-c").arg(sh).current_dir(dir));
}

fn tls_uri(s: &ServerProc, volume: &str, certs: &Path) -> String {
    format!(
        "nbds://{}/{volume}?tls-certificates={}",
        s.addr,
        certs.display()
    )
}

/// qemu-io on `volume` over TLS with credentials from `certs`.
fn qemu_io(s: &ServerProc, volume: &str, certs: &Path, cmds: &[&str]) -> (bool, String) {
    let (host, port) = s.addr.rsplit_once(':').unwrap();
    let mut c = Command::new("qemu-io");
    c.arg("--object").arg(format!(
        "tls-creds-x509,id=tls0,dir={},endpoint=client",
        certs.display()
    ));
    c.arg("--image-opts").arg(format!(
        "driver=nbd,host={host},port={port},export={volume},tls-creds=tls0"
    ));
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    try_run(&mut c)
}

fn start(d: &TempDir, pki: &Path, extra: &[&str]) -> ServerProc {
    let conf = d.path().join("tls.toml");
    std::fs::write(&conf, CONFIG.replace("PKI", pki.to_str().unwrap())).unwrap();
    let mut args = vec!["--config", conf.to_str().unwrap()];
    args.extend_from_slice(extra);
    ServerProc::start(d.path(), &args)
}

#[test]
fn tls_is_required_and_carries_reads_writes_and_copies() {
    if !have("openssl") || !have("nbdinfo") || !have("qemu-io") || !have("nbdcopy") {
        return;
    }
    let d = TempDir::new("tls");
    let pki = d.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    make_pki(&pki);
    let s = start(&d, &pki, &[]);
    assert!(s.log().contains("nbds://"), "{}", s.log());

    // libnbd over TLS sees the export.
    let size = run(Command::new("nbdinfo")
        .arg("--size")
        .arg(tls_uri(&s, "vm1", &pki)));
    assert_eq!(size.trim(), (256u64 << 20).to_string());
    // And over the Unix socket.
    let size = run(Command::new("nbdinfo").arg("--size").arg(format!(
        "nbds+unix:///vm1?socket={}&tls-certificates={}",
        d.path().join("nbd.sock").display(),
        pki.display()
    )));
    assert_eq!(size.trim(), (256u64 << 20).to_string());
    // A plaintext client is refused (NBD_REP_ERR_TLS_REQD), not served.
    let (ok, out) = try_run(Command::new("nbdinfo").arg("--size").arg(s.uri("vm1")));
    assert!(
        !ok,
        "plaintext client served under tls = \"require\": {out}"
    );

    // QEMU over TLS: a 32 MiB write and read (many TLS records each way), and a small one
    // far out, then read back.
    let (ok, out) = qemu_io(
        &s,
        "vm1",
        &pki,
        &[
            "write -P 0xab 0 32M",
            "write -P 0xcd 200M 1M",
            "flush",
            "read -P 0xab 0 32M",
            "read -P 0xcd 200M 1M",
        ],
    );
    assert!(ok && !out.contains("Pattern verification failed"), "{out}");

    // nbdcopy with four TLS connections copies the volume exactly.
    let copy = d.path().join("copy.raw");
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(tls_uri(&s, "vm1", &pki))
        .arg(&copy));
    let img = std::fs::read(&copy).unwrap();
    assert_eq!(img.len(), 256 << 20);
    assert!(img[..32 << 20].iter().all(|&b| b == 0xab));
    assert!(img[200 << 20..201 << 20].iter().all(|&b| b == 0xcd));
    assert!(img[33 << 20..200 << 20].iter().all(|&b| b == 0));
    assert_eq!(s.term(), Some(0));

    // With tls_verify_peer, a client without a certificate signed by the CA is refused;
    // one with it reads what was written before the restart.
    let s = ServerProc::start_plain(
        d.path(),
        &[
            "--config",
            d.path().join("tls.toml").to_str().unwrap(),
            "--tls-verify-peer",
        ],
    );
    let (ok, out) = try_run(Command::new("nbdinfo").arg("--size").arg(tls_uri(
        &s,
        "vm1",
        &pki.join("anon"),
    )));
    assert!(!ok, "a client without a certificate was served: {out}");
    let (ok, out) = qemu_io(&s, "vm1", &pki, &["read -P 0xcd 200M 1M"]);
    assert!(ok && !out.contains("Pattern verification failed"), "{out}");
    assert!(
        s.log().contains("peer sent no certificates"),
        "the refusal is logged: {}",
        s.log()
    );
    assert_eq!(s.term(), Some(0));
}

#[test]
fn bad_tls_settings_are_refused_before_anything_is_created() {
    let d = TempDir::new("tls-bad");
    let data = d.path().join("data");
    let conf = d.path().join("tls.toml");
    let missing = d.path().join("no-such-dir");
    std::fs::write(&conf, CONFIG.replace("PKI", missing.to_str().unwrap())).unwrap();
    let out = Command::new(bin())
        .args([
            "serve",
            "--format-new",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&conf)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("server-cert.pem") && err.contains("no-such-dir"),
        "the error names the missing file: {err}"
    );
    assert!(!data.exists(), "nothing may be created: {err}");

    // Pre-shared keys and unknown modes: the file and line, and what is expected.
    for (key, want) in [
        (
            "tls_psk = \"keys.psk\"",
            "pre-shared keys are not supported",
        ),
        ("tls = \"yes\"", "expected \"off\", \"on\" or \"require\""),
    ] {
        let text = CONFIG
            .replace("tls = \"require\"", key)
            .replace("PKI", missing.to_str().unwrap());
        std::fs::write(&conf, text).unwrap();
        let out = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&conf)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{key}");
        assert!(
            err.contains(want) && err.contains("tls.toml:5"),
            "{key}: {err}"
        );
        assert!(!data.exists());
    }
}
