//! Fuzzes the strict JSON reader: any bytes are read or refused, never a panic, and a refusal's
//! byte offset lies inside the body (or at the limit, for a body over it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use oncegate_core::json::{parse, JsonErrorKind, Limits};

fuzz_target!(|body: &[u8]| {
    // The default limits, and tight ones so the depth and size refusals are reached too.
    let tight = Limits {
        max_depth: 4,
        max_bytes: 64,
    };
    for limits in [Limits::default(), tight] {
        match parse(body, &limits) {
            Ok(value) => {
                // A value read within the limits is written back without a panic.
                let _ = oncegate_core::canon::to_jcs(&value);
                let _ = oncegate_core::canon::to_key_form(&value);
            }
            Err(e) => match e.kind {
                JsonErrorKind::TooLarge { limit, size } => {
                    assert_eq!((limit, size), (limits.max_bytes, body.len()));
                    assert!(body.len() > limits.max_bytes);
                }
                _ => assert!(
                    e.offset <= body.len(),
                    "{e} past the end of a {}-byte body",
                    body.len()
                ),
            },
        }
    }
});
