#!/usr/bin/env python3
"""Generates crates/oncegate-server/tests/fixtures/signatures.json: signature test vectors for
every scheme a provider's `signature` table may name, computed with Python's own hmac, hashlib
and base64, independently of oncegate's code.

Nothing in the output is written by hand, and nothing is random: the secrets, bodies and
timestamps are fixed. Each vector holds the contract's signature fields (beyond the secrets),
the provider's secrets in the contract's order, the request headers, the body, the service's
clock (`now`, Unix seconds) and the expected verdict:

- `ok`: the delivery is authentic and its signed timestamp (if any) is within the tolerance;
- `mismatch`: no MAC in the headers verifies under any of the secrets (wrong secret, tampered
  body, a retired secret);
- `stale` / `future`: authentic, but the signed timestamp is further than the tolerance in the
  past / in the future (a MAC that does not verify is `mismatch` whatever its timestamp);
- `missing`: a header the scheme needs is absent;
- `malformed`: a header is there but not in the scheme's format.

Two vectors are the providers' own published examples (Slack's "Verifying requests from Slack"
and GitHub's "Validating webhook deliveries"); the script checks its HMAC reproduces them.

Usage: scripts/gen-signature-vectors.py [--out PATH]
       (default: crates/oncegate-server/tests/fixtures/signatures.json; `-` writes to stdout)
"""

import argparse
import base64
import hashlib
import hmac
import json
import sys

NOW = 1_700_000_000
TOLERANCE = 300  # every timestamped scheme's default: 5 minutes

SECRET = "test-signing-secret-one"
SECOND = "test-signing-secret-two"
WRONG = "not-the-signing-secret"

BODY = '{"id":"evt_1","type":"charge.refunded","data":{"amount":1000,"currency":"eur"}}'
TAMPERED = BODY.replace("1000", "9000")


def mac(secret, content):
    return hmac.new(secret, content.encode("utf-8"), hashlib.sha256).digest()


def hex_mac(secret, content):
    return mac(secret.encode("utf-8"), content).hex()


def b64_mac(key, content):
    return base64.b64encode(mac(key, content)).decode("ascii")


def whsec(raw):
    """A Standard Webhooks secret: `whsec_` + base64 of the key bytes."""
    return "whsec_" + base64.b64encode(raw.encode("utf-8")).decode("ascii")


def verdict_for(ts):
    """The verdict for an authentic delivery signed at `ts` (Unix seconds)."""
    if abs(NOW - ts) <= TOLERANCE:
        return "ok"
    return "stale" if ts < NOW else "future"


class Vectors:
    def __init__(self):
        self.items = []

    def add(self, name, scheme, headers, expect, body=BODY, secrets=(SECRET,), fields=None, now=NOW):
        self.items.append({
            "name": name,
            "scheme": scheme,
            "fields": fields or {},
            "secrets": list(secrets),
            "headers": headers,
            "body": body,
            "now": now,
            "expect": expect,
        })


def timestamped(v, scheme, sign, secrets_of=lambda s: s):
    """The cases every timestamped scheme shares. `sign(secret, ts, body)` returns headers."""
    v.add(f"{scheme}/valid", scheme, sign(SECRET, NOW, BODY), "ok", secrets=[secrets_of(SECRET)])
    v.add(f"{scheme}/wrong secret", scheme, sign(WRONG, NOW, BODY), "mismatch",
          secrets=[secrets_of(SECRET)])
    v.add(f"{scheme}/tampered body", scheme, sign(SECRET, NOW, BODY), "mismatch", body=TAMPERED,
          secrets=[secrets_of(SECRET)])
    for label, ts in [("at the tolerance, in the past", NOW - TOLERANCE),
                      ("stale", NOW - TOLERANCE - 1),
                      ("at the tolerance, in the future", NOW + TOLERANCE),
                      ("future", NOW + TOLERANCE + 1),
                      ("an hour old", NOW - 3600)]:
        v.add(f"{scheme}/{label}", scheme, sign(SECRET, ts, BODY), verdict_for(ts),
              secrets=[secrets_of(SECRET)])
    v.add(f"{scheme}/rotated: signed with the second of two secrets", scheme,
          sign(SECOND, NOW, BODY), "ok", secrets=[secrets_of(SECRET), secrets_of(SECOND)])
    v.add(f"{scheme}/rotated: the signing secret was retired", scheme,
          sign(SECOND, NOW, BODY), "mismatch", secrets=[secrets_of(SECRET)])
    v.add(f"{scheme}/no headers", scheme, {}, "missing", secrets=[secrets_of(SECRET)])


def stripe(v):
    def sign(secret, ts, body, header="stripe-signature"):
        return {header: f"t={ts},v1={hex_mac(secret, f'{ts}.{body}')}"}

    timestamped(v, "stripe", sign)
    wrong = hex_mac(WRONG, f"{NOW}.{BODY}")
    good = hex_mac(SECRET, f"{NOW}.{BODY}")
    v.add("stripe/two v1, only the second verifies", "stripe",
          {"stripe-signature": f"t={NOW},v1={wrong},v1={good}"}, "ok")
    v.add("stripe/two v1, neither verifies", "stripe",
          {"stripe-signature": f"t={NOW},v1={wrong},v1={hex_mac(SECOND, f'{NOW}.{BODY}')}"}, "mismatch")
    v.add("stripe/a v0 entry is ignored", "stripe",
          {"stripe-signature": f"t={NOW},v1={good},v0={wrong}"}, "ok")
    v.add("stripe/only a v0 entry", "stripe", {"stripe-signature": f"t={NOW},v0={good}"}, "malformed")
    v.add("stripe/spaces around entries", "stripe", {"stripe-signature": f"t={NOW}, v1={good}"}, "ok")
    v.add("stripe/custom header name", "stripe", sign(SECRET, NOW, BODY, "x-lookalike-signature"),
          "ok", fields={"header": "x-lookalike-signature"})
    v.add("stripe/custom header name, sent under stripe-signature", "stripe",
          sign(SECRET, NOW, BODY), "missing", fields={"header": "x-lookalike-signature"})
    v.add("stripe/a longer tolerance", "stripe", sign(SECRET, NOW - 400, BODY), "ok",
          fields={"tolerance": "10m"})
    for label, value in [("no t=", f"v1={good}"),
                         ("t= not a number", f"t=soon,v1={good}"),
                         ("t= negative", f"t=-{NOW},v1={good}"),
                         ("two t=", f"t={NOW},t={NOW},v1={good}"),
                         ("no v1=", f"t={NOW}"),
                         ("v1= not hex", f"t={NOW},v1=zz{good[2:]}"),
                         ("an entry without =", f"t={NOW},{good}"),
                         ("a MAC alone", good)]:
        v.add(f"stripe/malformed: {label}", "stripe", {"stripe-signature": value}, "malformed")


def paddle(v):
    def sign(secret, ts, body):
        return {"paddle-signature": f"ts={ts};h1={hex_mac(secret, f'{ts}:{body}')}"}

    timestamped(v, "paddle", sign)
    good = hex_mac(SECRET, f"{NOW}:{BODY}")
    wrong = hex_mac(WRONG, f"{NOW}:{BODY}")
    v.add("paddle/two h1, only the second verifies", "paddle",
          {"paddle-signature": f"ts={NOW};h1={wrong};h1={good}"}, "ok")
    v.add("paddle/signed with stripe's separator", "paddle",
          {"paddle-signature": f"ts={NOW};h1={hex_mac(SECRET, f'{NOW}.{BODY}')}"}, "mismatch")
    for label, value in [("no ts=", f"h1={good}"),
                         ("comma-separated", f"ts={NOW},h1={good}"),
                         ("no h1=", f"ts={NOW}"),
                         ("h1= not hex", f"ts={NOW};h1=not-hex")]:
        v.add(f"paddle/malformed: {label}", "paddle", {"paddle-signature": value}, "malformed")


def slack(v):
    def sign(secret, ts, body):
        return {"x-slack-signature": "v0=" + hex_mac(secret, f"v0:{ts}:{body}"),
                "x-slack-request-timestamp": str(ts)}

    timestamped(v, "slack", sign)
    good = sign(SECRET, NOW, BODY)
    v.add("slack/no timestamp header", "slack", {"x-slack-signature": good["x-slack-signature"]}, "missing")
    v.add("slack/malformed: no v0= prefix", "slack",
          {**good, "x-slack-signature": good["x-slack-signature"][3:]}, "malformed")
    v.add("slack/malformed: not hex", "slack", {**good, "x-slack-signature": "v0=xyz"}, "malformed")
    v.add("slack/malformed: timestamp not a number", "slack",
          {**good, "x-slack-request-timestamp": "yesterday"}, "malformed")
    # Slack's published example: https://api.slack.com/authentication/verifying-requests-from-slack
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    ts = 1531420618
    body = ("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow"
            "&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner"
            "&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
            "commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
            "&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    published = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    assert "v0=" + hex_mac(secret, f"v0:{ts}:{body}") == published, "Slack's example"
    headers = {"x-slack-signature": published, "x-slack-request-timestamp": str(ts)}
    v.add("slack/the published example", "slack", headers, "ok", body=body, secrets=[secret], now=ts + 60)
    v.add("slack/the published example, a day later", "slack", headers, "stale", body=body,
          secrets=[secret], now=ts + 86400)


def untimestamped(v, scheme, sign):
    v.add(f"{scheme}/valid", scheme, sign(SECRET, BODY), "ok")
    v.add(f"{scheme}/wrong secret", scheme, sign(WRONG, BODY), "mismatch")
    v.add(f"{scheme}/tampered body", scheme, sign(SECRET, BODY), "mismatch", body=TAMPERED)
    v.add(f"{scheme}/rotated: signed with the second of two secrets", scheme, sign(SECOND, BODY),
          "ok", secrets=[SECRET, SECOND])
    v.add(f"{scheme}/rotated: signed with the first of two secrets", scheme, sign(SECRET, BODY),
          "ok", secrets=[SECRET, SECOND])
    v.add(f"{scheme}/no timestamp is checked", scheme, sign(SECRET, BODY), "ok", now=NOW + 10 * 365 * 86400)
    v.add(f"{scheme}/no headers", scheme, {}, "missing")


def github(v):
    def sign(secret, body):
        return {"x-hub-signature-256": "sha256=" + hex_mac(secret, body)}

    untimestamped(v, "github", sign)
    good = sign(SECRET, BODY)["x-hub-signature-256"]
    v.add("github/malformed: no sha256= prefix", "github", {"x-hub-signature-256": good[7:]}, "malformed")
    v.add("github/malformed: the sha1 prefix", "github", {"x-hub-signature-256": "sha1=" + good[7:]}, "malformed")
    v.add("github/malformed: not hex", "github", {"x-hub-signature-256": "sha256=" + "g" * 64}, "malformed")
    v.add("github/a truncated MAC", "github", {"x-hub-signature-256": good[:-2]}, "mismatch")
    v.add("github/only the legacy sha1 header", "github",
          {"x-hub-signature": "sha1=" + hmac.new(SECRET.encode(), BODY.encode(), hashlib.sha1).hexdigest()},
          "missing")
    # GitHub's published example:
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    published = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert "sha256=" + hex_mac("It's a Secret to Everybody", "Hello, World!") == published, "GitHub's example"
    v.add("github/the published example", "github", {"x-hub-signature-256": published}, "ok",
          body="Hello, World!", secrets=["It's a Secret to Everybody"])


def shopify(v):
    def sign(secret, body):
        return {"x-shopify-hmac-sha256": b64_mac(secret.encode("utf-8"), body)}

    untimestamped(v, "shopify", sign)
    good = sign(SECRET, BODY)["x-shopify-hmac-sha256"]
    v.add("shopify/malformed: not base64", "shopify", {"x-shopify-hmac-sha256": "***" + good[3:]}, "malformed")
    # Hex digits are base64 too: the header decodes (to 48 bytes) and simply does not match.
    v.add("shopify/hex instead of base64", "shopify",
          {"x-shopify-hmac-sha256": hex_mac(SECRET, BODY)}, "mismatch")


def standard_webhooks(v):
    def sign(key, ts, body, msg="msg_2Kx1"):
        sig = b64_mac(key.encode("utf-8"), f"{msg}.{ts}.{body}")
        return {"webhook-id": msg, "webhook-timestamp": str(ts), "webhook-signature": f"v1,{sig}"}

    timestamped(v, "standard-webhooks", sign, secrets_of=whsec)
    good = sign(SECRET, NOW, BODY)
    other = sign(WRONG, NOW, BODY)["webhook-signature"]
    v.add("standard-webhooks/two v1, only the second verifies", "standard-webhooks",
          {**good, "webhook-signature": f"{other} {good['webhook-signature']}"}, "ok", secrets=[whsec(SECRET)])
    v.add("standard-webhooks/a raw secret without whsec_", "standard-webhooks", good, "ok", secrets=[SECRET])
    v.add("standard-webhooks/the id is signed", "standard-webhooks", {**good, "webhook-id": "msg_other"},
          "mismatch", secrets=[whsec(SECRET)])
    v.add("standard-webhooks/no webhook-id", "standard-webhooks",
          {k: val for k, val in good.items() if k != "webhook-id"}, "missing", secrets=[whsec(SECRET)])
    v.add("standard-webhooks/malformed: no v1", "standard-webhooks",
          {**good, "webhook-signature": "v2," + good["webhook-signature"][3:]}, "malformed", secrets=[whsec(SECRET)])


def hmac_sha256(v):
    fields = {"header": "x-sig", "encoding": "hex", "prefix": "sha256=", "timestamp_header": "x-ts"}

    def sign(secret, ts, body):
        return {"x-sig": "sha256=" + hex_mac(secret, f"{ts}.{body}"), "x-ts": str(ts)}

    v.add("hmac-sha256/valid", "hmac-sha256", sign(SECRET, NOW, BODY), "ok", fields=fields)
    v.add("hmac-sha256/wrong secret", "hmac-sha256", sign(WRONG, NOW, BODY), "mismatch", fields=fields)
    v.add("hmac-sha256/tampered body", "hmac-sha256", sign(SECRET, NOW, BODY), "mismatch", body=TAMPERED,
          fields=fields)
    v.add("hmac-sha256/stale", "hmac-sha256", sign(SECRET, NOW - TOLERANCE - 1, BODY), "stale", fields=fields)
    v.add("hmac-sha256/future", "hmac-sha256", sign(SECRET, NOW + TOLERANCE + 1, BODY), "future", fields=fields)
    v.add("hmac-sha256/rotated: signed with the second of two secrets", "hmac-sha256",
          sign(SECOND, NOW, BODY), "ok", secrets=[SECRET, SECOND], fields=fields)
    v.add("hmac-sha256/malformed: no prefix", "hmac-sha256",
          {**sign(SECRET, NOW, BODY), "x-sig": hex_mac(SECRET, f"{NOW}.{BODY}")}, "malformed", fields=fields)
    v.add("hmac-sha256/no timestamp header", "hmac-sha256",
          {"x-sig": sign(SECRET, NOW, BODY)["x-sig"]}, "missing", fields=fields)
    b64 = {"header": "x-ledger-signature", "encoding": "base64"}
    v.add("hmac-sha256/base64 over the body", "hmac-sha256",
          {"x-ledger-signature": b64_mac(SECRET.encode("utf-8"), BODY)}, "ok", fields=b64)
    v.add("hmac-sha256/base64, malformed", "hmac-sha256", {"x-ledger-signature": "%%%"}, "malformed", fields=b64)


SQUARE_URL = "https://example.com/webhooks/square"


def square(v):
    """Square signs the registered notification URL followed by the body (base64)."""
    fields = {"url": SQUARE_URL}

    def sign(secret, body):
        return {"x-square-hmacsha256-signature": b64_mac(secret.encode("utf-8"), SQUARE_URL + body)}

    v.add("square/valid", "square", sign(SECRET, BODY), "ok", fields=fields)
    v.add("square/wrong secret", "square", sign(WRONG, BODY), "mismatch", fields=fields)
    v.add("square/tampered body", "square", sign(SECRET, BODY), "mismatch", body=TAMPERED, fields=fields)
    v.add("square/another notification URL", "square",
          {"x-square-hmacsha256-signature": b64_mac(SECRET.encode("utf-8"), SQUARE_URL + "/other" + BODY)},
          "mismatch", fields=fields)
    v.add("square/body alone, without the URL", "square",
          {"x-square-hmacsha256-signature": b64_mac(SECRET.encode("utf-8"), BODY)}, "mismatch", fields=fields)
    v.add("square/rotated: signed with the second of two secrets", "square", sign(SECOND, BODY), "ok",
          secrets=[SECRET, SECOND], fields=fields)
    v.add("square/no headers", "square", {}, "missing", fields=fields)
    good = sign(SECRET, BODY)["x-square-hmacsha256-signature"]
    v.add("square/malformed: not base64", "square", {"x-square-hmacsha256-signature": "***" + good[3:]},
          "malformed", fields=fields)


ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADYEN_SECOND = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF"


def adyen_item(psp, value, key=None, signature=None):
    item = {"pspReference": psp, "originalReference": "ORIG_PSP", "merchantAccountCode": "Acme",
            "merchantReference": "ref-1", "amount": {"value": value, "currency": "EUR"},
            "eventCode": "REFUND", "success": "true", "additionalData": {}}
    if key is not None:
        text = ":".join([psp, "ORIG_PSP", "Acme", "ref-1", str(value), "EUR", "REFUND", "true"])
        item["additionalData"]["hmacSignature"] = b64_mac(bytes.fromhex(key), text)
    if signature is not None:
        item["additionalData"]["hmacSignature"] = signature
    return {"NotificationRequestItem": item}


def adyen_body(*items):
    return json.dumps({"live": "false", "notificationItems": list(items)}, separators=(",", ":"))


def adyen(v):
    """Adyen signs each item of the body (no header) with the hex-decoded key."""
    good = adyen_body(adyen_item("PSP1", 1500, ADYEN_KEY), adyen_item("PSP2", 1500, ADYEN_KEY))
    v.add("adyen/valid: every item signed", "adyen", {}, "ok", body=good, secrets=[ADYEN_KEY])
    v.add("adyen/wrong key", "adyen", {}, "mismatch", body=good, secrets=[ADYEN_SECOND])
    v.add("adyen/tampered amount", "adyen", {}, "mismatch",
          body=good.replace('"value":1500', '"value":9500', 1), secrets=[ADYEN_KEY])
    v.add("adyen/rotated: signed with the second of two keys", "adyen", {}, "ok",
          body=adyen_body(adyen_item("PSP1", 1500, ADYEN_SECOND)), secrets=[ADYEN_KEY, ADYEN_SECOND])
    v.add("adyen/an unsigned item beside a signed one", "adyen", {}, "missing",
          body=adyen_body(adyen_item("PSP1", 1500, ADYEN_KEY), adyen_item("PSP2", 1500)), secrets=[ADYEN_KEY])
    v.add("adyen/malformed: a signature that is not base64", "adyen", {}, "malformed",
          body=adyen_body(adyen_item("PSP1", 1500, signature="***")), secrets=[ADYEN_KEY])
    v.add("adyen/malformed: not a notification batch", "adyen", {}, "malformed", body=BODY, secrets=[ADYEN_KEY])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="crates/oncegate-server/tests/fixtures/signatures.json")
    args = parser.parse_args()
    v = Vectors()
    for scheme in [stripe, paddle, slack, github, shopify, square, adyen, standard_webhooks, hmac_sha256]:
        scheme(v)
    names = [item["name"] for item in v.items]
    assert len(names) == len(set(names)), "vector names are unique"
    text = json.dumps({"generated_by": "scripts/gen-signature-vectors.py", "vectors": v.items},
                      indent=1, ensure_ascii=False) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
        return
    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        out.write(text)
    print(f"wrote {len(v.items)} signature vectors to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
