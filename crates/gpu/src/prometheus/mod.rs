//! The HTTP ends of Prometheus: [`client`] asks a server's range API (the reading and parsing
//! of its answers is the core's `source::prometheus`), [`exporter`] serves `/metrics` for
//! Prometheus to scrape.

pub mod client;
pub mod exporter;
