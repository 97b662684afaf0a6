//! `PYTORCH_CUDA_ALLOC_CONF` in PyTorch's own syntax: parsed into the allocator rules a replay
//! runs under, with errors that name the bad key or value and list what is known.
//!
//! The grammar and the checks are those of PyTorch's `AllocatorConfig::parseArgs`
//! (`c10/core/AllocatorConfig.cpp` in github.com/pytorch/pytorch): tokens are split at `,`, `:`,
//! `[` and `]` with spaces dropped; `max_split_size_mb` and `max_non_split_rounding_mb` must be at
//! least 20; `garbage_collection_threshold` lies strictly between 0 and 1;
//! `roundup_power2_divisions` takes one power of two for every size interval, or a list
//! `[256:1,512:2,>:8]` whose first entry also covers the smaller intervals and whose `>` entry
//! covers the intervals from the last one named (that one included) upward.

use std::fmt;

use crate::analysis::allocator_rules::{AllocatorRules, ROUNDUP_INTERVALS};
use crate::model::MIB;

/// One allocator configuration: the text as the user gave it and the rules it sets.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    /// The configuration as given (`default` when empty), shown next to every result.
    pub text: String,
    /// The sizing, splitting, expandable-segment and garbage-collection rules it sets.
    pub rules: AllocatorRules,
    /// `per_process_memory_fraction`: a cap as a share of the device's memory (what
    /// `set_per_process_memory_fraction` sets), applied when the device's memory is known.
    pub memory_fraction: Option<f64>,
    /// Options PyTorch accepts that do not change where device memory goes (pinned host
    /// memory, lock handling); listed so that a user sees they were read, not lost.
    pub without_effect: Vec<String>,
}

/// Why a configuration could not be used for a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfError {
    /// A key PyTorch does not know (or that a replay cannot model).
    UnknownKey(String),
    /// A known key with a value PyTorch would refuse.
    BadValue {
        key: String,
        value: String,
        why: String,
    },
    /// The text does not follow `key:value,key:value`.
    Syntax(String),
    /// `backend:cudaMallocAsync` hands memory to CUDA's own pool allocator, which has no
    /// caching-allocator trace to replay.
    AsyncBackend,
}

/// Keys that change device memory, with what each takes.
pub const KNOWN_KEYS: &[(&str, &str)] = &[
    ("expandable_segments", "True or False"),
    ("max_split_size_mb", "an integer number of MiB, at least 20"),
    (
        "max_non_split_rounding_mb",
        "an integer number of MiB, at least 20",
    ),
    (
        "garbage_collection_threshold",
        "a fraction between 0 and 1 (acts only under a per-process cap)",
    ),
    (
        "roundup_power2_divisions",
        "a power of two, or a list like [256:1,512:2,1024:4,>:8]",
    ),
    (
        "large_segment_size_mb",
        "an integer number of MiB: the segment for 1-10 MiB requests (20 by default)",
    ),
    (
        "per_process_memory_fraction",
        "a fraction between 0 and 1 of the device's memory",
    ),
    ("backend", "native"),
];

/// Keys PyTorch accepts that have no effect on device memory.
const KEYS_WITHOUT_EFFECT: &[&str] = &[
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
];

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfError::UnknownKey(key) => {
                write!(f, "unknown allocator setting '{key}'; known settings: ")?;
                let names: Vec<String> = KNOWN_KEYS
                    .iter()
                    .map(|(name, takes)| format!("{name} ({takes})"))
                    .collect();
                write!(f, "{}", names.join(", "))?;
                write!(
                    f,
                    "; accepted without effect on device memory: {}",
                    KEYS_WITHOUT_EFFECT.join(", ")
                )
            }
            ConfError::BadValue { key, value, why } => {
                write!(f, "bad value '{value}' for {key}: {why}")
            }
            ConfError::Syntax(why) => write!(
                f,
                "cannot read the allocator settings: {why} (expected PyTorch's syntax, e.g. \
                 expandable_segments:True or garbage_collection_threshold:0.6,max_split_size_mb:128)"
            ),
            ConfError::AsyncBackend => write!(
                f,
                "backend:cudaMallocAsync uses CUDA's own pool allocator, which the replay does \
                 not model (it replays PyTorch's native caching allocator)"
            ),
        }
    }
}

impl std::error::Error for ConfError {}

impl AllocConf {
    /// PyTorch's defaults (what an unset `PYTORCH_CUDA_ALLOC_CONF` means).
    pub fn default_conf() -> AllocConf {
        AllocConf {
            text: "default".to_string(),
            rules: AllocatorRules::default(),
            memory_fraction: None,
            without_effect: Vec::new(),
        }
    }

    /// Parses `text` in PyTorch's syntax; `default` or an empty text mean PyTorch's defaults.
    pub fn parse(text: &str) -> Result<AllocConf, ConfError> {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.eq_ignore_ascii_case("default") {
            return Ok(AllocConf::default_conf());
        }
        let tokens = lex(trimmed);
        let mut rules = AllocatorRules::default();
        let mut memory_fraction = None;
        let mut without_effect = Vec::new();
        let mut cursor = Cursor {
            tokens: &tokens,
            at: 0,
        };
        while let Some(key) = cursor.next() {
            cursor.expect(":", key)?;
            match key {
                "max_split_size_mb" => {
                    rules.max_split_size_bytes = Some(cursor.mebibytes_at_least_20(key)?);
                }
                "max_non_split_rounding_mb" => {
                    rules.max_non_split_rounding_bytes = cursor.mebibytes_at_least_20(key)?;
                }
                "garbage_collection_threshold" => {
                    let value = cursor.value(key)?;
                    let threshold: f64 =
                        value.parse().map_err(|_| bad(key, value, "not a number"))?;
                    if !(threshold > 0.0 && threshold < 1.0) {
                        return Err(bad(key, value, "must lie strictly between 0 and 1"));
                    }
                    rules.garbage_collection_threshold = threshold;
                }
                "roundup_power2_divisions" => {
                    rules.roundup_power2_divisions = cursor.roundup_divisions(key)?;
                }
                "expandable_segments" => {
                    rules.expandable_segments = cursor.boolean(key)?;
                }
                "large_segment_size_mb" => {
                    let value = cursor.value(key)?;
                    let mib: u64 = value
                        .parse()
                        .map_err(|_| bad(key, value, "not a whole number of MiB"))?;
                    if mib == 0 {
                        return Err(bad(key, value, "must be at least 1 (MiB)"));
                    }
                    rules.large_segment_bytes = mib.saturating_mul(MIB);
                }
                "per_process_memory_fraction" => {
                    let value = cursor.value(key)?;
                    let fraction: f64 =
                        value.parse().map_err(|_| bad(key, value, "not a number"))?;
                    if !(fraction > 0.0 && fraction <= 1.0) {
                        return Err(bad(key, value, "must lie in (0, 1]"));
                    }
                    memory_fraction = Some(fraction);
                }
                "backend" => {
                    let value = cursor.value(key)?;
                    match value {
                        "native" => {}
                        "cudaMallocAsync" => return Err(ConfError::AsyncBackend),
                        other => {
                            return Err(bad(key, other, "options are native and cudaMallocAsync"));
                        }
                    }
                }
                other if KEYS_WITHOUT_EFFECT.contains(&other) => {
                    let value = cursor.value(other)?;
                    without_effect.push(format!("{other}:{value}"));
                }
                other => return Err(ConfError::UnknownKey(other.to_string())),
            }
            if cursor.peek().is_some() {
                cursor.expect(",", key)?;
            }
        }
        Ok(AllocConf {
            text: trimmed.to_string(),
            rules,
            memory_fraction,
            without_effect,
        })
    }

    /// The configuration a snapshot recorded (its `allocator_settings`), or PyTorch's defaults
    /// when the file has none. The text is the recorded `PYTORCH_CUDA_ALLOC_CONF` when present.
    pub fn recorded(settings: Option<&crate::model::allocator::AllocatorSettings>) -> AllocConf {
        let mut rules = AllocatorRules::from_settings(settings);
        let recorded_text = settings
            .and_then(|s| s.alloc_conf.as_deref())
            .map(str::trim)
            .filter(|t| !t.is_empty());
        // Keys the structured settings do not carry (a cap fraction, the large segment size)
        // are read from the recorded text.
        let parsed = recorded_text.and_then(|t| AllocConf::parse(t).ok());
        if let Some(parsed) = &parsed {
            rules.large_segment_bytes = parsed.rules.large_segment_bytes;
            rules.max_non_split_rounding_bytes = parsed.rules.max_non_split_rounding_bytes;
        }
        let text = recorded_text.map_or_else(|| describe_rules(&rules), str::to_string);
        AllocConf {
            text,
            rules,
            memory_fraction: parsed.and_then(|p| p.memory_fraction),
            without_effect: Vec::new(),
        }
    }

    /// This configuration with `change` applied on top: keys `change` sets replace this
    /// configuration's values, as if both strings were given with `change` last.
    pub fn with_change(&self, change: &str) -> Result<AllocConf, ConfError> {
        let changed = AllocConf::parse(change)?;
        if self.rules == AllocatorRules::default() && self.memory_fraction.is_none() {
            return Ok(changed);
        }
        let tokens = lex(change);
        let mut rules = self.rules.clone();
        let mut cursor = Cursor {
            tokens: &tokens,
            at: 0,
        };
        // Apply only the keys the change names, with the values it parsed to.
        while let Some(key) = cursor.next() {
            match key {
                "max_split_size_mb" => {
                    rules.max_split_size_bytes = changed.rules.max_split_size_bytes
                }
                "max_non_split_rounding_mb" => {
                    rules.max_non_split_rounding_bytes = changed.rules.max_non_split_rounding_bytes
                }
                "garbage_collection_threshold" => {
                    rules.garbage_collection_threshold = changed.rules.garbage_collection_threshold
                }
                "roundup_power2_divisions" => {
                    rules.roundup_power2_divisions = changed.rules.roundup_power2_divisions
                }
                "expandable_segments" => {
                    rules.expandable_segments = changed.rules.expandable_segments
                }
                "large_segment_size_mb" => {
                    rules.large_segment_bytes = changed.rules.large_segment_bytes
                }
                _ => {}
            }
            cursor.skip_value();
        }
        Ok(AllocConf {
            text: joined_text(&self.text, change),
            rules,
            memory_fraction: changed.memory_fraction.or(self.memory_fraction),
            without_effect: changed.without_effect,
        })
    }
}

/// `base` without the keys `change` sets, then `change`: the string to give PyTorch, in the
/// user's own syntax (a recorded `roundup_power2_divisions:[256:1,>:8]` stays as written, and a
/// recorded `max_split_size_mb:512` changed to 64 appears once, as 64).
fn joined_text(base: &str, change: &str) -> String {
    let key = |item: &str| item.split(':').next().unwrap_or_default().trim().to_owned();
    let changed: Vec<String> = top_level_items(change).map(key).collect();
    let mut parts: Vec<&str> = top_level_items(base)
        .filter(|item| !item.eq_ignore_ascii_case("default") && !changed.contains(&key(item)))
        .collect();
    parts.extend(top_level_items(change));
    parts.join(",")
}

/// The comma-separated `key:value` items of a configuration string, a bracketed list kept
/// whole; empty items left out.
fn top_level_items(text: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0usize;
    let mut start = 0;
    let mut items = Vec::new();
    for (at, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// A configuration string that sets `rules` (keys at their defaults are left out).
pub fn describe_rules(rules: &AllocatorRules) -> String {
    let defaults = AllocatorRules::default();
    let mut parts = Vec::new();
    if rules.expandable_segments {
        parts.push("expandable_segments:True".to_string());
    }
    if let Some(limit) = rules.max_split_size_bytes {
        parts.push(format!("max_split_size_mb:{}", limit / MIB));
    }
    if rules.max_non_split_rounding_bytes != defaults.max_non_split_rounding_bytes {
        parts.push(format!(
            "max_non_split_rounding_mb:{}",
            rules.max_non_split_rounding_bytes / MIB
        ));
    }
    if rules.large_segment_bytes != defaults.large_segment_bytes {
        parts.push(format!(
            "large_segment_size_mb:{}",
            rules.large_segment_bytes / MIB
        ));
    }
    if rules.garbage_collection_threshold > 0.0 {
        parts.push(format!(
            "garbage_collection_threshold:{}",
            rules.garbage_collection_threshold
        ));
    }
    let divisions = rules.roundup_power2_divisions;
    if divisions != defaults.roundup_power2_divisions {
        if divisions.iter().all(|&d| d == divisions[0]) {
            parts.push(format!("roundup_power2_divisions:{}", divisions[0]));
        } else {
            let entries: Vec<String> = divisions
                .iter()
                .enumerate()
                .map(|(index, d)| format!("{}:{d}", 1u64 << index))
                .collect();
            parts.push(format!("roundup_power2_divisions:[{}]", entries.join(",")));
        }
    }
    if parts.is_empty() {
        "default".to_string()
    } else {
        parts.join(",")
    }
}

fn bad(key: &str, value: &str, why: &str) -> ConfError {
    ConfError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// PyTorch's `lexArgs`: separators are tokens of their own; spaces vanish.
fn lex(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        match c {
            ',' | ':' | '[' | ']' => {
                if !word.is_empty() {
                    tokens.push(std::mem::take(&mut word));
                }
                tokens.push(c.to_string());
            }
            c if c.is_whitespace() => {}
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

struct Cursor<'a> {
    tokens: &'a [String],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let token = self.tokens.get(self.at)?;
        self.at += 1;
        Some(token.as_str())
    }

    fn peek(&self) -> Option<&'a str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn expect(&mut self, separator: &str, after: &str) -> Result<(), ConfError> {
        match self.next() {
            Some(token) if token == separator => Ok(()),
            Some(token) => Err(ConfError::Syntax(format!(
                "expected '{separator}' after '{after}', found '{token}'"
            ))),
            None => Err(ConfError::Syntax(format!(
                "expected '{separator}' after '{after}'"
            ))),
        }
    }

    fn value(&mut self, key: &str) -> Result<&'a str, ConfError> {
        match self.next() {
            Some(token) if !matches!(token, "," | ":" | "[" | "]") => Ok(token),
            _ => Err(ConfError::Syntax(format!("{key} needs a value"))),
        }
    }

    /// Skips the value after a key (used when only the key matters), brackets included.
    fn skip_value(&mut self) {
        let mut depth = 0usize;
        while let Some(token) = self.peek() {
            match token {
                "[" => depth += 1,
                "]" => depth = depth.saturating_sub(1),
                "," if depth == 0 => {
                    self.at += 1;
                    return;
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    fn boolean(&mut self, key: &str) -> Result<bool, ConfError> {
        match self.value(key)? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => Err(bad(key, other, "expected True or False")),
        }
    }

    fn mebibytes_at_least_20(&mut self, key: &str) -> Result<u64, ConfError> {
        let value = self.value(key)?;
        let mib: u64 = value
            .parse()
            .map_err(|_| bad(key, value, "not a whole number of MiB"))?;
        if mib < 20 {
            return Err(bad(key, value, "must be at least 20 (MiB)"));
        }
        Ok(mib.saturating_mul(MIB))
    }

    /// `roundup_power2_divisions`: one number for every interval, or the bracketed list.
    fn roundup_divisions(&mut self, key: &str) -> Result<[u64; ROUNDUP_INTERVALS], ConfError> {
        let mut divisions = [0u64; ROUNDUP_INTERVALS];
        let first = self.value_or_bracket(key)?;
        if first != "[" {
            let value = parse_power_of_two(key, first, false)?;
            divisions = [value; ROUNDUP_INTERVALS];
            return Ok(divisions);
        }
        let mut first_entry = true;
        let mut last_index = 0usize;
        loop {
            let interval = match self.next() {
                Some("]") => break,
                Some(token) => token,
                None => return Err(ConfError::Syntax(format!("{key}: missing ']'"))),
            };
            self.expect(":", interval)?;
            let value = parse_power_of_two(key, self.value(key)?, true)?;
            if interval == ">" {
                for slot in divisions.iter_mut().skip(last_index) {
                    *slot = value;
                }
            } else {
                let start_mib: u64 = interval
                    .parse()
                    .map_err(|_| bad(key, interval, "an interval is a size in MiB or '>'"))?;
                if !start_mib.is_power_of_two() {
                    return Err(bad(key, interval, "intervals must be powers of two"));
                }
                let index = (start_mib.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                if first_entry {
                    for slot in divisions.iter_mut().take(index) {
                        *slot = value;
                    }
                    first_entry = false;
                }
                divisions[index] = value;
                last_index = index;
            }
            match self.peek() {
                Some("]") => {}
                Some(",") => self.at += 1,
                Some(other) => {
                    return Err(ConfError::Syntax(format!(
                        "{key}: expected ',' or ']' after an entry, found '{other}'"
                    )));
                }
                None => return Err(ConfError::Syntax(format!("{key}: missing ']'"))),
            }
        }
        Ok(divisions)
    }

    fn value_or_bracket(&mut self, key: &str) -> Result<&'a str, ConfError> {
        match self.next() {
            Some("[") => Ok("["),
            Some(token) if !matches!(token, "," | ":" | "]") => Ok(token),
            _ => Err(ConfError::Syntax(format!("{key} needs a value"))),
        }
    }
}

fn parse_power_of_two(key: &str, value: &str, zero_allowed: bool) -> Result<u64, ConfError> {
    let number: u64 = value
        .parse()
        .map_err(|_| bad(key, value, "not a whole number"))?;
    if (zero_allowed && number == 0) || number.is_power_of_two() {
        Ok(number)
    } else {
        Err(bad(
            key,
            value,
            "divisions must be a power of two (or 0 to turn rounding off)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_key() {
        let conf = AllocConf::parse(
            "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,\
             max_non_split_rounding_mb:64,roundup_power2_divisions:4,backend:native",
        )
        .unwrap();
        assert!(conf.rules.expandable_segments);
        assert_eq!(conf.rules.max_split_size_bytes, Some(128 * MIB));
        assert_eq!(conf.rules.garbage_collection_threshold, 0.6);
        assert_eq!(conf.rules.max_non_split_rounding_bytes, 64 * MIB);
        assert_eq!(conf.rules.roundup_power2_divisions, [4; ROUNDUP_INTERVALS]);
        assert_eq!(
            AllocConf::parse("default").unwrap().rules,
            AllocatorRules::default()
        );
        assert_eq!(AllocConf::parse("").unwrap().text, "default");
    }

    #[test]
    fn roundup_lists_follow_pytorchs_fill_rules() {
        // The first entry also covers the smaller intervals; '>' covers the intervals from the
        // last named one (which it overwrites) upward, exactly as parseRoundUpPower2Divisions.
        let conf = AllocConf::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
        let d = conf.rules.roundup_power2_divisions;
        assert_eq!(&d[..9], &[1; 9]);
        assert_eq!(d[9], 2);
        assert_eq!(&d[10..], &[8; 6]);
        let two = AllocConf::parse("roundup_power2_divisions:[>:8]").unwrap();
        assert_eq!(two.rules.roundup_power2_divisions, [8; ROUNDUP_INTERVALS]);
        let clamped = AllocConf::parse("roundup_power2_divisions:[131072:2]").unwrap();
        assert_eq!(
            clamped.rules.roundup_power2_divisions,
            [2; ROUNDUP_INTERVALS]
        );
    }

    #[test]
    fn errors_name_the_key_and_list_what_is_known() {
        let unknown = AllocConf::parse("expandable_segment:True").unwrap_err();
        let text = unknown.to_string();
        assert!(text.contains("'expandable_segment'"), "{text}");
        assert!(
            text.contains("expandable_segments (True or False)"),
            "{text}"
        );
        let small = AllocConf::parse("max_split_size_mb:8").unwrap_err();
        assert!(small.to_string().contains("at least 20"), "{small}");
        let gc = AllocConf::parse("garbage_collection_threshold:1.5").unwrap_err();
        assert!(gc.to_string().contains("between 0 and 1"), "{gc}");
        let bool_value = AllocConf::parse("expandable_segments:yes").unwrap_err();
        assert!(
            bool_value.to_string().contains("True or False"),
            "{bool_value}"
        );
        assert!(matches!(
            AllocConf::parse("roundup_power2_divisions:3"),
            Err(ConfError::BadValue { .. })
        ));
        assert!(matches!(
            AllocConf::parse("roundup_power2_divisions:[256:1"),
            Err(ConfError::Syntax(_))
        ));
        assert_eq!(
            AllocConf::parse("backend:cudaMallocAsync"),
            Err(ConfError::AsyncBackend)
        );
        assert!(matches!(
            AllocConf::parse("max_split_size_mb"),
            Err(ConfError::Syntax(_))
        ));
    }

    #[test]
    fn options_without_effect_are_kept_visible() {
        let conf = AllocConf::parse("release_lock_on_cudamalloc:True").unwrap();
        assert_eq!(conf.rules, AllocatorRules::default());
        assert_eq!(conf.without_effect, vec!["release_lock_on_cudamalloc:True"]);
    }

    #[test]
    fn a_change_overrides_only_the_keys_it_names() {
        let recorded =
            AllocConf::parse("max_split_size_mb:128,roundup_power2_divisions:4").unwrap();
        let changed = recorded.with_change("expandable_segments:True").unwrap();
        assert!(changed.rules.expandable_segments);
        assert_eq!(changed.rules.max_split_size_bytes, Some(128 * MIB));
        assert_eq!(
            changed.rules.roundup_power2_divisions,
            [4; ROUNDUP_INTERVALS]
        );
        assert_eq!(
            changed.text,
            "max_split_size_mb:128,roundup_power2_divisions:4,expandable_segments:True"
        );
        let again = recorded.with_change("max_split_size_mb:256").unwrap();
        assert_eq!(again.rules.max_split_size_bytes, Some(256 * MIB));
        // The changed key appears once, with its new value; a list stays as the user wrote it.
        assert_eq!(
            again.text,
            "roundup_power2_divisions:4,max_split_size_mb:256"
        );
        let listed = AllocConf::parse("roundup_power2_divisions:[256:1,512:2,>:8]")
            .unwrap()
            .with_change("max_split_size_mb:64")
            .unwrap();
        assert_eq!(
            listed.text,
            "roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:64"
        );
        assert_eq!(AllocConf::parse(&listed.text).unwrap().rules, listed.rules);
        let from_default = AllocConf::default_conf()
            .with_change("expandable_segments:True")
            .unwrap();
        assert_eq!(from_default.text, "expandable_segments:True");
        assert_eq!(
            AllocConf::parse(&describe_rules(&changed.rules))
                .unwrap()
                .rules,
            changed.rules
        );
    }
}
