//! Validation of one event type: its criticality, operation, resource, discriminants, volatile
//! and sensitive fields, normalizations, its strategy hierarchy and shadows, and its authority.

use super::check::*;
use super::raw::*;
use super::*;

pub(super) fn declared(
    c: &mut Checker<'_>,
    at: At<'_>,
    field: &str,
    raw: Vec<RawDeclared>,
) -> Vec<Declared> {
    let mut out = Vec::new();
    for (i, d) in raw.into_iter().enumerate() {
        let name = format!("{field}[{i}]");
        let why = d.why.map(|w| w.trim().to_owned()).unwrap_or_default();
        if why.is_empty() {
            c.error(
                at,
                &name,
                format!(
                    "declaring {:?} needs a `why`: the written reason this field may be treated so",
                    d.field
                ),
            );
        }
        if let Some(pointer) = c.pointer(at, &name, &d.field) {
            if pointer.is_root() {
                c.error(at, &name, "the whole document cannot be declared here");
            }
            out.push(Declared { pointer, why });
        }
    }
    out
}

pub(super) fn normalizations(
    c: &mut Checker<'_>,
    at: At<'_>,
    field: &str,
    ops: &[String],
) -> Vec<Normalization> {
    let mut out = Vec::new();
    for op in ops {
        match Normalization::parse(op) {
            Some(n) => out.push(n),
            None => c.error(
                at,
                field,
                format!(
                    "{op:?} is not a normalization: use trim, lowercase, uppercase, utc or decimal"
                ),
            ),
        }
    }
    out
}

pub(super) fn event_type_def(
    c: &mut Checker<'_>,
    at: At<'_>,
    provider: &str,
    name: &str,
    raw: RawType,
    settings: &Settings,
    labels: &mut HashMap<(String, u32), (Strategy, String)>,
) -> Option<EventType> {
    let errors_before = c.errors.len();
    let criticality = match raw.criticality.as_deref() {
        Some(s) => Criticality::parse(s).or_else(|| {
            c.error(
                at,
                "criticality",
                format!("{s:?} is not a criticality: use \"reversible\" or \"critical\""),
            );
            None
        }),
        None => {
            c.error(
                at,
                "criticality",
                "say what a duplicate or a loss costs: \"reversible\" or \"critical\"",
            );
            None
        }
    };
    let resource = raw
        .resource
        .as_deref()
        .and_then(|r| c.pointer(at, "resource", r));
    let discriminants: Vec<Pointer> = raw
        .discriminants
        .iter()
        .enumerate()
        .filter_map(|(i, d)| c.pointer(at, &format!("discriminants[{i}]"), d))
        .collect();
    let volatile_reviewed = raw.volatile.is_some();
    let volatile = declared(c, at, "volatile", raw.volatile.unwrap_or_default());
    let unordered = declared(c, at, "unordered", raw.unordered);
    let mut normalize = Vec::new();
    for (i, n) in raw.normalize.iter().enumerate() {
        let field = format!("normalize[{i}]");
        if let Some(p) = c.pointer(at, &field, &n.field) {
            let ops = normalizations(c, at, &field, &n.ops);
            normalize.push((p, ops));
        }
    }
    let sensitive: Vec<Pointer> = raw
        .sensitive
        .iter()
        .enumerate()
        .filter_map(|(i, s)| c.pointer(at, &format!("sensitive[{i}]"), s))
        .collect();
    for d in &discriminants {
        if volatile.iter().any(|v| &v.pointer == d) {
            c.error(at, "discriminants", format!("{d} is declared volatile and a discriminant: a field that changes between retries cannot tell two operations apart"));
        }
    }
    for u in &unordered {
        if volatile.iter().any(|v| v.pointer == u.pointer) {
            c.error(
                at,
                "unordered",
                format!("{} is declared both volatile and unordered", u.pointer),
            );
        }
    }
    let horizon = c.duration(at, "horizon", raw.horizon.as_deref(), settings.horizon);
    let authority = raw
        .authority
        .and_then(|a| authority(c, at, a, resource.is_some()));
    let verify = raw.verify.and_then(|v| verify::verifier(c, at, v));

    let mut strategies: Vec<Strategy> = Vec::new();
    let mut shadow: Vec<Strategy> = Vec::new();
    if raw.strategies.is_empty() {
        c.error(
            at,
            "strategies",
            "a type needs at least one strategy to make its effect key",
        );
    }
    // Shadows are read exactly as strategies are (same shape, same checks, same global
    // name+version consistency); they only land in their own list.
    let listed = raw
        .strategies
        .into_iter()
        .enumerate()
        .map(|(i, s)| ("strategies", i, s))
        .chain(
            raw.shadow
                .into_iter()
                .enumerate()
                .map(|(i, s)| ("shadow", i, s)),
        );
    for (list, i, spanned) in listed {
        let line = c.line_of(spanned.span().start);
        let sat = At {
            line: Some(line),
            ..at
        };
        let field = format!("{list}[{i}]");
        let rs = spanned.into_inner();
        let Some(level) = Level::parse(&rs.level) else {
            c.error(
                sat,
                &format!("{field}.level"),
                format!(
                    "{:?} is not a level: use provider_id, business_ref, semantic or fingerprint",
                    rs.level
                ),
            );
            continue;
        };
        let confidence = match rs.confidence.as_deref() {
            None => level.default_confidence(),
            Some(s) => match Confidence::parse(s) {
                Some(conf) => conf,
                None => {
                    c.error(
                        sat,
                        &format!("{field}.confidence"),
                        format!("{s:?} is not a confidence: use strong, medium or weak"),
                    );
                    continue;
                }
            },
        };
        let scope = match rs.scope.as_deref() {
            None | Some("type") => ScopeKind::Type,
            Some("operation") => ScopeKind::Operation,
            Some(s) => {
                c.error(
                    sat,
                    &format!("{field}.scope"),
                    format!("{s:?} is not a scope: use \"type\" or \"operation\""),
                );
                continue;
            }
        };
        let mut fields = Vec::new();
        for (j, f) in rs.fields.iter().enumerate() {
            let fname = format!("{field}.fields[{j}]");
            let source = match f.strip_prefix(Source::HEADER_PREFIX) {
                Some(name) => {
                    let name = name.trim();
                    let valid = !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                    if !valid {
                        c.error(sat, &fname, format!("{f:?} names no valid header: write `header:<Name>` with letters, digits, `-` or `_`"));
                        continue;
                    }
                    if level == Level::Fingerprint {
                        c.error(
                            sat,
                            &fname,
                            format!(
                                "{f:?}: a fingerprint hashes parts of the body, never a header"
                            ),
                        );
                        continue;
                    }
                    Source::Header(name.to_ascii_lowercase())
                }
                None => match c.pointer(sat, &fname, f) {
                    Some(pointer) => Source::Body(pointer),
                    None => continue,
                },
            };
            let ops = rs
                .normalize
                .get(f)
                .map(|ops| normalizations(c, sat, &format!("{field}.normalize"), ops))
                .unwrap_or_default();
            fields.push(Field {
                source,
                normalize: ops,
            });
        }
        if !rs.placeholders.is_empty() && level == Level::Fingerprint {
            c.error(
                sat,
                &format!("{field}.placeholders"),
                "a fingerprint has no id fields, so no placeholder values",
            );
        }
        if rs.placeholders.iter().any(|p| p.trim().is_empty()) {
            c.error(
                sat,
                &format!("{field}.placeholders"),
                "a placeholder is a value test tools reuse; a blank one already counts as absent",
            );
        }
        for key in rs.normalize.keys() {
            if !rs.fields.contains(key) {
                c.error(
                    sat,
                    &format!("{field}.normalize"),
                    format!("{key} is normalized but is not one of the strategy's fields"),
                );
            }
        }
        if rs.version == 0 {
            c.error(sat, &format!("{field}.version"), "versions start at 1");
        }
        if level != Level::Fingerprint && fields.is_empty() && rs.fields.is_empty() {
            c.error(
                sat,
                &format!("{field}.fields"),
                format!("a {level} strategy needs the fields that make its key"),
            );
        }
        if level == Level::Fingerprint {
            if !volatile_reviewed {
                c.error(sat, &field, "a fingerprint strategy needs the type's volatile fields reviewed: declare `volatile = [...]` (an empty list if none, on purpose)");
            }
            if confidence == Confidence::Strong {
                c.error(sat, &format!("{field}.confidence"), "a fingerprint cannot be strong: two legitimate operations can have identical bodies");
            }
        }
        if let Some(prev) = strategies
            .iter()
            .chain(&shadow)
            .find(|s| s.name == rs.name && s.version == rs.version)
        {
            let _ = prev;
            c.error(
                sat,
                &format!("{field}.name"),
                format!(
                    "{}@{} appears twice in this type's hierarchy",
                    rs.name, rs.version
                ),
            );
            continue;
        }
        let strategy = Strategy {
            name: rs.name.clone(),
            version: rs.version,
            level,
            fields,
            confidence,
            horizon: c.duration(
                sat,
                &format!("{field}.horizon"),
                rs.horizon.as_deref(),
                horizon,
            ),
            scope,
            placeholders: rs.placeholders.clone(),
            why: rs
                .why
                .as_deref()
                .map(str::trim)
                .unwrap_or_default()
                .to_owned(),
        };
        let here = format!("{provider}/{name}");
        match labels.get(&(rs.name.clone(), rs.version)) {
            Some((existing, there)) if !same_definition(existing, &strategy) => {
                c.error(
                    sat,
                    &format!("{field}.name"),
                    format!(
                        "{} is already defined differently in {there}: a new definition needs a new version, so old keys are never reinterpreted",
                        strategy.label()
                    ),
                );
            }
            Some(_) => {}
            None => {
                labels.insert((rs.name.clone(), rs.version), (strategy.clone(), here));
            }
        }
        if list == "shadow" {
            shadow.push(strategy);
        } else {
            strategies.push(strategy);
        }
    }

    let criticality = criticality?;
    if let Some(last) = strategies.last() {
        if criticality == Criticality::Critical
            && last.level == Level::Fingerprint
            && last.confidence == Confidence::Weak
            && authority.is_none()
        {
            c.warnings.push(format!(
                "{}:{}: provider {provider:?}, type {name:?}: the critical type's last resort is a weak fingerprint ({}) and no authority is configured: every fingerprint match will wait for a person",
                c.file,
                at.line.unwrap_or(0),
                last.label()
            ));
        }
    }
    if c.errors.len() != errors_before {
        return None;
    }
    Some(EventType {
        name: name.to_owned(),
        why: raw
            .why
            .as_deref()
            .map(str::trim)
            .unwrap_or_default()
            .to_owned(),
        provider: provider.to_owned(),
        criticality,
        operation: raw.operation.unwrap_or_else(|| name.to_owned()),
        resource,
        discriminants,
        volatile,
        volatile_reviewed,
        unordered,
        normalize,
        sensitive,
        durable: raw.durable,
        horizon,
        authority,
        verify,
        forward: None,
        strategies,
        shadow,
        line: at.line.unwrap_or(0),
    })
}

/// Two strategies with one label are the same if everything but the horizon agrees: the
/// horizon says how long the index remembers, not what the key means.
pub(super) fn same_definition(a: &Strategy, b: &Strategy) -> bool {
    a.level == b.level && a.fields == b.fields && a.confidence == b.confidence && a.scope == b.scope
}

fn authority(
    c: &mut Checker<'_>,
    at: At<'_>,
    raw: RawAuthority,
    has_resource: bool,
) -> Option<Authority> {
    let before = c.errors.len();
    // Every hole in the URL must be one we know how to fill.
    let mut rest = raw.url.as_str();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            c.error(at, "authority.url", "an opening '{' has no closing '}'");
            break;
        };
        let hole = &rest[open + 1..open + close];
        match hole {
            "env" | "tenant" | "provider" => {}
            "resource" if has_resource => {}
            "resource" => c.error(at, "authority.url", "{resource} is used but the type declares no `resource`"),
            h if h.starts_with('/') => {
                c.pointer(at, "authority.url", h);
            }
            h => c.error(at, "authority.url", format!("{{{h}}} is not a known hole: use {{resource}}, {{env}}, {{tenant}}, {{provider}} or {{/json/pointer}}")),
        }
        rest = &rest[open + close + 1..];
    }
    if !(raw.url.starts_with("http://") || raw.url.starts_with("https://")) {
        c.error(at, "authority.url", "must be an http:// or https:// URL");
    }
    if let Some(rest) = raw.url.strip_prefix("http://") {
        if !is_loopback(rest) {
            c.warn(at, format!(
                "the authority {} is plain http:// on a host that is not loopback: its answers and its auth header travel unencrypted and unauthenticated; use https://",
                raw.url
            ));
        }
    }
    match raw.ca_file.as_deref() {
        Some("") => c.error(
            at,
            "authority.ca_file",
            "must name a PEM file of CA certificates",
        ),
        // A CA for a plain-HTTP authority would never be used: the contract says something
        // it does not mean.
        Some(_) if !raw.url.starts_with("https://") => {
            c.error(at, "authority.ca_file", "is only used for an https:// URL")
        }
        _ => {}
    }
    let auth_secret = match (&raw.auth_header, raw.auth_secret_env, raw.auth_secret_file) {
        (None, None, None) => None,
        (Some(_), env, file) => c.secret(at, "authority", env, file),
        (None, _, _) => {
            c.error(
                at,
                "authority.auth_header",
                "a secret is named but no header to send it in",
            );
            None
        }
    };
    let sweep_window = raw.sweep_window.as_deref().map(|w| {
        c.duration(
            at,
            "authority.sweep_window",
            Some(w),
            Duration::from_secs(86400),
        )
    });
    let operations = c.pointer(at, "authority.operations", &raw.operations);
    let reference = c.pointer(at, "authority.reference", &raw.reference);
    let mut fields = Vec::new();
    for (ours, theirs) in &raw.fields {
        if let (Some(a), Some(b)) = (
            c.pointer(at, "authority.fields", ours),
            c.pointer(at, "authority.fields", theirs),
        ) {
            fields.push((a, b));
        }
    }
    if c.errors.len() != before {
        return None;
    }
    Some(Authority {
        url: raw.url,
        auth_header: raw.auth_header,
        auth_secret,
        operations: operations?,
        reference: reference?,
        fields,
        sweep_window,
        ca_file: raw.ca_file,
    })
}
