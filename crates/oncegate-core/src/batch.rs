//! Batches: one request that carries several notifications, each its own delivery.
//!
//! Some providers send several events in one body and expect one fixed reply for the whole
//! request: Adyen's classic notifications come as
//! `{"live":"false","notificationItems":[{"NotificationRequestItem":{…}}, …]}` and the provider
//! wants `[accepted]` back. A provider's contract says so with
//! `batch = { items = "/notificationItems", item = "/NotificationRequestItem", reply = "[accepted]" }`:
//! every pointer of its types (event type, resource, discriminants, key fields) is then read
//! inside one item, and each item is identified, decided and proved on its own. An item is
//! never merged with its neighbours: two refunds in one request are two deliveries.

use crate::json::Value;
use crate::pointer::Pointer;

/// A provider's batch shape (`batch = { items, item, reply }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Where the array of items is in the body (`items`).
    pub items: Pointer,
    /// Where the notification is inside one element of that array (`item`, default: the
    /// element itself).
    pub item: Pointer,
    /// The body the provider expects in reply once every item was journaled (`reply`, e.g.
    /// `[accepted]`); sent with status 200.
    pub reply: String,
}

/// Why a body could not be read as the provider's batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The body has nothing at the items pointer.
    #[error("the body has no batch of items at {0}")]
    NoItems(String),
    /// The items pointer holds something other than an array.
    #[error("the batch at {0} holds {1} where an array of items belongs")]
    NotAnArray(String, &'static str),
    /// The batch is an empty array: there is nothing to decide.
    #[error("the batch at {0} holds no item")]
    Empty(String),
    /// One element has no notification at the item pointer.
    #[error("item {index} of the batch at {items} has no notification at {item}")]
    NoNotification {
        /// The element's position, from 0.
        index: usize,
        /// The items pointer.
        items: String,
        /// The item pointer.
        item: String,
    },
}

impl Batch {
    /// The notifications of a batch body, in the body's order, each a document of its own.
    ///
    /// ```
    /// use oncegate_core::batch::Batch;
    /// use oncegate_core::json::{parse, Limits};
    /// use oncegate_core::pointer::Pointer;
    ///
    /// let batch = Batch {
    ///     items: Pointer::parse("/notificationItems").unwrap(),
    ///     item: Pointer::parse("/NotificationRequestItem").unwrap(),
    ///     reply: "[accepted]".into(),
    /// };
    /// let body = parse(br#"{"live":"false","notificationItems":[
    ///     {"NotificationRequestItem":{"eventCode":"REFUND","pspReference":"A"}},
    ///     {"NotificationRequestItem":{"eventCode":"REFUND","pspReference":"B"}}]}"#,
    ///     &Limits::default()).unwrap();
    /// let items = batch.items_of(&body).unwrap();
    /// assert_eq!(items.len(), 2);
    /// assert_eq!(items[1].as_object().unwrap().get("pspReference").unwrap().as_str(), Some("B"));
    ///
    /// let not_a_batch = parse(br#"{"eventCode":"REFUND"}"#, &Limits::default()).unwrap();
    /// assert_eq!(batch.items_of(&not_a_batch).unwrap_err().to_string(),
    ///     "the body has no batch of items at /notificationItems");
    /// ```
    pub fn items_of(&self, doc: &Value) -> Result<Vec<Value>, BatchError> {
        let at = || self.items.as_str().to_owned();
        let list = match self.items.get(doc) {
            None => return Err(BatchError::NoItems(at())),
            Some(Value::Array(list)) => list,
            Some(other) => return Err(BatchError::NotAnArray(at(), other.kind_name())),
        };
        if list.is_empty() {
            return Err(BatchError::Empty(at()));
        }
        list.iter()
            .enumerate()
            .map(|(index, element)| {
                self.item
                    .get(element)
                    .cloned()
                    .ok_or_else(|| BatchError::NoNotification {
                        index,
                        items: at(),
                        item: self.item.as_str().to_owned(),
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{parse, Limits};

    fn batch(item: &str) -> Batch {
        Batch {
            items: Pointer::parse("/items").unwrap(),
            item: Pointer::parse(item).unwrap(),
            reply: "ok".into(),
        }
    }

    #[test]
    fn items_are_read_in_order_or_refused_with_the_reason() {
        let check = |item: &str, body: &str, expected: Result<Vec<&str>, &str>| {
            let doc = parse(body.as_bytes(), &Limits::default()).unwrap();
            let got = batch(item).items_of(&doc);
            match expected {
                Ok(forms) => {
                    let got: Vec<String> =
                        got.unwrap().iter().map(crate::canon::to_key_form).collect();
                    assert_eq!(got, forms, "{body}");
                }
                Err(why) => assert_eq!(got.unwrap_err().to_string(), why, "{body}"),
            }
        };
        check(
            "/n",
            r#"{"items":[{"n":{"a":2}},{"n":{"a":1}}]}"#,
            Ok(vec![r#"{"a":2}"#, r#"{"a":1}"#]),
        );
        check(
            "",
            r#"{"items":[1,{"b":820982911946154508}]}"#,
            Ok(vec!["1", r#"{"b":820982911946154508}"#]),
        );
        check(
            "/n",
            r#"{"other":[]}"#,
            Err("the body has no batch of items at /items"),
        );
        check(
            "/n",
            r#"{"items":{"n":1}}"#,
            Err("the batch at /items holds object where an array of items belongs"),
        );
        check(
            "/n",
            r#"{"items":[]}"#,
            Err("the batch at /items holds no item"),
        );
        check(
            "/n",
            r#"{"items":[{"n":1},{"m":2}]}"#,
            Err("item 1 of the batch at /items has no notification at /n"),
        );
    }
}
