//! Validation: the file as written turned into the validated contract, every error collected
//! with its file, line, provider, type and field, and the whole refused on any error.

use super::event_type::event_type_def;
use super::raw::*;
use super::*;

/// The sentence for a file that is not TOML. The parser leaves its message empty for some
/// refusals (a control character in a comment), so one is written from what is at the place.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim();
    if !message.is_empty() {
        return message.to_owned();
    }
    let at = e
        .span()
        .and_then(|s| text.get(s.start..))
        .and_then(|t| t.chars().next());
    match at {
        Some(c) if c.is_control() => format!(
            "the control character U+{:04X} is not allowed here (not even in a comment)",
            u32::from(c)
        ),
        _ => "the text is not valid TOML here".to_owned(),
    }
}

/// Collects errors with their location while validating.
pub(super) struct Checker<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    pub(super) errors: Vec<ContractError>,
    pub(super) warnings: Vec<String>,
}

/// Where in the contract a check is being made.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) line: Option<usize>,
    pub(super) provider: Option<&'a str>,
    pub(super) event_type: Option<&'a str>,
}

impl<'a> Checker<'a> {
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|b| *b == b'\n')
            .count()
            + 1
    }

    pub(super) fn error(&mut self, at: At<'_>, field: &str, message: impl Into<String>) {
        self.errors.push(ContractError {
            file: self.file.to_owned(),
            line: at.line,
            provider: at.provider.map(str::to_owned),
            event_type: at.event_type.map(str::to_owned),
            field: (!field.is_empty()).then(|| field.to_owned()),
            message: message.into(),
        });
    }

    /// A warning at `at`: `file:line: provider "p", type "t": text`.
    pub(super) fn warn(&mut self, at: At<'_>, text: impl fmt::Display) {
        let mut w = format!(
            "{}:{}: provider {:?}",
            self.file,
            at.line.unwrap_or(0),
            at.provider.unwrap_or("")
        );
        if let Some(t) = at.event_type {
            w.push_str(&format!(", type {t:?}"));
        }
        self.warnings.push(format!("{w}: {text}"));
    }

    pub(super) fn pointer(&mut self, at: At<'_>, field: &str, text: &str) -> Option<Pointer> {
        match Pointer::parse(text) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(at, field, e.to_string());
                None
            }
        }
    }

    pub(super) fn duration(
        &mut self,
        at: At<'_>,
        field: &str,
        text: Option<&str>,
        default: Duration,
    ) -> Duration {
        match text {
            None => default,
            Some(t) => match humantime::parse_duration(t) {
                Ok(d) if !d.is_zero() => d,
                Ok(_) => {
                    self.error(at, field, "a duration must be longer than zero");
                    default
                }
                Err(e) => {
                    self.error(
                        at,
                        field,
                        format!("{t:?} is not a duration like \"30s\", \"72h\" or \"7d\" ({e})"),
                    );
                    default
                }
            },
        }
    }

    pub(super) fn secret(
        &mut self,
        at: At<'_>,
        field: &str,
        env: Option<String>,
        file: Option<String>,
    ) -> Option<SecretSource> {
        match (env, file) {
            (Some(e), None) => Some(SecretSource::Env(e)),
            (None, Some(f)) => Some(SecretSource::File(f)),
            (None, None) => {
                self.error(at, field, "name where the secret comes from: `secret_env` or `secret_file` (never the secret itself)");
                None
            }
            (Some(_), Some(_)) => {
                self.error(
                    at,
                    field,
                    "give either `secret_env` or `secret_file`, not both",
                );
                None
            }
        }
    }

    /// The signing secrets' sources: `secret_env` or `secret_file`, each one name or a list
    /// of distinct names (a rotation).
    pub(super) fn secrets(
        &mut self,
        at: At<'_>,
        field: &str,
        env: Option<Names>,
        file: Option<Names>,
    ) -> Option<Vec<SecretSource>> {
        let (key, names, make): (_, _, fn(String) -> SecretSource) = match (env, file) {
            (Some(Names(e)), None) => ("secret_env", e, SecretSource::Env),
            (None, Some(Names(f))) => ("secret_file", f, SecretSource::File),
            // Neither or both: the single-secret check words that error for both uses.
            (env, file) => {
                self.secret(
                    at,
                    field,
                    env.map(|_| String::new()),
                    file.map(|_| String::new()),
                );
                return None;
            }
        };
        let field = format!("{field}.{key}");
        if names.is_empty() {
            self.error(
                at,
                &field,
                "the list names no secret: give at least one name",
            );
            return None;
        }
        let mut out: Vec<SecretSource> = Vec::with_capacity(names.len());
        for name in names {
            if name.trim().is_empty() {
                self.error(at, &field, "a secret's name is empty");
                return None;
            }
            let source = make(name);
            if out.contains(&source) {
                let (SecretSource::Env(n) | SecretSource::File(n)) = &source;
                self.error(at, &field, format!("{n:?} is named twice"));
                return None;
            }
            out.push(source);
        }
        Some(out)
    }
}

/// Parses and validates a contract. `file` names it in messages.
///
/// Every problem is collected before the contract is refused, each with its line, provider,
/// type and field; a contract is never half-applied. Things allowed but worth a second look
/// land in [`Contract::warnings`].
///
/// ```
/// use oncegate_core::contract::parse;
/// use oncegate_core::strategy::Level;
/// use std::time::Duration;
///
/// let text = r#"
/// [providers.payflow]
/// event_type = "/type"
///
/// [providers.payflow.types."refund.created"]
/// criticality = "critical"
/// resource = "/data/payment_id"
/// discriminants = ["/data/amount", "/data/currency"]
/// horizon = "7d"
///
///   [[providers.payflow.types."refund.created".strategies]]
///   name = "refund-request-ref"
///   version = 1
///   level = "business_ref"
///   fields = ["/data/payment_id", "/data/request_ref"]
/// "#;
/// let contract = parse("oncegate.toml", text).unwrap();
/// let refund = contract.event_type("payflow", "refund.created").unwrap();
/// assert_eq!(refund.operation, "refund.created"); // defaults to the type's name
/// assert_eq!(refund.horizon, Duration::from_secs(7 * 86400));
/// assert_eq!(refund.strategies[0].label(), "refund-request-ref@1");
/// assert_eq!(refund.strategies[0].level, Level::BusinessRef);
/// assert_eq!(contract.settings.lease, Duration::from_secs(30)); // the default lease
///
/// // A level that does not exist is refused with where it is and what would be valid.
/// let errors = parse("oncegate.toml", &text.replace("business_ref", "bizref")).unwrap_err();
/// let error = &errors.0[0];
/// assert_eq!(error.line, Some(11));
/// assert_eq!(error.event_type.as_deref(), Some("refund.created"));
/// assert_eq!(error.field.as_deref(), Some("strategies[0].level"));
/// assert!(error.message.contains("use provider_id, business_ref, semantic or fingerprint"));
/// ```
pub fn parse(file: &str, text: &str) -> Result<Contract, ContractErrors> {
    let raw: RawContract = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| {
            text[..s.start.min(text.len())]
                .bytes()
                .filter(|b| *b == b'\n')
                .count()
                + 1
        });
        ContractErrors(vec![ContractError {
            file: file.to_owned(),
            line,
            provider: None,
            event_type: None,
            field: None,
            message: toml_message(text, &e),
        }])
    })?;
    let mut c = Checker {
        file,
        text,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let settings = settings(&mut c, raw.settings);
    let mut providers = BTreeMap::new();
    // name@version → (definition, where first seen), to refuse one label with two meanings.
    let mut labels: HashMap<(String, u32), (Strategy, String)> = HashMap::new();
    for (name, raw_provider) in raw.providers {
        let line = c.line_of(raw_provider.span().start);
        if let Some(p) = provider(
            &mut c,
            &name,
            line,
            raw_provider.into_inner(),
            &settings,
            &mut labels,
        ) {
            providers.insert(name, p);
        }
    }
    if c.errors.is_empty() {
        Ok(Contract {
            source: file.to_owned(),
            settings,
            environments: raw.environments,
            providers,
            warnings: c.warnings,
        })
    } else {
        Err(ContractErrors(c.errors))
    }
}

fn settings(c: &mut Checker<'_>, raw: RawSettings) -> Settings {
    let d = Settings::default();
    let at = At {
        line: None,
        provider: None,
        event_type: None,
    };
    let s = Settings {
        lease: c.duration(at, "settings.lease", raw.lease.as_deref(), d.lease),
        horizon: c.duration(at, "settings.horizon", raw.horizon.as_deref(), d.horizon),
        payload_retention: c.duration(
            at,
            "settings.payload_retention",
            raw.payload_retention.as_deref(),
            d.payload_retention,
        ),
        proof_retention: c.duration(
            at,
            "settings.proof_retention",
            raw.proof_retention.as_deref(),
            d.proof_retention,
        ),
        max_body_bytes: raw.max_body_bytes.unwrap_or(d.max_body_bytes),
        max_depth: raw.max_depth.unwrap_or(d.max_depth),
        breaker_threshold: raw.breaker_threshold.unwrap_or(d.breaker_threshold),
        breaker_min_sample: raw.breaker_min_sample.unwrap_or(d.breaker_min_sample),
        store: raw.store,
    };
    if !(0.0..=1.0).contains(&s.breaker_threshold) {
        c.error(
            at,
            "settings.breaker_threshold",
            "must be a share between 0 and 1 (0.005 is 0.5 %)",
        );
    }
    // Dropping and writing a parsed tree recurse once per level, so the depth limit is also
    // what keeps a hostile body from exhausting the stack.
    if s.max_depth > 1000 {
        c.error(
            at,
            "settings.max_depth",
            "must be at most 1000 (128 is the default)",
        );
    }
    if s.max_depth == 0 || s.max_body_bytes == 0 {
        c.error(
            at,
            "settings",
            "max_depth and max_body_bytes must be above zero",
        );
    }
    if s.proof_retention < s.payload_retention {
        c.error(
            at,
            "settings.proof_retention",
            "proofs must outlive payloads: proof_retention is shorter than payload_retention",
        );
    }
    s
}

fn provider(
    c: &mut Checker<'_>,
    name: &str,
    line: usize,
    raw: RawProvider,
    settings: &Settings,
    labels: &mut HashMap<(String, u32), (Strategy, String)>,
) -> Option<Provider> {
    let at = At {
        line: Some(line),
        provider: Some(name),
        event_type: None,
    };
    let errors_before = c.errors.len();
    let event_type = match (raw.event_type, raw.event_type_header) {
        (Some(p), None) => c
            .pointer(at, "event_type", &p)
            .map(EventTypeSource::Pointer),
        (None, Some(h)) => Some(EventTypeSource::Header(h.to_ascii_lowercase())),
        _ => {
            c.error(at, "event_type", "say where the event type is: `event_type = \"/json/pointer\"` or `event_type_header = \"name\"`, exactly one");
            None
        }
    };
    let signature = raw.signature.and_then(|s| signature(c, at, s));
    let batch = raw.batch.and_then(|b| {
        let items = c.pointer(at, "batch.items", &b.items);
        let item = c.pointer(at, "batch.item", b.item.as_deref().unwrap_or(""));
        if b.reply.len() > 1024 {
            c.error(
                at,
                "batch.reply",
                "the reply a provider expects is short text (at most 1024 bytes)",
            );
        }
        if items.as_ref().is_some_and(Pointer::is_root) {
            c.error(
                at,
                "batch.items",
                "the items are an array inside the body, not the whole body",
            );
            return None;
        }
        Some(crate::batch::Batch {
            items: items?,
            item: item?,
            reply: b.reply,
        })
    });
    let provider_verify = raw.verify.and_then(|v| verify::verifier(c, at, v));
    let provider_forward = raw.forward.clone().and_then(|f| forward::forward(c, at, f));
    let mut types = BTreeMap::new();
    for (type_name, raw_type) in raw.types {
        let line = c.line_of(raw_type.span().start);
        let at = At {
            line: Some(line),
            provider: Some(name),
            event_type: Some(&type_name),
        };
        let mut raw_type = raw_type.into_inner();
        let own_forward = raw_type.forward.take();
        let type_forward = match (own_forward, &raw.forward) {
            (None, _) => provider_forward.clone(),
            // The provider's table was checked above: a type whose own table cannot be
            // completed is reported once, under the type.
            (Some(own), base) => {
                let merged = own.over(&base.clone().unwrap_or_default());
                forward::forward(c, at, merged)
            }
        };
        if let Some(t) = event_type_def(c, at, name, &type_name, raw_type, settings, labels) {
            let mut t = t;
            if t.verify.is_none() {
                t.verify = provider_verify.clone();
            }
            t.forward = type_forward;
            types.insert(type_name, t);
        }
    }
    if types.is_empty() && c.errors.len() == errors_before {
        c.warnings.push(format!("provider {name:?} declares no event type: all its deliveries will go to reconciliation"));
    }
    Some(Provider {
        name: name.to_owned(),
        event_type: event_type?,
        delivery_id_header: raw.delivery_id_header.map(|h| h.to_ascii_lowercase()),
        signature,
        batch,
        types,
        forward: provider_forward,
    })
}

fn signature(c: &mut Checker<'_>, at: At<'_>, raw: RawSignature) -> Option<Signature> {
    let errors_before = c.errors.len();
    let secrets = c.secrets(at, "signature", raw.secret_env, raw.secret_file);
    let name = raw.scheme.as_str();
    if !Scheme::NAMES.contains(&name) {
        let valid = Scheme::NAMES.map(|n| format!("{n:?}")).join(", ");
        c.error(
            at,
            "signature.scheme",
            format!("{name:?} is not a signature scheme: use one of {valid}"),
        );
        return None;
    }
    // A field the scheme does not read is refused rather than ignored: a `header` left on a
    // preset would otherwise look like it is honoured while another header is checked.
    let mut misplaced = |field: &str, set: bool, only: &str| {
        if set {
            c.error(
                at,
                &format!("signature.{field}"),
                format!("the {name:?} scheme has a fixed format and takes no `{field}`; `{field}` is only for {only}"),
            );
        }
    };
    let generic = "\"hmac-sha256\"";
    if name != "hmac-sha256" {
        misplaced("encoding", raw.encoding.is_some(), generic);
        misplaced("prefix", raw.prefix.is_some(), generic);
        misplaced("timestamp_header", raw.timestamp_header.is_some(), generic);
        if name != "stripe" {
            misplaced(
                "header",
                raw.header.is_some(),
                "\"stripe\" (its format under another header name) and \"hmac-sha256\"",
            );
        }
    }
    if name != "square" && raw.url.is_some() {
        c.error(
            at,
            "signature.url",
            format!("the {name:?} scheme signs no URL; `url` is only for \"square\""),
        );
    }
    if matches!(name, "github" | "shopify" | "square" | "adyen") && raw.tolerance.is_some() {
        c.error(
            at,
            "signature.tolerance",
            format!("the {name:?} scheme signs no timestamp, so there is no `tolerance` to set"),
        );
    }
    let tolerance = c.duration(
        at,
        "signature.tolerance",
        raw.tolerance.as_deref(),
        Duration::from_secs(300),
    );
    let scheme = match name {
        "standard-webhooks" => Scheme::StandardWebhooks { tolerance },
        "stripe" => Scheme::Stripe {
            header: raw
                .header
                .map_or_else(|| "stripe-signature".to_owned(), |h| h.to_ascii_lowercase()),
            tolerance,
        },
        "paddle" => Scheme::Paddle { tolerance },
        "slack" => Scheme::Slack { tolerance },
        "github" => Scheme::Github,
        "shopify" => Scheme::Shopify,
        "adyen" => Scheme::Adyen,
        "square" => match raw.url.as_deref().map(str::trim) {
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
                Scheme::Square {
                    url: url.to_owned(),
                }
            }
            _ => {
                c.error(
                    at,
                    "signature.url",
                    "square signs the notification URL with the body: give `url`, the https:// URL registered with Square, exactly",
                );
                return None;
            }
        },
        _ => {
            let Some(header) = raw.header else {
                c.error(
                    at,
                    "signature.header",
                    "hmac-sha256 needs the header that carries the signature",
                );
                return None;
            };
            let encoding = match raw.encoding.as_deref().unwrap_or("hex") {
                "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                other => {
                    c.error(
                        at,
                        "signature.encoding",
                        format!("{other:?} is not an encoding: use \"hex\" or \"base64\""),
                    );
                    return None;
                }
            };
            Scheme::HmacSha256 {
                header: header.to_ascii_lowercase(),
                encoding,
                prefix: raw.prefix,
                timestamp_header: raw.timestamp_header.map(|h| h.to_ascii_lowercase()),
                tolerance,
            }
        }
    };
    if c.errors.len() != errors_before {
        return None;
    }
    Some(Signature {
        scheme,
        secrets: secrets?,
    })
}

/// Whether the host of a URL (given without its scheme) is a loopback address: 127.0.0.0/8,
/// `::1` or `localhost` (RFC 6761 keeps `localhost` and its subdomains on the machine itself).
/// Pure text: no name is resolved.
pub(super) fn is_loopback(after_scheme: &str) -> bool {
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    // Userinfo (`user:pass@`) comes before the host.
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}
