//! The controller's API as the CLI sees it: a password login through Identity v3 (the token goes
//! in `X-Auth-Token` on every later request), JSON in and out, errors as one clear line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use ureq::Agent;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The controller could not be reached.
    #[error("cannot reach the controller at {url}: {detail}")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        detail: String,
    },
    /// The controller answered with an error.
    #[error("{status}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error body's message (or the body).
        message: String,
    },
    /// The CA certificate file.
    #[error("CA certificate {path}: {detail}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// A setting is missing.
    #[error("{0}")]
    Missing(String),
}

/// Who logs in where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The controller's base URL (`http://127.0.0.1:8889`).
    pub url: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
    /// The project (tenant) name.
    pub project: String,
    /// The CA that signed the controller's HTTPS certificate.
    pub ca_cert: Option<PathBuf>,
}

/// A logged-in connection.
#[derive(Clone)]
pub struct Connection {
    base: String,
    agent: Agent,
    token: Option<String>,
    /// The project the token is scoped to (its id).
    pub project_id: Option<String>,
}

fn agent(ca_cert: Option<&Path>) -> Result<Agent, ClientError> {
    agent_with(ca_cert, false)
}

fn agent_with(ca_cert: Option<&Path>, unverified: bool) -> Result<Agent, ClientError> {
    let mut tls = TlsConfig::builder()
        .disable_verification(unverified)
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
    if let Some(path) = ca_cert {
        let ca_err = |detail: String| ClientError::Ca {
            path: path.to_path_buf(),
            detail,
        };
        let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c.to_owned()),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(ca_err("no certificate in the file".into()));
        }
        tls = tls.root_certs(RootCerts::Specific(Arc::new(certs)));
    }
    Ok(Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into())
}

impl Connection {
    /// A connection without a token (for version documents and health checks).
    pub fn anonymous(url: &str, ca_cert: Option<&Path>) -> Result<Connection, ClientError> {
        Ok(Connection {
            base: url.trim_end_matches('/').to_string(),
            agent: agent(ca_cert)?,
            token: None,
            project_id: None,
        })
    }

    /// A connection that does not verify the server's certificate: only for fetching what is
    /// checked otherwise (`cumulo join` fetches the cluster CA and checks it against the SHA-256
    /// its token names).
    pub fn unverified(url: &str) -> Result<Connection, ClientError> {
        Ok(Connection {
            base: url.trim_end_matches('/').to_string(),
            agent: agent_with(None, true)?,
            token: None,
            project_id: None,
        })
    }

    /// Logs in with a password, scoped to the project.
    pub fn login(creds: &Credentials) -> Result<Connection, ClientError> {
        let mut conn = Connection::anonymous(&creds.url, creds.ca_cert.as_deref())?;
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": creds.username, "domain": {"name": "Default"}, "password": creds.password}}},
            "scope": {"project": {"name": creds.project, "domain": {"name": "Default"}}}
        }});
        let url = format!("{}/v3/auth/tokens", conn.base);
        let mut response = conn
            .agent
            .post(&url)
            .send_json(&body)
            .map_err(|e| conn.unreachable(e))?;
        let status = response.status().as_u16();
        let token = response
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = response.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(api_error(status, &text));
        }
        conn.token = Some(token.ok_or_else(|| ClientError::Api {
            status,
            message: "the login answer has no X-Subject-Token".into(),
        })?);
        conn.project_id = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["token"]["project"]["id"].as_str().map(str::to_string));
        Ok(conn)
    }

    fn unreachable(&self, e: ureq::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            detail: e.to_string(),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request; `Ok(None)` for an empty answer (204).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>, ClientError> {
        self.request_with(method, path, body, &[])
    }

    /// [`Connection::request`] with `extra` headers.
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        extra: &[(&str, &str)],
    ) -> Result<Option<Value>, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut response = match (method, body) {
            ("GET", _) => self.with(self.agent.get(&url), extra).call(),
            ("DELETE", _) => self.with(self.agent.delete(&url), extra).call(),
            ("POST", Some(b)) => self.with(self.agent.post(&url), extra).send_json(b),
            ("POST", None) => self.with(self.agent.post(&url), extra).send_empty(),
            ("PUT", Some(b)) => self.with(self.agent.put(&url), extra).send_json(b),
            ("PUT", None) => self.with(self.agent.put(&url), extra).send_empty(),
            ("PATCH", Some(b)) => self.with(self.agent.patch(&url), extra).send_json(b),
            (other, _) => {
                return Err(ClientError::Missing(format!("unsupported method {other}")));
            }
        }
        .map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(api_error(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ClientError::Api {
                status,
                message: format!("the answer is not JSON: {e}"),
            })
    }

    /// `request` with the token and the `extra` headers.
    fn with<B>(
        &self,
        request: ureq::RequestBuilder<B>,
        extra: &[(&str, &str)],
    ) -> ureq::RequestBuilder<B> {
        let mut request = self.with_token(request);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request
    }

    fn with_token<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => request.header("X-Auth-Token", t),
            None => request,
        }
    }

    /// GET, expecting a JSON body.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        Ok(self.request("GET", path, None)?.unwrap_or(Value::Null))
    }

    /// POST with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        Ok(self
            .request("POST", path, Some(body))?
            .unwrap_or(Value::Null))
    }

    /// PUT with a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        Ok(self
            .request("PUT", path, Some(body))?
            .unwrap_or(Value::Null))
    }

    /// DELETE.
    pub fn delete(&self, path: &str) -> Result<(), ClientError> {
        self.request("DELETE", path, None).map(drop)
    }
}

/// The message of an error body: OpenStack style (`{"itemNotFound": {"message": ..}}`), the
/// native `{"error": {"message": ..}}`, or the text itself.
fn api_error(status: u16, text: &str) -> ClientError {
    let message = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| {
            v.as_object().and_then(|o| {
                o.values()
                    .find_map(|inner| inner["message"].as_str().map(str::to_string))
            })
        })
        .unwrap_or_else(|| {
            let t = text.trim();
            if t.is_empty() {
                "no details".to_string()
            } else {
                t.chars().take(300).collect()
            }
        });
    ClientError::Api { status, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_give_their_message() {
        let e = api_error(
            404,
            r#"{"itemNotFound": {"code": 404, "message": "no such server"}}"#,
        );
        assert_eq!(e.to_string(), "404: no such server");
        let e = api_error(400, r#"{"error": {"code": 400, "message": "bad"}}"#);
        assert_eq!(e.to_string(), "400: bad");
        assert_eq!(api_error(502, "").to_string(), "502: no details");
        assert_eq!(api_error(500, "oops").to_string(), "500: oops");
    }
}
