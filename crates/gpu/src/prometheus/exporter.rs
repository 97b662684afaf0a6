//! The `/metrics` HTTP endpoint of `vramscope exporter`.
//!
//! A fixed pool of worker threads answers requests with the page [`ExporterState`] rendered at
//! the last sample; the sampling thread is the only one that touches NVML. A scrape therefore
//! costs a lock, a reference count and a socket write, whatever the number of GPUs or the rate of
//! scrapes (`docs/benchmarks.md` measures 100 scrapes per second).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use vramscope_core::source::prometheus::exposition::CONTENT_TYPE;

/// The exporter's default port. Prometheus's list of default port allocations has no room left
/// in 9100–9999 and continues past 10000; NVIDIA's exporters use 9400 (dcgm-exporter), 9445 and
/// 9835 (community NVIDIA exporters) and 8000 (nvitop-exporter). 10640 is none of these.
pub const DEFAULT_PORT: u16 = 10640;

/// Worker threads answering scrapes: enough for a few Prometheus servers and a browser at once,
/// few enough that a flood of requests cannot take more than this many cores.
const WORKER_THREADS: usize = 2;

/// Why the endpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error(
        "--listen {given}: not an address to listen on ({why}); give HOST:PORT, e.g. 0.0.0.0:{DEFAULT_PORT}, 127.0.0.1:{DEFAULT_PORT} or [::]:{DEFAULT_PORT}"
    )]
    BadAddress { given: String, why: String },
    #[error(
        "--listen {address}: the port is already in use by another program; stop it or choose another port with --listen"
    )]
    InUse { address: String },
    #[error("--listen {address}: cannot listen there: {source}")]
    Io {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// Resolves `HOST:PORT` (also `:PORT` for every interface, as Go exporters accept).
pub fn resolve_listen_address(given: &str) -> Result<SocketAddr, ListenError> {
    let bad = |why: &str| ListenError::BadAddress {
        given: given.to_owned(),
        why: why.to_owned(),
    };
    let text = given.trim();
    let text = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    let (_, port) = text.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    port.parse::<u16>()
        .map_err(|_| bad(&format!("'{port}' is not a port number from 0 to 65535")))?;
    let mut addresses = text
        .to_socket_addrs()
        .map_err(|err| bad(&err.to_string()))?;
    addresses
        .next()
        .ok_or_else(|| bad("the host name has no address"))
}

/// The page the workers serve; replaced whole after every sample.
#[derive(Clone, Default)]
pub struct MetricsPage(Arc<Mutex<Arc<str>>>);

impl MetricsPage {
    /// Publishes a newly rendered page.
    pub fn set(&self, page: String) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::from(page);
    }

    fn get(&self) -> Arc<str> {
        Arc::clone(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A running endpoint; dropping it stops the workers.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    workers: Vec<JoinHandle<()>>,
    address: SocketAddr,
}

impl MetricsServer {
    /// Listens on `address` and serves `page` at `/metrics`.
    pub fn start(address: SocketAddr, page: MetricsPage) -> Result<Self, ListenError> {
        let listener = TcpListener::bind(address).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse {
                ListenError::InUse {
                    address: address.to_string(),
                }
            } else {
                ListenError::Io {
                    address: address.to_string(),
                    source,
                }
            }
        })?;
        let address = listener.local_addr().unwrap_or(address);
        no_delay_for_accepted(&listener);
        let server =
            tiny_http::Server::from_listener(listener, None).map_err(|err| ListenError::Io {
                address: address.to_string(),
                source: std::io::Error::other(err.to_string()),
            })?;
        let server = Arc::new(server);
        let mut workers = Vec::new();
        for worker in 0..WORKER_THREADS {
            let server = Arc::clone(&server);
            let page = page.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("vramscope-metrics-{worker}"))
                .spawn(move || serve(&server, &page));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(err) => {
                    return Err(ListenError::Io {
                        address: address.to_string(),
                        source: err,
                    });
                }
            }
        }
        Ok(MetricsServer {
            server,
            workers,
            address,
        })
    }

    /// Where the endpoint listens (with the real port when port 0 was asked for).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        for _ in &self.workers {
            self.server.unblock();
        }
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                log::error!("a metrics worker thread panicked");
            }
        }
    }
}

/// Turns Nagle's algorithm off for every connection the listener accepts (Linux copies the
/// option to accepted sockets). tiny_http writes a response's head and body separately; with
/// Nagle on, a kept-alive scraper waits for the delayed ACK, 40 ms per scrape (measured: 44 ms
/// p50 before, see docs/benchmarks.md).
fn no_delay_for_accepted(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor owned by `listener`, and a pointer to an int that lives
    // for the call, with its size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        log::warn!(
            "TCP_NODELAY could not be set on the metrics socket: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A worker: answers requests until the server is unblocked.
fn serve(server: &tiny_http::Server, page: &MetricsPage) {
    let content_type = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).ok();
    let html = tiny_http::Header::from_bytes("Content-Type", "text/html; charset=utf-8").ok();
    while let Ok(request) = server.recv() {
        let path = request.url().split('?').next().unwrap_or("");
        let method = request.method().clone();
        let is_read = matches!(method, tiny_http::Method::Get | tiny_http::Method::Head);
        let result = if !is_read {
            request.respond(
                tiny_http::Response::from_string("only GET and HEAD are served\n")
                    .with_status_code(405),
            )
        } else if path == "/metrics" {
            let body = page.get();
            let mut response = tiny_http::Response::from_data(body.as_bytes().to_vec());
            if let Some(header) = content_type.clone() {
                response.add_header(header);
            }
            request.respond(response)
        } else if path == "/" {
            let mut response = tiny_http::Response::from_string(
                "<html><head><title>vramscope exporter</title></head><body>\
                 <h1>vramscope exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n",
            );
            if let Some(header) = html.clone() {
                response.add_header(header);
            }
            request.respond(response)
        } else {
            request.respond(
                tiny_http::Response::from_string("not found: the metrics are at /metrics\n")
                    .with_status_code(404),
            )
        };
        if let Err(err) = result {
            // The scraper went away mid-answer: nothing to do but serve the next one.
            log::debug!("a metrics answer was not delivered: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_resolved_or_refused_with_the_reason() {
        assert_eq!(
            resolve_listen_address("127.0.0.1:10640").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 10640)))
        );
        assert_eq!(
            resolve_listen_address(":9999").ok(),
            Some(SocketAddr::from(([0, 0, 0, 0], 9999)))
        );
        assert!(resolve_listen_address("[::1]:10640").is_ok());
        for (bad, why) in [
            ("127.0.0.1", "no port"),
            ("127.0.0.1:70000", "'70000' is not a port number"),
            ("127.0.0.1:http", "'http' is not a port number"),
        ] {
            let message = match resolve_listen_address(bad) {
                Err(err) => err.to_string(),
                Ok(address) => panic!("{bad} resolved to {address}"),
            };
            assert!(message.contains(why), "{message}");
            assert!(
                message.starts_with(&format!("--listen {bad}:")),
                "{message}"
            );
        }
    }

    #[test]
    fn a_port_in_use_is_named_as_such() {
        let taken = match TcpListener::bind("127.0.0.1:0") {
            Ok(listener) => listener,
            Err(err) => panic!("cannot bind a loopback port for the test: {err}"),
        };
        let address = taken.local_addr().map_err(|e| e.to_string());
        let Ok(address) = address else {
            panic!("no local address");
        };
        match MetricsServer::start(address, MetricsPage::default()) {
            Err(ListenError::InUse { .. }) => {}
            Err(other) => panic!("expected 'in use', got {other}"),
            Ok(_) => panic!("listening twice on {address} succeeded"),
        }
    }
}
