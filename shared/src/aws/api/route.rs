//! Routing: the [`Resource`] tables the functions declare, and which operation of them a
//! request asks for (404 for an unknown path, 405 with the allowed methods for another
//! method).

use lambda_http::http::Method;

use super::ApiError;
use crate::credentials::Scope;

/// One path and the operations served on it: `(method, required scope, operation)`. A
/// function serves one or more of them.
pub struct Resource<Op: 'static> {
    pub path: &'static str,
    pub operations: &'static [(Method, Scope, Op)],
}

/// The operation at `path` for `method`, with its method and required scope.
pub(super) fn route_of<Op: Copy>(
    resources: &[Resource<Op>],
    method: &Method,
    path: &str,
) -> Result<(Method, Scope, Op), ApiError> {
    let resource = resources.iter().find(|resource| resource.path == path).ok_or(ApiError::NotFound)?;
    let found = resource.operations.iter().find(|(allowed, _, _)| allowed == method);
    found.cloned().ok_or_else(|| ApiError::MethodNotAllowed {
        allow: resource.operations.iter().map(|(method, _, _)| method.as_str()).collect::<Vec<_>>().join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Op {
        List,
        Create,
        Rotate,
    }

    const RESOURCES: [Resource<Op>; 2] = [
        Resource {
            path: "/api/v1/things",
            operations: &[
                (Method::GET, Scope::ReadWebhooks, Op::List),
                (Method::POST, Scope::WriteWebhooks, Op::Create),
            ],
        },
        Resource { path: "/api/v1/things/rotate", operations: &[(Method::POST, Scope::WriteWebhooks, Op::Rotate)] },
    ];

    #[test]
    fn a_request_finds_its_operation_or_the_right_refusal() {
        let cases = [
            (Method::GET, "/api/v1/things", Ok((Scope::ReadWebhooks, Op::List))),
            (Method::POST, "/api/v1/things", Ok((Scope::WriteWebhooks, Op::Create))),
            (Method::POST, "/api/v1/things/rotate", Ok((Scope::WriteWebhooks, Op::Rotate))),
            (Method::DELETE, "/api/v1/things", Err(("method_not_allowed", Some("GET, POST")))),
            (Method::GET, "/api/v1/things/rotate", Err(("method_not_allowed", Some("POST")))),
            // Paths match exactly: no prefix, trailing slash, other version or case.
            (Method::GET, "/api/v1/things/", Err(("not_found", None))),
            (Method::GET, "/api/v2/things", Err(("not_found", None))),
            (Method::GET, "/API/v1/things", Err(("not_found", None))),
            (Method::GET, "/api/v1", Err(("not_found", None))),
        ];
        for (method, path, expected) in cases {
            let found = route_of(&RESOURCES, &method, path);
            let found = match found {
                Ok((found_method, scope, op)) => {
                    assert_eq!(found_method, method);
                    Ok((scope, op))
                }
                Err(ApiError::MethodNotAllowed { allow }) => Err(("method_not_allowed", Some(allow))),
                Err(other) => Err((other.code(), None)),
            };
            let expected = expected.map_err(|(code, allow)| (code, allow.map(str::to_owned)));
            assert_eq!(found, expected, "{method} {path}");
        }
    }
}
