//! A provider that sends its notifications in batches (Adyen's classic notifications), over
//! real HTTP with the catalog's contract: the provider gets the reply it expects once every
//! item was journaled and decided on its own; a signed item verifies under the `adyen` preset
//! and a forged one refuses the batch; a batch sent again, re-encoded, is ignored item by item.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::harness::{Backend, Kind, Service, ADMIN, INGEST};

const CONTRACT: &str = include_str!("../../../../contracts/adyen.toml");
/// An HMAC key as Adyen issues them: hex.
const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

fn item(psp: &str, code: &str, success: &str, value: u64) -> Value {
    json!({"NotificationRequestItem": {
        "additionalData": {"authCode": "1234"},
        "amount": {"currency": "EUR", "value": value},
        "eventCode": code,
        "eventDate": "2026-03-02T10:14:05+01:00",
        "merchantAccountCode": "AcmeShop",
        "merchantReference": format!("order-{psp}"),
        "originalReference": "8816178952380553",
        "pspReference": psp,
        "success": success
    }})
}

fn batch(items: Vec<Value>) -> Value {
    json!({"live": "false", "notificationItems": items})
}

/// Signs each item as Adyen does (its HMAC in `additionalData.hmacSignature`).
fn signed(mut b: Value) -> Value {
    for i in b["notificationItems"].as_array_mut().unwrap() {
        let n = &mut i["NotificationRequestItem"];
        let signature = oncegate_server::sign_adyen_item(KEY, n);
        n["additionalData"]["hmacSignature"] = json!(signature);
    }
    b
}

async fn post(s: &Service, body: &[u8], token: Option<&str>) -> (u16, String, String) {
    let mut req = s
        .http
        .post(format!("{}/v1/deliveries/acme/adyen/live", s.base))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, r.text().await.unwrap())
}

/// The report's row for one Adyen event type.
async fn row(s: &Service, event_type: &str) -> Value {
    let report = s
        .get("/v1/report?since=2000-01-01T00:00:00Z", Some(ADMIN))
        .await;
    assert_eq!(report.status, 200, "{}", report.text);
    report.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provider"] == "adyen" && r["event_type"] == event_type)
        .cloned()
        .unwrap_or(Value::Null)
}

pub async fn a_batch_is_decided_item_by_item_and_answered_as_the_provider_expects(kind: Kind) {
    let contract = Arc::new(
        oncegate_core::contract::parse("contracts/adyen.toml", CONTRACT)
            .expect("the catalog's contract"),
    );
    let backend = Backend::new(kind).await;
    let url = backend.url.clone();
    let s = Service::start_on(backend, &url, |config| {
        config.contract = contract.clone();
        config
            .secrets
            .insert_for(&contract, "adyen", KEY)
            .expect("the adyen key");
    })
    .await;

    // Two notifications in one request, each signed: one reply, two decisions.
    let first = signed(batch(vec![
        item("7914073381342284", "AUTHORISATION", "true", 10100),
        item("8825408195409505", "CAPTURE", "true", 10100),
    ]));
    let (status, kind_, text) = post(&s, first.to_string().as_bytes(), None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text, "[accepted]");
    assert!(kind_.starts_with("text/plain"), "{kind_}");
    for t in ["AUTHORISATION", "CAPTURE"] {
        let r = row(&s, t).await;
        assert_eq!(r["received"], 1, "{t}: {r}");
        assert_eq!(r["processed"], 1, "{t}: {r}");
    }

    // The same batch again, re-encoded (indented, members reordered by the serializer): each
    // item is ignored, none processed twice.
    let again = serde_json::to_string_pretty(&first).unwrap();
    let (status, _, text) = post(&s, again.as_bytes(), None).await;
    assert_eq!((status, text.as_str()), (200, "[accepted]"));
    for t in ["AUTHORISATION", "CAPTURE"] {
        let r = row(&s, t).await;
        assert_eq!(r["received"], 2, "{t}: {r}");
        assert_eq!(r["processed"], 1, "{t}: {r}");
        assert_eq!(
            r["ignored_transport"].as_u64().unwrap() + r["ignored_effect"].as_u64().unwrap(),
            1,
            "{t}: {r}"
        );
    }

    // The capture's failure is another notification (success is "false"): decided on its own.
    let failed = signed(batch(vec![item(
        "8825408195409505",
        "CAPTURE",
        "false",
        10100,
    )]));
    let (status, _, _) = post(&s, failed.to_string().as_bytes(), None).await;
    assert_eq!(status, 200);
    assert_eq!(row(&s, "CAPTURE").await["processed"], 2);

    // One item whose signature does not verify refuses the request (401, journaled), and
    // nothing of it is decided.
    let mut forged = signed(batch(vec![item(
        "9914073381342299",
        "AUTHORISATION",
        "true",
        500,
    )]));
    forged["notificationItems"][0]["NotificationRequestItem"]["amount"]["value"] = json!(50000);
    let (status, _, text) = post(&s, forged.to_string().as_bytes(), None).await;
    assert_eq!(status, 401, "{text}");
    assert_eq!(row(&s, "AUTHORISATION").await["processed"], 1);

    // With a bearer token instead of signatures, the same reply.
    let bearer = batch(vec![item("7714073381342211", "AUTHORISATION", "true", 700)]);
    let (status, _, text) = post(&s, bearer.to_string().as_bytes(), Some(INGEST)).await;
    assert_eq!((status, text.as_str()), (200, "[accepted]"));
    assert_eq!(row(&s, "AUTHORISATION").await["processed"], 2);
    s.stop().await;
}
