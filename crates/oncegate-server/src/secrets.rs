//! Provider signing secrets, resolved once from the environment variables or files the contract
//! names. The contract never holds a secret; this type holds them in memory and never prints
//! them.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use oncegate_core::contract::{Contract, SecretSource, Signature};

/// The signing secret of each provider that declares a signature and whose secret was found.
/// A provider without one accepts only bearer tokens (role `ingest` or `admin`).
#[derive(Clone, Default)]
pub struct ProviderSecrets {
    secrets: BTreeMap<String, Vec<u8>>,
    /// Providers whose declared secret could not be found, said in plain sentences for the
    /// operator who starts the service.
    pub warnings: Vec<String>,
}

impl fmt::Debug for ProviderSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSecrets")
            .field("providers", &self.secrets.keys().collect::<Vec<_>>())
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl ProviderSecrets {
    /// Reads each provider's signing secret from where the contract says it is.
    ///
    /// A missing environment variable or file is not an error: that provider then accepts
    /// only bearer tokens, and a warning says so. A secret that is present but unusable (an
    /// empty value, a `whsec_` secret that is not base64, an unreadable file) is an error,
    /// because starting with it would refuse every genuine delivery.
    pub fn resolve(contract: &Contract) -> Result<ProviderSecrets, String> {
        let mut out = ProviderSecrets::default();
        for (name, provider) in &contract.providers {
            let Some(signature) = &provider.signature else {
                continue;
            };
            let source = match signature {
                Signature::StandardWebhooks { secret, .. } => secret,
                Signature::HmacSha256 { secret, .. } => secret,
            };
            let raw = match source {
                SecretSource::Env(var) => match std::env::var(var) {
                    Ok(v) => Some(v),
                    Err(std::env::VarError::NotPresent) => {
                        out.warnings.push(format!(
                            "provider {name:?}: the environment variable {var} holding its signing secret is not set; its deliveries are accepted only with a bearer token"
                        ));
                        None
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(format!(
                            "provider {name:?}: the environment variable {var} is not valid UTF-8"
                        ))
                    }
                },
                SecretSource::File(path) => match std::fs::read_to_string(path) {
                    Ok(v) => Some(v),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        out.warnings.push(format!(
                            "provider {name:?}: the secret file {path} does not exist; its deliveries are accepted only with a bearer token"
                        ));
                        None
                    }
                    Err(e) => {
                        return Err(format!(
                            "provider {name:?}: the secret file {path} cannot be read ({})",
                            e.kind()
                        ))
                    }
                },
            };
            if let Some(raw) = raw {
                out.insert(name, signature, raw.trim_end_matches(['\r', '\n']))?;
            }
        }
        Ok(out)
    }

    /// Sets a provider's secret directly (tests, embedding). For Standard Webhooks a
    /// `whsec_<base64>` secret is decoded; any other value is used as raw bytes.
    pub fn insert(
        &mut self,
        provider: &str,
        scheme: &Signature,
        secret: &str,
    ) -> Result<(), String> {
        if secret.is_empty() {
            return Err(format!(
                "provider {provider:?}: the signing secret is empty"
            ));
        }
        let bytes = match scheme {
            Signature::StandardWebhooks { .. } => match secret.strip_prefix("whsec_") {
                Some(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| {
                        format!(
                            "provider {provider:?}: the whsec_ signing secret is not valid base64"
                        )
                    })?,
                None => secret.as_bytes().to_vec(),
            },
            Signature::HmacSha256 { .. } => secret.as_bytes().to_vec(),
        };
        self.secrets.insert(provider.to_owned(), bytes);
        Ok(())
    }

    /// Sets the secret of a provider the contract declares, looking its scheme up.
    pub fn insert_for(
        &mut self,
        contract: &Contract,
        provider: &str,
        secret: &str,
    ) -> Result<(), String> {
        let scheme = contract
            .provider(provider)
            .and_then(|p| p.signature.as_ref())
            .ok_or_else(|| {
                format!("provider {provider:?} declares no signature in the contract")
            })?;
        self.insert(provider, scheme, secret)
    }

    pub(crate) fn get(&self, provider: &str) -> Option<&[u8]> {
        self.secrets.get(provider).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"
[providers.envsigned]
event_type = "/type"
signature = { scheme = "standard-webhooks", secret_env = "ONCEGATE_SERVER_UNIT_TEST_SECRET" }

[providers.filesigned]
event_type = "/type"
signature = { scheme = "hmac-sha256", header = "x-sig", secret_file = "/nonexistent/oncegate/secret" }

[providers.unsigned]
event_type = "/type"
"#;

    #[test]
    fn secrets_come_from_the_environment_and_missing_ones_are_warnings() {
        let contract = oncegate_core::contract::parse("t.toml", CONTRACT).unwrap();
        // Only this test reads this variable, so setting it cannot disturb another test.
        std::env::set_var("ONCEGATE_SERVER_UNIT_TEST_SECRET", "whsec_c2VjcmV0\n");
        let secrets = ProviderSecrets::resolve(&contract).unwrap();
        assert_eq!(secrets.get("envsigned"), Some(&b"secret"[..]));
        assert_eq!(secrets.get("filesigned"), None);
        assert_eq!(secrets.get("unsigned"), None);
        assert_eq!(secrets.warnings.len(), 1, "{:?}", secrets.warnings);
        assert!(
            secrets.warnings[0].contains("filesigned") && secrets.warnings[0].contains("bearer")
        );
        assert!(!format!("{secrets:?}").contains("secret\""));

        std::env::set_var("ONCEGATE_SERVER_UNIT_TEST_SECRET", "whsec_not base64!");
        let err = ProviderSecrets::resolve(&contract).unwrap_err();
        assert!(
            err.contains("envsigned") && !err.contains("not base64"),
            "{err}"
        );
        std::env::remove_var("ONCEGATE_SERVER_UNIT_TEST_SECRET");
    }
}
