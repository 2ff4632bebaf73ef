//! TLS for NBD (`NBD_OPT_STARTTLS`, the NBD project's doc/proto.md "TLS support"), with
//! rustls. Certificates are read from one directory with the file names qemu's
//! `tls-creds-x509` and nbdkit's `--tls-certificates` use, so an operator's existing
//! directory works unchanged: `server-cert.pem` (the server's chain), `server-key.pem`,
//! and `ca-cert.pem` (the CA that signs client certificates, needed only when
//! `tls_verify_peer` is on).
//!
//! Pre-shared keys (qemu's `tls-creds-psk`, nbdkit's `--tls-psk`) are refused with a
//! clear error: rustls has no external-PSK support (rustls/rustls#174, PR #2424 unmerged).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `tls = "off" | "on" | "require"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// Clients may upgrade; plaintext clients are served too.
    On,
    /// Every option but `STARTTLS` and `ABORT` is refused (`NBD_REP_ERR_TLS_REQD`) until
    /// the client upgrades; `NBD_OPT_EXPORT_NAME` closes the connection.
    Require,
}

impl TlsMode {
    pub fn parse(s: &str) -> Option<TlsMode> {
        match s {
            "off" => Some(TlsMode::Off),
            "on" => Some(TlsMode::On),
            "require" => Some(TlsMode::Require),
            _ => None,
        }
    }
}

/// What the configuration says about TLS, and the rustls configuration built from it at
/// start (before any pool file is touched, so a missing certificate costs nothing).
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    pub mode: TlsMode,
    /// The certificate directory (see the module comment).
    pub certificates: Option<PathBuf>,
    /// Ask clients for a certificate signed by `ca-cert.pem` and refuse those without.
    pub verify_peer: bool,
    /// Built by [`TlsSettings::load`]; `None` while `mode` is off.
    pub server: Option<Arc<rustls::ServerConfig>>,
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let it = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("TLS: cannot read {}: {e}", path.display()))?;
    let certs = it
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS: {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS: {} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

impl TlsSettings {
    /// Read the certificates and build the server's TLS configuration. An error names the
    /// file and what it should hold.
    pub fn load(&mut self) -> Result<(), String> {
        if self.mode == TlsMode::Off {
            self.server = None;
            return Ok(());
        }
        let Some(dir) = &self.certificates else {
            return Err(
                "tls is on but tls_certificates is not set: expected a directory holding server-cert.pem and server-key.pem (as qemu's tls-creds-x509 and nbdkit's --tls-certificates)"
                    .into(),
            );
        };
        let chain = certs(&dir.join("server-cert.pem"))?;
        let key_path = dir.join("server-key.pem");
        let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
            format!(
                "TLS: cannot read a private key from {}: {e} (expected a PEM PRIVATE KEY)",
                key_path.display()
            )
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if self.verify_peer {
            let ca_path = dir.join("ca-cert.pem");
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(&ca_path)? {
                roots
                    .add(c)
                    .map_err(|e| format!("TLS: {}: {e}", ca_path.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| format!("TLS: {}: {e}", ca_path.display()))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let cfg = builder.with_single_cert(chain, key).map_err(|e| {
            format!(
                "TLS: {} and {} do not make a usable certificate: {e}",
                dir.join("server-cert.pem").display(),
                key_path.display()
            )
        })?;
        self.server = Some(Arc::new(cfg));
        Ok(())
    }
}
