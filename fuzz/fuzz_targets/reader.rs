//! One fuzz target for every reader in `tests/support/readers.rs`, chosen by the environment
//! variable `VRAMSCOPE_FUZZ_READER` (`scripts/fuzz` sets it), so a new reader needs no new target.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/readers.rs"]
#[allow(dead_code, reason = "the regression tests use the seed helpers")]
mod readers;

/// The reader named by `VRAMSCOPE_FUZZ_READER`; a missing or unknown name stops the run with the
/// list of names.
fn chosen() -> &'static readers::Reader {
    static CHOSEN: OnceLock<&'static readers::Reader> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let names: Vec<_> = readers::READERS.iter().map(|r| r.name).collect();
        let name = std::env::var("VRAMSCOPE_FUZZ_READER").unwrap_or_default();
        match readers::reader(&name) {
            Some(reader) => reader,
            None => {
                eprintln!("set VRAMSCOPE_FUZZ_READER to one of {names:?} (got {name:?})");
                std::process::exit(2);
            }
        }
    })
}

fuzz_target!(|bytes: &[u8]| {
    (chosen().read)(bytes);
});
