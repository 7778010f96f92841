//! Engines behind TLS (`DOCKER_HOST=tcp://...` with `DOCKER_TLS_VERIFY`,
//! or a docker context with TLS material), reached as the docker CLI
//! reaches them: the engine's certificate checked against `ca.pem` alone
//! (not the system's roots), the client certificate `cert.pem` with
//! `key.pem` offered, and no session resumption, so every connection does
//! a full handshake. TLS terminators built on OpenSSL (socat's
//! `OPENSSL-LISTEN` with `verify=1`, stunnel, HAProxy) that verify clients
//! but set no session id context abort a resumed handshake with an
//! `internal_error` alert ("session id context uninitialized"); the docker
//! CLI never resumes, and neither does quarry.
//!
//! A failed connection is sorted by [`Failure::of`] so that its message
//! points at the right thing: the certificates only when verification
//! failed (here, or at the endpoint: a certificate alert); the endpoint's
//! own log when it aborted the handshake for another reason.

use super::endpoint::TlsFiles;
use bollard::{BollardRequest, Docker};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the TLS client could not be set up from the files.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read {what} `{}`: {source}", path.display())]
    Read { what: &'static str, path: PathBuf, source: rustls::pki_types::pem::Error },
    #[error("`{}` holds no {what}", path.display())]
    Empty { what: &'static str, path: PathBuf },
    #[error("the CA certificate in `{}` is not usable: {source}", path.display())]
    Ca { path: PathBuf, source: rustls::Error },
    #[error("the client certificate `{}` with the key `{}` is not usable: {source}", cert.display(), key.display())]
    Identity { cert: PathBuf, key: PathBuf, source: rustls::Error },
    #[error("the TLS client cannot be set up: {0}")]
    Client(#[source] rustls::Error),
    #[error("the TLS client cannot be set up: {0}")]
    Transport(#[source] bollard::errors::Error),
}

impl TlsSetupError {
    /// What to check: the files, but for the client itself.
    pub fn failure(&self) -> Failure {
        match self {
            TlsSetupError::Client(_) | TlsSetupError::Transport(_) => Failure::Connection,
            _ => Failure::Certificate,
        }
    }
}

/// What a failed connection to a TLS endpoint says about its cause.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Verification failed: of the engine's certificate here, or of ours
    /// at the endpoint (a certificate alert); or the files are missing.
    Certificate,
    /// The endpoint aborted the handshake with an alert not about certificates.
    Alert(AlertDescription),
    /// Another TLS error (the endpoint may not speak TLS at all).
    Protocol,
    /// No TLS error: nothing listening, reset, timed out.
    Connection,
}

impl Failure {
    /// The first TLS error in `err`'s chain of causes, sorted. Connection
    /// errors keep the rustls error inside `io::Error`s, whose `source()`
    /// skips it (as does bollard's transparent `IOError`): those are looked
    /// into with `get_ref()`.
    pub fn of(err: &(dyn std::error::Error + 'static)) -> Failure {
        let mut cause = Some(err);
        while let Some(c) = cause {
            if let Some(tls) = c.downcast_ref::<rustls::Error>() {
                return Failure::of_rustls(tls);
            }
            let io = match c.downcast_ref::<bollard::errors::Error>() {
                Some(bollard::errors::Error::IOError { err }) => Some(err),
                _ => c.downcast_ref::<std::io::Error>(),
            };
            cause = match io {
                Some(io) => io.get_ref().map(|e| e as &(dyn std::error::Error + 'static)),
                None => c.source(),
            };
        }
        Failure::Connection
    }

    fn of_rustls(err: &rustls::Error) -> Failure {
        use rustls::Error as E;
        use AlertDescription as A;
        match err {
            E::InvalidCertificate(_) | E::NoCertificatesPresented | E::InvalidCertRevocationList(_) => {
                Failure::Certificate
            }
            E::AlertReceived(
                A::NoCertificate
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::CertificateRequired
                | A::CertificateUnobtainable
                | A::BadCertificateStatusResponse
                | A::BadCertificateHashValue,
            ) => Failure::Certificate,
            E::AlertReceived(alert) => Failure::Alert(*alert),
            _ => Failure::Protocol,
        }
    }

    /// What to check, for the endpoint at `url` with the material in `files`.
    pub fn hint(&self, url: &str, files: &TlsFiles) -> String {
        match self {
            Failure::Certificate => format!(
                "check the TLS material in {}: ca.pem must have signed the engine's certificate, and cert.pem/key.pem must be a client certificate the engine trusts",
                files.dir.display()
            ),
            Failure::Alert(alert) => format!(
                "the endpoint aborted the TLS handshake with alert {alert:?}, which is not about certificates: its own log (the TLS terminator's or dockerd's) says why"
            ),
            Failure::Protocol => format!(
                "the endpoint at {url} did not complete a TLS handshake: is it a TLS endpoint? (without DOCKER_TLS_VERIFY, tcp:// is plain HTTP)"
            ),
            Failure::Connection => {
                format!("is the engine, or the TLS endpoint in front of it, listening at {url}?")
            }
        }
    }
}

/// The client configuration: `ca.pem` as the only roots, the client
/// certificate, no resumption.
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    for ca in certificates("CA certificate", &files.ca)? {
        roots.add(ca).map_err(|source| TlsSetupError::Ca { path: files.ca.clone(), source })?;
    }
    let chain = certificates("client certificate", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => {
            TlsSetupError::Empty { what: "private key", path: files.key.clone() }
        }
        source => TlsSetupError::Read { what: "private key", path: files.key.clone(), source },
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Client)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|source| TlsSetupError::Identity { cert: files.cert.clone(), key: files.key.clone(), source })?;
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let read = |source| TlsSetupError::Read { what, path: path.into(), source };
    let certs = CertificateDer::pem_file_iter(path).map_err(read)?.collect::<Result<Vec<_>, _>>().map_err(read)?;
    if certs.is_empty() {
        return Err(TlsSetupError::Empty { what, path: path.into() });
    }
    Ok(certs)
}

/// A bollard client for the engine at `addr` (`host:port`) over TLS. As
/// bollard's own TLS client does, no idle connection is kept: each request
/// has its own connection (and so its own full handshake).
pub fn connect(addr: &str, files: &TlsFiles, timeout_secs: u64) -> Result<Docker, TlsSetupError> {
    let config = client_config(files)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_max_idle_per_host(0);
    // The body type is bollard's own (not nameable here): inferred from the request.
    let client = builder.build(https);
    let transport = move |req: BollardRequest| {
        let client = client.clone();
        async move { client.request(req).await.map_err(bollard::errors::Error::from) }
    };
    Docker::connect_with_custom_transport(
        transport,
        Some(format!("https://{addr}")),
        timeout_secs,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(TlsSetupError::Transport)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// The rustls error in an `io::Error` in another, as tokio-rustls and
    /// hyper-rustls wrap it.
    fn io_wrapped(err: rustls::Error) -> io::Error {
        io::Error::other(io::Error::new(io::ErrorKind::InvalidData, err))
    }

    /// A wrapper whose `source()` is the `io::Error`, as hyper's client has it.
    #[derive(Debug)]
    struct ClientError(io::Error);

    impl std::fmt::Display for ClientError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for ClientError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// In bollard's error (transparent: its `source()` skips the rustls error).
    fn wrapped(err: rustls::Error) -> bollard::errors::Error {
        bollard::errors::Error::from(io_wrapped(err))
    }

    #[test]
    fn alerts_not_about_certificates_are_reported_as_alerts() {
        let f = Failure::of(&wrapped(rustls::Error::AlertReceived(AlertDescription::InternalError)));
        assert_eq!(f, Failure::Alert(AlertDescription::InternalError));
        let files = TlsFiles {
            dir: "/certs".into(),
            ca: "/certs/ca.pem".into(),
            cert: "/certs/cert.pem".into(),
            key: "/certs/key.pem".into(),
        };
        let hint = f.hint("tcp://lab:2376", &files);
        assert!(hint.contains("aborted the TLS handshake with alert InternalError"), "{hint}");
        assert!(hint.contains("its own log"), "{hint}");
        assert!(!hint.contains("ca.pem") && !hint.contains("/certs"), "{hint}");
        let f = Failure::of(&ClientError(io_wrapped(rustls::Error::AlertReceived(AlertDescription::HandshakeFailure))));
        assert_eq!(f, Failure::Alert(AlertDescription::HandshakeFailure));
        // A certificate failure names the material.
        let hint = Failure::Certificate.hint("tcp://lab:2376", &files);
        assert!(hint.contains("/certs") && hint.contains("ca.pem"), "{hint}");
    }

    #[test]
    fn verification_failures_are_certificate_problems() {
        for err in [
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
            rustls::Error::NoCertificatesPresented,
            rustls::Error::AlertReceived(AlertDescription::BadCertificate),
            rustls::Error::AlertReceived(AlertDescription::UnknownCA),
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
        ] {
            let text = err.to_string();
            assert_eq!(Failure::of(&wrapped(err)), Failure::Certificate, "{text}");
        }
    }

    #[test]
    fn other_errors_are_not_blamed_on_certificates() {
        let refused = bollard::errors::Error::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(Failure::of(&refused), Failure::Connection);
        let plain_http = wrapped(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType));
        assert_eq!(Failure::of(&plain_http), Failure::Protocol);
        // The rustls error itself, not wrapped.
        assert_eq!(Failure::of(&rustls::Error::DecryptError), Failure::Protocol);
    }
}
