//! Bearer tokens: who may call which route, and which tenants they may see.
//!
//! A token has a role and an optional tenant restriction. Tokens are compared in constant time
//! (over their SHA-256 digests, so neither the content nor the length of a configured secret
//! leaks through timing), and a token's secret never appears in `Debug` output or a log.

use std::fmt;

use axum::http::HeaderMap;
use oncegate::store::TenantFilter;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// What a bearer token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Posts deliveries, completes / fails / heartbeats the effects it reserved, claims work.
    Ingest,
    /// Reads proofs, lists and resolves the queue, reads the report and the metrics.
    Operator,
    /// Everything, including reading a delivery's payload.
    Admin,
}

impl Role {
    /// Its name in `ONCEGATE_TOKENS` and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// The role named `s`, if one is.
    pub fn parse(s: &str) -> Option<Role> {
        [Role::Ingest, Role::Operator, Role::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// One configured bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The bearer secret (compared in constant time; never logged).
    pub secret: String,
    /// What it may do.
    pub role: Role,
    /// `None`: every tenant. `Some(list)`: only these; others' deliveries answer 404.
    pub tenants: Option<Vec<String>>,
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("secret", &"<redacted>")
            .field("role", &self.role)
            .field("tenants", &self.tenants)
            .finish()
    }
}

impl ApiToken {
    /// Parses a token list such as `admin:*:s3cret;ingest:acme,beta:tok2`.
    ///
    /// Entries are separated by `;`; each is `role:tenants:secret` where `role` is `ingest`,
    /// `operator` or `admin`, `tenants` is `*` (every tenant) or a comma-separated list, and the
    /// secret is everything after the second `:` (so it may itself contain `:`). Blank entries
    /// are skipped. Errors name the entry by position, never by its secret.
    pub fn parse_list(spec: &str) -> Result<Vec<ApiToken>, String> {
        let mut out: Vec<ApiToken> = Vec::new();
        for (i, entry) in spec.split(';').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let n = i + 1;
            let mut parts = entry.splitn(3, ':');
            let role = parts.next().unwrap_or_default().trim();
            let (Some(tenants), Some(secret)) = (parts.next(), parts.next()) else {
                return Err(format!(
                    "token entry {n} is not `role:tenants:secret` (for example `ingest:acme,beta:s3cret` or `admin:*:s3cret`)"
                ));
            };
            let role = Role::parse(role).ok_or_else(|| {
                format!("token entry {n} has role {role:?}: use ingest, operator or admin")
            })?;
            let tenants = match tenants.trim() {
                "*" => None,
                list => {
                    let names: Vec<String> = list
                        .split(',')
                        .map(|t| t.trim().to_owned())
                        .filter(|t| !t.is_empty())
                        .collect();
                    if names.is_empty() {
                        return Err(format!(
                            "token entry {n} names no tenant: use `*` for every tenant or a comma-separated list"
                        ));
                    }
                    Some(names)
                }
            };
            if secret.len() < 8 {
                return Err(format!(
                    "token entry {n} has a secret shorter than 8 characters; use a long random value"
                ));
            }
            if out.iter().any(|t| t.secret == secret) {
                return Err(format!(
                    "token entry {n} repeats the secret of an earlier entry"
                ));
            }
            out.push(ApiToken {
                secret: secret.to_owned(),
                role,
                tenants,
            });
        }
        Ok(out)
    }
}

/// Who is calling, once authenticated.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub role: Role,
    pub tenants: TenantFilter,
    /// A short, non-secret name for the token (a hash prefix), for logs and worker names.
    pub label: String,
}

impl Caller {
    /// The identity of a provider post authenticated by its own signature: it speaks for the
    /// tenant it posted to only.
    pub fn provider(tenant: &str, provider: &str) -> Caller {
        Caller {
            role: Role::Ingest,
            tenants: TenantFilter::Only(vec![tenant.to_owned()]),
            label: format!("signature:{provider}"),
        }
    }

    pub fn sees(&self, tenant: &str) -> bool {
        self.tenants.allows(tenant)
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Refuses callers whose role is not among `allowed`.
    pub fn require(&self, allowed: &[Role]) -> Result<(), ApiError> {
        if allowed.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "a token with role {} cannot call this route",
                self.role.as_str()
            )))
        }
    }
}

/// The configured tokens, kept as digests for constant-time lookup.
#[derive(Clone)]
pub(crate) struct Tokens {
    entries: Vec<([u8; 32], Caller)>,
}

impl Tokens {
    pub fn new(tokens: &[ApiToken]) -> Tokens {
        let entries = tokens
            .iter()
            .map(|t| {
                let digest: [u8; 32] = Sha256::digest(t.secret.as_bytes()).into();
                let caller = Caller {
                    role: t.role,
                    tenants: match &t.tenants {
                        None => TenantFilter::All,
                        Some(list) => TenantFilter::Only(list.clone()),
                    },
                    label: format!("token:{}", &hex::encode(digest)[..8]),
                };
                (digest, caller)
            })
            .collect();
        Tokens { entries }
    }

    /// Every configured token as (SHA-256 digest of its secret, caller), in configuration
    /// order; the console's sessions name their token by a keyed hash of this digest.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8; 32], &Caller)> {
        self.entries.iter().map(|(d, c)| (d, c))
    }

    /// The bearer token the request presents, if any: `Ok(None)` when there is no
    /// `Authorization` header, an error when there is one that is not a known bearer token.
    pub fn bearer(&self, headers: &HeaderMap) -> Result<Option<Caller>, ApiError> {
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let presented = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, rest) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header is not `Bearer <token>`")
            })?;
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Every entry is compared, whatever matched first, so the time taken does not say
        // which position (if any) matched.
        let mut found: Option<&Caller> = None;
        for (d, caller) in &self.entries {
            if bool::from(d.ct_eq(&digest)) {
                found = Some(caller);
            }
        }
        found
            .cloned()
            .map(Some)
            .ok_or_else(|| ApiError::unauthorized("the bearer token is not valid"))
    }

    /// The caller of a route that needs a bearer token with one of `allowed` roles.
    pub fn require(&self, headers: &HeaderMap, allowed: &[Role]) -> Result<Caller, ApiError> {
        let caller = self.bearer(headers)?.ok_or_else(|| {
            ApiError::unauthorized("this route needs `Authorization: Bearer <token>`")
        })?;
        caller.require(allowed)?;
        Ok(caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lists_parse_roles_tenants_and_secrets_with_colons() {
        let tokens =
            ApiToken::parse_list("admin:*:s3cret-admin; ingest:acme, beta:tok2:with:colons;")
                .unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].role, Role::Admin);
        assert_eq!(tokens[0].tenants, None);
        assert_eq!(tokens[1].role, Role::Ingest);
        assert_eq!(
            tokens[1].tenants,
            Some(vec!["acme".to_owned(), "beta".to_owned()])
        );
        assert_eq!(tokens[1].secret, "tok2:with:colons");
    }

    #[test]
    fn token_list_errors_name_the_entry_not_the_secret() {
        let err = ApiToken::parse_list("root:*:supersecretvalue").unwrap_err();
        assert!(err.contains("entry 1") && err.contains("root"), "{err}");
        assert!(!err.contains("supersecretvalue"), "{err}");
        assert!(ApiToken::parse_list("admin:*").is_err());
        assert!(ApiToken::parse_list("admin::longenoughsecret").is_err());
        assert!(ApiToken::parse_list("admin:*:short").is_err());
        assert!(ApiToken::parse_list("admin:*:samesecret1;ingest:*:samesecret1").is_err());
    }

    #[test]
    fn debug_output_redacts_the_secret() {
        let t = &ApiToken::parse_list("operator:acme:visible-nowhere").unwrap()[0];
        assert!(!format!("{t:?}").contains("visible-nowhere"));
    }

    #[test]
    fn bearer_lookup_finds_the_role_and_refuses_unknown_tokens() {
        let tokens = Tokens::new(&ApiToken::parse_list("operator:acme:operator-token").unwrap());
        let mut h = HeaderMap::new();
        assert!(tokens.bearer(&h).unwrap().is_none());
        h.insert("authorization", "Bearer operator-token".parse().unwrap());
        let c = tokens.bearer(&h).unwrap().unwrap();
        assert_eq!(c.role, Role::Operator);
        assert!(c.sees("acme") && !c.sees("beta"));
        h.insert("authorization", "Bearer nope-nope-nope".parse().unwrap());
        assert_eq!(tokens.bearer(&h).unwrap_err().status().as_u16(), 401);
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(tokens.bearer(&h).unwrap_err().status().as_u16(), 401);
    }
}
