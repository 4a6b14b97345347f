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

/// The token key, held as its HMAC already keyed (the key's two padded blocks hashed once), so
/// each token minted or verified hashes only its own message.
#[derive(Clone)]
pub(crate) struct TokenKey(Hmac<Sha256>);

impl TokenKey {
    /// Derives the token key from the salt, under a label so it never equals a key used to
    /// mask sensitive fields.
    pub fn derive(salt: &[u8]) -> TokenKey {
        let mut m = Hmac::<Sha256>::new_from_slice(salt).expect("HMAC takes a key of any length");
        m.update(b"oncegate-reservation-token/1");
        let key = m.finalize().into_bytes();
        TokenKey(Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length"))
    }

    fn mac(&self, effect: &EffectId, fencing: u64) -> Hmac<Sha256> {
        let mut m = self.0.clone();
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

    /// Tokens stay what every instance, older ones included, mints and accepts: the key is
    /// the salt's HMAC of the label, and a token's MAC the key's HMAC of `effect.fencing`.
    #[test]
    fn a_token_is_the_keyed_mac_of_its_effect_and_fencing() {
        let label = {
            let mut m = Hmac::<Sha256>::new_from_slice(b"salt").unwrap();
            m.update(b"oncegate-reservation-token/1");
            m.finalize().into_bytes()
        };
        let e = EffectId::from_u128(42);
        let mut m = Hmac::<Sha256>::new_from_slice(&label).unwrap();
        m.update(format!("{e}.7").as_bytes());
        let full = hex::encode(m.finalize().into_bytes());
        let key = TokenKey::derive(b"salt");
        assert_eq!(key.mint(&e, 7), format!("7.{}", &full[..MAC_HEX_LEN]));
        // The keyed state is cloned, never consumed: a second token is minted alike.
        assert_eq!(key.mint(&e, 7), key.mint(&e, 7));
    }
}
