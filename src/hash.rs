//! Canonical JSON and its SHA-256: the content identity behind every idempotency check.
//!
//! Canonical form: object keys sorted by their UTF-8 bytes, no whitespace, serde_json's
//! escaping and number formatting. It is written here, not left to `serde_json::to_string`,
//! so that a dependency turning on serde_json's `preserve_order` cannot change a stored hash.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical text of `value`.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// The lowercase hex SHA-256 of the canonical text of `value`.
pub(crate) fn content_hash(value: &Value) -> String {
    hex(&Sha256::digest(canonical_json(value).as_bytes()))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_without_whitespace() {
        let value = json!({"b": 1, "a": {"z": [1, {"y": null, "x": true}], "c": "é\n"}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":"é\n","z":[1,{"x":true,"y":null}]},"b":1}"#
        );
    }

    #[test]
    fn golden_hashes() {
        // Fixed values: a change here changes every stored idempotency hash.
        assert_eq!(
            content_hash(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(
            content_hash(&json!({"type": "created", "payload": {"b": 2, "a": 1}})),
            content_hash(&json!({"payload": {"a": 1, "b": 2}, "type": "created"}))
        );
        assert_eq!(
            content_hash(&json!([1, "two", null])),
            "597be421a7a1692cdedfeae56567a7f6f64f20022eacae23a3918aeaa29e5904"
        );
    }
}
