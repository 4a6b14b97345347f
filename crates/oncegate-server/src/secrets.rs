//! Provider signing secrets, resolved once from the environment variables or files the contract
//! names. The contract never holds a secret; this type holds them in memory and never prints
//! them.

use std::collections::BTreeMap;
use std::fmt;

use axum::http::HeaderMap;
use base64::Engine;
use oncegate_core::contract::{Contract, Scheme, SecretSource};
use time::OffsetDateTime;

use crate::signature::{self, SignatureError};

/// The signing secrets of each provider that declares a signature and whose secrets were
/// found: several during a rotation. A provider without one accepts only bearer tokens (role
/// `ingest` or `admin`).
#[derive(Clone, Default)]
pub struct ProviderSecrets {
    secrets: BTreeMap<String, Vec<Vec<u8>>>,
    /// Secrets that could not be found, said in plain sentences for the operator who starts
    /// the service.
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
    /// Reads each provider's signing secrets from where the contract says they are.
    ///
    /// A missing environment variable or file is not an error: a provider with none of its
    /// secrets found accepts only bearer tokens, and a warning says so; one with some found
    /// verifies with those (the others may be a rotation's retired or future secret), and a
    /// warning names the missing ones. A secret that is present but unusable (an empty value,
    /// a `whsec_` secret that is not base64, an unreadable file) is an error, because starting
    /// with it would refuse genuine deliveries.
    pub fn resolve(contract: &Contract) -> Result<ProviderSecrets, String> {
        let mut out = ProviderSecrets::default();
        for (name, provider) in &contract.providers {
            let Some(signature) = &provider.signature else {
                continue;
            };
            let mut missing = Vec::new();
            for source in &signature.secrets {
                let raw = match source {
                    SecretSource::Env(var) => match std::env::var(var) {
                        Ok(v) => Some(v),
                        Err(std::env::VarError::NotPresent) => {
                            missing.push(format!("the environment variable {var}"));
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
                            missing.push(format!("the secret file {path}"));
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
                    out.insert(name, &signature.scheme, raw.trim_end_matches(['\r', '\n']))?;
                }
            }
            if missing.is_empty() {
                continue;
            }
            let missing = missing.join(" and ");
            out.warnings.push(if out.secrets.contains_key(name) {
                format!("provider {name:?}: {missing} holding one of its signing secrets is not set; it verifies with the others")
            } else if signature.secrets.len() == 1 {
                format!("provider {name:?}: {missing} holding its signing secret is not set; its deliveries are accepted only with a bearer token")
            } else {
                format!("provider {name:?}: none of its signing secrets is set ({missing}); its deliveries are accepted only with a bearer token")
            });
        }
        Ok(out)
    }

    /// Adds a signing secret of a provider directly (tests, embedding); call it once per
    /// secret during a rotation. For Standard Webhooks a `whsec_<base64>` secret is decoded;
    /// any other value, for any other scheme, is used as raw bytes (Stripe's `whsec_…`
    /// secrets are keys as written).
    pub fn insert(&mut self, provider: &str, scheme: &Scheme, secret: &str) -> Result<(), String> {
        if secret.is_empty() {
            return Err(format!(
                "provider {provider:?}: the signing secret is empty"
            ));
        }
        let bytes = match (scheme, secret.strip_prefix("whsec_")) {
            (Scheme::StandardWebhooks { .. }, Some(b64)) => {
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| {
                        format!(
                            "provider {provider:?}: the whsec_ signing secret is not valid base64"
                        )
                    })?
            }
            _ => secret.as_bytes().to_vec(),
        };
        self.secrets
            .entry(provider.to_owned())
            .or_default()
            .push(bytes);
        Ok(())
    }

    /// Adds a signing secret of a provider the contract declares, looking its scheme up.
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
        self.insert(provider, &scheme.scheme, secret)
    }

    /// Verifies a delivery of `provider` signed under `scheme`: any of the provider's secrets
    /// verifying any of the delivery's MACs is enough, and a signed timestamp must be within
    /// the scheme's tolerance of `now`.
    ///
    /// ```
    /// use axum::http::HeaderMap;
    /// use oncegate_server::{sign_hmac, ProviderSecrets};
    /// use oncegate_core::contract::{parse, Encoding};
    ///
    /// let contract = parse("c.toml", r#"
    /// [providers.stripe]
    /// event_type = "/type"
    /// signature = { scheme = "stripe", secret_env = ["STRIPE_OLD", "STRIPE_NEW"] }
    /// "#).unwrap();
    /// let scheme = &contract.provider("stripe").unwrap().signature.as_ref().unwrap().scheme;
    /// let mut secrets = ProviderSecrets::default();
    /// secrets.insert_for(&contract, "stripe", "whsec_old").unwrap();
    /// secrets.insert_for(&contract, "stripe", "whsec_new").unwrap();
    ///
    /// // Signed with the second secret: `<t>.<body>`, hex, in a `v1=` entry.
    /// let body = br#"{"id":"evt_1","type":"charge.refunded"}"#;
    /// let mac = sign_hmac(b"whsec_new", Encoding::Hex, Some(1_700_000_000), body);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("stripe-signature", format!("t=1700000000,v1={mac}").parse().unwrap());
    /// let now = time::OffsetDateTime::from_unix_timestamp(1_700_000_060).unwrap();
    /// assert_eq!(secrets.verify("stripe", scheme, &headers, body, now), Ok(()));
    ///
    /// let later = now + time::Duration::minutes(10);
    /// let stale = secrets.verify("stripe", scheme, &headers, body, later).unwrap_err();
    /// assert_eq!(stale.kind(), "stale");
    /// ```
    pub fn verify(
        &self,
        provider: &str,
        scheme: &Scheme,
        headers: &HeaderMap,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<(), SignatureError> {
        let secrets = self.secrets.get(provider).map_or(&[][..], Vec::as_slice);
        signature::verify(scheme, secrets, headers, body, now)
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
        assert_eq!(
            secrets.secrets.get("envsigned"),
            Some(&vec![b"secret".to_vec()])
        );
        assert_eq!(secrets.secrets.get("filesigned"), None);
        assert_eq!(secrets.secrets.get("unsigned"), None);
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

    #[test]
    fn a_rotation_verifies_with_the_secrets_found_and_names_the_missing_ones() {
        const ROTATING: &str = r#"
[providers.rotating]
event_type = "/type"
signature = { scheme = "stripe", secret_env = ["ONCEGATE_SERVER_UNIT_ROTATION_OLD", "ONCEGATE_SERVER_UNIT_ROTATION_NEW"] }
"#;
        let contract = oncegate_core::contract::parse("t.toml", ROTATING).unwrap();
        // Only this test reads these variables.
        std::env::set_var("ONCEGATE_SERVER_UNIT_ROTATION_OLD", "whsec_old\n");
        std::env::remove_var("ONCEGATE_SERVER_UNIT_ROTATION_NEW");
        let secrets = ProviderSecrets::resolve(&contract).unwrap();
        // Stripe's `whsec_` secrets are keys as written, never base64-decoded.
        assert_eq!(
            secrets.secrets.get("rotating"),
            Some(&vec![b"whsec_old".to_vec()])
        );
        assert_eq!(secrets.warnings.len(), 1, "{:?}", secrets.warnings);
        let w = &secrets.warnings[0];
        assert!(
            w.contains("ONCEGATE_SERVER_UNIT_ROTATION_NEW")
                && w.contains("verifies with the others"),
            "{w}"
        );

        std::env::set_var("ONCEGATE_SERVER_UNIT_ROTATION_NEW", "whsec_new");
        let secrets = ProviderSecrets::resolve(&contract).unwrap();
        assert_eq!(
            secrets.secrets.get("rotating"),
            Some(&vec![b"whsec_old".to_vec(), b"whsec_new".to_vec()])
        );
        assert!(secrets.warnings.is_empty(), "{:?}", secrets.warnings);

        std::env::remove_var("ONCEGATE_SERVER_UNIT_ROTATION_OLD");
        std::env::remove_var("ONCEGATE_SERVER_UNIT_ROTATION_NEW");
        let secrets = ProviderSecrets::resolve(&contract).unwrap();
        assert_eq!(secrets.secrets.get("rotating"), None);
        assert!(
            secrets.warnings[0].contains("none of its signing secrets is set")
                && secrets.warnings[0].contains("bearer token"),
            "{:?}",
            secrets.warnings
        );
    }
}
