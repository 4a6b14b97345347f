//! `oncegate serve`: the HTTP service with the contract, store, salt, tokens and provider
//! secrets read from files and the environment, and a graceful stop on SIGINT/SIGTERM.

use anyhow::{anyhow, bail, Context, Result};
use oncegate_server::{ApiToken, ProviderSecrets, ServiceConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub struct Options<'a> {
    /// `--contract`; `None` looks for it as every command does.
    pub contract: Option<&'a Path>,
    pub store: &'a crate::store::StoreArg,
    /// `--read-store` / `ONCEGATE_READ_STORE`: a streaming standby for reads.
    pub read_store: Option<&'a str>,
    pub listen: &'a str,
    pub lease: Option<Duration>,
    pub request_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    /// `--ca-file` / `ONCEGATE_CA_FILE`.
    pub ca_file: Option<&'a Path>,
    pub metrics_public: bool,
    /// The background purge's period; `None` runs none.
    pub purge_every: Option<Duration>,
    /// Where the background purge archives what it removes first.
    pub purge_archive: Option<&'a Path>,
    pub breaker_window: Duration,
    /// The reconciler's fallback poll.
    pub reconcile_every: Duration,
    /// Override the contract's `settings.max_body_bytes` / `settings.max_depth`.
    pub max_body_bytes: Option<usize>,
    pub max_depth: Option<usize>,
}

fn tokens() -> Result<Vec<ApiToken>> {
    let spec = match (
        std::env::var("ONCEGATE_TOKENS"),
        std::env::var("ONCEGATE_TOKENS_FILE"),
    ) {
        (Ok(s), _) => s,
        (Err(_), Ok(path)) => std::fs::read_to_string(&path)
            .with_context(|| format!("reading the token list {path}"))?,
        _ => String::new(),
    };
    ApiToken::parse_list(&spec).map_err(|e| anyhow!("ONCEGATE_TOKENS: {e}"))
}

pub async fn run(o: Options<'_>) -> Result<()> {
    // Past the request timeout a slow body would be answered 503 ("retry"), not 408: refuse a
    // body deadline that could never bite.
    if o.body_timeout >= o.request_timeout {
        bail!(
            "--body-timeout ({}) must be shorter than --request-timeout ({})",
            humantime::format_duration(o.body_timeout),
            humantime::format_duration(o.request_timeout)
        );
    }
    for (flag, d) in [
        ("--header-timeout", o.header_timeout),
        ("--body-timeout", o.body_timeout),
        ("--idle-timeout", o.idle_timeout),
    ] {
        if d.is_zero() {
            bail!("{flag} must be above zero");
        }
    }
    let mut contract = crate::contract::find(o.contract)?;
    if let Some(bytes) = o.max_body_bytes {
        if bytes == 0 {
            bail!("--max-body-bytes must be above zero");
        }
        contract.settings.max_body_bytes = bytes;
    }
    if let Some(depth) = o.max_depth {
        // The same bound the contract enforces: writing and dropping a tree recurse per level.
        if depth == 0 || depth > 1000 {
            bail!("--max-depth must be between 1 and 1000");
        }
        contract.settings.max_depth = depth;
    }
    let contract = Arc::new(contract);
    let Some(salt) = crate::salt::read()? else {
        bail!("set ONCEGATE_KEY_SALT (or ONCEGATE_KEY_SALT_FILE) to a long random secret: sensitive fields and reservation tokens are keyed by it, and every instance sharing a store must use the same one");
    };
    crate::reconcile::check_authorities(&contract, o.ca_file)?;
    let location = o.store.location(Some(&contract))?;
    let store = oncegate::store::open_at(&location)
        .await
        .with_context(|| format!("opening the store ({location})"))?;
    // Keys of operation-scoped strategies written before they were scoped by the operation
    // are moved once; later runs find nothing to move.
    let moved = store
        .rescope(&oncegate::store::OperationScope::from_contract(&contract))
        .await
        .context("moving operation-scoped keys to their operation's scope")?;
    if moved.effects > 0 {
        tracing::info!(
            effects = moved.effects,
            index_entries = moved.index_entries,
            queue_items = moved.queue_items,
            "operation-scoped keys moved to their operation's scope"
        );
    }
    if moved.doubled > 0 {
        tracing::warn!(effects = moved.doubled, "effects of an operation-scoped key were reserved once per event type before keys were scoped by the operation: each is a business effect that may have run twice; `oncegate report` and `explain` show them");
    }
    let secrets = ProviderSecrets::resolve(&contract).map_err(anyhow::Error::msg)?;
    for w in &secrets.warnings {
        tracing::warn!("{w}");
    }
    let read_store = match o.read_store {
        Some(raw) => {
            let replica: oncegate::store::StoreLocation = raw.parse()?;
            let opened = oncegate::store::open_replica(&replica)
                .await
                .with_context(|| format!("opening the read store ({replica})"))?;
            tracing::info!(read_store = %replica, "reads served from a replica");
            Some(opened)
        }
        None => None,
    };
    let mut config = ServiceConfig::new(contract.clone(), store, salt);
    config.read_store = read_store;
    config.tokens = tokens()?;
    config.secrets = secrets;
    config.lease = o.lease;
    config.request_timeout = o.request_timeout;
    config.header_timeout = o.header_timeout;
    config.body_timeout = o.body_timeout;
    config.idle_timeout = o.idle_timeout;
    config.ca_file = o.ca_file.map(Path::to_owned);
    config.metrics_public = o.metrics_public;
    config.purge_every = o.purge_every;
    config.purge_archive = o.purge_archive.map(Path::to_owned);
    config.breaker_window = o.breaker_window;
    config.reconciler.every = Some(o.reconcile_every);
    if config.tokens.is_empty() {
        tracing::warn!("no bearer tokens configured (ONCEGATE_TOKENS): only signed provider posts are accepted and operator routes are closed");
    }
    let shutdown = Shutdown::listen()?;
    let listener = tokio::net::TcpListener::bind(o.listen)
        .await
        .with_context(|| format!("listening on {}", o.listen))?;
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(address = %listener.local_addr()?, store = %location, contract = %contract.source, workers, "oncegate serving");
    oncegate_server::serve(listener, config, shutdown.received()).await?;
    tracing::info!("stopped: in-flight decisions finished");
    Ok(())
}

/// SIGINT and SIGTERM, listened for from the moment this is made.
///
/// Tokio installs a signal's handler only when its stream is made; a future that makes it on
/// its first poll leaves the default action (end the process, status "killed by signal") in
/// place until the server first polls it, which is after the address is logged. A supervisor
/// that stops the service as soon as it is up would kill it mid-start, so the streams are made
/// before the listener is bound.
struct Shutdown {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Shutdown {
    fn listen() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
                terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Resolves on the first of the signals.
    async fn received(self) {
        #[cfg(unix)]
        {
            let Self {
                mut interrupt,
                mut terminate,
            } = self;
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
