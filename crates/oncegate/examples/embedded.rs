//! The refund story in process, with no HTTP: a payment provider that sends no event id
//! retries a refund with its JSON re-encoded, sends a second legitimate refund of the same
//! amount, and reuses a request reference for a different amount. oncegate runs each refund
//! once, answers the retry with the first result, keeps the collision for a person, and never
//! drops the second refund.
//!
//! `cargo run --release -p oncegate --example embedded` (a temporary SQLite file; set
//! `ONCEGATE_STORE` to the `postgres://…` URL of an empty database to run it on PostgreSQL).

use std::time::Duration;

use oncegate::store::TenantFilter;
use oncegate::{Gate, Outcome, Reception};

/// The business effect: what the consumer's refund handler would do.
async fn apply_refund(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("the gate only passes JSON");
    let data = &v["data"];
    format!(
        r#"{{"refund":"re_{}","amount":{}}}"#,
        data["request_ref"].as_str().unwrap_or("?"),
        data["amount"]
    )
}

fn refund(json: &str) -> Reception {
    Reception::new("acme", "payflow", "live", json.as_bytes().to_vec())
}

async fn deliver(gate: &Gate, step: &str, json: &str) -> anyhow::Result<Outcome> {
    let outcome = gate.deliver(refund(json)).await?;
    let proof = outcome.proof();
    println!(
        "{step}\n  → {} ({}): {}",
        proof.action().as_str(),
        proof.decision.rule,
        proof.decision.reason
    );
    Ok(outcome)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let contract = oncegate::core::contract::parse(
        "examples/oncegate.toml",
        include_str!("../../../examples/oncegate.toml"),
    )?;
    let dir = tempfile::tempdir()?;
    let url = std::env::var("ONCEGATE_STORE")
        .unwrap_or_else(|_| format!("sqlite://{}", dir.path().join("oncegate.db").display()));
    let gate = Gate::open(contract, &url, b"salt from the environment".to_vec()).await?;
    println!("store: {}\n", gate.backend());

    // 1. A refund of 15.00 EUR with the merchant's request reference: it runs.
    let first = r#"{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{"payment_id":"pay_7Hq2","request_ref":"RR-1","amount":1500,"currency":"EUR"}}"#;
    match deliver(&gate, "1. refund RR-1, 15.00 EUR on pay_7Hq2", first).await? {
        Outcome::Process(held) => {
            let result = apply_refund(first.as_bytes()).await;
            println!("  the handler ran: {result}");
            held.complete(&result).await?;
        }
        other => anyhow::bail!("a first refund must run, not {:?}", other.action()),
    }

    // 2. The provider retries it 40 s later, re-encoded: members reordered, 1500 as 15e2, a
    //    new send time and attempt, the reference in other case. Same refund: nothing runs.
    let retry = r#"{"attempt":2,"data":{"currency":"EUR","amount":15e2,"request_ref":" rr-1 ","payment_id":"pay_7Hq2"},"sent_at":"2026-03-05T16:02:51Z","type":"refund.created"}"#;
    let again = deliver(&gate, "2. the retry, re-encoded", retry).await?;
    let Outcome::Ignore(proof) = &again else {
        anyhow::bail!("a retry must be ignored, not {:?}", again.action());
    };
    println!(
        "  answered with the first result: {}",
        proof.existing_result.as_deref().unwrap_or("")
    );

    // 3. Four minutes later, a second legitimate refund of the same amount: it runs too.
    let second = r#"{"type":"refund.created","sent_at":"2026-03-05T16:06:40Z","attempt":1,"data":{"payment_id":"pay_7Hq2","request_ref":"RR-2","amount":1500,"currency":"EUR"}}"#;
    match deliver(&gate, "3. refund RR-2, also 15.00 EUR on pay_7Hq2", second).await? {
        Outcome::Process(held) => {
            let result = apply_refund(second.as_bytes()).await;
            println!("  the handler ran: {result}");
            held.complete(&result).await?;
        }
        other => anyhow::bail!(
            "a second legitimate refund was {:?}: the silent loss oncegate exists to prevent",
            other.action()
        ),
    }

    // 4. The reference RR-1 again, for another amount: a collision, kept for a person.
    let reused = r#"{"type":"refund.created","sent_at":"2026-03-05T16:09:02Z","attempt":1,"data":{"payment_id":"pay_7Hq2","request_ref":"RR-1","amount":900,"currency":"EUR"}}"#;
    let collision = deliver(&gate, "4. RR-1 again, for 9.00 EUR", reused).await?;
    if !matches!(collision, Outcome::Quarantine(_)) {
        anyhow::bail!("a reused reference with another amount must be quarantined");
    }

    // 5. A refund without a reference: only a fingerprint identifies it, which cannot tell a
    //    retry from a second refund of the same amount. A critical effect is never ignored on
    //    that: it waits for the provider's refund list or a person.
    let bare = r#"{"type":"refund.created","sent_at":"2026-03-05T16:12:30Z","attempt":1,"data":{"payment_id":"pay_9Zt4","amount":700,"currency":"EUR"}}"#;
    let first_bare = deliver(&gate, "5. a refund with no reference", bare).await?;
    let Outcome::Process(held) = first_bare else {
        anyhow::bail!("the first refund of pay_9Zt4 must run");
    };
    held.complete(r#"{"refund":"re_bare"}"#).await?;
    let later = r#"{"type":"refund.created","sent_at":"2026-03-05T16:15:02Z","attempt":1,"data":{"payment_id":"pay_9Zt4","amount":700,"currency":"EUR"}}"#;
    let bare_again = deliver(&gate, "6. the same refund body, sent again later", later).await?;
    if !matches!(bare_again, Outcome::Reconcile(_)) {
        anyhow::bail!("a fingerprint alone must not decide a critical refund");
    }

    let report = gate
        .report(&TenantFilter::All, time::OffsetDateTime::UNIX_EPOCH)
        .await?;
    let t = &report.total;
    println!(
        "\nreport: received {}, processed {}, ignored {}, quarantined {}, reconcile {}, effects completed {}, unexplained gap {}",
        t.received,
        t.processed,
        t.ignored_transport + t.ignored_effect,
        t.quarantined,
        t.reconcile,
        t.effects_completed,
        t.unexplained_gap
    );
    anyhow::ensure!(t.effects_completed == 3, "three refunds ran, each once");
    anyhow::ensure!(t.unexplained_gap == 0, "every delivery has its proof");
    // Let the store's writer finish before the temporary directory goes.
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
