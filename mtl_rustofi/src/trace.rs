//! A small `tracing` subscriber of our own: events (and the spans they
//! happen in) become `opal_output` lines through [`crate::log::line`],
//! prefixed with host, pid and rank. `mtl_rustofi_verbose` sets the level:
//!
//! | verbose | events shown |
//! |---|---|
//! | 0 | none: no subscriber is installed, so every `tracing` macro stops at one relaxed load of the global maximum level (`OFF`) and formats nothing |
//! | 1 | warnings and errors |
//! | 2 | also info: provider selection, peers |
//! | 3 | also debug: rendezvous, retries |
//! | 4 and more | also trace |
//!
//! The `tracing-subscriber` crate is not used: routing lines to
//! `opal_output` with a level filter is all that is needed here, which this
//! file does without its dependency tree.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The level filter for a `mtl_rustofi_verbose` value.
pub(crate) fn level_for(verbose: i32) -> LevelFilter {
    match verbose {
        i32::MIN..=0 => LevelFilter::OFF,
        1 => LevelFilter::WARN,
        2 => LevelFilter::INFO,
        3 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// Installs the subscriber for the process when `verbose` asks for events.
/// The first installation wins (Open MPI initialises an MTL once per
/// process).
pub(crate) fn install(verbose: i32) {
    let max = level_for(verbose);
    if max == LevelFilter::OFF {
        return;
    }
    let sub = OpalSubscriber {
        max,
        next_id: AtomicU64::new(1),
        spans: Mutex::new(HashMap::new()),
    };
    let _ = tracing::subscriber::set_global_default(sub);
}

struct SpanData {
    /// `name{field=value ...}`, formatted when the span is created.
    text: String,
    refs: usize,
}

struct OpalSubscriber {
    max: LevelFilter,
    next_id: AtomicU64,
    spans: Mutex<HashMap<u64, SpanData>>,
}

thread_local! {
    /// Spans entered on this thread, innermost last.
    static STACK: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Collects an event's or span's fields as `message k=v ...`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }
}

impl OpalSubscriber {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SpanData>> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Formats one output line (without the host prefix).
pub(crate) fn format_line(level: &Level, spans: &[String], message: &str, fields: &str) -> String {
    let mut s = format!("mtl_rustofi {level}");
    for (i, span) in spans.iter().enumerate() {
        s.push(if i == 0 { ' ' } else { ':' });
        s.push_str(span);
    }
    if !spans.is_empty() {
        s.push(':');
    }
    let _ = write!(s, " {message}{fields}");
    s
}

impl Subscriber for OpalSubscriber {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        *meta.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut f = Fields::default();
        attrs.record(&mut f);
        let mut text = attrs.metadata().name().to_string();
        if !f.rest.is_empty() {
            let _ = write!(text, "{{{}}}", f.rest.trim_start());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, SpanData { text, refs: 1 });
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut f = Fields::default();
        values.record(&mut f);
        if let Some(d) = self.lock().get_mut(&span.into_u64()) {
            let _ = write!(d.text, "{{{}}}", f.rest.trim_start());
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let spans: Vec<String> = STACK.with(|st| {
            let map = self.lock();
            st.borrow()
                .iter()
                .filter_map(|id| map.get(id).map(|d| d.text.clone()))
                .collect()
        });
        let body = format_line(event.metadata().level(), &spans, &f.message, &f.rest);
        crate::log::line(format!("{} {body}", crate::log::prefix()).trim_start());
    }

    fn enter(&self, span: &Id) {
        STACK.with(|st| st.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        STACK.with(|st| {
            let mut st = st.borrow_mut();
            if let Some(i) = st.iter().rposition(|&x| x == span.into_u64()) {
                st.remove(i);
            }
        });
    }

    fn clone_span(&self, id: &Id) -> Id {
        if let Some(d) = self.lock().get_mut(&id.into_u64()) {
            d.refs += 1;
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        let mut map = self.lock();
        let key = id.into_u64();
        let Some(d) = map.get_mut(&key) else {
            return false;
        };
        d.refs -= 1;
        if d.refs == 0 {
            map.remove(&key);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_maps_to_levels() {
        assert_eq!(level_for(0), LevelFilter::OFF);
        assert_eq!(level_for(1), LevelFilter::WARN);
        assert_eq!(level_for(2), LevelFilter::INFO);
        assert_eq!(level_for(3), LevelFilter::DEBUG);
        assert_eq!(level_for(9), LevelFilter::TRACE);
    }

    #[test]
    fn lines_name_their_spans() {
        let spans = ["init".to_string(), "peer{rank=3}".to_string()];
        assert_eq!(
            format_line(&Level::INFO, &spans, "added", " rail=net"),
            "mtl_rustofi INFO init:peer{rank=3}: added rail=net"
        );
        assert_eq!(
            format_line(&Level::WARN, &[], "retry", ""),
            "mtl_rustofi WARN retry"
        );
    }

    #[test]
    fn events_reach_the_subscriber_with_their_span() {
        let sub = OpalSubscriber {
            max: LevelFilter::DEBUG,
            next_id: AtomicU64::new(1),
            spans: Mutex::new(HashMap::new()),
        };
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("select", provider = "tcp");
            let _g = span.enter();
            tracing::trace!("filtered out");
            let depth = STACK.with(|s| s.borrow().len());
            assert_eq!(depth, 1);
        });
        assert_eq!(STACK.with(|s| s.borrow().len()), 0);
    }
}
