#!/usr/bin/env python3
"""Generates examples/corpus/sample.jsonl: a labeled corpus of webhook deliveries for the
providers and event types of examples/oncegate.toml, deterministically from a seed.

Nothing in the output is written by hand. Each line is one delivery in oncegate's corpus format
(see docs/operations.md, "Choose your keys from evidence"); `label.operation` names the real business
operation, so deliveries sharing a label are retries of one operation and different labels are
distinct operations. The corpus deliberately holds what makes key choice hard:

- retries re-encoded: members reordered, whitespace, numbers spelled differently (4990, 4.99e3,
  4990.0), dates in another offset, a new `sent_at` and `attempt`;
- legitimate repeats: two refunds of the same amount on the same payment, no request reference,
  bodies identical once `sent_at` is removed (the source story's second refund);
- collisions: the same refund request reference with a different amount;
- missing fields: captures from the older API without `capture_id`, refunds without
  `request_ref`, notifications without `event_id`;
- ordered vs unordered arrays: invoice `lines` keep their order (a reordered copy is a
  different invoice), product `tags` arrive shuffled between retries of one update;
- delivery ids reused across environments by the store platform.

Usage: scripts/gen-corpus.py [--seed N] [--out PATH]   (defaults: 6, examples/corpus/sample.jsonl)
"""

import argparse
import datetime as dt
import json
import random


class Raw:
    """A JSON number or literal written exactly as given (to vary number spelling)."""

    def __init__(self, text):
        self.text = text


def encode(value, rng, loose):
    """Encodes `value` in document order; when `loose`, adds random insignificant whitespace."""
    sp = (lambda: rng.choice(["", " ", "  "])) if loose else (lambda: "")
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        members = [f"{sp()}{json.dumps(k)}{sp()}:{sp()}{encode(v, rng, loose)}" for k, v in value.items()]
        return "{" + ",".join(members) + sp() + "}"
    if isinstance(value, list):
        return "[" + ",".join(sp() + encode(v, rng, loose) for v in value) + sp() + "]"
    return json.dumps(value, ensure_ascii=False)


def shuffled(obj, rng):
    """The same object with its members (recursively) in another order."""
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [shuffled(v, rng) for v in obj]
    return obj


def spell(n, rng):
    """An integer amount spelled in one of several equal ways."""
    forms = [str(n), f"{n}.0"]
    if n % 10 == 0 and n:
        forms.append(f"{n // 10}e1")
        digits = str(n)
        forms.append(f"{digits[0]}.{digits[1:].rstrip('0') or '0'}e{len(digits) - 1}")
    return Raw(rng.choice(forms))


class Corpus:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.clock = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.timezone.utc)
        self.records = []
        self.ops = 0

    def op(self, kind):
        self.ops += 1
        return f"op-{kind}-{self.ops:04d}"

    def tick(self, seconds=None):
        self.clock += dt.timedelta(seconds=seconds if seconds is not None else self.rng.randint(5, 400))
        return self.clock

    def stamp(self, at):
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")

    def emit(self, provider, env, event_type, headers, body, label, retry):
        rng = self.rng
        if retry:
            body = shuffled(body, rng)
        text = encode(body, rng, loose=retry)
        self.records.append(
            "{" + ",".join([
                f'"tenant":"acme"',
                f'"provider":{json.dumps(provider)}',
                f'"env":{json.dumps(env)}',
                f'"event_type":{json.dumps(event_type)}',
                f'"headers":{json.dumps(headers, sort_keys=True, separators=(",", ":"))}',
                f'"body":{text}',
                f'"received_at":{json.dumps(self.stamp(self.tick()))}',
                f'"label":{{"operation":{json.dumps(label)}}}',
            ]) + "}"
        )


def payflow(c):
    rng = c.rng
    payments = [f"pay_{rng.randrange(16**6):06x}" for _ in range(30)]
    headers = {"content-type": "application/json"}
    # A handful of customers pay many times: an email identifies a person, not an operation.
    emails = [f"customer{k}@example.com" for k in range(5)]
    # Captures: one per payment; older API versions omit capture_id.
    for i, pay in enumerate(payments[:24]):
        label = c.op("capture")
        amount = rng.choice([1500, 4990, 12000, 2599, 30000])
        offset = dt.timezone(dt.timedelta(hours=rng.choice([0, 1, 2])))
        captured = c.clock.astimezone(offset)
        data = {"payment_id": pay, "amount": amount, "currency": rng.choice(["EUR", "USD"]),
                "customer_email": emails[i % len(emails)]}
        if i % 5 != 4:
            data["capture_id"] = f"cap_{rng.randrange(16**4):04x}"
        for attempt in range(1, rng.choice([2, 2, 3, 4]) + 1):
            sent = c.tick(rng.randint(30, 900))
            d = dict(data, amount=spell(amount, rng))
            # Retries may send the capture time in UTC or in the merchant's offset: same instant.
            at = captured if attempt == 1 or rng.random() < 0.5 else captured.astimezone(dt.timezone.utc)
            d["captured_at"] = at.isoformat()
            body = {"type": "payment.captured", "sent_at": c.stamp(sent), "attempt": attempt, "data": d}
            c.emit("payflow", "live", "payment.captured", headers, body, label, attempt > 1)
    # Refunds with a request reference (trimmed and lowercased by the contract).
    for i, pay in enumerate(payments[:16]):
        label = c.op("refund")
        ref = f"rr_{rng.randrange(16**5):05x}"
        amount = rng.choice([500, 1500, 2000])
        for attempt in range(1, rng.choice([1, 2, 3]) + 1):
            shown = ref if attempt == 1 else rng.choice([ref.upper(), f" {ref} ", ref])
            body = {"type": "refund.created", "sent_at": c.stamp(c.tick()), "attempt": attempt,
                    "data": {"payment_id": pay, "request_ref": shown, "amount": spell(amount, rng),
                             "currency": "EUR", "reason": "requested_by_customer",
                             "customer_email": emails[i % len(emails)]}}
            c.emit("payflow", "live", "refund.created", headers, body, label, attempt > 1)
        # A collision: the same request reference reused with another amount. It is a distinct
        # operation as far as the labels go; a safe contract keeps it (quarantine), never merges it.
        if i % 6 == 5:
            body = {"type": "refund.created", "sent_at": c.stamp(c.tick()), "attempt": 1,
                    "data": {"payment_id": pay, "request_ref": ref, "amount": amount + 700,
                             "currency": "EUR", "reason": "requested_by_customer",
                             "customer_email": emails[i % len(emails)]}}
            c.emit("payflow", "live", "refund.created", headers, body, c.op("refund-collision"), False)
    # Legitimate repeats: two refunds of the same amount on the same payment, minutes apart, no
    # request reference; each may be retried.
    for pay in payments[16:24]:
        amount = rng.choice([1500, 2500])
        for _ in range(2):
            label = c.op("refund-repeat")
            for attempt in range(1, rng.choice([1, 2]) + 1):
                body = {"type": "refund.created", "sent_at": c.stamp(c.tick(rng.randint(60, 300))),
                        "attempt": attempt,
                        "data": {"payment_id": pay, "amount": spell(amount, rng), "currency": "EUR",
                                 "reason": "requested_by_customer"}}
                c.emit("payflow", "live", "refund.created", headers, body, label, attempt > 1)


def shopline(c):
    rng = c.rng
    used_ids = []
    for i in range(14):
        label = c.op("order-paid")
        event_id = f"evt_{rng.randrange(16**8):08x}"
        order = {"id": 7000 + i, "total": spell(rng.choice([1999, 4500, 8990]), rng), "currency": "EUR",
                 "payment_ref": f"py_{rng.randrange(16**6):06x}"}
        delivery = f"whd_{rng.randrange(16**8):08x}"
        used_ids.append(delivery)
        for attempt in range(1, rng.choice([1, 2, 3]) + 1):
            # Some platforms resend the same packet (same delivery id); others make a new delivery.
            if attempt > 1 and rng.random() < 0.5:
                delivery = f"whd_{rng.randrange(16**8):08x}"
            headers = {"x-shopline-topic": "orders/paid", "x-shopline-delivery": delivery}
            body = {"event_id": event_id, "order": dict(order)}
            c.emit("shopline", "live", "orders/paid", headers, body, label, attempt > 1)
    # The sandbox reuses production delivery ids for unrelated events.
    for i, delivery in enumerate(used_ids[:4]):
        headers = {"x-shopline-topic": "orders/paid", "x-shopline-delivery": delivery}
        body = {"event_id": f"evt_{rng.randrange(16**8):08x}",
                "order": {"id": 9100 + i, "total": 100, "currency": "EUR", "payment_ref": f"py_test{i}"}}
        c.emit("shopline", "test", "orders/paid", headers, body, c.op("sandbox-order"), False)
    for i in range(12):
        label = c.op("notify")
        event_id = f"evt_{rng.randrange(16**8):08x}"
        for attempt in range(1, rng.choice([1, 2]) + 1):
            body = {"sent_at": c.stamp(c.tick()), "customer": {"id": 300 + i}, "template": "welcome"}
            # A few notifications come from an integration that sends no event id.
            if i % 4 != 3:
                body = {"event_id": event_id, **body}
            headers = {"x-shopline-topic": "customers/notify",
                       "x-shopline-delivery": f"whd_{rng.randrange(16**8):08x}"}
            c.emit("shopline", "live", "customers/notify", headers, body, label, attempt > 1)
    for i in range(8):
        product = 500 + i
        tags = ["sale", "summer", "cotton", "kids"][: rng.randint(2, 4)]
        for version in range(rng.choice([1, 2])):
            label = c.op("product-update")
            updated = c.tick(3600)
            title = f"Shirt {i}" + (" (new)" if version else "")
            for attempt in range(1, rng.choice([1, 2, 3]) + 1):
                t = list(tags)
                rng.shuffle(t)
                at = updated.astimezone(dt.timezone(dt.timedelta(hours=rng.choice([0, 2]))))
                body = {"sent_at": c.stamp(c.tick()),
                        "product": {"id": product, "title": title, "price": spell(2500, rng),
                                    "tags": t, "updated_at": at.isoformat()}}
                headers = {"x-shopline-topic": "products/update",
                           "x-shopline-delivery": f"whd_{rng.randrange(16**8):08x}"}
                c.emit("shopline", "live", "products/update", headers, body, label, attempt > 1)


def ledgerly(c):
    rng = c.rng
    for i in range(10):
        label = c.op("invoice")
        number = f"INV-{2026000 + i}"
        lines = [{"sku": f"sku-{k}", "qty": rng.randint(1, 3), "amount": rng.choice([1000, 2500])}
                 for k in range(rng.randint(2, 3))]
        total = sum(line["qty"] * line["amount"] for line in lines)
        for attempt in range(1, rng.choice([1, 2, 3]) + 1):
            shown = number if attempt == 1 else rng.choice([number.lower(), f" {number}"])
            body = {"event": "invoice.finalized", "delivered_at": c.stamp(c.tick()),
                    "invoice": {"number": shown, "total": spell(total, rng), "currency": "EUR",
                                "lines": lines}}
            headers = {"x-ledgerly-delivery-id": f"ldl_{rng.randrange(16**8):08x}"}
            c.emit("ledgerly", "live", "invoice.finalized", headers, body, label, attempt > 1)
        # Line order is meaning: an invoice reissued under the same number with its lines in
        # another order is not a retry, and a safe contract must not merge it.
        if i % 5 == 4 and len(lines) > 1:
            body = {"event": "invoice.finalized", "delivered_at": c.stamp(c.tick()),
                    "invoice": {"number": number, "total": total, "currency": "EUR",
                                "lines": list(reversed(lines))}}
            headers = {"x-ledgerly-delivery-id": f"ldl_{rng.randrange(16**8):08x}"}
            c.emit("ledgerly", "live", "invoice.finalized", headers, body, c.op("invoice-reordered"), False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--out", default="examples/corpus/sample.jsonl")
    args = parser.parse_args()
    c = Corpus(args.seed)
    payflow(c)
    shopline(c)
    ledgerly(c)
    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        for line in c.records:
            json.loads(line)  # every line must be valid JSON on its own
            out.write(line + "\n")
    print(f"wrote {len(c.records)} deliveries of {c.ops} labeled operations to {args.out}")


if __name__ == "__main__":
    main()
