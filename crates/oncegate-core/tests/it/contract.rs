//! The contract file: the shipped example is valid, and each refusal names file, line,
//! provider, type and field.

use oncegate_core::contract::{parse, ContractErrors, Scheme, SecretSource, Signature};
use oncegate_core::strategy::Level;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../../examples/oncegate.toml");

#[test]
fn the_shipped_example_is_valid_and_covers_the_required_cases() {
    let c = parse("examples/oncegate.toml", EXAMPLE).unwrap_or_else(|e| panic!("{e}"));
    let refund = c.event_type("payflow", "refund.created").unwrap();
    assert!(
        c.provider("payflow").unwrap().delivery_id_header.is_none(),
        "a provider with no event id"
    );
    assert_eq!(refund.strategies.first().unwrap().level, Level::BusinessRef);
    assert_eq!(refund.strategies.last().unwrap().level, Level::Fingerprint);
    assert!(refund.authority.is_some());
    assert!(c.provider("shopline").unwrap().delivery_id_header.is_some());
    assert_eq!(
        c.event_type("shopline", "customers/notify")
            .unwrap()
            .criticality
            .as_str(),
        "reversible"
    );
    let invoice = c.event_type("ledgerly", "invoice.finalized").unwrap();
    assert!(invoice.unordered.is_empty(), "invoice lines are ordered");
    let products = c.event_type("shopline", "products/update").unwrap();
    assert_eq!(products.unordered[0].pointer.as_str(), "/product/tags");
    assert!(c
        .warnings
        .iter()
        .any(|w| w.contains("invoice.finalized") && w.contains("weak fingerprint")));
}

fn errors(text: &str) -> ContractErrors {
    match parse("c.toml", text) {
        Ok(_) => panic!("the contract should be refused:\n{text}"),
        Err(e) => e,
    }
}

#[track_caller]
fn refused(text: &str, expected: &[&str]) {
    let all = errors(text).to_string();
    for part in expected {
        assert!(all.contains(part), "{part:?} not in:\n{all}");
    }
}

const HEAD: &str =
    "[providers.p]\nevent_type = \"/type\"\n\n[providers.p.types.t]\ncriticality = \"critical\"\n";

#[test]
fn refusals_name_where_and_what() {
    // Unknown pointer syntax.
    refused(
        &format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"data/id\"]\n"),
        &["c.toml:6:", "provider \"p\"", "type \"t\"", "field \"strategies[0].fields[0]\"", "must be empty or start with '/'"],
    );
    // A fingerprint with no volatile review.
    refused(
        &format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"fp\"\nversion = 1\nlevel = \"fingerprint\"\n"),
        &["c.toml:6:", "field \"strategies[0]\"", "volatile = [...]"],
    );
    // A strong fingerprint.
    refused(
        &format!("{HEAD}volatile = []\n[[providers.p.types.t.strategies]]\nname = \"fp\"\nversion = 1\nlevel = \"fingerprint\"\nconfidence = \"strong\"\n"),
        &["a fingerprint cannot be strong"],
    );
    // A volatile field declared without a reason.
    refused(
        &format!("{HEAD}volatile = [{{ field = \"/sent_at\" }}]\n[[providers.p.types.t.strategies]]\nname = \"fp\"\nversion = 1\nlevel = \"fingerprint\"\n"),
        &["field \"volatile[0]\"", "needs a `why`"],
    );
    // Unknown keys are typos, not silence.
    refused(
        &format!("{HEAD}critical = true\n"),
        &["c.toml:", "unknown field `critical`"],
    );
    // Bad level, bad criticality.
    refused(
        "[providers.p]\nevent_type = \"/type\"\n[providers.p.types.t]\ncriticality = \"meh\"\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"hash\"\nfields = [\"/id\"]\n",
        &["\"meh\" is not a criticality", "\"hash\" is not a level"],
    );
    // No strategy, no event type source.
    refused(
        "[providers.p]\n[providers.p.types.t]\ncriticality = \"reversible\"\n",
        &["say where the event type is", "at least one strategy"],
    );
    // A secret may not be missing its source; durations must parse.
    refused(
        "[settings]\nlease = \"soon\"\n[providers.p]\nevent_type = \"/t\"\nsignature = { scheme = \"hmac-sha256\", header = \"x-sig\" }\n",
        &["\"soon\" is not a duration", "`secret_env` or `secret_file`"],
    );
    // A contradiction: a volatile discriminant.
    refused(
        &format!("{HEAD}discriminants = [\"/sent_at\"]\nvolatile = [{{ field = \"/sent_at\", why = \"send time\" }}]\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n"),
        &["declared volatile and a discriminant"],
    );
    // The authority URL may only use holes we can fill.
    refused(
        &format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n[providers.p.types.t.authority]\nurl = \"https://x/{{resource}}/{{who}}\"\noperations = \"/items\"\nreference = \"/id\"\n"),
        &["{resource} is used but the type declares no `resource`", "{who} is not a known hole"],
    );
}

#[test]
fn an_authority_records_its_ca_file_and_refuses_one_it_would_not_use() {
    let authority = |url: &str, ca: &str| {
        format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n[providers.p.types.t.authority]\nurl = \"{url}\"\noperations = \"/items\"\nreference = \"/id\"\nca_file = \"{ca}\"\n")
    };
    let c = parse(
        "c.toml",
        &authority("https://api.example/x", "certs/provider-ca.pem"),
    )
    .expect("an https authority with a CA file is valid");
    let t = &c.providers["p"].types["t"];
    assert_eq!(
        t.authority.as_ref().unwrap().ca_file.as_deref(),
        Some("certs/provider-ca.pem")
    );
    refused(
        &authority("http://api.example/x", "ca.pem"),
        &["authority.ca_file", "only used for an https:// URL"],
    );
    refused(
        &authority("https://api.example/x", ""),
        &["authority.ca_file", "must name a PEM file"],
    );
}

#[test]
fn a_plain_http_authority_off_loopback_is_warned_about() {
    let check = |url: &str, warned: bool| {
        let text = format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n[providers.p.types.t.authority]\nurl = \"{url}\"\noperations = \"/items\"\nreference = \"/id\"\n");
        let c = parse("c.toml", &text).expect("valid");
        let found = c
            .warnings
            .iter()
            .any(|w| w.contains("plain http://") && w.contains(url) && w.contains("type \"t\""));
        assert_eq!(found, warned, "{url}: {:?}", c.warnings);
    };
    check("http://api.provider.example/v1/x", true);
    check("http://10.0.0.8:8080/x", true);
    check("http://127.0.0.2.example/x", true);
    check("http://[2001:db8::1]:80/x", true);
    check("http://localhost.evil.example/x", true);
    check("http://127.0.0.1:8089/v1/x", false);
    check("http://127.10.0.1/x", false);
    check("http://localhost:9000/x", false);
    check("http://LOCALHOST/x", false);
    check("http://api.localhost/x", false);
    check("http://[::1]:8089/x", false);
    check("http://user:pw@127.0.0.1/x", false);
    check("https://api.provider.example/v1/x", false);
}

#[test]
fn one_label_cannot_have_two_definitions() {
    let text = "[providers.p]\nevent_type = \"/type\"\n\
        [providers.p.types.a]\ncriticality = \"critical\"\n[[providers.p.types.a.strategies]]\nname = \"ref\"\nversion = 1\nlevel = \"business_ref\"\nfields = [\"/ref\"]\n\
        [providers.p.types.b]\ncriticality = \"critical\"\n[[providers.p.types.b.strategies]]\nname = \"ref\"\nversion = 1\nlevel = \"business_ref\"\nfields = [\"/reference\"]\n";
    refused(
        text,
        &[
            "ref@1 is already defined differently in p/a",
            "a new definition needs a new version",
        ],
    );
    // The same definition reused, or a new version, is fine.
    let same = text.replace("[\"/reference\"]", "[\"/ref\"]");
    assert!(parse("c.toml", &same).is_ok());
    let bumped = text.replacen(
        "version = 1\nlevel = \"business_ref\"\nfields = [\"/reference\"]",
        "version = 2\nlevel = \"business_ref\"\nfields = [\"/reference\"]",
        1,
    );
    assert!(
        parse("c.toml", &bumped).is_ok(),
        "{:?}",
        parse("c.toml", &bumped).err()
    );
    // Twice in one hierarchy.
    let twice = format!(
        "{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n"
    );
    refused(&twice, &["s@1 appears twice"]);
}

#[test]
fn toml_syntax_errors_carry_the_line() {
    refused(
        "[providers.p]\nevent_type = \"/t\"\nbroken = = 1\n",
        &["c.toml:3:"],
    );
}

#[test]
fn a_control_character_in_a_comment_is_refused_with_a_sentence() {
    // Found by fuzzing (fuzz/fuzz_targets/contract.rs): the TOML parser's own message for a
    // NUL in a comment is empty, which left the error saying nothing after its line.
    let e = errors("[settings]\n# a comment with a \0 in it\nlease = \"30s\"\n");
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(e.0[0].line, Some(2));
    assert_eq!(
        e.0[0].message,
        "the control character U+0000 is not allowed here (not even in a comment)"
    );
}

#[test]
fn all_errors_are_reported_together() {
    let e = errors("[settings]\nlease = \"x\"\nhorizon = \"y\"\n");
    assert_eq!(e.0.len(), 2, "{e}");
}

fn signature_of(c: &oncegate_core::contract::Contract, provider: &str) -> Signature {
    c.provider(provider)
        .and_then(|p| p.signature.clone())
        .unwrap_or_else(|| panic!("{provider} declares a signature"))
}

#[test]
fn signature_presets_take_their_defaults_and_several_secrets() {
    let text = r#"
[providers.stripe]
event_type = "/type"
signature = { scheme = "stripe", secret_env = ["STRIPE_OLD", "STRIPE_NEW"] }

[providers.lookalike]
event_type = "/type"
signature = { scheme = "stripe", header = "X-Lookalike-Signature", tolerance = "10m", secret_file = "/run/secrets/lookalike" }

[providers.paddle]
event_type = "/event_type"
signature = { scheme = "paddle", secret_file = ["/run/a", "/run/b"] }

[providers.slack]
event_type = "/type"
signature = { scheme = "slack", tolerance = "1m", secret_env = "SLACK_SIGNING_SECRET" }

[providers.github]
event_type_header = "x-github-event"
signature = { scheme = "github", secret_env = "GITHUB_WEBHOOK_SECRET" }

[providers.shopify]
event_type_header = "x-shopify-topic"
signature = { scheme = "shopify", secret_env = "SHOPIFY_API_SECRET" }
"#;
    let c = parse("c.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let five = Duration::from_secs(300);
    let env = |n: &str| SecretSource::Env(n.to_owned());
    let file = |n: &str| SecretSource::File(n.to_owned());
    let cases = [
        (
            "stripe",
            Scheme::Stripe {
                header: "stripe-signature".into(),
                tolerance: five,
            },
            vec![env("STRIPE_OLD"), env("STRIPE_NEW")],
        ),
        (
            "lookalike",
            Scheme::Stripe {
                header: "x-lookalike-signature".into(),
                tolerance: Duration::from_secs(600),
            },
            vec![file("/run/secrets/lookalike")],
        ),
        (
            "paddle",
            Scheme::Paddle { tolerance: five },
            vec![file("/run/a"), file("/run/b")],
        ),
        (
            "slack",
            Scheme::Slack {
                tolerance: Duration::from_secs(60),
            },
            vec![env("SLACK_SIGNING_SECRET")],
        ),
        ("github", Scheme::Github, vec![env("GITHUB_WEBHOOK_SECRET")]),
        ("shopify", Scheme::Shopify, vec![env("SHOPIFY_API_SECRET")]),
    ];
    for (provider, scheme, secrets) in cases {
        assert_eq!(
            signature_of(&c, provider),
            Signature { scheme, secrets },
            "{provider}"
        );
    }
    assert_eq!(signature_of(&c, "stripe").scheme.tolerance(), Some(five));
    assert_eq!(signature_of(&c, "github").scheme.tolerance(), None);
    assert_eq!(
        signature_of(&c, "slack").scheme.timestamp_header(),
        Some("x-slack-request-timestamp")
    );
}

#[test]
fn signature_refusals_name_the_field() {
    let with =
        |sig: &str| format!("[providers.p]\nevent_type = \"/type\"\nsignature = {{ {sig} }}\n");
    // An unknown scheme lists every valid one.
    refused(
        &with(r#"scheme = "stripe-v2", secret_env = "S""#),
        &[
            "field \"signature.scheme\": \"stripe-v2\" is not a signature scheme",
            r#""standard-webhooks", "hmac-sha256", "stripe", "paddle", "slack", "github", "shopify""#,
        ],
    );
    // A field the scheme does not read is an error, not a silent no-op.
    refused(
        &with(r#"scheme = "paddle", header = "x-paddle", secret_env = "S""#),
        &["field \"signature.header\": the \"paddle\" scheme has a fixed format and takes no `header`"],
    );
    refused(
        &with(r#"scheme = "github", header = "x-hub-signature", secret_env = "S""#),
        &["field \"signature.header\""],
    );
    refused(
        &with(r#"scheme = "stripe", encoding = "base64", prefix = "v1=", secret_env = "S""#),
        &["field \"signature.encoding\"", "field \"signature.prefix\""],
    );
    refused(
        &with(r#"scheme = "slack", timestamp_header = "x-ts", secret_env = "S""#),
        &["field \"signature.timestamp_header\""],
    );
    refused(
        &with(r#"scheme = "shopify", tolerance = "5m", secret_env = "S""#),
        &["field \"signature.tolerance\": the \"shopify\" scheme signs no timestamp"],
    );
    refused(
        &with(r#"scheme = "stripe", tolerance = "0s", secret_env = "S""#),
        &["field \"signature.tolerance\": a duration must be longer than zero"],
    );
    // Secret lists: not empty, no name twice, and still never both sources.
    refused(
        &with(r#"scheme = "stripe", secret_env = []"#),
        &["field \"signature.secret_env\": the list names no secret"],
    );
    refused(
        &with(r#"scheme = "stripe", secret_file = ["/a", "/a"]"#),
        &["field \"signature.secret_file\": \"/a\" is named twice"],
    );
    refused(
        &with(r#"scheme = "stripe", secret_env = ["A", ""]"#),
        &["field \"signature.secret_env\": a secret's name is empty"],
    );
    refused(
        &with(r#"scheme = "stripe", secret_env = ["A"], secret_file = "/b""#),
        &["`secret_env` or `secret_file`, not both"],
    );
    refused(
        &with(r#"scheme = "stripe", secret_env = 3"#),
        &["a name or a list of names"],
    );
}

#[test]
fn a_verification_api_is_a_types_own_or_its_providers() {
    const STRATEGY: &str =
        "[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n";
    let provider_wide = "[providers.p]\nevent_type = \"/type\"\nverify = { url = \"https://ledger.internal/effects/{effect_id}\", auth_header = \"Authorization\", auth_secret_env = \"LEDGER_TOKEN\" }\n\n[providers.p.types.t]\ncriticality = \"critical\"\n".to_owned()
        + STRATEGY
        + "[providers.p.types.u]\ncriticality = \"critical\"\nverify = { url = \"http://127.0.0.1:7000/u/{tenant}/{effect_id}\" }\n[[providers.p.types.u.strategies]]\nname = \"s2\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n";
    let c = parse("c.toml", &provider_wide).expect("valid verification APIs");
    let t = c.providers["p"].types["t"]
        .verify
        .as_ref()
        .expect("inherited");
    assert_eq!(t.url, "https://ledger.internal/effects/{effect_id}");
    assert_eq!(t.auth_header.as_deref(), Some("authorization"));
    let u = c.providers["p"].types["u"]
        .verify
        .as_ref()
        .expect("its own");
    assert_eq!(u.url, "http://127.0.0.1:7000/u/{tenant}/{effect_id}");
    let own = |v: &str| format!("{HEAD}verify = {v}\n{STRATEGY}");
    refused(
        &own("{ url = \"https://x.example/effects\" }"),
        &["verify.url", "must contain {effect_id}"],
    );
    refused(
        &own("{ url = \"https://x.example/{effect}\" }"),
        &["verify.url", "{effect} is not a known hole"],
    );
    refused(
        &own("{ url = \"ftp://x.example/{effect_id}\" }"),
        &["verify.url", "http:// or https://"],
    );
    refused(
        &own("{ url = \"https://x.example/{effect_id}\", auth_secret_env = \"T\" }"),
        &["verify.auth_header", "needs the header"],
    );
    let plain = parse(
        "c.toml",
        &own("{ url = \"http://ledger.example/{effect_id}\" }"),
    )
    .expect("plain http is allowed with a warning");
    assert!(
        plain
            .warnings
            .iter()
            .any(|w| w.contains("verification API")),
        "{:?}",
        plain.warnings
    );
}

#[test]
fn a_forward_is_a_providers_with_a_types_fields_over_it() {
    const T: &str =
        "[providers.p.types.t]\ncriticality = \"critical\"\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n";
    const U: &str =
        "[providers.p.types.u]\ncriticality = \"reversible\"\n[[providers.p.types.u.strategies]]\nname = \"s2\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n";
    let text = format!(
        "[providers.p]\nevent_type = \"/type\"\n[providers.p.forward]\nurl = \"https://consumer.internal/hooks/p\"\nsigning_secret_env = \"FORWARD_SECRET\"\n\n{T}{U}[providers.p.types.u.forward]\ntimeout = \"2s\"\nmax_attempts = 3\nbackoff = \"100ms..1s\"\n"
    );
    let c = parse("c.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    let t = c.providers["p"].types["t"]
        .forward
        .as_ref()
        .expect("the provider's");
    assert_eq!(t.url, "https://consumer.internal/hooks/p");
    assert_eq!(t.timeout, Duration::from_secs(10));
    assert_eq!(t.max_attempts, 8);
    assert_eq!(
        (t.backoff_first, t.backoff_max),
        (Duration::from_secs(1), Duration::from_secs(600))
    );
    assert_eq!(
        t.signing_secret,
        Some(SecretSource::Env("FORWARD_SECRET".to_owned()))
    );
    let u = c.providers["p"].types["u"]
        .forward
        .as_ref()
        .expect("merged");
    assert_eq!(u.url, t.url, "the url comes from the provider's table");
    assert_eq!(u.timeout, Duration::from_secs(2));
    assert_eq!(u.max_attempts, 3);
    assert_eq!(
        (u.backoff_first, u.backoff_max),
        (Duration::from_millis(100), Duration::from_secs(1))
    );
    assert_eq!(u.signing_secret, t.signing_secret);
    assert!(c.providers["p"].forward.is_some());

    // Without a forward table nothing is forwarded.
    let plain = parse("c.toml", &format!("{HEAD}[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n")).unwrap();
    assert!(plain.providers["p"].types["t"].forward.is_none());

    let own = |f: &str| {
        format!("{HEAD}forward = {f}\n[[providers.p.types.t.strategies]]\nname = \"s\"\nversion = 1\nlevel = \"semantic\"\nfields = [\"/id\"]\n")
    };
    refused(
        &own("{ timeout = \"1s\" }"),
        &[
            "c.toml:",
            "type \"t\"",
            "forward.url",
            "consumer's endpoint",
        ],
    );
    refused(
        &own("{ url = \"ftp://x.example/\" }"),
        &["forward.url", "http:// or https://"],
    );
    refused(
        &own("{ url = \"https://x.example/\", max_attempts = 0 }"),
        &["forward.max_attempts", "between 1 and 100"],
    );
    refused(
        &own("{ url = \"https://x.example/\", backoff = \"1s\" }"),
        &["forward.backoff", "range of pauses"],
    );
    refused(
        &own("{ url = \"https://x.example/\", backoff = \"1m..1s\" }"),
        &["forward.backoff", "first pause is longer"],
    );
    refused(
        &own("{ url = \"https://x.example/\", timeout = \"soon\" }"),
        &["forward.timeout", "not a duration"],
    );
    refused(
        &own("{ url = \"https://x.example/\", signing_secret_env = \"A\", signing_secret_file = \"/b\" }"),
        &["forward.signing_secret", "not both"],
    );
    refused(
        &own("{ url = \"https://x.example/\", retries = 3 }"),
        &["unknown field `retries`"],
    );
    let unsigned = parse("c.toml", &own("{ url = \"http://127.0.0.1:9/\" }")).unwrap();
    assert!(
        unsigned.warnings.iter().any(|w| w.contains("not signed")),
        "{:?}",
        unsigned.warnings
    );
}
