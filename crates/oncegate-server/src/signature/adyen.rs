//! Adyen's classic notification signatures: carried in the body, one per item, never in a
//! header. Each `NotificationRequestItem` holds `additionalData.hmacSignature`, the base64
//! HMAC-SHA-256 under the hex-decoded key of
//! `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
//! (absent fields empty). A request is authentic when every one of its items verifies under
//! one of the provider's keys: an unsigned item slipped beside signed ones is refused with them.

use base64::Engine;
use hmac::Mac;
use serde_json::Value;

use super::{mac, SignatureError};

/// Where the refusals say the signature is (there is no header to name).
const WHERE: &str = "additionalData.hmacSignature";

fn malformed(why: impl Into<String>) -> SignatureError {
    SignatureError::Malformed {
        header: WHERE.to_owned(),
        why: why.into(),
    }
}

/// The text Adyen signs for one item.
pub(crate) fn signed_text(item: &Value) -> String {
    let text = |pointer: &str| match item.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    };
    [
        "/pspReference",
        "/originalReference",
        "/merchantAccountCode",
        "/merchantReference",
        "/amount/value",
        "/amount/currency",
        "/eventCode",
        "/success",
    ]
    .map(text)
    .join(":")
}

/// Signs one item as Adyen would, under a hex key (the base64 value of its
/// `additionalData.hmacSignature`); used by tests and by whoever simulates Adyen.
///
/// ```
/// let item = serde_json::json!({"pspReference": "PSP1", "amount": {"value": 1500, "currency": "EUR"},
///     "eventCode": "REFUND", "success": "true"});
/// let sig = oncegate_server::sign_adyen_item("0123456789ABCDEF", &item);
/// assert_eq!(sig.len(), 44); // 32 bytes in base64
/// ```
pub fn sign_adyen_item(hex_key: &str, item: &Value) -> String {
    let key = hex::decode(hex_key).expect("an Adyen HMAC key is hex");
    let mut m = mac(&key);
    m.update(signed_text(item).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes())
}

/// Verifies every item of a classic notification body under any of `secrets` (each the hex
/// key as configured).
pub(super) fn verify(secrets: &[Vec<u8>], body: &[u8]) -> Result<(), SignatureError> {
    let keys: Vec<Vec<u8>> = secrets
        .iter()
        .filter_map(|s| hex::decode(s.trim_ascii()).ok())
        .collect();
    if keys.is_empty() {
        return Err(malformed(
            "cannot be checked: the provider's HMAC key is not in hex",
        ));
    }
    let doc: Value = serde_json::from_slice(body)
        .map_err(|_| malformed("cannot be read: the body is not JSON"))?;
    let Some(items) = doc.get("notificationItems").and_then(Value::as_array) else {
        return Err(malformed(
            "cannot be read: the body has no notificationItems",
        ));
    };
    if items.is_empty() {
        return Err(malformed("cannot be read: notificationItems is empty"));
    }
    for (i, element) in items.iter().enumerate() {
        let item = element.get("NotificationRequestItem").ok_or_else(|| {
            malformed(format!(
                "is missing: item {i} has no NotificationRequestItem"
            ))
        })?;
        let given = item
            .pointer("/additionalData/hmacSignature")
            .and_then(Value::as_str)
            .ok_or_else(|| SignatureError::Missing {
                header: format!("item {i}'s {WHERE}"),
            })?;
        let given = base64::engine::general_purpose::STANDARD
            .decode(given.trim())
            .map_err(|_| malformed(format!("of item {i} is not base64")))?;
        let text = signed_text(item);
        let authentic = keys.iter().any(|key| {
            let mut m = mac(key);
            m.update(text.as_bytes());
            m.verify_slice(&given).is_ok()
        });
        if !authentic {
            return Err(SignatureError::Mismatch {
                header: format!("item {i}'s {WHERE}"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

    fn body(items: &[Value]) -> Vec<u8> {
        let items: Vec<Value> = items
            .iter()
            .map(|i| serde_json::json!({ "NotificationRequestItem": i }))
            .collect();
        serde_json::to_vec(&serde_json::json!({ "live": "false", "notificationItems": items }))
            .unwrap()
    }

    fn item(psp: &str, value: i64) -> Value {
        serde_json::json!({
            "pspReference": psp, "originalReference": "ORIG", "merchantAccountCode": "Acme",
            "merchantReference": "ref-1", "amount": { "value": value, "currency": "EUR" },
            "eventCode": "REFUND", "success": "true", "additionalData": {}
        })
    }

    fn signed(mut i: Value) -> Value {
        let sig = sign_adyen_item(KEY, &i);
        i["additionalData"]["hmacSignature"] = Value::String(sig);
        i
    }

    #[test]
    fn the_signed_text_joins_the_eight_fields_with_absent_ones_empty() {
        let mut i = item("PSP1", 1500);
        assert_eq!(signed_text(&i), "PSP1:ORIG:Acme:ref-1:1500:EUR:REFUND:true");
        i.as_object_mut().unwrap().remove("originalReference");
        assert_eq!(signed_text(&i), "PSP1::Acme:ref-1:1500:EUR:REFUND:true");
    }

    #[test]
    fn every_item_must_verify_and_a_changed_byte_is_refused() {
        let keys = vec![KEY.as_bytes().to_vec()];
        let good = body(&[signed(item("A", 1500)), signed(item("B", 1500))]);
        assert_eq!(verify(&keys, &good), Ok(()));
        // One changed byte of a signed field.
        let text = String::from_utf8(good.clone())
            .unwrap()
            .replacen("1500", "1501", 1);
        assert_eq!(
            verify(&keys, text.as_bytes()).map_err(|e| e.kind()),
            Err("mismatch")
        );
        // An unsigned item beside a signed one.
        let mixed = body(&[signed(item("A", 1500)), item("B", 1500)]);
        assert_eq!(verify(&keys, &mixed).map_err(|e| e.kind()), Err("missing"));
        // Another key.
        let other = vec![b"00".to_vec()];
        assert_eq!(verify(&other, &good).map_err(|e| e.kind()), Err("mismatch"));
        let not_hex = vec![b"not hex".to_vec()];
        assert_eq!(
            verify(&not_hex, &good).map_err(|e| e.kind()),
            Err("malformed")
        );
        assert_eq!(verify(&keys, b"{}").map_err(|e| e.kind()), Err("malformed"));
    }
}
