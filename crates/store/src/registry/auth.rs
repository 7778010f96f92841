//! Registry credentials and challenges: basic credentials from the user's
//! docker config (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`:
//! `auths` base64 entries, `credHelpers` and `credsStore` helpers), and the
//! `WWW-Authenticate` challenges that start the bearer token flow.

use super::RegistryError;
use base64::Engine;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A user name and password (or token) for one registry.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <hidden>)", self.username)
    }
}

impl Credentials {
    pub fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))
    }
}

#[derive(serde::Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The docker config file quarry reads credentials from.
pub fn docker_config_path() -> Option<PathBuf> {
    match std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
        Some(d) => Some(PathBuf::from(d).join("config.json")),
        None => dirs::home_dir().map(|h| h.join(".docker/config.json")),
    }
}

/// `https://host/v1/` and `host` name the same registry in docker configs.
fn normalize_key(key: &str) -> &str {
    let k = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

/// Credentials for `registry` from the docker config, if any.
pub fn lookup(registry: &str) -> Result<Option<Credentials>, RegistryError> {
    let Some(path) = docker_config_path() else {
        return Ok(None);
    };
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RegistryError::Config { path: path.display().to_string(), message: e.to_string() }),
    };
    let cfg: DockerConfig = serde_json::from_slice(&text).map_err(|e| RegistryError::Config {
        path: path.display().to_string(),
        message: format!("not valid JSON: {e}"),
    })?;
    let config_err = |message: String| RegistryError::Config { path: path.display().to_string(), message };
    let helper_err = |source| RegistryError::Helper { path: path.display().to_string(), source };

    if let Some(helper) = cfg.cred_helpers.get(registry) {
        return run_helper(helper, registry).map_err(helper_err);
    }
    for (key, entry) in &cfg.auths {
        if normalize_key(key) != registry {
            continue;
        }
        if let Some(a) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(a.trim())
                .map_err(|e| config_err(format!("`auths.{key}.auth` is not base64: {e}")))?;
            let raw = String::from_utf8(raw).map_err(|_| config_err(format!("`auths.{key}.auth` is not UTF-8")))?;
            let (u, p) = raw
                .split_once(':')
                .ok_or_else(|| config_err(format!("`auths.{key}.auth` must encode `user:password`")))?;
            return Ok(Some(Credentials { username: u.to_string(), password: p.to_string() }));
        }
        if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
            return Ok(Some(Credentials { username: u.clone(), password: p.clone() }));
        }
    }
    if let Some(store) = &cfg.creds_store {
        return run_helper(store, registry).map_err(helper_err);
    }
    Ok(None)
}

/// Why a credential helper gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("cannot run credential helper `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("credential helper `{program}`: {source}")]
    Wait { program: String, source: std::io::Error },
    #[error("credential helper `{program}` answered: {source}")]
    Reply { program: String, source: serde_json::Error },
}

/// Ask `docker-credential-<helper> get` (the docker credential helper protocol).
fn run_helper(helper: &str, registry: &str) -> Result<Option<Credentials>, HelperError> {
    let program = format!("docker-credential-{helper}");
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HelperError::Spawn { program: program.clone(), source })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(registry.as_bytes());
    }
    let out = child.wait_with_output().map_err(|source| HelperError::Wait { program: program.clone(), source })?;
    if !out.status.success() {
        // Helpers say "credentials not found" this way: anonymous access then.
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct HelperReply {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let r: HelperReply =
        serde_json::from_slice(&out.stdout).map_err(|source| HelperError::Reply { program, source })?;
    Ok(Some(Credentials { username: r.username, password: r.secret }))
}

/// One `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `bearer` or `basic`, lowercased.
    pub scheme: String,
    pub params: BTreeMap<String, String>,
}

/// Parse `Bearer realm="https://x/token",service="reg",scope="repository:a:pull"`.
/// Hand-written: the header grammar is small, and the crates for it are
/// unmaintained; quoted values may hold commas.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.split_once(char::is_whitespace) {
        Some((s, r)) => (s, r),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(c) if c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next().is_none() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n)
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        params.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    Some(Challenge { scheme: scheme.to_ascii_lowercase(), params })
}

/// The token in a token service's JSON reply (`token`, or OAuth2's `access_token`).
pub fn token_from_reply(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Reply {
        token: Option<String>,
        access_token: Option<String>,
    }
    let r: Reply = serde_json::from_slice(body).ok()?;
    r.token.or(r.access_token).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_challenge_with_commas_in_quotes() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token");
        assert_eq!(c.params["service"], "reg");
        assert_eq!(c.params["scope"], "repository:a/b:pull,push");
        let b = parse_challenge(r#"Basic realm="basic-realm""#).unwrap();
        assert_eq!(b.scheme, "basic");
        assert_eq!(b.params["realm"], "basic-realm");
    }

    #[test]
    fn reads_tokens() {
        assert_eq!(token_from_reply(br#"{"token":"t1"}"#).as_deref(), Some("t1"));
        assert_eq!(token_from_reply(br#"{"access_token":"t2"}"#).as_deref(), Some("t2"));
        assert_eq!(token_from_reply(br#"{}"#), None);
    }

    #[test]
    fn docker_config_keys() {
        assert_eq!(normalize_key("https://host.example:5000/v1/"), "host.example:5000");
        assert_eq!(normalize_key("host.example"), "host.example");
    }

    #[test]
    fn basic_header_is_base64() {
        let c = Credentials { username: "u".into(), password: "p:w".into() };
        assert_eq!(c.basic_header(), "Basic dTpwOnc=");
    }
}
