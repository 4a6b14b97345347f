//! Reservation tokens: the opaque string a `process` answer (or a claim) hands to the holder of
//! an effect, `"{fencing}.{mac}"`.
//!
//! The MAC binds the fencing integer to the effect id under a key derived from the service's
//! salt, so only the caller that received the token can complete, fail or heartbeat the effect
//! (guessing the next fencing number is not enough), and every instance sharing the salt
//! accepts the tokens of the others. The store still checks the fencing number itself: a token
//! that verifies here but was superseded is answered `409 stale_token`.

use hmac::{Hmac, Mac};
use oncegate_core::ids::EffectId;
use sha2::Sha256;

use crate::error::ApiError;

/// 32 hex digits: 128 bits of MAC, plenty against guessing and short enough to log-safely
/// truncate in support conversations.
const MAC_HEX_LEN: usize = 32;

#[derive(Clone)]
pub(crate) struct TokenKey([u8; 32]);

impl TokenKey {
    /// Derives the token key from the salt, under a label so it never equals a key used to
    /// mask sensitive fields.
    pub fn derive(salt: &[u8]) -> TokenKey {
        let mut m = Hmac::<Sha256>::new_from_slice(salt).expect("HMAC takes a key of any length");
        m.update(b"oncegate-reservation-token/1");
        TokenKey(m.finalize().into_bytes().into())
    }

    fn mac(&self, effect: &EffectId, fencing: u64) -> Hmac<Sha256> {
        let mut m =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(effect.as_str().as_bytes());
        m.update(b".");
        m.update(fencing.to_string().as_bytes());
        m
    }

    pub fn mint(&self, effect: &EffectId, fencing: u64) -> String {
        let full = hex::encode(self.mac(effect, fencing).finalize().into_bytes());
        format!("{fencing}.{}", &full[..MAC_HEX_LEN])
    }

    /// The fencing number of a token this service minted for `effect`.
    pub fn verify(&self, effect: &EffectId, token: &str) -> Result<u64, ApiError> {
        let invalid = || {
            ApiError::bad_request(
                "invalid_token",
                format!("The reservation token was not issued for effect {effect}."),
            )
        };
        let (fencing, mac_hex) = token.trim().split_once('.').ok_or_else(invalid)?;
        let fencing: u64 = fencing.parse().map_err(|_| invalid())?;
        if mac_hex.len() != MAC_HEX_LEN {
            return Err(invalid());
        }
        let presented = hex::decode(mac_hex).map_err(|_| invalid())?;
        self.mac(effect, fencing)
            .verify_truncated_left(&presented)
            .map_err(|_| invalid())?;
        Ok(fencing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_for_their_effect_and_fencing() {
        let key = TokenKey::derive(b"salt");
        let e = EffectId::from_u128(42);
        let t = key.mint(&e, 3);
        assert!(t.starts_with("3."));
        assert_eq!(key.verify(&e, &t).unwrap(), 3);
        // Another effect, a bumped fencing number, another salt: all refused.
        assert!(key.verify(&EffectId::from_u128(43), &t).is_err());
        let forged = t.replacen("3.", "4.", 1);
        assert!(key.verify(&e, &forged).is_err());
        assert!(TokenKey::derive(b"other").verify(&e, &t).is_err());
        assert!(key.verify(&e, "3").is_err());
        assert!(key.verify(&e, "x.abc").is_err());
    }
}
