//! Parsing the human-readable sizes that frameworks print (`27.86 GiB`, `0 bytes`, `4.00TiB`,
//! `32.00M`, `3743729664 bytes`) back into bytes.
//!
//! PyTorch prints binary units with two decimals; TensorFlow/XLA print `HumanReadableNumBytes`
//! (`4.00TiB`); TensorFlow's stream executor prints `32.00M`. All of them mean powers of 1024.

/// Parses a size such as `27.86 GiB`, `1.5MB`, `512 bytes` or `32.00M` into bytes (rounded to the
/// nearest byte). Returns `None` for anything else, or for values beyond `u64`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "byte" | "bytes" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0_f64.powi(4),
        "p" | "pb" | "pib" => 1024.0_f64.powi(5),
        "e" | "eb" | "eib" => 1024.0_f64.powi(6),
        _ => return None,
    };
    let bytes = (value * multiplier).round();
    if bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64 {
        Some(bytes as u64)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GIB, MIB};

    #[test]
    fn parses_every_spelling_frameworks_print() {
        assert_eq!(parse_size("0 bytes"), Some(0));
        assert_eq!(parse_size("512 bytes"), Some(512));
        assert_eq!(parse_size("382.00 MiB"), Some(382 * MIB));
        assert_eq!(parse_size("4.00 GiB"), Some(4 * GIB));
        assert_eq!(parse_size("4.00TiB"), Some(4 * 1024 * GIB));
        assert_eq!(parse_size("32.00M"), Some(32 * MIB));
        assert_eq!(parse_size("1.50 KiB"), Some(1536));
        assert_eq!(
            parse_size("27.86 GiB"),
            Some((27.86 * GIB as f64).round() as u64)
        );
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("1.2.3 GiB"), None);
        assert_eq!(parse_size("99999999999999999999 EiB"), None);
    }
}
