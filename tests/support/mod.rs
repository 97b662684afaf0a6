//! Code shared by the integration tests (`tests/all`): the table of readers of outside bytes
//! (also compiled into the fuzz target), a synthetic allocator (also used by a bench), running
//! the binary and driving the app.

pub mod cli;
pub mod readers;
pub mod skip;
pub mod synthetic_allocator;
pub mod ui;

#[cfg(test)]
mod skip_tests {
    use super::skip::record_skip;

    #[test]
    fn each_skip_is_one_line_of_the_log_with_its_reason() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("skipped.txt");
        record_skip(Some(&log), "area::first", "no NVIDIA driver");
        record_skip(Some(&log), "area::second", "a driver is present");
        record_skip(None, "area::third", "not logged");
        let text = std::fs::read_to_string(&log).expect("the log was written");
        assert_eq!(
            text,
            "area::first: no NVIDIA driver\narea::second: a driver is present\n"
        );
    }
}
