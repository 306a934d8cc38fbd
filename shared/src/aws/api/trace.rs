//! The trace context of an API request, read from its headers (contract section 19).

use lambda_http::http::HeaderMap;

use crate::trace::{TraceContext, TraceParent};

impl TraceContext {
    /// The trace of an API request: its `traceparent` (with its `tracestate`), else API
    /// Gateway's `X-Amzn-Trace-Id`. A header sent twice is as none (which one counts would
    /// depend on who reads it); several `tracestate` headers are one list.
    pub fn of_request(headers: &HeaderMap) -> Option<Self> {
        let once = |name: &str| {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(value), None) => value.to_str().ok(),
                _ => None,
            }
        };
        let states: Vec<&str> = headers.get_all("tracestate").iter().filter_map(|value| value.to_str().ok()).collect();
        let state = (!states.is_empty()).then(|| states.join(","));
        TraceContext::of(once("traceparent"), state.as_deref()).or_else(|| {
            let parent = TraceParent::from_amzn_trace_id(once("x-amzn-trace-id")?)?;
            Some(TraceContext { parent, state: None })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_request_gives_its_traceparent_else_api_gateways_trace_id() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, value.parse().unwrap());
            }
            TraceContext::of_request(&map)
        };
        let amzn = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let both = headers(&[
            ("traceparent", EXAMPLE),
            ("tracestate", "a=1"),
            ("tracestate", "b=2"),
            ("x-amzn-trace-id", amzn),
        ]);
        assert_eq!(both.as_ref().map(|c| c.parent.to_string()).as_deref(), Some(EXAMPLE));
        assert_eq!(both.and_then(|c| c.state).map(|s| s.as_str().to_owned()).as_deref(), Some("a=1,b=2"));
        let fallback =
            headers(&[("traceparent", "00-nope"), ("tracestate", "a=1"), ("x-amzn-trace-id", amzn)]).unwrap();
        assert_eq!(fallback.parent.to_string(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        assert_eq!(fallback.state, None, "the tracestate went with the traceparent that was refused");
        assert_eq!(headers(&[("traceparent", EXAMPLE), ("traceparent", EXAMPLE)]), None, "sent twice");
        assert_eq!(headers(&[("tracestate", "a=1")]), None);
        assert_eq!(headers(&[]), None);
    }
}
