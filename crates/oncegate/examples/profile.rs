//! A fixed amount of work for a profiler: `ONCEGATE_PROFILE_OPS` deliveries of new refunds
//! (default 2,000), each `Gate::deliver` then `Held::complete`, from `ONCEGATE_PROFILE_CALLERS`
//! tasks (default 32), on the backend `ONCEGATE_PROFILE_BACKEND` names (`sqlite`, the default,
//! or `postgres`). A fixed count, unlike the time-bound benches, so an instruction count divided
//! by the operations is comparable from one build to the next:
//!
//! ```text
//! cargo build --release -p oncegate --example profile
//! valgrind --tool=callgrind target/release/examples/profile
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use oncegate::{Gate, GateConfig, Outcome, Reception};
use oncegate_store::testing::TestDatabase;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn refund(n: u64) -> Reception {
    let body = format!(
        r#"{{"type":"refund.created","sent_at":"2026-03-05T16:02:11Z","attempt":1,"data":{{"payment_id":"pay_{}","request_ref":"rr-{n}","amount":1500,"currency":"EUR"}}}}"#,
        n % 97
    );
    Reception::new("acme", "payflow", "live", body.into_bytes())
}

fn main() -> anyhow::Result<()> {
    let ops = env_or("ONCEGATE_PROFILE_OPS", 2_000);
    let callers = env_or("ONCEGATE_PROFILE_CALLERS", 32).max(1);
    let backend = std::env::var("ONCEGATE_PROFILE_BACKEND").unwrap_or_else(|_| "sqlite".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let db = match backend.as_str() {
            "postgres" => TestDatabase::postgres("oncegate_profile").await,
            _ => TestDatabase::sqlite(),
        };
        let contract = Arc::new(oncegate_core::contract::parse(
            "examples/oncegate.toml",
            include_str!("../../../examples/oncegate.toml"),
        )?);
        let store = oncegate_store::open(&db.url).await?;
        let gate = Gate::new(GateConfig::new(contract, store, b"profile".to_vec()));
        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (gate, next) = (gate.clone(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= ops {
                            return Ok::<_, anyhow::Error>(());
                        }
                        match gate.deliver(refund(n)).await? {
                            Outcome::Process(held) => held.complete(r#"{"refund":"ok"}"#).await?,
                            other => anyhow::bail!("a new refund must run, not {:?}", other.action()),
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await??;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{backend}: {ops} deliveries decided and completed by {callers} callers in {secs:.2} s ({:.0}/s)",
            ops as f64 / secs
        );
        drop(gate);
        db.cleanup().await;
        Ok(())
    })
}
