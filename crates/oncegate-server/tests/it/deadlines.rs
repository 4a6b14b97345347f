//! Connection deadlines against raw TCP clients: a head trickled one byte per 100 ms is cut at
//! the header deadline, a trickled body is answered `408 body_timeout` (and journaled), an
//! idle kept-alive connection is closed, and a normal request is still answered.
//!
//! The deadlines are 300 ms; every bound asserted is ten times that or more, so the tests tell
//! "cut by the deadline" from "left open" without timing the machine.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;

const DEADLINE: Duration = Duration::from_millis(300);
/// Far above the deadline, far below "held open".
const BOUND: Duration = Duration::from_secs(3);

async fn start(kind: Kind, idle: Duration) -> Service {
    Service::start_with(kind, |c| {
        c.header_timeout = DEADLINE;
        c.body_timeout = DEADLINE;
        c.idle_timeout = idle;
        c.request_timeout = Duration::from_secs(10);
    })
    .await
}

async fn connect(s: &Service) -> TcpStream {
    TcpStream::connect(s.base.trim_start_matches("http://"))
        .await
        .expect("connect to the service")
}

/// Reads until the peer closes (EOF or reset) and returns what arrived, or panics if the
/// connection is still open after `BOUND`.
async fn read_until_closed(read: &mut (impl AsyncReadExt + Unpin)) -> String {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = BOUND.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, read.read(&mut buf)).await {
            Err(_) => panic!(
                "the connection is still open after {BOUND:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one whole answer (head and `content-length` body) from a kept-alive connection.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(BOUND, stream.read(&mut buf))
            .await
            .expect("an answer within the bound")
            .expect("read the answer");
        assert!(n > 0, "closed before a whole answer: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Writes `bytes` one at a time, 100 ms apart, until done or the peer is gone.
fn trickle(mut write: tokio::net::tcp::OwnedWriteHalf, bytes: Vec<u8>) {
    tokio::spawn(async move {
        for b in bytes {
            if write.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Trickles a request head on `write` and asserts the connection is closed without an answer,
/// well within the bound: 60 bytes at 10 per second would take 6 s, and the 300 ms head
/// deadline cuts it long before.
async fn trickled_head_is_cut(
    mut read: tokio::net::tcp::OwnedReadHalf,
    write: tokio::net::tcp::OwnedWriteHalf,
) {
    let head = "GET /healthz HTTP/1.1\r\nhost: oncegate\r\nx-padding: aaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    trickle(write, head.as_bytes().to_vec());
    let got = read_until_closed(&mut read).await;
    assert!(
        !got.contains("200 OK"),
        "the trickled request was served: {got:?}"
    );
    assert!(started.elapsed() < BOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_head_is_cut_at_the_header_deadline() {
    let s = start(Kind::Sqlite, Duration::from_secs(60)).await;
    let (read, write) = connect(&s).await.into_split();
    trickled_head_is_cut(read, write).await;

    // A new connection sending nothing at all is cut the same way.
    let mut silent = connect(&s).await;
    read_until_closed(&mut silent).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_requests_are_answered_and_an_idle_connection_is_closed() {
    let s = start(Kind::Sqlite, DEADLINE).await;
    let mut stream = connect(&s).await;
    // Two requests on one connection, back to back: both answered (keep-alive still works).
    for _ in 0..2 {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: oncegate\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    }
    // Then nothing: the idle deadline closes it.
    let rest = read_until_closed(&mut stream).await;
    assert!(rest.is_empty(), "{rest:?}");
    s.stop().await;
}

/// A next request's head is on the head's clock from its first byte, however long the idle
/// deadline it interrupts: after an answer, on a connection allowed to idle for a minute, a
/// trickled second head is still cut at the 300 ms head deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_head_trickled_on_a_kept_alive_connection_is_cut_at_the_header_deadline() {
    let s = start(Kind::Sqlite, Duration::from_secs(60)).await;
    let mut stream = connect(&s).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: oncegate\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let (read, write) = stream.into_split();
    trickled_head_is_cut(read, write).await;
    s.stop().await;
}

/// The idle wait has its own deadline, longer than the head's: a kept-alive connection quiet
/// for longer than the head's deadline (but not the idle one's) still serves its next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_outlives_the_head_deadline() {
    let s = start(Kind::Sqlite, DEADLINE * 4).await;
    let mut stream = connect(&s).await;
    for pause in [Duration::ZERO, DEADLINE * 2, DEADLINE * 2] {
        tokio::time::sleep(pause).await;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: oncegate\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut stream).await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "after {pause:?}: {answer:?}"
        );
    }
    let rest = read_until_closed(&mut stream).await;
    assert!(rest.is_empty(), "{rest:?}");
    s.stop().await;
}

pub async fn a_trickled_body_is_answered_408_and_journaled(kind: Kind) {
    // The default idle deadline, so the harness's pooled client is not cut between its calls.
    let s = start(kind, Duration::from_secs(75)).await;
    let (mut read, mut write) = connect(&s).await.into_split();
    let body = refund("pay_slow", "1500", "2024-05-03T09:00:00Z");
    let head = format!(
        "POST /v1/deliveries/acme/payflow/live HTTP/1.1\r\nhost: oncegate\r\nauthorization: Bearer {INGEST}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    trickle(write, body.into_bytes());
    let answer = read_until_closed(&mut read).await;
    assert!(started.elapsed() < BOUND);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    let json = &answer[answer.find("\r\n\r\n").expect("a body") + 4..];
    let parsed = Answer {
        status: 408,
        body: serde_json::from_str(json).expect("the error shape"),
        text: json.to_owned(),
    };
    assert_eq!(parsed.error_code(), "body_timeout");
    assert!(json.contains("not received within 300ms"), "{json}");

    // The reception is journaled with its refusal, like a body its sender cut short.
    let delivery = journaled_id(&parsed);
    let proof = s.proof(&delivery).await;
    assert_eq!(proof.status, 200, "{}", proof.text);
    assert!(proof.text.contains("body_timeout"), "{}", proof.text);
    assert_no_gap(&s.report(OPERATOR).await);
    s.stop().await;
}

/// A slow body on a JSON route (an effect outcome) gets the same 408 in the error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_json_body_is_answered_408() {
    let s = start(Kind::Sqlite, Duration::from_secs(75)).await;
    let (mut read, mut write) = connect(&s).await.into_split();
    let body = r#"{"token":"not-yet","result":{}}"#;
    let head = format!(
        "POST /v1/effects/eff_01/complete HTTP/1.1\r\nhost: oncegate\r\nauthorization: Bearer {INGEST}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    write.write_all(head.as_bytes()).await.unwrap();
    trickle(write, body.as_bytes().to_vec());
    let answer = read_until_closed(&mut read).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains(r#""code":"body_timeout""#), "{answer:?}");
    s.stop().await;
}
