//! One blob's upload (distribution spec "pushing blobs"): a session opened
//! with POST, then either one PUT with the whole blob (small blobs) or PATCH
//! requests of `chunk_size` bytes with `Content-Range` and a closing PUT
//! with the digest (large blobs). A broken transfer restarts the blob in a
//! new session: a registry's half-received chunk cannot be trusted to line
//! up with what the client sent (distribution cancels such sessions).

use super::client::{Call, Client, Payload};
use super::RegistryError;
use std::path::Path;
use ureq::http::Method;
use url::Url;

pub(crate) enum Mount {
    Mounted,
    /// The registry did not mount, but opened an upload session.
    Session(Url),
}

fn location(client: &Client, resp: &ureq::http::Response<ureq::Body>, what: &str) -> Result<Url, RegistryError> {
    let loc = resp.headers().get("location").and_then(|v| v.to_str().ok()).ok_or_else(|| {
        client.protocol(what, format!("the registry answered {} without a Location", resp.status().as_u16()))
    })?;
    client.resolve(loc, what)
}

/// Open an upload session.
pub(crate) fn start(client: &mut Client, repo: &str, what: &str) -> Result<Url, RegistryError> {
    let url = client.url(&format!("{repo}/blobs/uploads/"));
    let resp = client.send(&Call::new(Method::POST, url, what))?;
    if resp.status().as_u16() != 202 {
        return Err(client.status_error(what, resp));
    }
    location(client, &resp, what)
}

/// Ask the registry to mount `digest` from the repository `from`.
pub(crate) fn mount(
    client: &mut Client,
    repo: &str,
    digest: &str,
    from: &str,
    what: &str,
) -> Result<Mount, RegistryError> {
    client.add_scope(from, "pull");
    let mut url = client.url(&format!("{repo}/blobs/uploads/"));
    url.query_pairs_mut().append_pair("mount", digest).append_pair("from", from);
    let resp = client.send(&Call::new(Method::POST, url, what))?;
    match resp.status().as_u16() {
        201 => Ok(Mount::Mounted),
        202 => Ok(Mount::Session(location(client, &resp, what)?)),
        _ => Err(client.status_error(what, resp)),
    }
}

fn transient(e: &RegistryError) -> bool {
    match e {
        RegistryError::Connect { .. } => true,
        RegistryError::Status { status, .. } => matches!(status, 408 | 429 | 500 | 502 | 503 | 504),
        _ => false,
    }
}

/// How many bytes the registry holds in an upload session (`Range: 0-N`),
/// or None when the session is gone or the answer is unclear.
fn received(client: &mut Client, session: &Url, what: &str) -> Option<u64> {
    let resp = client.send(&Call::new(Method::GET, session.clone(), what)).ok()?;
    if resp.status().as_u16() != 204 {
        return None;
    }
    let range = resp.headers().get("range")?.to_str().ok()?;
    let (start, end) = range.trim_start_matches("bytes=").split_once('-')?;
    (start == "0").then_some(())?;
    end.parse::<u64>().ok().map(|e| e + 1)
}

fn with_digest(mut url: Url, digest: &str) -> Url {
    url.query_pairs_mut().append_pair("digest", digest);
    url
}

pub(crate) struct BlobToSend<'a> {
    pub path: &'a Path,
    pub digest: &'a str,
    pub size: u64,
    pub what: &'a str,
}

/// Upload a blob, in `session` if given (else a new one); retries with
/// backoff restart the blob in a new session.
pub(crate) fn upload_blob(
    client: &mut Client,
    repo: &str,
    blob: &BlobToSend<'_>,
    chunk_size: u64,
    mut session: Option<Url>,
    bar: &indicatif::ProgressBar,
) -> Result<(), RegistryError> {
    let max = super::client::max_attempts();
    let mut attempt = 0;
    loop {
        attempt += 1;
        bar.set_position(0);
        let s = match session.take() {
            Some(s) => s,
            None => start(client, repo, blob.what)?,
        };
        let r = if blob.size <= chunk_size {
            monolithic(client, s, blob, bar)
        } else {
            chunked(client, s, blob, chunk_size, bar)
        };
        match r {
            Err(e) if transient(&e) && attempt < max => {
                std::thread::sleep(std::time::Duration::from_millis(250 << attempt));
            }
            r => return r,
        }
    }
}

fn finish_check(
    client: &Client,
    resp: ureq::http::Response<ureq::Body>,
    blob: &BlobToSend<'_>,
) -> Result<(), RegistryError> {
    if resp.status().as_u16() != 201 {
        return Err(client.status_error(blob.what, resp));
    }
    if let Some(d) = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()) {
        if d != blob.digest {
            return Err(RegistryError::DigestMismatch {
                what: format!("{} (as stored by the registry)", blob.what),
                expected: blob.digest.to_string(),
                actual: d.to_string(),
            });
        }
    }
    Ok(())
}

fn monolithic(
    client: &mut Client,
    session: Url,
    blob: &BlobToSend<'_>,
    bar: &indicatif::ProgressBar,
) -> Result<(), RegistryError> {
    let call = Call::new(Method::PUT, with_digest(session, blob.digest), blob.what)
        .header("content-type", "application/octet-stream")
        .body(Payload::File { path: blob.path, offset: 0, len: blob.size, progress: Some(bar) })
        .no_retry();
    let resp = client.send(&call)?;
    finish_check(client, resp, blob)
}

fn chunked(
    client: &mut Client,
    mut session: Url,
    blob: &BlobToSend<'_>,
    chunk_size: u64,
    bar: &indicatif::ProgressBar,
) -> Result<(), RegistryError> {
    let max = super::client::max_attempts();
    let mut chunk_failures = 0;
    let mut offset = 0u64;
    while offset < blob.size {
        let len = chunk_size.min(blob.size - offset);
        let call = Call::new(Method::PATCH, session.clone(), blob.what)
            .header("content-type", "application/octet-stream")
            .header("content-range", format!("{}-{}", offset, offset + len - 1))
            .body(Payload::File { path: blob.path, offset, len, progress: Some(bar) })
            .no_retry();
        let result = match client.send(&call) {
            Ok(resp) if resp.status().as_u16() == 202 => Ok(resp),
            Ok(resp) => Err(client.status_error(blob.what, resp)),
            Err(e) => Err(e),
        };
        match result {
            Ok(resp) => {
                session = location(client, &resp, blob.what)?;
                offset += len;
                chunk_failures = 0;
            }
            // A chunk that failed before the registry stored any of it can be
            // sent again in the same session; else the caller restarts the blob.
            Err(e) if transient(&e) && chunk_failures + 1 < max && offset > 0 => {
                chunk_failures += 1;
                std::thread::sleep(std::time::Duration::from_millis(250 << chunk_failures));
                if received(client, &session, blob.what) != Some(offset) {
                    return Err(e);
                }
                bar.set_position(offset);
            }
            Err(e) => return Err(e),
        }
    }
    let resp = client.send(&Call::new(Method::PUT, with_digest(session, blob.digest), blob.what).no_retry())?;
    finish_check(client, resp, blob)
}
