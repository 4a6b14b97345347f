//! A delivery as it was received, before any decision: where it came from (tenant, provider,
//! environment), its headers, its raw body (or what is known of a body that could not be
//! kept) and when it arrived.

use time::OffsetDateTime;

/// One webhook delivery as received.
///
/// ```
/// use oncegate::Reception;
///
/// let r = Reception::new("acme", "stripe", "live", br#"{"id":"evt_1"}"#.to_vec())
///     .header("Stripe-Signature", "t=1,v1=ab")
///     .header("content-type", "application/json");
/// assert_eq!(r.header_value("stripe-signature"), Some("t=1,v1=ab"));
/// assert_eq!(r.body().size(), 14);
/// ```
#[derive(Debug, Clone)]
pub struct Reception {
    pub(crate) tenant: String,
    pub(crate) provider: String,
    pub(crate) env: String,
    /// Lowercase names, values as received.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Body,
    pub(crate) received_at: Option<OffsetDateTime>,
    pub(crate) correlation_id: Option<String>,
}

impl Reception {
    /// A delivery whose whole body arrived.
    pub fn new(
        tenant: impl Into<String>,
        provider: impl Into<String>,
        env: impl Into<String>,
        body: Vec<u8>,
    ) -> Reception {
        Reception::with_body(tenant, provider, env, Body::whole(body))
    }

    /// A delivery with a body as read by a transport (possibly cut short, see [`Body`]).
    pub fn with_body(
        tenant: impl Into<String>,
        provider: impl Into<String>,
        env: impl Into<String>,
        body: Body,
    ) -> Reception {
        Reception {
            tenant: tenant.into(),
            provider: provider.into(),
            env: env.into(),
            headers: Vec::new(),
            body,
            received_at: None,
            correlation_id: None,
        }
    }

    /// Adds a header (the name is matched case-insensitively).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reception {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// When it arrived; by default, the gate's clock when it is delivered.
    pub fn received_at(mut self, at: OffsetDateTime) -> Reception {
        self.received_at = Some(at);
        self
    }

    /// A correlation id kept with the delivery (at most 128 characters are kept).
    pub fn correlation_id(mut self, id: impl Into<String>) -> Reception {
        self.correlation_id = Some(id.into().chars().take(128).collect());
        self
    }

    /// The tenant it was posted for.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The provider it claims to come from.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Its environment (`live`, `test`…).
    pub fn env(&self) -> &str {
        &self.env
    }

    /// When it arrived, or `now` when no time was set.
    pub fn received_at_or(&self, now: OffsetDateTime) -> OffsetDateTime {
        self.received_at.unwrap_or(now)
    }

    /// Its body.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// Its headers (lowercase names).
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The first value of a header, trimmed; `None` when absent or blank.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    pub(crate) fn origin(&self) -> oncegate_core::identity::Origin<'_> {
        oncegate_core::identity::Origin {
            tenant: &self.tenant,
            provider: &self.provider,
            env: &self.env,
        }
    }
}

/// The raw body of a delivery: its bytes when they were all kept, else its real size and
/// hash and why it was cut.
#[derive(Debug, Clone)]
pub struct Body {
    bytes: Vec<u8>,
    size: u64,
    sha256: String,
    cut: Option<Cut>,
}

/// Why a body's bytes were not all kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// Over the contract's `max_body_bytes` (read, hashed and counted, not kept).
    OverLimit,
    /// The sender hung up, or a chunk was broken.
    Broken,
    /// Still arriving at the body deadline; the sentence says which deadline.
    Late(String),
}

impl Body {
    /// A body received whole.
    pub fn whole(bytes: Vec<u8>) -> Body {
        use sha2::{Digest, Sha256};
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Body {
            size: bytes.len() as u64,
            bytes,
            sha256,
            cut: None,
        }
    }

    /// A body that could not be kept whole: `size` bytes were seen, hashing to `sha256` (hex).
    pub fn cut(size: u64, sha256: String, cut: Cut) -> Body {
        Body {
            bytes: Vec::new(),
            size,
            sha256,
            cut: Some(cut),
        }
    }

    /// The bytes kept (empty when the body was cut).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many bytes arrived.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The SHA-256 of what arrived, in hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Why the body was not kept whole, if it was not.
    pub fn cut_by(&self) -> Option<&Cut> {
        self.cut.as_ref()
    }
}
