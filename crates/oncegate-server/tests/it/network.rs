//! A network that lies, between the service and PostgreSQL: a real TCP proxy on 127.0.0.1:0
//! that blackholes, resets connections mid-transaction, cuts a connection after its `COMMIT`
//! was sent and before the answer comes back, and adds latency. Under each fault the service
//! answers 200 or 503 and nothing else; when the proxy heals, every provider retry is decided
//! from the store, and nothing acknowledged is lost or done twice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncegate::store::testing::{pg_endpoint, pg_via, PgEndpoint};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::harness::{capture, pg_admin, Backend, Kind, Service};

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Carries everything.
    Heal,
    /// Accepts connections and carries nothing, either way.
    Blackhole,
    /// Carries a `COMMIT` to the database, then closes the connection before its answer.
    CutAfterCommit,
    /// Carries everything, each chunk 200 ms late.
    Latency,
}

/// The proxy's shared state: the fault, and a generation that bumps to reset every connection.
struct Wire {
    fault: Mutex<Fault>,
    resets: watch::Sender<u64>,
    /// Connections cut after a COMMIT was carried.
    cut: AtomicU64,
}

struct Proxy {
    addr: SocketAddr,
    wire: Arc<Wire>,
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl Proxy {
    async fn start(upstream: PgEndpoint) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let wire = Arc::new(Wire {
            fault: Mutex::new(Fault::Heal),
            resets: watch::channel(0).0,
            cut: AtomicU64::new(0),
        });
        let w = wire.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let wire = w.clone();
                tokio::spawn(async move {
                    let server: Box<dyn Stream> = match &upstream {
                        PgEndpoint::Tcp(h, p) => match TcpStream::connect((h.as_str(), *p)).await {
                            Ok(s) => Box::new(s),
                            Err(_) => return,
                        },
                        PgEndpoint::Unix(path) => match tokio::net::UnixStream::connect(path).await
                        {
                            Ok(s) => Box::new(s),
                            Err(_) => return,
                        },
                    };
                    carry(client, server, wire).await;
                });
            }
        });
        Proxy { addr, wire }
    }

    fn set(&self, fault: Fault) {
        *self.wire.fault.lock().unwrap() = fault;
    }

    /// Resets every connection open now (RST, as a crashed middlebox or a failed-over address).
    fn reset_all(&self) {
        self.wire.resets.send_modify(|g| *g += 1);
    }
}

/// Carries one connection both ways until either side closes, a reset, or a cut.
async fn carry(client: TcpStream, server: Box<dyn Stream>, wire: Arc<Wire>) {
    let mut resets = wire.resets.subscribe();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = tokio::io::split(server);
    let cut = Arc::new(tokio::sync::Notify::new());
    let fault = |w: &Wire| *w.fault.lock().unwrap();
    let up = {
        let wire = wire.clone();
        let cut = cut.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                match fault(&wire) {
                    Fault::Blackhole => continue,
                    Fault::Latency => tokio::time::sleep(Duration::from_millis(200)).await,
                    Fault::CutAfterCommit if contains(chunk, b"COMMIT\0") => {
                        // The database gets the COMMIT; the service never hears its answer.
                        let _ = sw.write_all(chunk).await;
                        wire.cut.fetch_add(1, Ordering::SeqCst);
                        cut.notify_one();
                        return;
                    }
                    _ => {}
                }
                if sw.write_all(chunk).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = {
        let wire = wire.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match sr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                match fault(&wire) {
                    Fault::Blackhole => continue,
                    Fault::Latency => tokio::time::sleep(Duration::from_millis(200)).await,
                    _ => {}
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let start = *resets.borrow_and_update();
    tokio::select! {
        () = up => {}
        () = down => {}
        () = cut.notified() => {}
        _ = async {
            while resets.changed().await.is_ok() {
                if *resets.borrow() != start {
                    return;
                }
            }
            std::future::pending::<()>().await
        } => {}
    }
    // Dropping both halves closes the service's side (the reset case sets no linger, so the
    // kernel may send FIN rather than RST; the service sees its connection end either way).
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every answer a delivery got, in order.
#[derive(Default)]
struct Ledger {
    answers: Vec<(String, u16, Value)>,
}

impl Ledger {
    fn record(&mut self, payment: &str, status: u16, body: Value) {
        self.answers.push((payment.to_owned(), status, body));
    }

    fn processed(&self, payment: &str) -> usize {
        self.answers
            .iter()
            .filter(|(p, s, b)| p == payment && *s == 200 && b["action"] == "process")
            .count()
    }
}

/// One capture per payment; the body is the same on every retry.
fn body(payment: &str) -> String {
    capture(
        payment,
        &format!("cap_{payment}"),
        "1200",
        "2024-05-01T10:00:00Z",
    )
}

/// Delivers each payment once, concurrently, and records what each got.
async fn burst(s: &Arc<Service>, payments: &[String], ledger: &Arc<Mutex<Ledger>>) {
    let mut tasks = tokio::task::JoinSet::new();
    for p in payments {
        let s = s.clone();
        let p = p.clone();
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let a = s.payflow("acme", &body(&p)).await;
            assert!(
                a.status == 200 || a.status == 503,
                "only 200 or 503 under a fault, got {} {}",
                a.status,
                a.text
            );
            if a.status == 503 {
                let code = a.body["error"]["code"].as_str().unwrap_or_default();
                assert!(
                    code == "store_unavailable" || code == "timeout",
                    "a 503 says why: {}",
                    a.text
                );
            }
            ledger.lock().unwrap().record(&p, a.status, a.body);
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("a delivery task");
    }
}

/// The provider's retries once the network heals: every payment is delivered until it is
/// answered 200, as a provider retries a 503.
async fn retry_until_decided(s: &Arc<Service>, payments: &[String], ledger: &Arc<Mutex<Ledger>>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for p in payments {
        loop {
            let a = s.payflow("acme", &body(p)).await;
            let status = a.status;
            ledger.lock().unwrap().record(p, a.status, a.body);
            if status == 200 {
                break;
            }
            assert_eq!(status, 503, "a retry after healing");
            assert!(Instant::now() < deadline, "{p} still undecided after 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What the database holds, read around the proxy: one effect per payment, each reserved by
/// exactly one `process` decision, and every delivery answered 200 has its proof.
async fn assert_exactly_once(backend: &Backend, payments: &[String], ledger: &Ledger) {
    let (admin, name) = backend.admin.clone().expect("PostgreSQL");
    let db = pg_admin(&oncegate::store::testing::with_database(&admin, &name)).await;
    for p in payments {
        assert!(
            ledger.processed(p) <= 1,
            "{p} was answered `process` {} times",
            ledger.processed(p)
        );
        let decided: Vec<&Value> = ledger
            .answers
            .iter()
            .filter(|(q, s, _)| q == p && *s == 200)
            .map(|(_, _, b)| b)
            .collect();
        assert!(!decided.is_empty(), "{p} was never answered 200");
        for b in &decided {
            let id = b["delivery_id"].as_str().expect("a decided delivery's id");
            let proofs: i64 = db
                .query_one("SELECT count(*) FROM proofs WHERE delivery_id = $1", &[&id])
                .await
                .unwrap()
                .get(0);
            assert_eq!(
                proofs, 1,
                "{p}: delivery {id} was answered 200 and has its proof"
            );
        }
        let effects: Vec<String> = decided
            .iter()
            .filter_map(|b| b["effect"]["id"].as_str().map(str::to_owned))
            .collect();
        assert!(
            effects.windows(2).all(|w| w[0] == w[1]),
            "{p}: every answer names one effect: {effects:?}"
        );
    }
    // One effect per payment, never two: nothing done twice.
    let effects: i64 = db
        .query_one("SELECT count(*) FROM effects", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects as usize, payments.len(), "one effect per payment");
}

async fn ready(s: &Service) -> (u16, Duration) {
    let t = Instant::now();
    let a = s.get("/readyz", None).await;
    (a.status, t.elapsed())
}

fn payments(case: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("pay_{case}_{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_network_that_lies_loses_nothing_and_doubles_nothing() {
    let backend = Backend::new(Kind::Postgres).await;
    let proxy = Proxy::start(pg_endpoint(&backend.url)).await;
    // A libpq key=value string through the proxy, as an operator may write one.
    let through = pg_via(&backend.url, proxy.addr);
    let mut service = Service::start_on(backend, &through, |_| {}).await;
    let backend = service.backend.take().expect("the backend");
    let s = Arc::new(service);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut all = Vec::new();

    // Healthy first.
    let warm = payments("warm", 4);
    burst(&s, &warm, &ledger).await;
    retry_until_decided(&s, &warm, &ledger).await;
    all.extend(warm);
    assert_eq!(ready(&s).await.0, 200);

    // 1. A blackhole: statements get no answer. Each delivery is answered 503 within the
    //    service's bounds, and /readyz says not ready, promptly.
    proxy.set(Fault::Blackhole);
    let (status, took) = ready(&s).await;
    assert_eq!(status, 503, "not ready in a blackhole");
    assert!(
        took < Duration::from_secs(5),
        "/readyz answered in {took:?}"
    );
    let holed = payments("blackhole", 6);
    burst(&s, &holed, &ledger).await;
    {
        let l = ledger.lock().unwrap();
        for p in &holed {
            assert!(
                l.answers.iter().any(|(q, st, _)| q == p && *st == 503),
                "{p} was answered 503 in the blackhole"
            );
        }
        // The store's own bound answers before the request's timeout: without it every answer
        // would be the request's `timeout`. (A delivery queued behind a batch that waited out
        // its bound may still meet the request's timeout on a loaded machine: also a 503.)
        assert!(
            l.answers.iter().any(|(q, st, b)| holed.contains(q)
                && *st == 503
                && b["error"]["code"] == "store_unavailable"),
            "no delivery was answered by the store's own bound in the blackhole"
        );
    }
    proxy.set(Fault::Heal);
    let healed = Instant::now();
    retry_until_decided(&s, &holed, &ledger).await;
    eprintln!(
        "blackhole: decided again {:?} after healing",
        healed.elapsed()
    );
    all.extend(holed);
    assert_eq!(ready(&s).await.0, 200, "ready again once healed");

    // 2. Connections reset mid-transaction, while a burst is in flight.
    let reset = payments("reset", 12);
    let resetter = {
        let wire = proxy.wire.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(15)).await;
                wire.resets.send_modify(|g| *g += 1);
            }
        })
    };
    burst(&s, &reset, &ledger).await;
    resetter.await.unwrap();
    proxy.reset_all();
    retry_until_decided(&s, &reset, &ledger).await;
    all.extend(reset);

    // 3. The answer to COMMIT is lost: the decision committed, the service cannot know it. It
    //    says so (503, "may have been recorded"), and the provider's retry is decided from
    //    the store: never a second `process`.
    proxy.set(Fault::CutAfterCommit);
    let (status, _) = ready(&s).await;
    assert_eq!(status, 503, "not ready while COMMIT answers are lost");
    let cut = payments("cut", 3);
    burst(&s, &cut, &ledger).await;
    assert!(
        proxy.wire.cut.load(Ordering::SeqCst) > 0,
        "the proxy cut connections after COMMIT"
    );
    {
        let l = ledger.lock().unwrap();
        let unanswered: Vec<&Value> = l
            .answers
            .iter()
            .filter(|(q, st, _)| cut.contains(q) && *st == 503)
            .map(|(_, _, b)| b)
            .collect();
        assert!(!unanswered.is_empty(), "some deliveries lost their answer");
        for b in unanswered {
            let message = b["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("may have been recorded"),
                "a 503 after a sent COMMIT does not say nothing was recorded: {b}"
            );
        }
    }
    proxy.set(Fault::Heal);
    retry_until_decided(&s, &cut, &ledger).await;
    all.extend(cut);

    // 4. 200 ms each way: slow, but every delivery is decided and answered 200.
    proxy.set(Fault::Latency);
    let slow = payments("slow", 3);
    burst(&s, &slow, &ledger).await;
    // A transport retry of each (an `ignore`), answered without waiting on its tally.
    burst(&s, &slow, &ledger).await;
    {
        let l = ledger.lock().unwrap();
        for p in &slow {
            let got: Vec<(u16, &str)> = l
                .answers
                .iter()
                .filter(|(q, _, _)| q == p)
                .map(|(_, st, b)| (*st, b["action"].as_str().unwrap_or_default()))
                .collect();
            assert_eq!(got, vec![(200, "process"), (200, "ignore")], "{p}");
        }
    }
    proxy.set(Fault::Heal);
    all.extend(slow);

    let ledger = Arc::try_unwrap(ledger)
        .ok()
        .expect("every task ended")
        .into_inner()
        .unwrap();
    assert_exactly_once(&backend, &all, &ledger).await;
    Arc::try_unwrap(s).ok().expect("one service").stop().await;
    backend.cleanup().await;
}
