//! The HTTP API's routes as template.yaml declares them: each function's `HttpApi` events.
//! A request takes the route API Gateway would choose: the one whose path matches in full,
//! else the one with a greedy path variable (`{proxy+}`) whose path is the longest, else
//! `$default`; among routes of one path, the request's method before `ANY`.

use std::cmp::Reverse;

use anyhow::{bail, Context};
use lambda_http::http::Method;
use serde_yaml::Value;

use crate::template::{scalar, Template};

/// The properties of an `HttpApi` event the gateway evaluates; any other is an error, not
/// ignored. `ApiId` is not compared: the template has one HTTP API.
const KNOWN: &[&str] = &["ApiId", "Path", "Method", "PayloadFormatVersion"];

/// The payload the gateway builds (`lambda_request`), and SAM's default for an HTTP API.
const PAYLOAD_FORMAT: &str = "2.0";

/// The route table, each route leading to a `T` (what the gateway runs for it).
pub struct Routes<T> {
    routes: Vec<Route<T>>,
}

struct Route<T> {
    /// `None` for `ANY`.
    method: Option<Method>,
    path: RoutePath,
    target: T,
}

#[derive(Debug, PartialEq)]
enum RoutePath {
    Exact(String),
    /// `/a/{proxy+}`, kept as `/a/`: one segment or more below `/a`.
    Below(String),
    Default,
}

impl RoutePath {
    fn parse(path: &str) -> anyhow::Result<Self> {
        if path == "$default" {
            return Ok(Self::Default);
        }
        let (fixed, greedy) = match path.rfind("/{") {
            Some(at) if path.ends_with("+}") => (&path[..=at], true),
            _ => (path, false),
        };
        if !fixed.starts_with('/') || fixed.contains(['{', '}']) {
            bail!("path {path}: the local gateway routes exact paths, one greedy variable at the end and $default");
        }
        Ok(if greedy { Self::Below(fixed.to_owned()) } else { Self::Exact(fixed.to_owned()) })
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(exact) => path == exact,
            Self::Below(prefix) => path.strip_prefix(prefix.as_str()).is_some_and(|rest| !rest.is_empty()),
            Self::Default => true,
        }
    }
}

impl<T> Routes<T> {
    /// The `HttpApi` events of every function of `template`, each function's target given by
    /// `target` (an error for a function the gateway cannot run).
    pub fn of(template: &Template, mut target: impl FnMut(&str) -> anyhow::Result<T>) -> anyhow::Result<Self> {
        let mut routes: Vec<Route<T>> = Vec::new();
        for function in template.resources_of("AWS::Serverless::Function") {
            let function = function.logical_id;
            for (name, properties) in template.events(function, "HttpApi")? {
                let route =
                    route(properties, || target(function)).with_context(|| format!("{function}'s event {name}"))?;
                if routes.iter().any(|other| other.method == route.method && other.path == route.path) {
                    bail!("{function}'s event {name}: another event has its method and path");
                }
                routes.push(route);
            }
        }
        Ok(Self { routes })
    }

    /// What the route of a request for `method` and `path` leads to; `None` when no route
    /// matches (API Gateway answers 404 then).
    pub fn find(&self, method: &Method, path: &str) -> Option<&T> {
        let matching = self
            .routes
            .iter()
            .filter(|route| route.method.as_ref().is_none_or(|own| own == method) && route.path.matches(path));
        let chosen = matching.min_by_key(|route| {
            let path = match &route.path {
                RoutePath::Exact(_) => (0, Reverse(0)),
                RoutePath::Below(prefix) => (1, Reverse(prefix.len())),
                RoutePath::Default => (2, Reverse(0)),
            };
            (path, route.method.is_none())
        });
        chosen.map(|route| &route.target)
    }
}

fn route<T>(properties: &Value, target: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<Route<T>> {
    for (property, _) in properties.as_mapping().into_iter().flatten() {
        let property = property.as_str().unwrap_or_default();
        if !KNOWN.contains(&property) {
            bail!("the local gateway does not evaluate {property}");
        }
    }
    let text = |name: &str| properties.get(name).and_then(scalar);
    if let Some(format) = text("PayloadFormatVersion").filter(|format| format != PAYLOAD_FORMAT) {
        bail!("PayloadFormatVersion {format}: the local gateway builds {PAYLOAD_FORMAT} requests only");
    }
    let path = RoutePath::parse(&text("Path").context("no Path")?)?;
    let method = match text("Method").context("no Method")?.to_ascii_uppercase() {
        any if any == "ANY" => None,
        method => Some(Method::from_bytes(method.as_bytes()).with_context(|| format!("Method {method}"))?),
    };
    Ok(Route { method, path, target: target()? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{function, TEMPLATE};

    fn routes(template: &str) -> Routes<String> {
        Routes::of(&Template::parse(template).unwrap(), |function| Ok(function.to_owned())).unwrap()
    }

    fn function_for<'a>(routes: &'a Routes<String>, method: Method, path: &str) -> Option<&'a str> {
        routes.find(&method, path).map(String::as_str)
    }

    /// Each `HttpApi` event of the shipped template (its path, and a request path it alone
    /// matches), in the template's order.
    const SHIPPED: &[(&str, &str, &str)] = &[
        (function::ALERTS, "/api/v1/alerts", "/api/v1/alerts"),
        (function::ALERTS, "$default", "/nowhere"),
        (function::DATA_SHARING, "/api/v1/data-sharing", "/api/v1/data-sharing"),
        (function::WEBHOOKS, "/api/v1/webhooks", "/api/v1/webhooks"),
        (function::WEBHOOKS, "/api/v1/webhooks/{proxy+}", "/api/v1/webhooks/rotate-secret"),
        (function::WEBHOOKS, "/portal", "/portal"),
        (function::WEBHOOKS, "/portal/{proxy+}", "/portal/app.js"),
    ];

    #[test]
    fn each_route_of_the_template_leads_to_its_function_and_no_other_route_is_served() {
        let shipped = routes(TEMPLATE);
        assert_eq!(shipped.routes.len(), SHIPPED.len(), "the template's routes are SHIPPED's");
        for (function, _, request) in SHIPPED {
            for method in [Method::GET, Method::PUT, Method::DELETE] {
                assert_eq!(function_for(&shipped, method, request), Some(*function), "{request}");
            }
        }
        for (index, (function, path, request)) in SHIPPED.iter().enumerate() {
            // The event's path moved elsewhere in the template: its request goes where the
            // other routes send it, and the new path to the function.
            let declared = format!("Path: {path}\n");
            assert_eq!(TEMPLATE.matches(&declared).count(), 1, "{declared}");
            let moved = TEMPLATE.replacen(&declared, &format!("Path: /moved{index}\n"), 1);
            let moved = routes(&moved);
            assert_eq!(function_for(&moved, Method::GET, &format!("/moved{index}")), Some(*function));
            let now = function_for(&moved, Method::GET, request);
            let expected = match *path {
                "$default" => None,
                _ => Some(function::ALERTS),
            };
            assert_eq!(now, expected, "{request} once {path} is no route");
        }
    }

    #[test]
    fn the_most_specific_route_wins() {
        let template = "Resources:\n  A:\n    Type: AWS::Serverless::Function\n    Properties:\n      Events:\n";
        let event = |name: &str, method: &str, path: &str| {
            format!("        {name}:\n          Type: HttpApi\n          Properties: {{Method: {method}, Path: '{path}'}}\n")
        };
        let template = [
            template.to_owned(),
            event("Any", "ANY", "/a"),
            event("Get", "get", "/a"),
            event("Below", "ANY", "/a/{proxy+}"),
            event("FurtherBelow", "ANY", "/a/b/{proxy+}"),
            event("Default", "ANY", "$default"),
        ]
        .concat();
        // Each route leads to its event's place in the template.
        let mut events = 0..;
        let routes = Routes::of(&Template::parse(&template).unwrap(), |_| Ok(events.next().unwrap())).unwrap();
        let name = |method: Method, path: &str| routes.find(&method, path).copied();
        assert_eq!(name(Method::GET, "/a"), Some(1), "the method before ANY");
        assert_eq!(name(Method::POST, "/a"), Some(0));
        assert_eq!(name(Method::GET, "/a/x"), Some(2), "the exact path before the greedy one");
        assert_eq!(name(Method::GET, "/a/b/c"), Some(3), "the longer greedy path");
        assert_eq!(name(Method::GET, "/a/"), Some(4), "a greedy variable takes one segment or more");
        assert_eq!(name(Method::GET, "/ab"), Some(4));
    }

    #[test]
    fn what_the_gateway_cannot_route_is_an_error_naming_it() {
        for (from, to, named) in [
            ("Path: /portal\n", "Path: /portal/{file}\n", "/portal/{file}"),
            ("PayloadFormatVersion: \"2.0\"\n", "PayloadFormatVersion: \"1.0\"\n", "1.0"),
            ("Path: /portal\n", "Path: /portal\n            Auth: {Authorizer: NONE}\n", "Auth"),
            ("Path: /portal\n", "Path: /api/v1/data-sharing\n", "another event"),
        ] {
            let template = Template::parse(&TEMPLATE.replacen(from, to, 1)).unwrap();
            let error = Routes::of(&template, |_| Ok(())).map(|_| ()).unwrap_err();
            assert!(format!("{error:#}").contains(named), "{error:#}");
        }
        let refused = Routes::of(&Template::shipped(), |function| match function {
            function::WEBHOOKS => bail!("no handler for {function}"),
            _ => Ok(()),
        });
        let error = refused.map(|_| ()).unwrap_err();
        assert!(format!("{error:#}").contains("no handler for WebhooksFunction"), "{error:#}");
    }
}
