//! What Prometheus's HTTP API answers, read: the matrix of `/api/v1/query_range`, the metric
//! names of `/api/v1/label/__name__/values` and the error envelope, into errors that name the
//! server and quote the query. The requests are sent elsewhere (`client`, native only):
//! reading an answer is no I/O, so it compiles everywhere and is fuzzed with the other readers of
//! outside bytes (`tests/support/readers.rs`), as is [`super::reader`], which asks through
//! [`RangeApi`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::UnixMs;

/// What the errors say for the request of the metric names.
pub const METRIC_NAMES: &str = "the list of metric names (/api/v1/label/__name__/values)";

/// Answers range queries: the HTTP client, or whatever stands in for a server (the fuzzer).
pub trait RangeApi: Send {
    /// The server, for messages and the capture's host.
    fn server(&self) -> &str;

    /// Every metric name with samples between `start_ms` and `end_ms`, so that queries for
    /// exporters the server does not scrape can be skipped. With `series_match` (a series
    /// selector, `match[]` of the API) only the names of the series it selects: the server parses
    /// it here, so a selector it refuses is reported with the selector quoted even when the range
    /// holds no GPU series to query.
    fn metric_names(
        &self,
        start_ms: UnixMs,
        end_ms: UnixMs,
        series_match: Option<&str>,
    ) -> Result<Vec<String>, PrometheusError>;

    /// `/api/v1/query_range` from `start_ms` to `end_ms` (inclusive) every `step_ms`. The caller
    /// keeps the number of steps within Prometheus's 11,000 points per series.
    fn query_range(
        &self,
        query: &str,
        start_ms: UnixMs,
        end_ms: UnixMs,
        step_ms: i64,
    ) -> Result<Vec<RangeSeries>, PrometheusError>;
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

/// Reads the answer (`status`, `body`) of `server` to the range query `query`.
pub fn read_range_answer(
    server: &str,
    query: &str,
    status: u16,
    body: &str,
) -> Result<Vec<RangeSeries>, PrometheusError> {
    let not_prometheus = |detail: String| PrometheusError::NotPrometheus {
        server: server.to_owned(),
        query: query.to_owned(),
        detail,
    };
    let answer: MatrixAnswer<'_> = match serde_json::from_str(body) {
        Ok(answer) => answer,
        Err(err) => {
            // An error envelope with a shape we did not expect still carries the message.
            if let Some(refusal) = refusal(server, status, body, query) {
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
            server: server.to_owned(),
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

/// Reads the answer (`status`, `body`) of `server` to the request of the metric names; `what`
/// is that request for messages: [`METRIC_NAMES`], or the series selector it sent.
pub fn read_metric_names(
    server: &str,
    what: &str,
    status: u16,
    body: &str,
) -> Result<Vec<String>, PrometheusError> {
    #[derive(Deserialize)]
    struct NamesAnswer {
        status: String,
        #[serde(default)]
        data: Vec<String>,
    }
    match serde_json::from_str::<NamesAnswer>(body) {
        Ok(answer) if answer.status == "success" => Ok(answer.data),
        _ => Err(refusal(server, status, body, what).unwrap_or_else(|| {
            PrometheusError::NotPrometheus {
                server: server.to_owned(),
                query: what.to_owned(),
                detail: format!(
                    "HTTP {status}; it begins {:?}",
                    body.chars().take(80).collect::<String>()
                ),
            }
        })),
    }
}

/// The error of an answer that is not a success, or `None` when the body is no error envelope.
fn refusal(server: &str, status: u16, body: &str, what: &str) -> Option<PrometheusError> {
    let ErrorAnswer { error, error_type } = serde_json::from_str::<ErrorAnswer>(body).ok()?;
    Some(PrometheusError::Refused {
        server: server.to_owned(),
        status,
        error_type: error_type.unwrap_or_default(),
        error: error?,
        query: what.to_owned(),
    })
}
