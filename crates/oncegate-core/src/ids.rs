//! Prefixed identifiers as newtypes (`dlv_…`, `eff_…`, `q_…`): an effect id cannot be passed
//! where a delivery id is expected, and a pasted id says what it names.
//!
//! The core never generates ids (that would need a clock or a random source); the store does,
//! from a 128-bit value it chooses, and the core only formats and parses them.
//!
//! ```
//! use oncegate_core::ids::{DeliveryId, EffectId};
//!
//! let delivery = DeliveryId::from_u128(42);
//! assert_eq!(delivery.as_str(), "dlv_0000000000000000000000001a");
//! assert_eq!(delivery.as_str().parse::<DeliveryId>(), Ok(delivery.clone()));
//! // A delivery id is not an effect id, and the error says which was expected.
//! let err = delivery.as_str().parse::<EffectId>().unwrap_err();
//! assert_eq!(err.kind, "effect");
//! ```

use std::fmt;
use std::str::FromStr;

/// Why a string is not a valid id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid {kind} id: expected {prefix} followed by 26 base32 characters")]
pub struct IdError {
    /// The kind of id that was expected, in words (`"delivery"`, `"effect"`, `"queue item"`).
    pub kind: &'static str,
    /// The prefix that kind of id starts with (`"dlv_"`, `"eff_"`, `"q_"`).
    pub prefix: &'static str,
    /// The refused string, as given.
    pub input: String,
}

/// Crockford base32, as ULIDs use: sortable, no ambiguous letters.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// `prefix` and the 26 characters of `value`, in one allocation.
fn encode(prefix: &str, value: u128) -> String {
    let mut body = [0u8; 26];
    let mut v = value;
    for slot in body.iter_mut().rev() {
        *slot = ALPHABET[(v & 31) as usize];
        v >>= 5;
    }
    let mut out = String::with_capacity(prefix.len() + body.len());
    out.push_str(prefix);
    out.push_str(std::str::from_utf8(&body).expect("alphabet is ASCII"));
    out
}

fn valid_body(body: &str) -> bool {
    // 26 characters of 5 bits hold 130 bits; the first one must stay below 8 for 128 bits.
    body.len() == 26 && body.bytes().all(|b| ALPHABET.contains(&b)) && body.as_bytes()[0] <= b'7'
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            #[doc = concat!("The text every ", $kind, " id starts with, `", $prefix, "`; 26 lower-case")]
            /// Crockford base32 characters (128 bits, most significant first) follow it.
            pub const PREFIX: &'static str = $prefix;

            /// Builds the id from 128 bits chosen by the caller (time-ordered bits sort best).
            pub fn from_u128(value: u128) -> Self {
                $name(encode($prefix, value))
            }

            #[doc = concat!("The whole id as text, prefix included (`", $prefix, "…`), as stored and shown.")]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                match s.strip_prefix($prefix) {
                    Some(body) if valid_body(body) => Ok($name(s.to_owned())),
                    _ => Err(IdError { kind: $kind, prefix: $prefix, input: s.to_owned() }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// One reception: an HTTP request from a provider, journaled before anything else.
    DeliveryId, "dlv_", "delivery"
);
prefixed_id!(
    /// One business effect that must happen once; deliveries are observations attached to it.
    EffectId, "eff_", "effect"
);
prefixed_id!(
    /// One entry of the ambiguity queue (quarantine or reconcile).
    QueueItemId, "q_", "queue item"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_refuse_the_wrong_prefix() {
        let d = DeliveryId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(d.as_str().len(), 4 + 26);
        assert_eq!(d.as_str().parse::<DeliveryId>().unwrap(), d);
        let e = EffectId::from_u128(u128::MAX);
        assert_eq!(e.as_str().parse::<EffectId>().unwrap(), e);
        let err = d.as_str().parse::<EffectId>().unwrap_err();
        assert_eq!(err.kind, "effect");
        assert!(err.to_string().contains("eff_"), "{err}");
        assert!("dlv_short".parse::<DeliveryId>().is_err());
        assert!("dlv_8zzzzzzzzzzzzzzzzzzzzzzzzz"
            .parse::<DeliveryId>()
            .is_err());
    }

    #[test]
    fn ids_sort_like_their_bits() {
        let a = DeliveryId::from_u128(5);
        let b = DeliveryId::from_u128(1 << 100);
        assert!(a < b);
    }
}
