//! The JSON form of a snapshot (what some tools write and MemoryViz also accepts): the same
//! dicts and lists as the pickle, fed through the same [`Builder`].
//!
//! serde_json limits nesting to 128 levels, so the walk below recurses at most that deep.

use super::build::{Builder, Value};

/// Why JSON input was refused.
pub(super) enum JsonError {
    Syntax {
        line: usize,
        column: usize,
        problem: String,
        /// The text ended early (truncated file).
        eof: bool,
    },
    Build(String),
}

/// Parses `bytes` as JSON into `builder` and returns the root value.
pub(super) fn decode(bytes: &[u8], builder: &mut Builder) -> Result<Value, JsonError> {
    let document: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| JsonError::Syntax {
            line: e.line(),
            column: e.column(),
            problem: e.to_string(),
            eof: e.is_eof(),
        })?;
    walk(&document, builder).map_err(JsonError::Build)
}

fn walk(value: &serde_json::Value, builder: &mut Builder) -> Result<Value, String> {
    Ok(match value {
        serde_json::Value::Null => Value::None,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::U64(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => builder.string(s.as_bytes()),
        serde_json::Value::Array(items) => {
            let list = builder.new_list()?;
            let mut values = Vec::with_capacity(items.len().min(1024));
            for chunk in items.chunks(1024) {
                values.clear();
                for item in chunk {
                    values.push(walk(item, builder)?);
                }
                builder.list_append(list, &values)?;
            }
            list
        }
        serde_json::Value::Object(map) => {
            let dict = builder.new_dict()?;
            let mut pairs = Vec::with_capacity(map.len() * 2);
            for (key, item) in map {
                pairs.push(builder.string(key.as_bytes()));
                pairs.push(walk(item, builder)?);
            }
            builder.dict_set(dict, &pairs)?;
            dict
        }
    })
}
