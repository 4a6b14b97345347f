//! Fuzzes a whole delivery through the gate in process (`Gate::deliver`, the example contract,
//! a SQLite store in a temporary directory): arbitrary bytes and headers never panic, and each
//! delivery is journaled with its decision or its refusal, read back from the store.
//!
//! The input is one byte choosing the provider, the environment, whether a `process` is
//! completed and whether the transport refused the sender (`Gate::refuse`); then lines up to the first empty one: the tenant, then `name: value` headers;
//! the rest is the body.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oncegate::core::identity::body_hash;
use oncegate::{Gate, Outcome, Reception, Refusal, RefusalKind};
use tokio::runtime::Runtime;

const PROVIDERS: [&str; 4] = ["payflow", "shopline", "ledgerly", "undeclared"];
const ENVS: [&str; 3] = ["live", "test", "staging"];

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn gate() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(|| {
        let contract = oncegate::core::contract::parse(
            "examples/oncegate.toml",
            include_str!("../../examples/oncegate.toml"),
        )
        .expect("the example contract is valid");
        // Under TMPDIR, which `scripts/fuzz` points at a tmpfs of its own and removes after
        // the run (the store syncs every commit, and the directory outlives every input).
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
        // The directory lives as long as the process: the store is shared by every input.
        std::mem::forget(dir);
        runtime()
            .block_on(Gate::open(contract, &url, b"fuzz salt".to_vec()))
            .expect("the store opens")
    })
}

fuzz_target!(|data: &[u8]| {
    let [choice, rest @ ..] = data else {
        return;
    };
    let provider = PROVIDERS[usize::from(choice & 3)];
    let env = ENVS[usize::from(choice >> 2 & 3) % ENVS.len()];
    let complete = choice & 0x10 != 0;
    let refused = choice & 0x20 != 0;
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (&[][..], rest),
    };
    let head = String::from_utf8_lossy(head);
    let mut lines = head.split('\n');
    let tenant = lines.next().filter(|t| !t.is_empty()).unwrap_or("acme");
    let mut reception = Reception::new(tenant, provider, env, body.to_vec());
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        reception = reception.header(name, value);
    }

    let gate = gate();
    runtime().block_on(async {
        let outcome = if refused {
            let why = Refusal::new(
                RefusalKind::BadSignature,
                "the signature in the x-signature header does not match the body",
            );
            let outcome = gate.refuse(reception, why).await;
            let outcome = outcome.unwrap_or_else(|e| panic!("a refusal was not recorded: {e}"));
            assert!(matches!(outcome, Outcome::Rejected(_)), "{outcome:?}");
            outcome
        } else {
            let outcome = gate.deliver(reception).await;
            outcome.unwrap_or_else(|e| panic!("a delivery was not decided: {e}"))
        };
        let proof = outcome.proof().clone();
        let stored = gate
            
            .delivery(&proof.delivery)
            .await
            .expect("the store reads")
            .unwrap_or_else(|| panic!("delivery {} is not journaled", proof.delivery));
        assert_eq!(
            (
                stored.tenant.as_str(),
                stored.provider.as_str(),
                stored.env.as_str()
            ),
            (tenant, provider, env)
        );
        assert_eq!(stored.size, body.len() as u64);
        assert_eq!(stored.body_sha256, body_hash(body));
        let decided = gate
            
            .decision(&proof.delivery)
            .await
            .expect("the store reads")
            .unwrap_or_else(|| panic!("delivery {} has no proof", proof.delivery));
        assert_eq!(decided.action, outcome.action(), "{}", decided.reason);
        match outcome {
            Outcome::Rejected(r) => assert_eq!(decided.reason, r.proof.decision.reason),
            Outcome::Process(held) if complete => held
                .complete(r#"{"done":true}"#)
                .await
                .expect("a fresh reservation completes"),
            _ => {}
        }
    });
});
