//! Stored history for the scale mode, written with bulk SQL rather than through the service:
//! `count` completed effects, each with its index slot and two deliveries, the first that
//! reserved it and a later duplicate, each with its proof. The deliveries' ids are ULIDs of
//! reception times spread evenly over the last `DAYS` days, as the service makes them (time
//! first, so a range of time is a range of ids), ending a minute ago.

/// The days the seeded deliveries span.
pub const DAYS: i64 = 30;

/// Crockford base 32, as the store spells ids (lowercase).
const ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

/// SQL for the ten characters of a ULID's time part, from the milliseconds in `ms` (an
/// integer expression); the same text runs on PostgreSQL and SQLite.
fn time_part(ms: &str) -> String {
    (0..10)
        .map(|k| {
            format!(
                "substr('{ALPHABET}', CAST((({ms}) >> {}) & 31 AS INTEGER) + 1, 1)",
                45 - 5 * k
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Writes the history into the store at `url` (its schema already made by the service).
pub async fn history(url: &str, count: u64) {
    let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000 - 60_000;
    let span = DAYS * 86_400_000;
    let deliveries = 2 * count;
    // Delivery `j` (1-based) was received at `ms(j)`; effect `i` was reserved by delivery 2i-1
    // and met its duplicate in 2i.
    let ms = |j: &str| format!("({now_ms} - {span} + ({j}) * {span} / {deliveries})");
    let delivery_id = |j: &str, pad: &str| format!("'dlv_' || {} || {pad}", time_part(&ms(j)));
    let (pad_j, pad_first, eff, range_i, range_j, lpad64, pg) = match url.strip_prefix("sqlite://")
    {
        Some(_) => (
            "printf('%016d', j)",
            "printf('%016d', 2 * i - 1)",
            "'eff_' || {time_first} || printf('%016d', 2 * i - 1)",
            "ni",
            "nj",
            "printf('%064d', i)",
            false,
        ),
        None => (
            "lpad(j::text, 16, '0')",
            "lpad((2 * i - 1)::text, 16, '0')",
            "'eff_' || {time_first} || lpad((2 * i - 1)::text, 16, '0')",
            "generate_series(1, {count}) AS g(i)",
            "generate_series(1, {deliveries}) AS g(j)",
            "lpad(i::text, 64, '0')",
            true,
        ),
    };
    let range_i = range_i.replace("{count}", &count.to_string());
    let range_j = range_j.replace("{deliveries}", &deliveries.to_string());
    let t = if pg { "true" } else { "1" };
    let first = delivery_id("2 * i - 1", pad_first);
    // An effect's id is a ULID of its creation, when its first delivery was received.
    let eff = eff.replace("{time_first}", &time_part(&ms("2 * i - 1")));
    let first_of_j = "2 * ((j + 1) / 2) - 1";
    let effect_of_j = format!(
        "'eff_' || {} || {}",
        time_part(&ms(first_of_j)),
        if pg {
            format!("lpad(({first_of_j})::text, 16, '0')")
        } else {
            format!("printf('%016d', {first_of_j})")
        }
    );
    let statements = [
        format!(
            "INSERT INTO effects (id, tenant, provider, env, event_type, strategy_name, strategy_version, \
             strategy_level, key_value, scope_hash, durable, state, fencing_token, lease_until, discriminants, result, \
             first_delivery, created_at, updated_at, resource, critical, scope_seq, indexed) \
             SELECT {eff}, 'acme', 'payflow', 'live', 'payment.captured', 'capture-id', 1, 'business_ref', \
             'seed-' || i, {lpad64}, {t}, 'completed', 1, 0, '{{}}', '{{}}', {first}, {ms_i}, {ms_i}, \
             'pay_seed' || i, {t}, 1, {t} FROM {range_i}",
            ms_i = ms("2 * i - 1"),
        ),
        // Each delivery with its proof, one row: odd deliveries reserved their effect; even
        // ones were ignored as its duplicates.
        format!(
            "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, \
             headers_json, transport_key, transport_strength, decided_at, prior, transport, action, \
             layer, reason, flags, rule, matrix_version, effect_id, differences, details, link_kind) \
             SELECT {id}, 'acme', 'payflow', 'live', 'payment.captured', {ms_j}, 10, {lpad64j}, '{{}}', {lpad64j}, 'weak', \
             {ms_j}, CASE WHEN j % 2 = 1 THEN 'none' ELSE 'completed' END, 'none', \
             CASE WHEN j % 2 = 1 THEN 'process' ELSE 'ignore' END, \
             CASE WHEN j % 2 = 1 THEN NULL ELSE 'effect' END, 'seeded', '[]', 'seed', 1, {effect_of_j}, '[]', '{{}}', \
             CASE WHEN j % 2 = 1 THEN 'reserved' ELSE 'effect' END FROM {range_j}",
            id = delivery_id("j", pad_j),
            ms_j = ms("j"),
            lpad64j = if pg { "lpad(j::text, 64, '0')" } else { "printf('%064d', j)" },
        ),
    ];
    if let Some(path) = url.strip_prefix("sqlite://") {
        let conn = rusqlite::Connection::open(path).expect("open the seeded file");
        let mut script = format!(
            "BEGIN; \
             CREATE TEMP TABLE ni AS WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {count}) SELECT i FROM s; \
             CREATE TEMP TABLE nj AS WITH RECURSIVE s(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM s WHERE j < {deliveries}) SELECT j FROM s; "
        );
        for s in &statements {
            script.push_str(s);
            script.push_str("; ");
        }
        script.push_str("COMMIT; ANALYZE;");
        conn.execute_batch(&script).expect("seed SQLite");
    } else {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect to seed");
        tokio::spawn(connection);
        let script = format!("BEGIN; {}; COMMIT; ANALYZE;", statements.join("; "));
        client
            .batch_execute(&script)
            .await
            .expect("seed PostgreSQL");
    }
}
