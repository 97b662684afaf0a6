//! A blocking client for Prometheus's HTTP API (`/api/v1/query_range`), with bearer-token or
//! basic authentication and HTTPS through rustls. Callers run it off the UI thread.
//!
//! Errors say which server and which query: a user who mistyped a selector sees Prometheus's own
//! parse error next to the query that caused it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::model::UnixMs;

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

/// Why a request failed. Every message names the server; those about a query quote it.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error(
        "{url}: not a Prometheus address ({why}); give the server's base URL, e.g. http://prometheus:9090"
    )]
    BadUrl { url: String, why: String },
    #[error("{file}: cannot read the CA certificate: {why}")]
    BadCaCert { file: String, why: String },
    #[error("cannot reach Prometheus at {server}: {detail}")]
    Unreachable { server: String, detail: String },
    #[error(
        "Prometheus at {server} answered {status} to the query `{query}`: access denied; give a token with --bearer-token-file or a user with --user USER:PASSWORD"
    )]
    Denied {
        server: String,
        status: u16,
        query: String,
    },
    #[error("Prometheus at {server} refused the query `{query}` ({status} {error_type}): {error}")]
    Refused {
        server: String,
        status: u16,
        error_type: String,
        error: String,
        query: String,
    },
    #[error(
        "{server} answered the query `{query}` with something that is not Prometheus's API ({detail}); is this the Prometheus server's base URL?"
    )]
    NotPrometheus {
        server: String,
        query: String,
        detail: String,
    },
}

/// One series of a range query: its labels (without `__name__`) and its points, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RangeSeries {
    pub labels: BTreeMap<String, String>,
    /// (time in Unix ms, value); NaN and infinite values are left out.
    pub points: Vec<(UnixMs, f64)>,
}

/// A connection to one Prometheus server.
pub struct PrometheusClient {
    base_url: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

/// The API's answer envelope, with a matrix as its data.
#[derive(Deserialize)]
struct MatrixAnswer<'a> {
    status: &'a str,
    #[serde(default, borrow)]
    data: Option<MatrixData<'a>>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct MatrixData<'a> {
    #[serde(rename = "resultType")]
    result_type: &'a str,
    #[serde(borrow)]
    result: Vec<MatrixSeries<'a>>,
}

#[derive(Deserialize)]
struct MatrixSeries<'a> {
    metric: BTreeMap<String, String>,
    #[serde(default, borrow)]
    values: Vec<(f64, &'a str)>,
}

/// The error envelope alone, for answers that are not a matrix.
#[derive(Deserialize)]
struct ErrorAnswer {
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
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
                crate::report::html::base64(format!("{user}:{password}").as_bytes())
            )),
        };
        Ok(PrometheusClient {
            base_url,
            agent,
            authorization,
        })
    }

    /// The server's base URL, for messages.
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// `/api/v1/query_range` from `start_ms` to `end_ms` (inclusive) every `step_ms`. The caller
    /// keeps the number of steps within Prometheus's 11,000 points per series.
    pub fn query_range(
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
        let not_prometheus = |detail: String| PrometheusError::NotPrometheus {
            server: self.base_url.clone(),
            query: query.to_owned(),
            detail,
        };
        let answer: MatrixAnswer<'_> = match serde_json::from_str(&body) {
            Ok(answer) => answer,
            Err(err) => {
                // An error envelope with a shape we did not expect still carries the message.
                if let Some(refusal) = self.refusal(status, &body, query) {
                    return Err(refusal);
                }
                return Err(not_prometheus(format!(
                    "HTTP {status}, {err}; it begins {:?}",
                    body.chars().take(80).collect::<String>()
                )));
            }
        };
        if answer.status != "success" {
            return Err(PrometheusError::Refused {
                server: self.base_url.clone(),
                status,
                error_type: answer.error_type.unwrap_or_default(),
                error: answer.error.unwrap_or_else(|| "no message".to_owned()),
                query: query.to_owned(),
            });
        }
        let data = answer
            .data
            .ok_or_else(|| not_prometheus("a success without data".to_owned()))?;
        if data.result_type != "matrix" {
            return Err(not_prometheus(format!(
                "a {} instead of a matrix",
                data.result_type
            )));
        }
        Ok(data
            .result
            .into_iter()
            .map(|series| {
                let mut labels = series.metric;
                labels.remove("__name__");
                let points = series
                    .values
                    .into_iter()
                    .filter_map(|(t_secs, value)| {
                        let value: f64 = value.parse().ok()?;
                        value
                            .is_finite()
                            .then_some(((t_secs * 1000.0).round() as UnixMs, value))
                    })
                    .collect();
                RangeSeries { labels, points }
            })
            .collect())
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

    /// The error of an answer that is not a success, or `None` when the body is no error envelope.
    fn refusal(&self, status: u16, body: &str, what: &str) -> Option<PrometheusError> {
        let ErrorAnswer { error, error_type } = serde_json::from_str::<ErrorAnswer>(body).ok()?;
        Some(PrometheusError::Refused {
            server: self.base_url.clone(),
            status,
            error_type: error_type.unwrap_or_default(),
            error: error?,
            query: what.to_owned(),
        })
    }

    /// Every metric name with samples between `start_ms` and `end_ms`, so that queries for
    /// exporters the server does not scrape can be skipped. With `series_match` (a series
    /// selector, `match[]` of the API) only the names of the series it selects: the server parses
    /// it here, so a selector it refuses is reported with the selector quoted even when the range
    /// holds no GPU series to query.
    pub fn metric_names(
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
            None => "the list of metric names (/api/v1/label/__name__/values)",
        };
        let (status, body) = self.get("/api/v1/label/__name__/values", &params, what)?;
        #[derive(Deserialize)]
        struct NamesAnswer {
            status: String,
            #[serde(default)]
            data: Vec<String>,
        }
        match serde_json::from_str::<NamesAnswer>(&body) {
            Ok(answer) if answer.status == "success" => Ok(answer.data),
            _ => Err(self.refusal(status, &body, what).unwrap_or_else(|| {
                PrometheusError::NotPrometheus {
                    server: self.base_url.clone(),
                    query: what.to_owned(),
                    detail: format!(
                        "HTTP {status}; it begins {:?}",
                        body.chars().take(80).collect::<String>()
                    ),
                }
            })),
        }
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
            client.ok().map(|c| c.url().to_owned()).as_deref(),
            Some("https://example.org/prom")
        );
    }
}
