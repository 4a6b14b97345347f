//! The state every request shares: the gate (the engine every delivery goes through), the
//! HTTP side's config as resolved once at start-up (tokens, provider secrets, timeouts) and the
//! keys derived from the salt.

use std::sync::Arc;
use std::time::Duration;

use oncegate::{Gate, GateConfig};
use oncegate_core::contract::Contract;
use time::OffsetDateTime;

use crate::auth::Tokens;
use crate::reservation::TokenKey;
use crate::secrets::ProviderSecrets;
use crate::ServiceConfig;

pub(crate) struct Inner {
    pub gate: Gate,
    pub contract: Arc<Contract>,
    pub salt: Vec<u8>,
    pub tokens: Tokens,
    pub secrets: ProviderSecrets,
    pub metrics_public: bool,
    pub request_timeout: Duration,
    pub body_timeout: Duration,
    pub token_key: TokenKey,
}

#[derive(Clone)]
pub(crate) struct AppState(Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(config: ServiceConfig) -> AppState {
        AppState::with_gate(Gate::new(gate_config(&config)), config)
    }

    pub fn with_gate(gate: Gate, config: ServiceConfig) -> AppState {
        AppState(Arc::new(Inner {
            tokens: Tokens::new(&config.tokens),
            token_key: TokenKey::derive(&config.salt),
            contract: gate.contract().clone(),
            gate,
            salt: config.salt,
            secrets: config.secrets,
            metrics_public: config.metrics_public,
            request_timeout: config.request_timeout,
            body_timeout: config.body_timeout,
        }))
    }

    pub fn now(&self) -> OffsetDateTime {
        self.gate.now()
    }
}

/// The engine's part of the service's config.
pub(crate) fn gate_config(config: &ServiceConfig) -> GateConfig {
    GateConfig {
        contract: config.contract.clone(),
        store: config.store.clone(),
        read_store: config.read_store.clone(),
        salt: config.salt.clone(),
        lease: config.lease,
        breaker_window: config.breaker_window,
        clock: config.clock.clone(),
    }
}
