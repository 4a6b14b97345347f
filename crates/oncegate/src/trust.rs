//! What an authority's HTTPS connection trusts: the system's root certificates, plus extra CA
//! certificates read once at start-up from PEM files (`ONCEGATE_CA_FILE` for every authority,
//! an authority's own `ca_file` for that one).
//!
//! A CA file that is missing, unreadable or holds no certificate is an error naming the file,
//! never a silent fallback to the system's roots alone: the operator who named a private CA
//! expects it to be trusted, and finding out from a failed reconciliation hours later is worse
//! than a refusal to start.

use std::path::PathBuf;

/// Why the trusted certificates cannot be assembled.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what it and its fields hold
pub enum TrustError {
    #[error("the CA file {path} ({origin}) cannot be read: {source}")]
    Read {
        path: PathBuf,
        origin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the CA file {path} ({origin}) holds no PEM certificate (a `-----BEGIN CERTIFICATE-----` block)")]
    NotPem { path: PathBuf, origin: String },
    #[error("the CA file {path} ({origin}) holds a certificate that cannot be used: {cause}")]
    Invalid {
        path: PathBuf,
        origin: String,
        cause: String,
    },
    #[error("the HTTPS client for the authorities cannot be built with the system's root certificates: {cause}")]
    Client { cause: String },
}

/// One extra CA file and where it was named (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CaFile {
    pub path: PathBuf,
    /// `ONCEGATE_CA_FILE`, or the authority's type (`the authority of payflow/refund.created`).
    pub origin: String,
}

/// Reads the certificates of one CA file; an empty, non-PEM or unusable file is an error.
pub(crate) fn read(ca: &CaFile) -> Result<Vec<reqwest::Certificate>, TrustError> {
    let bytes = std::fs::read(&ca.path).map_err(|source| TrustError::Read {
        path: ca.path.clone(),
        origin: ca.origin.clone(),
        source,
    })?;
    let invalid = |e: &reqwest::Error| TrustError::Invalid {
        path: ca.path.clone(),
        origin: ca.origin.clone(),
        cause: cause(e),
    };
    let certs = reqwest::Certificate::from_pem_bundle(&bytes).map_err(|e| invalid(&e))?;
    if certs.is_empty() {
        // rustls' PEM reader skips whatever is not a PEM block, so a DER file or a text file
        // reads as "no certificate" rather than as an error: say so here.
        return Err(TrustError::NotPem {
            path: ca.path.clone(),
            origin: ca.origin.clone(),
        });
    }
    // The certificates are parsed only when a client is built: build one with them alone (no
    // system roots, so it is cheap) to report an unusable block against its own file.
    let mut probe = reqwest::Client::builder().tls_built_in_root_certs(false);
    for c in &certs {
        probe = probe.add_root_certificate(c.clone());
    }
    probe.build().map_err(|e| invalid(&e))?;
    Ok(certs)
}

/// A client trusting the system's roots plus `extra`, with the policy's timeout.
pub(crate) fn client(
    timeout: std::time::Duration,
    extra: &[reqwest::Certificate],
) -> Result<reqwest::Client, TrustError> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout);
    for c in extra {
        builder = builder.add_root_certificate(c.clone());
    }
    builder
        .build()
        .map_err(|e| TrustError::Client { cause: cause(&e) })
}

/// The error and its causes in one line (reqwest's own message is only "builder error").
pub(crate) fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ca(path: &Path) -> CaFile {
        CaFile {
            path: path.to_owned(),
            origin: "ONCEGATE_CA_FILE".to_owned(),
        }
    }

    #[test]
    fn a_missing_or_non_pem_file_is_named() {
        let dir = std::env::temp_dir().join(format!("oncegate-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = read(&ca(&missing)).unwrap_err().to_string();
        assert!(
            e.contains("missing.pem") && e.contains("cannot be read"),
            "{e}"
        );
        assert!(e.contains("ONCEGATE_CA_FILE"), "{e}");
        let text = dir.join("notes.txt");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let e = read(&ca(&text)).unwrap_err().to_string();
        assert!(
            e.contains("notes.txt") && e.contains("no PEM certificate"),
            "{e}"
        );
        let garbled = dir.join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = read(&ca(&garbled)).unwrap_err().to_string();
        assert!(
            e.contains("garbled.pem") && e.contains("cannot be used"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
