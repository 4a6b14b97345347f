//! The header formats of the signature schemes: each reads a delivery's headers into what the
//! verifier core needs (the bytes signed before the body, the candidate MACs, the signed
//! timestamp) and computes nothing.
//!
//! Most schemes are data: a [`Layout`] says which header holds the MAC, how it is encoded and
//! where the timestamp is. Standard Webhooks, which also signs its message id and lists its MACs
//! in its own way, is the one small hand-written parser.
//!
//! No error here ever quotes a header's value: a refused delivery's reason is journaled and
//! logged, and a value could be a MAC worth replaying.

use axum::http::HeaderMap;
use base64::Engine;
use oncegate_core::contract::{Encoding, Scheme};

use super::SignatureError;

/// What a scheme reads from a delivery's headers.
#[derive(Debug)]
pub(super) struct Signed {
    /// The header the MACs came from, to name it in messages.
    pub header: String,
    /// What the provider signed before the body (`"<t>."`, `"v0:<ts>:"`, nothing…).
    pub prefix: Vec<u8>,
    /// The MACs the delivery carries; any one that verifies is enough (a rotation).
    pub candidates: Vec<Vec<u8>>,
    /// The signed Unix timestamp, for schemes that sign one.
    pub timestamp: Option<i64>,
}

/// Where a scheme carries its MACs and its timestamp.
struct Layout<'s> {
    header: &'s str,
    encoding: Encoding,
    shape: Shape<'s>,
    /// The signed content is `before <timestamp> after <body>` when a timestamp is signed,
    /// and the body alone otherwise.
    around: (&'static str, &'static str),
}

enum Shape<'s> {
    /// The header is one MAC after an optional fixed prefix; a signed timestamp, if any, has
    /// a header of its own.
    Single {
        prefix: Option<&'s str>,
        timestamp_header: Option<&'s str>,
    },
    /// The header is `key=value` pairs joined by `separator`: exactly one timestamp and one or
    /// more MACs (several during a rotation). Other keys (Stripe's `v0=`) are ignored.
    Pairs {
        separator: char,
        timestamp_key: &'static str,
        mac_key: &'static str,
    },
}

/// The layout of every scheme but Standard Webhooks.
fn layout(scheme: &Scheme) -> Option<Layout<'_>> {
    Some(match scheme {
        Scheme::StandardWebhooks { .. } | Scheme::Adyen => return None,
        Scheme::HmacSha256 {
            header,
            encoding,
            prefix,
            timestamp_header,
            ..
        } => Layout {
            header,
            encoding: *encoding,
            shape: Shape::Single {
                prefix: prefix.as_deref(),
                timestamp_header: timestamp_header.as_deref(),
            },
            around: ("", "."),
        },
        Scheme::Stripe { header, .. } => Layout {
            header,
            encoding: Encoding::Hex,
            shape: Shape::Pairs {
                separator: ',',
                timestamp_key: "t",
                mac_key: "v1",
            },
            around: ("", "."),
        },
        Scheme::Paddle { .. } => Layout {
            header: "paddle-signature",
            encoding: Encoding::Hex,
            shape: Shape::Pairs {
                separator: ';',
                timestamp_key: "ts",
                mac_key: "h1",
            },
            around: ("", ":"),
        },
        Scheme::Slack { .. } => Layout {
            header: "x-slack-signature",
            encoding: Encoding::Hex,
            shape: Shape::Single {
                prefix: Some("v0="),
                timestamp_header: Some("x-slack-request-timestamp"),
            },
            around: ("v0:", ":"),
        },
        Scheme::Github => Layout {
            header: "x-hub-signature-256",
            encoding: Encoding::Hex,
            shape: Shape::Single {
                prefix: Some("sha256="),
                timestamp_header: None,
            },
            around: ("", ""),
        },
        Scheme::Square { .. } => Layout {
            header: "x-square-hmacsha256-signature",
            encoding: Encoding::Base64,
            shape: Shape::Single {
                prefix: None,
                timestamp_header: None,
            },
            around: ("", ""),
        },
        Scheme::Shopify => Layout {
            header: "x-shopify-hmac-sha256",
            encoding: Encoding::Base64,
            shape: Shape::Single {
                prefix: None,
                timestamp_header: None,
            },
            around: ("", ""),
        },
    })
}

fn value<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, SignatureError> {
    let missing = || SignatureError::Missing {
        header: name.to_owned(),
    };
    let v = headers.get(name).ok_or_else(missing)?;
    let v = v
        .to_str()
        .map_err(|_| malformed(name, "is not visible ASCII"))?;
    Some(v.trim()).filter(|v| !v.is_empty()).ok_or_else(missing)
}

fn malformed(header: &str, why: impl Into<String>) -> SignatureError {
    SignatureError::Malformed {
        header: header.to_owned(),
        why: why.into(),
    }
}

fn decode(encoding: Encoding, text: &str) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Hex => hex::decode(text).ok(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
    }
}

fn encoding_name(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Hex => "hex",
        Encoding::Base64 => "base64",
    }
}

/// A signed timestamp: Unix seconds, digits only (a sign or a fraction is not what any of
/// these providers sends, and accepting it would let two spellings sign the same instant).
fn timestamp(header: &str, text: &str) -> Result<i64, SignatureError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(
            header,
            "has a timestamp that is not Unix seconds in digits",
        ));
    }
    text.parse()
        .map_err(|_| malformed(header, "has a timestamp out of range"))
}

/// Reads a delivery's headers under its scheme (Adyen's signatures are in the body: see
/// `signature::adyen`).
pub(super) fn read(scheme: &Scheme, headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let Some(layout) = layout(scheme) else {
        return standard_webhooks(headers);
    };
    let mut signed = read_layout(&layout, headers)?;
    // Square signs the registered notification URL, then the body.
    if let Scheme::Square { url } = scheme {
        signed.prefix = url.as_bytes().to_vec();
    }
    Ok(signed)
}

fn read_layout(layout: &Layout<'_>, headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let name = layout.header;
    let raw = value(headers, name)?;
    let (before, after) = layout.around;
    match &layout.shape {
        Shape::Single {
            prefix,
            timestamp_header,
        } => {
            let mac = match *prefix {
                Some(p) => raw
                    .strip_prefix(p)
                    .ok_or_else(|| malformed(name, format!("does not start with {p:?}")))?,
                None => raw,
            };
            let mac = decode(layout.encoding, mac).ok_or_else(|| {
                malformed(name, format!("is not {}", encoding_name(layout.encoding)))
            })?;
            let (prefix, timestamp) = match *timestamp_header {
                None => (Vec::new(), None),
                Some(ts_name) => {
                    let ts = value(headers, ts_name)?;
                    let at = timestamp(ts_name, ts)?;
                    (format!("{before}{ts}{after}").into_bytes(), Some(at))
                }
            };
            Ok(Signed {
                header: name.to_owned(),
                prefix,
                candidates: vec![mac],
                timestamp,
            })
        }
        Shape::Pairs {
            separator,
            timestamp_key,
            mac_key,
        } => {
            let mut ts: Option<&str> = None;
            let mut macs = 0;
            let mut candidates = Vec::new();
            let (separator, timestamp_key, mac_key) = (*separator, *timestamp_key, *mac_key);
            for pair in raw.split(separator) {
                let Some((key, v)) = pair.trim().split_once('=') else {
                    return Err(malformed(name, format!("has an entry that is not key=value (entries are separated by {separator:?})")));
                };
                if key == timestamp_key {
                    if ts.replace(v).is_some() {
                        return Err(malformed(
                            name,
                            format!("has more than one {timestamp_key}= timestamp"),
                        ));
                    }
                } else if key == mac_key {
                    macs += 1;
                    // An entry that does not decode cannot verify; the others still may.
                    candidates.extend(decode(layout.encoding, v));
                }
            }
            let ts =
                ts.ok_or_else(|| malformed(name, format!("has no {timestamp_key}= timestamp")))?;
            let at = timestamp(name, ts)?;
            if candidates.is_empty() {
                return Err(malformed(
                    name,
                    if macs == 0 {
                        format!("has no {mac_key}= signature")
                    } else {
                        format!("has no {mac_key}= signature in hex")
                    },
                ));
            }
            Ok(Signed {
                header: name.to_owned(),
                prefix: format!("{before}{ts}{after}").into_bytes(),
                candidates,
                timestamp: Some(at),
            })
        }
    }
}

/// Standard Webhooks: the message id and timestamp in their own headers, both signed, and a
/// space-separated list of `v1,<base64>` MACs.
fn standard_webhooks(headers: &HeaderMap) -> Result<Signed, SignatureError> {
    let id = value(headers, "webhook-id")?;
    let ts = value(headers, "webhook-timestamp")?;
    let sigs = value(headers, "webhook-signature")?;
    let at = timestamp("webhook-timestamp", ts)?;
    let mut saw_v1 = false;
    let mut candidates = Vec::new();
    for entry in sigs.split_whitespace() {
        let Some(b64) = entry.strip_prefix("v1,") else {
            continue;
        };
        saw_v1 = true;
        candidates.extend(base64::engine::general_purpose::STANDARD.decode(b64).ok());
    }
    if candidates.is_empty() {
        return Err(malformed(
            "webhook-signature",
            if saw_v1 {
                "has no v1 signature in base64"
            } else {
                "has no v1 signature"
            },
        ));
    }
    Ok(Signed {
        header: "webhook-signature".to_owned(),
        prefix: format!("{id}.{ts}.").into_bytes(),
        candidates,
        timestamp: Some(at),
    })
}
