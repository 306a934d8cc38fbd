//! W3C Trace Context (contract section 19): the trace of the change that caused an event,
//! carried with each of its deliveries and continued by each attempt as a span of its own.
//!
//! Incoming values (a request's `traceparent`, `tracestate` and `X-Amzn-Trace-Id` headers, a
//! changed item's `traceparent` and `tracestate` attributes) are parsed once, here, by the
//! rules of the W3C Recommendation (Trace Context Level 1). One that does not parse is
//! ignored, never an error: the event then starts a trace of its own.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::random;

/// The sampled flag, the only one Level 1 defines; the others are sent as zero.
const SAMPLED: u8 = 0x01;
/// `00-` + 32 + `-` + 16 + `-` + 2 characters.
const TRACEPARENT_LEN: usize = 55;
/// At most this many list members; a longer `tracestate` is discarded whole.
const MAX_TRACESTATE_MEMBERS: usize = 32;
/// The spec asks to propagate at least 512 characters of `tracestate`; a longer one is
/// dropped rather than cut (which entries to cut is the owner's choice, not ours).
const MAX_TRACESTATE_LEN: usize = 512;

/// 16 bytes, not all zero: the id every span of one trace shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

/// 8 bytes, not all zero: one span (an operation) within a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanId([u8; 8]);

impl TraceId {
    fn generate() -> Self {
        TraceId(nonzero_random())
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl SpanId {
    /// A new span id from the OS random number generator.
    pub fn generate() -> Self {
        SpanId(nonzero_random())
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// Random bytes that are not all zero (the spec's invalid value).
fn nonzero_random<const N: usize>() -> [u8; N] {
    loop {
        let bytes = random::random_bytes::<N>();
        if bytes.iter().any(|b| *b != 0) {
            return bytes;
        }
    }
}

/// `2 * N` lowercase hex digits (the spec's HEXDIGLC) as bytes, unless all zero.
fn lowercase_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut bytes = [0u8; N];
    hex::decode_to_slice(text, &mut bytes).ok()?;
    bytes.iter().any(|b| *b != 0).then_some(bytes)
}

/// A `traceparent`: the trace, the span that caused what carries it, and the sampled flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub parent_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// A `traceparent` header or attribute. Version `00` is exactly 55 characters; a later
    /// version (not `ff`) is read as the spec asks, by the fields of `00` that it starts
    /// with. Anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim_matches([' ', '\t']);
        let fields = match hex_byte(text.get(..2)?)? {
            0xff => return None,
            0 => Some(text).filter(|text| text.len() == TRACEPARENT_LEN)?,
            _ => text
                .get(..TRACEPARENT_LEN)
                .filter(|_| matches!(text.as_bytes().get(TRACEPARENT_LEN), None | Some(b'-')))?,
        };
        let dashes = [2, 35, 52].iter().all(|at| fields.as_bytes()[*at] == b'-');
        (fields.is_ascii() && dashes).then_some(())?;
        Some(TraceParent {
            trace_id: TraceId(lowercase_hex(&fields[3..35])?),
            parent_id: SpanId(lowercase_hex(&fields[36..52])?),
            sampled: hex_byte(&fields[53..])? & SAMPLED != 0,
        })
    }

    /// API Gateway's `X-Amzn-Trace-Id` (`Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=1`),
    /// whose root is a W3C trace id written in two parts. A header without `Parent` (an HTTP
    /// API sends only `Root`) gets a parent id of its own to stand for the request; without
    /// `Sampled` the trace counts as sampled, as a trace the service starts does.
    pub fn from_amzn_trace_id(text: &str) -> Option<Self> {
        let field = |name: &str| {
            text.split(';').find_map(|part| part.trim().strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        };
        let root = field("Root")?.strip_prefix("1-")?;
        let (time, unique) = root.split_once('-')?;
        (time.len() == 8).then_some(())?;
        let trace_id = TraceId(lowercase_hex(&format!("{time}{unique}"))?);
        let parent_id = match field("Parent") {
            Some(parent) => SpanId(lowercase_hex(parent)?),
            None => SpanId::generate(),
        };
        Some(TraceParent { trace_id, parent_id, sampled: field("Sampled") != Some("0") })
    }

    /// A new trace, sampled: the service records a span of every attempt of its deliveries.
    pub fn start() -> Self {
        TraceParent { trace_id: TraceId::generate(), parent_id: SpanId::generate(), sampled: true }
    }

    /// The `traceparent` of a span of this trace: the value sent for it, whose parent it is.
    pub fn child(&self, span_id: SpanId) -> Self {
        TraceParent { parent_id: span_id, ..*self }
    }
}

/// A two-digit lowercase hex field of `traceparent` (the version or the flags).
fn hex_byte(text: &str) -> Option<u8> {
    lowercase_hex::<1>(text).map(|[byte]| byte).or_else(|| (text == "00").then_some(0))
}

impl fmt::Display for TraceParent {
    /// Always version `00`, whatever version it was read from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = if self.sampled { SAMPLED } else { 0 };
        write!(f, "00-{}-{}-{flags:02x}", self.trace_id.hex(), self.parent_id.hex())
    }
}

impl Serialize for TraceParent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TraceParent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TraceParent::parse(&text).ok_or_else(|| serde::de::Error::custom("not a traceparent"))
    }
}

/// A `tracestate`: the vendors' list of `key=value` members, passed on unchanged. One that
/// breaks the spec's grammar, has more than 32 members, repeats a key or is longer than 512
/// characters is not kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceState(String);

impl TraceState {
    /// The members of one or more `tracestate` values (several headers join with commas).
    /// Empty members and the blanks around members are dropped.
    pub fn parse(text: &str) -> Option<Self> {
        let members: Vec<&str> =
            text.split(',').map(|member| member.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()).collect();
        if members.is_empty() || members.len() > MAX_TRACESTATE_MEMBERS {
            return None;
        }
        let mut keys = Vec::with_capacity(members.len());
        for member in &members {
            let (key, value) = member.split_once('=')?;
            if !is_key(key) || !is_value(value) || keys.contains(&key) {
                return None;
            }
            keys.push(key);
        }
        let joined = members.join(",");
        (joined.len() <= MAX_TRACESTATE_LEN).then_some(TraceState(joined))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for TraceState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TraceState::parse(&text).ok_or_else(|| serde::de::Error::custom("not a tracestate"))
    }
}

/// `simple-key` (lcalpha, then up to 255 of lcalpha, digits, `_-*/`) or `tenant@system`.
fn is_key(key: &str) -> bool {
    let rest = |text: &str, max: usize| {
        text.len() <= max && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    match key.split_once('@') {
        None => key.bytes().next().is_some_and(|b| b.is_ascii_lowercase()) && rest(&key[1..], 255),
        Some((tenant, system)) => {
            tenant.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && rest(&tenant[1..], 240)
                && system.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
                && rest(&system[1..], 13)
        }
    }
}

/// Up to 256 printable ASCII characters but `,` and `=` (the member was trimmed, so its value
/// ends in no space).
fn is_value(value: &str) -> bool {
    let printable = |b: u8| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=';
    (1..=256).contains(&value.len()) && value.bytes().all(printable)
}

/// The trace a delivery belongs to: the change's `traceparent` (its parent id is the span
/// that made the change) and its `tracestate`, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    #[serde(rename = "traceparent")]
    pub parent: TraceParent,
    #[serde(rename = "tracestate", default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TraceState>,
}

impl TraceContext {
    /// The context of incoming `traceparent` and `tracestate` values; `tracestate` goes only
    /// with a valid `traceparent`, as the spec asks. `None` when `traceparent` is absent or
    /// does not parse.
    pub fn of(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        Some(TraceContext { parent, state: tracestate.and_then(TraceState::parse) })
    }

    /// A new trace, with no `tracestate`.
    pub fn start() -> Self {
        TraceContext { parent: TraceParent::start(), state: None }
    }

    /// The headers a delivery sent as the span `span_id` carries (contract section 19), for
    /// a subscription that asked for them.
    pub fn headers(&self, span_id: SpanId) -> Vec<(&'static str, String)> {
        let mut headers = vec![("traceparent", self.parent.child(span_id).to_string())];
        headers.extend(self.state.as_ref().map(|state| ("tracestate", state.as_str().to_owned())));
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_of_version_00_reads_and_writes_back_the_same() {
        let parsed = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(parsed.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.parent_id.hex(), "00f067aa0ba902b7");
        assert!(parsed.sampled);
        assert_eq!(parsed.to_string(), EXAMPLE);
        let unsampled = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled);
        assert_eq!(TraceParent::parse(&format!(" {EXAMPLE}\t")), Some(parsed), "blanks around it are no part of it");
    }

    #[test]
    fn flags_other_than_sampled_are_sent_as_zero() {
        let other = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09").unwrap();
        assert!(other.sampled);
        assert!(other.to_string().ends_with("-01"), "{other}");
        let unsampled = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe").unwrap();
        assert!(unsampled.to_string().ends_with("-00"), "{unsampled}");
    }

    #[test]
    fn a_later_version_is_read_by_the_fields_of_00_and_sent_as_00() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(TraceParent::parse(later).unwrap().to_string(), EXAMPLE);
        let longer = format!("{later}-what-the-future-adds");
        assert_eq!(TraceParent::parse(&longer).unwrap().to_string(), EXAMPLE);
        assert_eq!(TraceParent::parse(&format!("{later}x")), None, "a longer one continues with a dash");
    }

    #[test]
    fn a_traceparent_that_breaks_a_rule_is_none() {
        for bad in [
            "",
            "00",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902g7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01€",
            "€€-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_amazon_trace_id_is_the_same_trace_in_w3c_form() {
        let full = TraceParent::from_amzn_trace_id(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        );
        assert_eq!(full.unwrap().to_string(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        let unsampled = TraceParent::from_amzn_trace_id("Sampled=0;Root=1-5759e988-bd862e3fe1be46a994272793");
        assert!(!unsampled.unwrap().sampled);
        let root_only = TraceParent::from_amzn_trace_id("Root=1-6b093886-29ec148cead50263f4d6d235").unwrap();
        assert_eq!(root_only.trace_id.hex(), "6b09388629ec148cead50263f4d6d235");
        assert!(root_only.sampled);
        for bad in [
            "",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e98-8bd862e3fe1be46a994272793",
            "Root=1-5759e988-bd862e3fe1be46a99427279",
            "Root=1-00000000-000000000000000000000000",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=xyz",
            "Self=1-5759e988-bd862e3fe1be46a994272793",
        ] {
            assert_eq!(TraceParent::from_amzn_trace_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_started_trace_and_its_spans_have_fresh_ids() {
        let (a, b) = (TraceParent::start(), TraceParent::start());
        assert_ne!(a.trace_id, b.trace_id);
        assert!(a.sampled);
        let span = SpanId::generate();
        let child = a.child(span);
        assert_eq!((child.trace_id, child.parent_id, child.sampled), (a.trace_id, span, a.sampled));
        assert_eq!(TraceParent::parse(&child.to_string()), Some(child));
    }

    #[test]
    fn a_tracestate_is_kept_when_it_follows_the_grammar() {
        let state = TraceState::parse(" rojo=00f067aa0ba902b7 ,, congo=t61rcWkgMzE,tenant1@vendor=a b").unwrap();
        assert_eq!(state.as_str(), "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,tenant1@vendor=a b");
        let members: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        assert!(TraceState::parse(&members.join(",")).is_some());
        for bad in [
            String::new(),
            " , ".into(),
            "Rojo=1".into(),
            "1abc=1".into(),
            "rojo".into(),
            "rojo=".into(),
            "rojo=a=b".into(),
            "rojo=a\tb".into(),
            "rojo=1,rojo=2".into(),
            "rojo=caf\u{e9}".into(),
            "t@Vendor=1".into(),
            "t@vendor12345678901234=1".into(),
            format!("{},k32=v", members.join(",")),
            format!("a={}", "x".repeat(257)),
            (0..3).map(|i| format!("k{i}={}", "x".repeat(200))).collect::<Vec<_>>().join(","),
        ] {
            assert_eq!(TraceState::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_context_keeps_tracestate_only_beside_a_valid_traceparent() {
        let context = TraceContext::of(Some(EXAMPLE), Some("rojo=1")).unwrap();
        assert_eq!(context.state.as_ref().map(TraceState::as_str), Some("rojo=1"));
        assert_eq!(TraceContext::of(Some("00-zz"), Some("rojo=1")), None);
        assert_eq!(TraceContext::of(None, Some("rojo=1")), None);
        assert_eq!(TraceContext::of(Some(EXAMPLE), Some("Rojo=1")).unwrap().state, None, "a bad tracestate only");
        let span = SpanId::generate();
        let headers = context.headers(span);
        assert_eq!(
            headers,
            [
                ("traceparent", format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", span.hex())),
                ("tracestate", "rojo=1".to_owned())
            ]
        );
        let json = serde_json::to_value(&context).unwrap();
        assert_eq!(json, serde_json::json!({"traceparent": EXAMPLE, "tracestate": "rojo=1"}));
        assert_eq!(serde_json::from_value::<TraceContext>(json).unwrap(), context);
        assert_eq!(TraceContext::start().headers(span).len(), 1, "no tracestate of its own");
    }
}
