//! Console sessions: a bearer token exchanged for a stateless, MACed cookie, and the CSRF token
//! derived from it.
//!
//! The cookie is `v1.{role}.{tenants}.{token id}.{expiry}.{mac}`:
//! - `tenants` is `*` or the base64url of the comma-joined list the token is restricted to;
//! - `token id` is a keyed hash (under the session key) of the SHA-256 digest of the token's
//!   secret, so the cookie names which configured token it came from without holding the token
//!   or anything an attacker could test guesses against offline;
//! - `expiry` is a Unix time; `mac` is HMAC-SHA-256 of everything before it under a key derived
//!   from the service's salt.
//!
//! Nothing is kept on the server, so every instance sharing the salt accepts the cookie. On
//! every request the cookie is checked against the tokens configured *now*: a removed token, or
//! one whose role or tenants changed, revokes its sessions at once.
//!
//! The CSRF token is a MAC of the session's own MAC: it changes with each sign-in, needs no
//! storage, and a page from another origin cannot read it (the cookie is `SameSite=Strict` and
//! `HttpOnly` besides).

use axum::http::HeaderMap;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use oncegate::store::TenantFilter;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

use crate::auth::{Caller, Role, Tokens};

/// The cookie's name.
pub(crate) const COOKIE: &str = "oncegate_console";

/// How long a session lasts: a working day, after which the operator signs in again.
pub(crate) const LIFETIME: time::Duration = time::Duration::hours(8);

/// The key sessions and CSRF tokens are MACed with, derived from the salt under its own label
/// so it never equals the key of reservation tokens or of sensitive fields.
#[derive(Clone)]
pub(crate) struct SessionKey([u8; 32]);

impl SessionKey {
    pub fn derive(salt: &[u8]) -> SessionKey {
        let mut m = Hmac::<Sha256>::new_from_slice(salt).expect("HMAC takes a key of any length");
        m.update(b"oncegate-console-session/1");
        SessionKey(m.finalize().into_bytes().into())
    }

    fn mac(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut m =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(label);
        m.update(b"|");
        m.update(data);
        m.finalize().into_bytes().into()
    }

    /// The name of a configured token in a cookie: 128 bits of a keyed hash of its digest.
    fn token_id(&self, digest: &[u8; 32]) -> String {
        hex::encode(&self.mac(b"token", digest)[..16])
    }
}

/// A signed-in operator.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub caller: Caller,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    pub expires_at: OffsetDateTime,
    /// How far behind the store the page's reads are, when they come from a read store
    /// (shown in the page's header).
    pub read_lag: Option<std::time::Duration>,
}

impl Session {
    /// Whether a form's CSRF token is this session's (compared in constant time).
    pub fn csrf_ok(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// Why a token could not be exchanged for a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignInError {
    #[error("This token is not one the service knows.")]
    UnknownToken,
    #[error("An ingest token cannot sign in to the console; use an operator or admin token.")]
    IngestRole,
}

fn tenants_field(t: &TenantFilter) -> String {
    match t {
        TenantFilter::All => "*".to_owned(),
        TenantFilter::Only(list) => URL_SAFE_NO_PAD.encode(list.join(",")),
    }
}

/// Exchanges a presented token for a cookie value, when the token is a configured operator or
/// admin token.
pub(crate) fn sign_in(
    key: &SessionKey,
    tokens: &Tokens,
    presented: &str,
    now: OffsetDateTime,
) -> Result<(String, Session), SignInError> {
    let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
    // Every entry is compared, whatever matched first, so timing does not say which did.
    let mut found: Option<&Caller> = None;
    for (d, caller) in tokens.entries() {
        if bool::from(d.ct_eq(&digest)) {
            found = Some(caller);
        }
    }
    let caller = found.ok_or(SignInError::UnknownToken)?;
    if caller.role == Role::Ingest {
        return Err(SignInError::IngestRole);
    }
    let expires_at = now + LIFETIME;
    let payload = format!(
        "v1.{}.{}.{}.{}",
        caller.role.as_str(),
        tenants_field(&caller.tenants),
        key.token_id(&digest),
        expires_at.unix_timestamp()
    );
    let mac = key.mac(b"session", payload.as_bytes());
    let session = Session {
        caller: caller.clone(),
        csrf: csrf_of(key, &mac),
        expires_at,
        read_lag: None,
    };
    Ok((
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(mac)),
        session,
    ))
}

fn csrf_of(key: &SessionKey, session_mac: &[u8; 32]) -> String {
    hex::encode(&key.mac(b"csrf", session_mac)[..16])
}

/// The session a cookie value stands for, if its MAC holds, it has not expired and the token
/// it names is still configured with the same role and tenants.
pub(crate) fn verify(
    key: &SessionKey,
    tokens: &Tokens,
    value: &str,
    now: OffsetDateTime,
) -> Option<Session> {
    let (payload, mac_text) = value.rsplit_once('.')?;
    let presented = URL_SAFE_NO_PAD.decode(mac_text).ok()?;
    let mac = key.mac(b"session", payload.as_bytes());
    if !bool::from(mac.as_slice().ct_eq(&presented)) {
        return None;
    }
    let mut parts = payload.split('.');
    let (Some("v1"), Some(role), Some(tenants), Some(token_id), Some(expiry), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let expires_at = OffsetDateTime::from_unix_timestamp(expiry.parse().ok()?).ok()?;
    if expires_at <= now {
        return None;
    }
    let mut found: Option<&Caller> = None;
    for (d, caller) in tokens.entries() {
        if bool::from(key.token_id(d).as_bytes().ct_eq(token_id.as_bytes())) {
            found = Some(caller);
        }
    }
    let caller = found?;
    if caller.role.as_str() != role || tenants_field(&caller.tenants) != tenants {
        return None;
    }
    if caller.role == Role::Ingest {
        return None;
    }
    Some(Session {
        caller: caller.clone(),
        csrf: csrf_of(key, &mac),
        expires_at,
        read_lag: None,
    })
}

/// The console cookie's value in a request's `Cookie` headers.
pub(crate) fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether the request came over HTTPS: the service itself speaks plain HTTP, so this is what
/// a TLS-terminating proxy in front of it says (`X-Forwarded-Proto` or `Forwarded: proto=`).
/// A client that lies only makes its own cookie stricter.
pub(crate) fn over_https(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([';', ',']))
        .any(|kv| kv.trim().eq_ignore_ascii_case("proto=https"));
    forwarded_proto || forwarded
}

/// The `Set-Cookie` value of a new session.
pub(crate) fn set_cookie(value: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{}",
        LIFETIME.whole_seconds(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that signs out.
pub(crate) fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ApiToken;

    fn tokens(spec: &str) -> Tokens {
        Tokens::new(&ApiToken::parse_list(spec).unwrap())
    }

    const NOW: i64 = 1_700_000_000;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(NOW).unwrap()
    }

    #[test]
    fn a_session_verifies_until_it_expires_and_never_holds_the_token() {
        let key = SessionKey::derive(b"salt");
        let t = tokens("operator:acme:operator-secret-1");
        let (cookie, s) = sign_in(&key, &t, "operator-secret-1", now()).unwrap();
        assert!(!cookie.contains("operator-secret-1"));
        let back = verify(&key, &t, &cookie, now() + time::Duration::hours(1)).unwrap();
        assert_eq!(back.caller.role, Role::Operator);
        assert_eq!(back.csrf, s.csrf);
        assert!(back.caller.sees("acme") && !back.caller.sees("beta"));
        assert!(verify(&key, &t, &cookie, now() + LIFETIME).is_none());
    }

    #[test]
    fn a_tampered_cookie_another_salt_or_a_removed_token_is_refused() {
        let key = SessionKey::derive(b"salt");
        let t = tokens("operator:acme:operator-secret-1;admin:*:admin-secret-1");
        let (cookie, _) = sign_in(&key, &t, "operator-secret-1", now()).unwrap();
        let forged = cookie.replacen("v1.operator.", "v1.admin.", 1);
        assert!(verify(&key, &t, &forged, now()).is_none());
        assert!(verify(&SessionKey::derive(b"other"), &t, &cookie, now()).is_none());
        let without = tokens("admin:*:admin-secret-1");
        assert!(verify(&key, &without, &cookie, now()).is_none());
        // Same secret, wider tenants: the old session does not silently widen.
        let widened = tokens("operator:*:operator-secret-1");
        assert!(verify(&key, &widened, &cookie, now()).is_none());
    }

    #[test]
    fn ingest_and_unknown_tokens_cannot_sign_in() {
        let key = SessionKey::derive(b"salt");
        let t = tokens("ingest:*:ingest-secret-1");
        assert_eq!(
            sign_in(&key, &t, "ingest-secret-1", now()).unwrap_err(),
            SignInError::IngestRole
        );
        assert_eq!(
            sign_in(&key, &t, "nope-nope-nope", now()).unwrap_err(),
            SignInError::UnknownToken
        );
    }

    #[test]
    fn the_cookie_is_read_among_others_and_https_comes_from_the_proxy() {
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            format!("a=b; {COOKIE}=v1.x.y; c=d").parse().unwrap(),
        );
        assert_eq!(cookie_value(&h), Some("v1.x.y"));
        assert!(!over_https(&h));
        h.insert("x-forwarded-proto", "https".parse().unwrap());
        assert!(over_https(&h));
        let mut f = HeaderMap::new();
        f.insert("forwarded", "for=1.2.3.4;proto=https".parse().unwrap());
        assert!(over_https(&f));
        assert!(set_cookie("v", true).ends_with("; Secure"));
        assert!(set_cookie("v", false).contains("HttpOnly; SameSite=Strict"));
    }
}
