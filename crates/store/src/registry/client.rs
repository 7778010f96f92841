//! One registry's HTTP session over `ureq`: the `/v2/` URLs, authentication
//! (anonymous first; on a 401, basic credentials or a bearer token fetched
//! from the challenge's realm with the session's scopes), and retries with
//! exponential backoff on transient failures (connection errors, 408, 429, 5xx).

use super::auth::{self, Challenge, Credentials};
use super::RegistryError;
use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;
use ureq::http::{self, Response};
use url::Url;

/// What a request sends.
pub(crate) enum Payload<'a> {
    Empty,
    Bytes(&'a [u8]),
    /// `len` bytes of a file from `offset`, counted on `progress`.
    File {
        path: &'a Path,
        offset: u64,
        len: u64,
        progress: Option<&'a indicatif::ProgressBar>,
    },
}

pub(crate) struct Call<'a> {
    pub method: http::Method,
    pub url: Url,
    pub headers: Vec<(&'static str, String)>,
    pub body: Payload<'a>,
    /// For error messages: "manifest `x`", "blob sha256:...".
    pub what: String,
    /// Resend on transient failures (false where a failed attempt may have changed state).
    pub retry: bool,
}

impl<'a> Call<'a> {
    pub fn new(method: http::Method, url: Url, what: impl Into<String>) -> Call<'a> {
        Call { method, url, headers: Vec::new(), body: Payload::Empty, what: what.into(), retry: true }
    }
    pub fn header(mut self, k: &'static str, v: impl Into<String>) -> Self {
        self.headers.push((k, v.into()));
        self
    }
    pub fn body(mut self, b: Payload<'a>) -> Self {
        self.body = b;
        self
    }
    pub fn no_retry(mut self) -> Self {
        self.retry = false;
        self
    }
}

pub struct Client {
    agent: ureq::Agent,
    pub registry: String,
    base: Url,
    plain_http: bool,
    creds: Option<Option<Credentials>>,
    authorization: Option<String>,
    challenge: Option<Challenge>,
    scopes: BTreeSet<String>,
    max_attempts: u32,
    backoff: Duration,
}

/// Attempts per request on transient failures (`QUARRY_REGISTRY_ATTEMPTS`, default 4).
pub(crate) fn max_attempts() -> u32 {
    std::env::var("QUARRY_REGISTRY_ATTEMPTS").ok().and_then(|v| v.parse().ok()).unwrap_or(4u32).max(1)
}

/// How much of an error body to read.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

impl Client {
    /// A session with `registry` (`host[:port]`); `plain_http` speaks HTTP instead of HTTPS.
    pub fn new(registry: &str, plain_http: bool) -> Result<Client, RegistryError> {
        let scheme = if plain_http { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{registry}/")).map_err(|e| RegistryError::Protocol {
            registry: registry.to_string(),
            what: "registry address".into(),
            message: e.to_string(),
        })?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Blob GETs may redirect to storage with signed URLs: credentials
            // go only to the registry's own host.
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(600)))
            .user_agent(format!("quarry/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let max_attempts = max_attempts();
        Ok(Client {
            agent,
            registry: registry.to_string(),
            base,
            plain_http,
            creds: None,
            authorization: None,
            challenge: None,
            scopes: BTreeSet::new(),
            max_attempts,
            backoff: Duration::from_millis(250),
        })
    }

    /// Ask for `repository:NAME:ACTIONS` in the next token; a new scope
    /// drops the current token so the next request authenticates again.
    pub fn add_scope(&mut self, repository: &str, actions: &str) {
        let scope = format!("repository:{repository}:{actions}");
        if self.scopes.insert(scope) && self.authorization.as_deref().is_some_and(|a| a.starts_with("Bearer ")) {
            self.authorization = None;
        }
    }

    /// `/v2/<path>` on this registry.
    pub fn url(&self, path: &str) -> Url {
        self.base.join(&format!("v2/{path}")).expect("registry paths are valid URL paths")
    }

    /// A `Location` header, absolute or relative to the registry.
    pub fn resolve(&self, location: &str, what: &str) -> Result<Url, RegistryError> {
        self.base.join(location).map_err(|e| self.protocol(what, format!("bad Location `{location}`: {e}")))
    }

    pub fn protocol(&self, what: &str, message: impl Into<String>) -> RegistryError {
        RegistryError::Protocol { registry: self.registry.clone(), what: what.to_string(), message: message.into() }
    }

    /// A TLS handshake with a server that answers in plain HTTP (or a bad
    /// certificate): retrying cannot help.
    fn is_tls_problem(e: &ureq::Error) -> bool {
        let text = e.to_string().to_lowercase();
        matches!(e, ureq::Error::Tls(_))
            || ["tls", "invalidcontenttype", "certificate", "handshake"].iter().any(|w| text.contains(w))
    }

    fn connect_error(&self, e: &ureq::Error) -> RegistryError {
        let hint = if !self.plain_http && Self::is_tls_problem(e) {
            "; if the registry speaks plain HTTP (no TLS), use --plain-http (bases on 127.0.0.1/localhost use plain HTTP; list other hosts in QUARRY_PLAIN_HTTP_REGISTRIES)".to_string()
        } else {
            String::new()
        };
        RegistryError::Connect { registry: self.registry.clone(), message: e.to_string(), hint }
    }

    fn is_transient(e: &ureq::Error) -> bool {
        matches!(e, ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::Timeout(_))
            && !Self::is_tls_problem(e)
    }

    fn build(&self, call: &Call<'_>) -> Result<http::Request<ureq::SendBody<'static>>, RegistryError> {
        let mut b = http::Request::builder().method(call.method.clone()).uri(call.url.as_str());
        for (k, v) in &call.headers {
            b = b.header(*k, v);
        }
        if let Some(a) = &self.authorization {
            b = b.header("authorization", a);
        }
        let body = match &call.body {
            Payload::Empty => {
                if matches!(call.method, http::Method::PUT | http::Method::PATCH | http::Method::POST) {
                    b = b.header("content-length", "0");
                }
                ureq::SendBody::none()
            }
            Payload::Bytes(data) => {
                b = b.header("content-length", data.len().to_string());
                ureq::SendBody::from_owned_reader(std::io::Cursor::new(data.to_vec()))
            }
            Payload::File { path, offset, len, progress } => {
                let io =
                    |what: &str, err| RegistryError::Io { path: path.display().to_string(), what: what.into(), err };
                let mut f = std::fs::File::open(path).map_err(|e| io("cannot open", e))?;
                f.seek(SeekFrom::Start(*offset)).map_err(|e| io("cannot seek", e))?;
                b = b.header("content-length", len.to_string());
                let r = f.take(*len);
                match progress {
                    Some(p) => ureq::SendBody::from_owned_reader(p.wrap_read(r)),
                    None => ureq::SendBody::from_owned_reader(r),
                }
            }
        };
        b.body(body).map_err(|e| self.protocol(&call.what, e.to_string()))
    }

    /// Send a call: authenticate when challenged, retry transient failures.
    /// Returns every response that is not a 401 or a transient failure,
    /// whatever its status; `check` turns unexpected statuses into errors.
    pub(crate) fn send(&mut self, call: &Call<'_>) -> Result<Response<ureq::Body>, RegistryError> {
        let mut attempt = 0u32;
        let mut authenticated_now = false;
        loop {
            attempt += 1;
            let req = self.build(call)?;
            let last = !call.retry || attempt >= self.max_attempts;
            let resp = match self.agent.run(req) {
                Ok(r) => r,
                Err(e) if Self::is_transient(&e) && !last => {
                    self.sleep(attempt);
                    continue;
                }
                Err(e) => return Err(self.connect_error(&e)),
            };
            let status = resp.status().as_u16();
            if status == 401 {
                if authenticated_now {
                    return Err(self.unauthorized(&call.what, resp));
                }
                self.authenticate(&call.what, resp)?;
                authenticated_now = true;
                attempt -= 1;
                continue;
            }
            if matches!(status, 408 | 429 | 500 | 502 | 503 | 504) && !last {
                self.sleep(attempt);
                continue;
            }
            return Ok(resp);
        }
    }

    fn sleep(&self, attempt: u32) {
        std::thread::sleep(self.backoff * 2u32.pow(attempt.saturating_sub(1).min(6)));
    }

    fn docker_config_display() -> String {
        auth::docker_config_path().map(|p| p.display().to_string()).unwrap_or_else(|| "~/.docker/config.json".into())
    }

    fn unauthorized(&self, what: &str, resp: Response<ureq::Body>) -> RegistryError {
        RegistryError::Unauthorized {
            registry: self.registry.clone(),
            what: what.to_string(),
            message: error_text(resp),
            config: Self::docker_config_display(),
        }
    }

    fn credentials(&mut self) -> Result<Option<Credentials>, RegistryError> {
        if self.creds.is_none() {
            self.creds = Some(auth::lookup(&self.registry)?);
        }
        Ok(self.creds.clone().flatten())
    }

    /// Answer a 401's challenge: set basic credentials, or fetch a bearer token.
    fn authenticate(&mut self, what: &str, resp: Response<ureq::Body>) -> Result<(), RegistryError> {
        let challenges: Vec<Challenge> = resp
            .headers()
            .get_all("www-authenticate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(auth::parse_challenge)
            .collect();
        if let Some(c) = challenges.iter().find(|c| c.scheme == "bearer") {
            if let Some(scope) = c.params.get("scope") {
                for s in scope.split(' ').filter(|s| !s.is_empty()) {
                    self.scopes.insert(s.to_string());
                }
            }
            self.challenge = Some(c.clone());
            return self.fetch_token(what);
        }
        if challenges.iter().any(|c| c.scheme == "basic") {
            if let Some(creds) = self.credentials()? {
                self.authorization = Some(creds.basic_header());
                return Ok(());
            }
            let mut e = self.unauthorized(what, resp);
            if let RegistryError::Unauthorized { message, .. } = &mut e {
                message.push_str("; no credentials for this registry in the docker config");
            }
            return Err(e);
        }
        Err(self.unauthorized(what, resp))
    }

    fn fetch_token(&mut self, what: &str) -> Result<(), RegistryError> {
        let challenge = self.challenge.clone().expect("set by the caller");
        let realm =
            challenge.params.get("realm").ok_or_else(|| self.protocol(what, "the bearer challenge has no realm"))?;
        let mut url = Url::parse(realm).map_err(|e| self.protocol(what, format!("bad token realm `{realm}`: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = challenge.params.get("service") {
                q.append_pair("service", s);
            }
            for s in &self.scopes {
                q.append_pair("scope", s);
            }
        }
        let creds = self.credentials()?;
        let mut attempt = 0;
        let resp = loop {
            attempt += 1;
            let mut b = http::Request::builder().method("GET").uri(url.as_str());
            if let Some(c) = &creds {
                b = b.header("authorization", c.basic_header());
            }
            let req = b.body(ureq::SendBody::none()).map_err(|e| self.protocol(what, e.to_string()))?;
            match self.agent.run(req) {
                Ok(r) if matches!(r.status().as_u16(), 429 | 500 | 502 | 503 | 504) && attempt < self.max_attempts => {
                    self.sleep(attempt)
                }
                Ok(r) => break r,
                Err(e) if Self::is_transient(&e) && attempt < self.max_attempts => self.sleep(attempt),
                Err(e) => {
                    return Err(self.protocol(what, format!("cannot reach the token service {}: {e}", url.as_str())));
                }
            }
        };
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            let message = format!(
                "the token service refused {} ({status})",
                if creds.is_some() { "the credentials" } else { "anonymous access" }
            );
            return Err(RegistryError::Unauthorized {
                registry: self.registry.clone(),
                what: what.to_string(),
                message,
                config: Self::docker_config_display(),
            });
        }
        if status != 200 {
            return Err(self.protocol(
                what,
                format!("the token service {} answered {status}: {}", url.as_str(), error_text(resp)),
            ));
        }
        let body =
            read_limited(resp, ERROR_BODY_LIMIT * 16).map_err(|e| self.protocol(what, format!("token reply: {e}")))?;
        let token = auth::token_from_reply(&body)
            .ok_or_else(|| self.protocol(what, "the token service's reply has no token"))?;
        self.authorization = Some(format!("Bearer {token}"));
        Ok(())
    }

    /// Turn an unexpected status into a clear error.
    pub(crate) fn status_error(&self, what: &str, resp: Response<ureq::Body>) -> RegistryError {
        let status = resp.status().as_u16();
        let registry = self.registry.clone();
        let what = what.to_string();
        let message = error_text(resp);
        match status {
            401 => RegistryError::Unauthorized { registry, what, message, config: Self::docker_config_display() },
            403 => RegistryError::Denied { registry, what, message },
            404 => RegistryError::NotFound { registry, what, message },
            _ => RegistryError::Status { registry, what, status, message },
        }
    }
}

/// Read at most `limit` bytes of a body.
pub(crate) fn read_limited(resp: Response<ureq::Body>, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    resp.into_body().into_reader().take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// The registry's error JSON (`{"errors":[{"code","message"}]}`) as text,
/// else the status line.
fn error_text(resp: Response<ureq::Body>) -> String {
    let status = resp.status();
    let body = read_limited(resp, ERROR_BODY_LIMIT).unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorEntry {
        code: Option<String>,
        message: Option<String>,
    }
    if let Ok(e) = serde_json::from_slice::<Errors>(&body) {
        let parts: Vec<String> = e
            .errors
            .iter()
            .map(|x| match (&x.code, &x.message) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.clone(),
                (None, Some(m)) => m.clone(),
                (None, None) => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect();
        if !parts.is_empty() {
            return format!("{}: {}", status.as_u16(), parts.join("; "));
        }
    }
    format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""))
}
