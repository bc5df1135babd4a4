//! The one table of the OpenStack-compatible routes. Each family (`identity`, `compute`,
//! `image`, `network`, `volume`) lists its routes in a `table()` function, one line a route:
//!
//! ```text
//! .get("/compute/v2.1/flavors", flavors::list, os("List Flavors", 200))
//! ```
//!
//! (the method, the path as axum reads it, the handler, and a [`Doc`]: the OpenStack API
//! reference's name of the operation or a summary of cumulo's own, the success status, the
//! error statuses the route adds to its family's). [`RouteTable::router`] builds the family's
//! axum router from it, and `GET /openapi-openstack.json` (`openstack_openapi.rs`) is written
//! from the same entries, so a route cannot be served without being documented, nor documented
//! without being served. To add a route, add its line to its family's `table()`.
//!
//! This module does not know what the routes do, nor their request and answer bodies: those the
//! document describes loosely (`object`).

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::routing::{MethodFilter, on};

use super::ApiState;

/// An OpenStack-compatible API, as the document groups its routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Identity v3 (Keystone).
    Identity,
    /// Compute v2.1 (Nova).
    Compute,
    /// Image v2 (Glance).
    Image,
    /// Networking v2.0 (Neutron).
    Network,
    /// Block Storage v3 (Cinder).
    Volume,
}

impl Family {
    /// The document's tag for the family's operations.
    pub fn tag(self) -> &'static str {
        match self {
            Family::Identity => "Identity v3",
            Family::Compute => "Compute v2.1",
            Family::Image => "Image v2",
            Family::Network => "Networking v2.0",
            Family::Volume => "Block Storage v3",
        }
    }

    /// The name of the family's error body schema.
    pub fn error_schema(self) -> &'static str {
        match self {
            Family::Identity | Family::Image => "KeystoneError",
            Family::Compute => "NovaFault",
            Family::Network => "NeutronError",
            Family::Volume => "CinderFault",
        }
    }

    /// Whether a request may name a microversion the family does not serve (406).
    pub fn has_microversions(self) -> bool {
        matches!(self, Family::Compute | Family::Volume)
    }
}

/// An HTTP method of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    /// GET (which also answers HEAD, without the body, unless HEAD has a route of its own).
    Get,
    /// HEAD, where OpenStack names a HEAD operation of its own.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Verb {
    /// The method as OpenAPI writes it (lower case).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Head => "head",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Head => MethodFilter::HEAD,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Patch => MethodFilter::PATCH,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// What a route's request or answer body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// None.
    Empty,
    /// A JSON object (described loosely).
    Json,
    /// A JSON patch (`application/openstack-images-v2.1-json-patch`).
    JsonPatch,
    /// Bytes (`application/octet-stream`).
    Octets,
}

/// What the document says of one route: see [`os`] and [`own`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doc {
    /// One line saying what it does.
    pub summary: &'static str,
    /// The OpenStack API reference's name of the operation, if it has one.
    pub name: Option<&'static str>,
    /// The API reference's names of the operations the request body chooses between (an
    /// `action` route), if any.
    pub actions: &'static [&'static str],
    /// The success status.
    pub status: u16,
    /// Other success statuses, where the request chooses (an action, an image without data).
    pub also: &'static [u16],
    /// Error statuses this route may answer besides its family's ([`Doc::errors`]).
    pub errors: &'static [u16],
    /// Answers without a token.
    pub public: bool,
    /// The request body; `None`: JSON for POST, PUT and PATCH, none otherwise.
    pub request: Option<Body>,
    /// The answer's body on success; `None`: JSON unless the status is 204.
    pub answer: Option<Body>,
    /// The request body has no size limit (it is streamed).
    pub streamed: bool,
}

/// A route the OpenStack API reference names `name` (also its summary), answering `status`.
pub const fn os(name: &'static str, status: u16) -> Doc {
    Doc {
        name: Some(name),
        ..own(name, status)
    }
}

/// A route the API reference does not name (version documents, cumulo's additions), answering
/// `status`.
pub const fn own(summary: &'static str, status: u16) -> Doc {
    Doc {
        summary,
        name: None,
        actions: &[],
        status,
        also: &[],
        errors: &[],
        public: false,
        request: None,
        answer: None,
        streamed: false,
    }
}

impl Doc {
    /// The route may also answer these error statuses (besides 401 and 403 for a route that
    /// needs a token, 404 for one with path parameters, 400 and 413 for one with a JSON body,
    /// and 406 in a family with microversions).
    pub const fn errors(self, errors: &'static [u16]) -> Doc {
        Doc { errors, ..self }
    }

    /// The route may also succeed with these statuses.
    pub const fn also(self, also: &'static [u16]) -> Doc {
        Doc { also, ..self }
    }

    /// The route needs no token.
    pub const fn public(self) -> Doc {
        Doc {
            public: true,
            ..self
        }
    }

    /// The API reference's names of the operations the body chooses between.
    pub const fn actions(self, actions: &'static [&'static str]) -> Doc {
        Doc { actions, ..self }
    }

    /// The request body.
    pub const fn request(self, body: Body) -> Doc {
        Doc {
            request: Some(body),
            ..self
        }
    }

    /// The answer's body on success.
    pub const fn answer(self, body: Body) -> Doc {
        Doc {
            answer: Some(body),
            ..self
        }
    }

    /// The request body is streamed, with no size limit (`DefaultBodyLimit::disable`).
    pub const fn streamed(self) -> Doc {
        Doc {
            streamed: true,
            ..self
        }
    }
}

/// One route of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Its family.
    pub family: Family,
    /// Its method.
    pub verb: Verb,
    /// Its path, with parameters as `{name}` (axum's and OpenAPI's syntax).
    pub path: &'static str,
    /// What the document says of it.
    pub doc: Doc,
}

impl Route {
    /// The names of its path parameters, in order.
    pub fn params(&self) -> Vec<&'static str> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect()
    }

    /// The request body.
    pub fn request(&self) -> Body {
        self.doc.request.unwrap_or(match self.verb {
            Verb::Post | Verb::Put | Verb::Patch => Body::Json,
            Verb::Get | Verb::Head | Verb::Delete => Body::Empty,
        })
    }

    /// The success answer's body.
    pub fn answer(&self) -> Body {
        self.doc
            .answer
            .unwrap_or(match (self.verb, self.doc.status) {
                (Verb::Head, _) | (_, 204) => Body::Empty,
                _ => Body::Json,
            })
    }

    /// Every error status it may answer, in order.
    pub fn errors(&self) -> Vec<u16> {
        let mut errors = self.doc.errors.to_vec();
        if !self.doc.public {
            errors.extend([401, 403]);
        }
        if !self.params().is_empty() {
            errors.push(404);
        }
        if self.request() == Body::Json || self.request() == Body::JsonPatch {
            errors.extend([400, 413]);
        }
        if self.family.has_microversions() {
            errors.push(406);
        }
        errors.sort_unstable();
        errors.dedup();
        errors
    }
}

/// A family's routes: the axum router and the entries it was built from.
pub struct RouteTable {
    family: Family,
    router: Router<ApiState>,
    routes: Vec<Route>,
}

impl RouteTable {
    /// An empty table of `family`.
    pub fn new(family: Family) -> RouteTable {
        RouteTable {
            family,
            router: Router::new(),
            routes: Vec::new(),
        }
    }

    /// The entries, in the order they were added.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The router serving every entry (the family adds its layers).
    pub fn router(self) -> Router<ApiState> {
        self.router
    }

    /// Adds `verb path` served by `handler`. Panics for a method and path added twice (as axum
    /// does), which every test that builds the router finds.
    fn add<H, T>(mut self, verb: Verb, path: &'static str, handler: H, doc: Doc) -> RouteTable
    where
        H: Handler<T, ApiState>,
        T: 'static,
    {
        assert!(
            !self.routes.iter().any(|r| r.verb == verb && r.path == path),
            "{} {path} is in the route table twice",
            verb.as_str()
        );
        let mut method = on(verb.filter(), handler);
        if doc.streamed {
            method = method.layer(DefaultBodyLimit::disable());
        }
        self.router = self.router.route(path, method);
        self.routes.push(Route {
            family: self.family,
            verb,
            path,
            doc,
        });
        self
    }

    /// `GET path`.
    pub fn get<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Get, path, h, doc)
    }

    /// `HEAD path` (a GET route answers HEAD already: this is for a HEAD operation of its own).
    pub fn head<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Head, path, h, doc)
    }

    /// `POST path`.
    pub fn post<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Post, path, h, doc)
    }

    /// `PUT path`.
    pub fn put<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Put, path, h, doc)
    }

    /// `PATCH path`.
    pub fn patch<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Patch, path, h, doc)
    }

    /// `DELETE path`.
    pub fn delete<H: Handler<T, ApiState>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        doc: Doc,
    ) -> Self {
        self.add(Verb::Delete, path, h, doc)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// axum gives no list of its routes, so the guarantee that the OpenStack document lists
    /// every route served rests on every route going through a [`RouteTable`](super::RouteTable):
    /// no file of the five families calls axum's router methods itself, and the API's root
    /// router adds only the routes named here besides merging the families'.
    #[test]
    fn openstack_routes_are_only_added_through_the_table() {
        let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        let mut files = Vec::new();
        for family in ["identity", "compute", "image", "network", "volume"] {
            sources(&api.join(family), &mut files);
        }
        assert!(files.len() > 30, "{files:?}");
        let forbidden = [
            "Router::new",
            ".route(",
            ".route_service(",
            ".nest(",
            ".nest_service(",
            ".merge(",
            ".fallback(",
            "routing::",
        ];
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for word in forbidden {
                assert!(
                    !text.contains(word),
                    "{} calls axum's `{word}`: add the route to its family's table() instead",
                    file.display()
                );
            }
        }
        // The root router: the families, the native API (its own utoipa document), and these.
        let root = std::fs::read_to_string(api.join("mod.rs")).unwrap();
        let added: Vec<&str> = root
            .split(".route(\"")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap())
            .collect();
        assert_eq!(
            added,
            ["/openapi.json", "/openapi-openstack.json", "/metrics"]
        );
        assert!(!root.contains(".nest("), "the root router nests nothing");
    }
}
