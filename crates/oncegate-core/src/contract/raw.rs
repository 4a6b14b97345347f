//! The contract file as written: the TOML shapes serde reads (every table refuses unknown
//! fields), before any validation.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContract {
    #[serde(default)]
    pub(super) settings: RawSettings,
    #[serde(default)]
    pub(super) environments: Vec<String>,
    #[serde(default)]
    pub(super) providers: BTreeMap<String, Spanned<RawProvider>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub(super) lease: Option<String>,
    pub(super) horizon: Option<String>,
    pub(super) payload_retention: Option<String>,
    pub(super) proof_retention: Option<String>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) max_depth: Option<usize>,
    pub(super) breaker_threshold: Option<f64>,
    pub(super) breaker_min_sample: Option<u32>,
    pub(super) store: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) event_type: Option<String>,
    pub(super) event_type_header: Option<String>,
    pub(super) delivery_id_header: Option<String>,
    pub(super) signature: Option<RawSignature>,
    pub(super) batch: Option<RawBatch>,
    /// The consumer's verification API for every type of the provider (a type may override it).
    pub(super) verify: Option<super::verify::RawVerifier>,
    /// Gateway mode for every type of the provider (a type may override fields of it).
    pub(super) forward: Option<super::forward::RawForward>,
    #[serde(default)]
    pub(super) types: BTreeMap<String, Spanned<RawType>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignature {
    pub(super) scheme: String,
    pub(super) header: Option<String>,
    pub(super) encoding: Option<String>,
    pub(super) prefix: Option<String>,
    pub(super) timestamp_header: Option<String>,
    pub(super) tolerance: Option<String>,
    pub(super) url: Option<String>,
    pub(super) secret_env: Option<Names>,
    pub(super) secret_file: Option<Names>,
}

/// One name or a list of names: `secret_env = "A"`, or `secret_env = ["A", "B"]` during a
/// secret rotation.
pub(super) struct Names(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a list of names")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Names, E> {
                Ok(Names(vec![v.to_owned()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Names, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(Names(names))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeclared {
    pub(super) field: String,
    pub(super) why: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNormalize {
    pub(super) field: String,
    pub(super) ops: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawType {
    pub(super) why: Option<String>,
    pub(super) criticality: Option<String>,
    pub(super) operation: Option<String>,
    pub(super) resource: Option<String>,
    #[serde(default)]
    pub(super) discriminants: Vec<String>,
    pub(super) volatile: Option<Vec<RawDeclared>>,
    #[serde(default)]
    pub(super) unordered: Vec<RawDeclared>,
    #[serde(default)]
    pub(super) normalize: Vec<RawNormalize>,
    #[serde(default)]
    pub(super) sensitive: Vec<String>,
    #[serde(default)]
    pub(super) durable: bool,
    pub(super) horizon: Option<String>,
    pub(super) authority: Option<RawAuthority>,
    pub(super) verify: Option<super::verify::RawVerifier>,
    pub(super) forward: Option<super::forward::RawForward>,
    #[serde(default)]
    pub(super) strategies: Vec<Spanned<RawStrategy>>,
    #[serde(default)]
    pub(super) shadow: Vec<Spanned<RawStrategy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuthority {
    pub(super) url: String,
    pub(super) auth_header: Option<String>,
    pub(super) auth_secret_env: Option<String>,
    pub(super) auth_secret_file: Option<String>,
    pub(super) operations: String,
    pub(super) reference: String,
    #[serde(default)]
    pub(super) fields: BTreeMap<String, String>,
    pub(super) sweep_window: Option<String>,
    pub(super) ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStrategy {
    pub(super) name: String,
    pub(super) version: u32,
    pub(super) level: String,
    #[serde(default)]
    pub(super) fields: Vec<String>,
    #[serde(default)]
    pub(super) normalize: BTreeMap<String, Vec<String>>,
    pub(super) confidence: Option<String>,
    pub(super) horizon: Option<String>,
    pub(super) scope: Option<String>,
    #[serde(default)]
    pub(super) placeholders: Vec<String>,
    pub(super) why: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBatch {
    pub(super) items: String,
    pub(super) item: Option<String>,
    pub(super) reply: String,
}
