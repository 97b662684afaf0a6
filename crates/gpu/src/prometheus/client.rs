//! A blocking client for Prometheus's HTTP API (`/api/v1/query_range`), with bearer-token or
//! basic authentication and HTTPS through rustls. Callers run it off the UI thread.
//!
//! Errors say which server and which query: a user who mistyped a selector sees Prometheus's own
//! parse error next to the query that caused it.

use std::time::Duration;

use base64::Engine as _;

use vramscope_core::model::UnixMs;
use vramscope_core::source::prometheus::api::{self, PrometheusError, RangeApi, RangeSeries};

/// How long one request may take before it is given up (a day of a thousand GPUs is a few
/// seconds of server time per chunk; a hung server must not hang vramscope).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer read: a chunk of a 1,000-GPU fleet is tens of MB; beyond this the server is
/// asked for too much at once.
const MAX_ANSWER_BYTES: u64 = 1 << 30;

/// How to authenticate to the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    #[default]
    None,
    /// `Authorization: Bearer <token>` (Grafana Cloud, OpenShift, most proxies).
    Bearer(String),
    /// HTTP basic authentication (Prometheus's own `web.yml`, nginx in front).
    Basic { user: String, password: String },
}

/// A connection to one Prometheus server.
pub struct PrometheusClient {
    base_url: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl PrometheusClient {
    /// A client for the server at `url` (`http://host:9090`, `https://…/prometheus`).
    /// `ca_cert_pem` replaces the built-in roots (Mozilla's) for servers with a private CA.
    pub fn new(
        url: &str,
        auth: Auth,
        ca_cert_pem: Option<(&str, &[u8])>,
    ) -> Result<Self, PrometheusError> {
        let base_url = url.trim().trim_end_matches('/').to_owned();
        let bad = |why: &str| PrometheusError::BadUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let rest = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
            .ok_or_else(|| bad("it must start with http:// or https://"))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(bad("no host"));
        }
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some((file, pem)) = ca_cert_pem {
            let certificate = ureq::tls::Certificate::from_pem(pem).map_err(|err| {
                PrometheusError::BadCaCert {
                    file: file.to_owned(),
                    why: err.to_string(),
                }
            })?;
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&[certificate]));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(format!("vramscope/{}", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build()
            .into();
        let authorization = match auth {
            Auth::None => None,
            Auth::Bearer(token) => Some(format!("Bearer {}", token.trim())),
            Auth::Basic { user, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
        };
        Ok(PrometheusClient {
            base_url,
            agent,
            authorization,
        })
    }
}

impl RangeApi for PrometheusClient {
    fn server(&self) -> &str {
        &self.base_url
    }

    fn query_range(
        &self,
        query: &str,
        start_ms: UnixMs,
        end_ms: UnixMs,
        step_ms: i64,
    ) -> Result<Vec<RangeSeries>, PrometheusError> {
        let (status, body) = self.get(
            "/api/v1/query_range",
            &[
                ("query", query.to_owned()),
                ("start", seconds(start_ms)),
                ("end", seconds(end_ms)),
                ("step", seconds(step_ms.max(1))),
            ],
            query,
        )?;
        api::read_range_answer(&self.base_url, query, status, &body)
    }

    fn metric_names(
        &self,
        start_ms: UnixMs,
        end_ms: UnixMs,
        series_match: Option<&str>,
    ) -> Result<Vec<String>, PrometheusError> {
        let mut params = vec![("start", seconds(start_ms)), ("end", seconds(end_ms))];
        let what = match series_match {
            Some(selector) => {
                params.push(("match[]", selector.to_owned()));
                selector
            }
            None => api::METRIC_NAMES,
        };
        let (status, body) = self.get("/api/v1/label/__name__/values", &params, what)?;
        api::read_metric_names(&self.base_url, what, status, &body)
    }
}

impl PrometheusClient {
    /// Sends a GET to `path` with `params` and returns the status and body; `what` names the
    /// request in errors (the query, or the endpoint).
    fn get(
        &self,
        path: &str,
        params: &[(&str, String)],
        what: &str,
    ) -> Result<(u16, String), PrometheusError> {
        let url = format!("{}{path}", self.base_url);
        let mut request = self.agent.get(&url);
        for (key, value) in params {
            request = request.query(*key, value);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        let unreachable = |detail: String| PrometheusError::Unreachable {
            server: self.base_url.clone(),
            detail,
        };
        let mut response = request.call().map_err(|err| unreachable(err.to_string()))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|err| unreachable(format!("the answer could not be read: {err}")))?;
        if status == 401 || status == 403 {
            return Err(PrometheusError::Denied {
                server: self.base_url.clone(),
                status,
                query: what.to_owned(),
            });
        }
        Ok((status, body))
    }
}

/// Unix milliseconds as the API's decimal seconds.
fn seconds(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_scheme_or_host_are_refused() {
        for bad in ["prometheus:9090", "http://", "ftp://x"] {
            match PrometheusClient::new(bad, Auth::None, None) {
                Err(err) => assert!(err.to_string().starts_with(bad), "{err}"),
                Ok(_) => panic!("{bad} was accepted"),
            }
        }
        let client = PrometheusClient::new("https://example.org/prom/", Auth::None, None);
        assert_eq!(
            client.ok().map(|c| c.server().to_owned()).as_deref(),
            Some("https://example.org/prom")
        );
    }
}
