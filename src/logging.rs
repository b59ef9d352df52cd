//! Log output: the format (`--log-format text|json`), colour only on a terminal, the filter
//! that keeps credentials out, and the request id a request's span carries.
//!
//! A request's id lives in its tracing span (`request_id`), not in a task-local: the span is
//! what follows the request into spawned work and across the actor hop, so the id is read back
//! from the span wherever it is needed (`current_request_id`, to forward it to another node).
//! Installing the subscriber is the binary's business; tests and benchmarks that run the
//! service in-process install none.

use std::io::IsTerminal;
use tracing::Level;
use tracing::span::{Attributes, Id};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The span field that carries a request's id.
pub const REQUEST_ID_FIELD: &str = "request_id";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people: one line per event, coloured only when stdout is a terminal.
    #[default]
    Text,
    /// For a log pipeline: one JSON object per line, with the fields of the spans it
    /// happened in (`span`, `spans`), among them `request_id`.
    Json,
}

/// Targets whose detail-level output can carry credentials, and the most they may log
/// whatever `RUST_LOG` asks: sea-orm's trace spans record its `ConnectOptions`, whose URL holds
/// the database password (and, were its `debug-print` feature ever on, its statements with
/// their bound values: keys, secrets); sqlx's statement and connection logging the same. A
/// filter on top of `RUST_LOG` rather than a default of it, because `RUST_LOG=trace` (or
/// `sqlx=trace`) must not undo it.
const CAPPED_TARGETS: [(&str, Level); 2] = [("sea_orm", Level::INFO), ("sqlx", Level::WARN)];

/// Installs the process's subscriber: lines to stdout in `format`, filtered by `RUST_LOG`
/// (default `info`) and capped by `CAPPED_TARGETS`.
pub fn init(format: LogFormat) {
    let requested = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn,sea_orm=warn".into());
    let caps = CAPPED_TARGETS.into_iter().fold(
        Targets::new().with_default(LevelFilter::TRACE),
        |targets, (target, level)| targets.with_target(target, level),
    );
    let filter = requested.and(caps);
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stdout().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(RequestIds)
        .with(lines.with_filter(filter))
        .init();
}

/// The id of the request whose span (or a span inside it) is current, if the installed
/// subscriber keeps them (`init`).
pub fn current_request_id() -> Option<String> {
    tracing::Span::current()
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
            let span = registry.span(id)?;
            span.scope().find_map(|span| {
                span.extensions()
                    .get::<RequestId>()
                    .map(|found| found.0.clone())
            })
        })
        .flatten()
}

/// A span's `request_id`, kept in the span's extensions by `RequestIds`.
struct RequestId(String);

/// Keeps the `request_id` of every span that records one, for `current_request_id`.
struct RequestIds;

impl<S> Layer<S> for RequestIds
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.fields().field(REQUEST_ID_FIELD).is_none() {
            return;
        }
        let mut visitor = RequestIdVisitor(None);
        attrs.record(&mut visitor);
        if let (Some(request_id), Some(span)) = (visitor.0, ctx.span(id)) {
            span.extensions_mut().insert(RequestId(request_id));
        }
    }
}

struct RequestIdVisitor(Option<String>);

impl tracing::field::Visit for RequestIdVisitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == REQUEST_ID_FIELD {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == REQUEST_ID_FIELD {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_id_is_read_from_the_innermost_request_span() {
        let subscriber = tracing_subscriber::registry().with(RequestIds);
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(current_request_id(), None, "outside any request");
            let request = tracing::info_span!("request", request_id = "abc-123");
            let _entered = request.enter();
            tracing::info_span!("apply").in_scope(|| {
                assert_eq!(current_request_id().as_deref(), Some("abc-123"));
            });
        });
    }
}
