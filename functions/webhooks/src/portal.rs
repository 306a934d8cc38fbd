//! The webhook portal (contract section 14): `GET /portal` and its script modules, stylesheet
//! and icon below `/portal/`, served to anyone without a key (the page asks for one and
//! sends it to the API itself). The files are compiled into the function, so serving them
//! reads nothing, at start or per request, and a cold start does no more work than before.

use career_core::aws::api::{self, ApiError};
use lambda_http::http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};

/// The page's own path; its other files lie below it.
const PAGE: &str = "/portal";

struct File {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const SCRIPT: &str = "text/javascript; charset=utf-8";
const STYLE: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

const FILES: [File; 6] = [
    File { path: PAGE, content_type: HTML, body: include_str!("../portal/index.html") },
    File { path: "/portal/portal.js", content_type: SCRIPT, body: include_str!("../portal/portal.js") },
    File { path: "/portal/api.js", content_type: SCRIPT, body: include_str!("../portal/api.js") },
    File { path: "/portal/chart.js", content_type: SCRIPT, body: include_str!("../portal/chart.js") },
    File { path: "/portal/portal.css", content_type: STYLE, body: include_str!("../portal/portal.css") },
    File { path: "/portal/icon.svg", content_type: SVG, body: include_str!("../portal/icon.svg") },
];

/// On every answer below `/portal`, errors included. The page loads and contacts only its
/// own origin, runs no inline script, cannot be framed, and sends no referrer (its address
/// may have carried a key in its fragment, which browsers never send, but say so anyway).
const SECURITY_HEADERS: [(&str, &str); 3] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];

/// True for `/portal` and every path below it (API Gateway's `/portal` and `/portal/{proxy+}`).
pub fn serves(path: &str) -> bool {
    path.strip_prefix(PAGE).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The file at the request's path (GET, or HEAD for its headers alone); 404 for a path
/// that is no file, 405 for another method.
pub fn answer(request: &Request) -> Response<Body> {
    let mut response = api::serve_without_key(request, || {
        let file = FILES.iter().find(|file| file.path == request.uri().path()).ok_or(ApiError::NotFound)?;
        let body = match *request.method() {
            Method::GET => Body::Text(file.body.to_owned()),
            Method::HEAD => Body::Empty,
            _ => return Err(ApiError::MethodNotAllowed { allow: "GET, HEAD".into() }),
        };
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(file.content_type));
        // Revalidated on each load, so a deployment's new page never meets an old script.
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(response)
    });
    for (name, value) in SECURITY_HEADERS {
        response.headers_mut().insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_page_and_what_lies_below_it_only() {
        for path in ["/portal", "/portal/", "/portal/portal.js", "/portal/nothing"] {
            assert!(serves(path), "{path}");
        }
        for path in ["/portals", "/portal.js", "/api/v1/webhooks", "/", "/api/v1/portal"] {
            assert!(!serves(path), "{path}");
        }
    }

    /// What the page and its modules load must be files served here: a reference to any
    /// other path would be a 404 (or, with an absolute address, another origin the CSP refuses).
    #[test]
    fn every_file_the_page_and_its_modules_load_is_served() {
        let served: Vec<&str> = FILES.iter().map(|file| file.path).collect();
        let page = FILES[0].body;
        for reference in ["portal/icon.svg", "portal/portal.css", "portal/portal.js"] {
            assert!(page.contains(&format!("\"{reference}\"")), "index.html does not load {reference}");
        }
        let imports = FILES
            .iter()
            .filter(|file| file.path.ends_with(".js"))
            .flat_map(|file| file.body.lines().filter_map(|line| line.strip_prefix("import ")))
            .map(|import| import.rsplit_once(" from './").expect("a relative import").1.trim_end_matches("';"));
        for module in imports {
            assert!(served.contains(&format!("/portal/{module}").as_str()), "{module} is imported but not served");
        }
    }

    /// The CSP refuses inline script and style; the page must not need them.
    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let page = FILES[0].body.to_ascii_lowercase();
        assert_eq!(page.matches("<script").count(), page.matches("<script type=\"module\" src=").count());
        for inline in ["<style", " style=", " onclick=", " onload=", " onsubmit=", "javascript:"] {
            assert!(!page.contains(inline), "index.html has {inline}");
        }
    }
}
