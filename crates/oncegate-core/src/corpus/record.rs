//! One corpus line: the record of a delivery (origin, headers, body, label), read strictly and
//! written compactly.

use crate::canon::to_jcs;
use crate::json::{self, Limits, Object, Value};

/// Why one corpus line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The line breaks a rule of the strict reader (duplicate names included).
    #[error("the line is not strict JSON: {0}")]
    Json(#[from] json::JsonError),
    /// The line is JSON but not an object; holds the JSON kind it is.
    #[error("the line is a JSON {0}, not an object")]
    NotAnObject(&'static str),
    /// A required member (`provider`, `body`) is absent or null; holds its name.
    #[error("`{0}` is required")]
    Missing(&'static str),
    /// A member holds the wrong kind of value.
    #[error("`{field}` must be {expected}")]
    Kind {
        /// The member's name.
        field: &'static str,
        /// What it must be, as a phrase (`a string`, `an object of strings`…).
        expected: &'static str,
    },
}

/// The body of a recorded delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A JSON body, members in document order and numbers as spelled.
    Json(Value),
    /// A body that is not JSON, base64 as recorded, with the reason it did not parse.
    Base64 {
        /// The body's bytes in standard base64, as recorded (`body_base64`).
        data: String,
        /// Why it is not JSON, as recorded (`body_reason`; empty when none was).
        reason: String,
    },
}

/// The label of a delivery: which real business operation it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The real business operation (`label.operation`, any stable name): deliveries with the
    /// same one are retries of one operation, different ones are distinct operations.
    pub operation: String,
    /// `distinct` or `duplicate` when the label comes from a queue resolution.
    pub resolution: Option<String>,
    /// The reference delivery of that resolution.
    pub reference: Option<String>,
}

/// One delivery of a corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The tenant it was received for (default `default`).
    pub tenant: String,
    /// The provider's name, as the contract spells it (required).
    pub provider: String,
    /// The environment (default `live`).
    pub env: String,
    /// The event type, when recorded; otherwise it is read from the body or headers as the
    /// contract says.
    pub event_type: Option<String>,
    /// Header names lowercase, in the order recorded.
    pub headers: Vec<(String, String)>,
    /// The body as sent: JSON with members and number spellings kept, or base64.
    pub body: Body,
    /// When oncegate received it (RFC 3339), informative only.
    pub received_at: Option<String>,
    /// The oncegate delivery id it was journaled as (`dlv_…`), informative only.
    pub delivery_id: Option<String>,
    /// The action it was given when captured, informative only: a replay decides afresh.
    pub decision: Option<String>,
    /// Which real operation it carries, when someone labeled it.
    pub label: Option<Label>,
}

fn string_member(
    o: &Object,
    field: &'static str,
    required: bool,
) -> Result<Option<String>, RecordError> {
    match o.get(field) {
        None | Some(Value::Null) if required => Err(RecordError::Missing(field)),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RecordError::Kind {
            field,
            expected: "a string",
        }),
    }
}

impl Record {
    /// Reads one corpus line with oncegate's strict JSON reader (duplicate names are refused
    /// here as they are in bodies, so a line cannot be read two ways).
    pub fn parse_line(line: &str) -> Result<Record, RecordError> {
        let limits = Limits {
            max_depth: 256,
            max_bytes: line.len().max(1),
        };
        let doc = json::parse(line.as_bytes(), &limits)?;
        let Value::Object(o) = doc else {
            return Err(RecordError::NotAnObject(doc.kind_name()));
        };
        let provider = string_member(&o, "provider", true)?.unwrap_or_default();
        let mut headers = Vec::new();
        match o.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(h)) => {
                for (name, value) in h.iter() {
                    let Value::String(v) = value else {
                        return Err(RecordError::Kind {
                            field: "headers",
                            expected: "an object of strings",
                        });
                    };
                    headers.push((name.to_ascii_lowercase(), v.clone()));
                }
            }
            Some(_) => {
                return Err(RecordError::Kind {
                    field: "headers",
                    expected: "an object of strings",
                })
            }
        }
        let body = match (o.get("body"), string_member(&o, "body_base64", false)?) {
            (Some(b), None) => Body::Json(b.clone()),
            (None, Some(data)) => Body::Base64 {
                data,
                reason: string_member(&o, "body_reason", false)?.unwrap_or_default(),
            },
            (None, None) => return Err(RecordError::Missing("body")),
            (Some(_), Some(_)) => {
                return Err(RecordError::Kind {
                    field: "body",
                    expected: "given once: either `body` or `body_base64`",
                })
            }
        };
        let label = match o.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::Object(l)) => Some(Label {
                operation: string_member(l, "operation", true)
                    .map_err(|_| RecordError::Kind {
                        field: "label",
                        expected: "an object with an `operation` string",
                    })?
                    .unwrap_or_default(),
                resolution: string_member(l, "resolution", false).unwrap_or(None),
                reference: string_member(l, "reference", false).unwrap_or(None),
            }),
            Some(_) => {
                return Err(RecordError::Kind {
                    field: "label",
                    expected: "an object with an `operation` string",
                })
            }
        };
        Ok(Record {
            tenant: string_member(&o, "tenant", false)?.unwrap_or_else(|| "default".to_owned()),
            provider,
            env: string_member(&o, "env", false)?.unwrap_or_else(|| "live".to_owned()),
            event_type: string_member(&o, "event_type", false)?,
            headers,
            body,
            received_at: string_member(&o, "received_at", false)?,
            delivery_id: string_member(&o, "delivery_id", false)?,
            decision: string_member(&o, "decision", false)?,
            label,
        })
    }

    /// The value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, if the delivery had one.
    pub fn json(&self) -> Option<&Value> {
        match &self.body {
            Body::Json(v) => Some(v),
            Body::Base64 { .. } => None,
        }
    }

    /// Writes the record as one corpus line (no trailing newline). The body keeps its member
    /// order and number spellings, so a replay re-encodes it as the provider sent it, except
    /// for insignificant whitespace.
    pub fn to_line(&self) -> String {
        let mut out = String::from("{");
        let member = |name: &str, out: &mut String| {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&to_jcs(&Value::String(name.to_owned())));
            out.push(':');
        };
        let text = |s: &str| to_jcs(&Value::String(s.to_owned()));
        member("tenant", &mut out);
        out.push_str(&text(&self.tenant));
        member("provider", &mut out);
        out.push_str(&text(&self.provider));
        member("env", &mut out);
        out.push_str(&text(&self.env));
        if let Some(t) = &self.event_type {
            member("event_type", &mut out);
            out.push_str(&text(t));
        }
        for (name, value) in [
            ("delivery_id", &self.delivery_id),
            ("received_at", &self.received_at),
            ("decision", &self.decision),
        ] {
            if let Some(v) = value {
                member(name, &mut out);
                out.push_str(&text(v));
            }
        }
        member("headers", &mut out);
        out.push('{');
        for (i, (k, v)) in self.headers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&text(k));
            out.push(':');
            out.push_str(&text(v));
        }
        out.push('}');
        match &self.body {
            Body::Json(v) => {
                member("body", &mut out);
                write_compact(v, &mut out);
            }
            Body::Base64 { data, reason } => {
                member("body_base64", &mut out);
                out.push_str(&text(data));
                member("body_reason", &mut out);
                out.push_str(&text(reason));
            }
        }
        if let Some(l) = &self.label {
            member("label", &mut out);
            out.push_str("{\"operation\":");
            out.push_str(&text(&l.operation));
            if let Some(r) = &l.resolution {
                out.push_str(",\"resolution\":");
                out.push_str(&text(r));
            }
            if let Some(r) = &l.reference {
                out.push_str(",\"reference\":");
                out.push_str(&text(r));
            }
            out.push('}');
        }
        out.push('}');
        out
    }
}

/// Writes a value without insignificant whitespace, members in document order and numbers as
/// spelled: the bytes a provider would have sent, minus whitespace. (The canonical form would
/// hide exactly the re-encodings a replay must exercise.)
pub fn write_compact(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n.literal()),
        Value::String(_) => out.push_str(&to_jcs(value)),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(v, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&to_jcs(&Value::String(k.to_owned())));
                out.push(':');
                write_compact(v, out);
            }
            out.push('}');
        }
    }
}

/// [`write_compact`] into a new string.
pub fn to_compact(value: &Value) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}
