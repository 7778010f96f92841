//! Image references: `HOST[:PORT]/REPO[:TAG][@sha256:HEX]`.
//!
//! The registry host is always explicit: quarry has no default registry, so
//! a reference never silently means a host the user did not write.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`, as written.
    pub registry: String,
    /// The repository path, e.g. `team/image`.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("image reference `{reference}`: {message}")]
pub struct ReferenceError {
    pub reference: String,
    pub message: String,
}

fn is_host(s: &str) -> bool {
    s.contains('.') || s.contains(':') || s == "localhost"
}

fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    !b.is_empty()
        && b.iter().all(|&x| x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'.' | b'_' | b'-'))
}

/// True for `sha256:` followed by 64 lowercase hex digits.
pub fn valid_digest(d: &str) -> bool {
    crate::oci::Digest::parse(d).is_ok()
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
        let err = |message: &str| ReferenceError { reference: s.to_string(), message: message.to_string() };
        let s_trim = s.trim();
        if s_trim != s || s.is_empty() {
            return Err(err("is empty or has surrounding spaces"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                if !valid_digest(d) {
                    return Err(err("the part after `@` must be `sha256:` and 64 lowercase hex digits"));
                }
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((h, p)) if is_host(h) => (h, p),
            _ => return Err(err(
                "name the registry host first: HOST[:PORT]/REPO[:TAG][@sha256:...] (quarry has no default registry)",
            )),
        };
        // A tag is a `:` in the last path component (the host's port is already split off).
        let (repository, tag) = match path.rfind(':') {
            Some(i) if !path[i..].contains('/') => (&path[..i], Some(path[i + 1..].to_string())),
            _ => (path, None),
        };
        if repository.is_empty() || !repository.split('/').all(valid_component) {
            return Err(err(
                "the repository must be lowercase letters, digits and `._-` in `/`-separated parts, each starting and ending with a letter or digit",
            ));
        }
        if let Some(t) = &tag {
            if !valid_tag(t) {
                return Err(err(
                    "the tag must be 1-128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`",
                ));
            }
        }
        if registry.is_empty() || registry.starts_with(':') {
            return Err(err("the registry host is empty"));
        }
        Ok(Reference { registry: registry.to_string(), repository: repository.to_string(), tag, digest })
    }

    /// What to ask the registry for: the digest when pinned, else the tag, else `latest`.
    pub fn object(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// Host part without the port, for loopback detection.
    fn hostname(&self) -> &str {
        if let Some(rest) = self.registry.strip_prefix('[') {
            return rest.split(']').next().unwrap_or(rest);
        }
        self.registry.rsplit_once(':').map(|(h, _)| h).unwrap_or(&self.registry)
    }

    /// True for `localhost`, 127.0.0.0/8 and `::1`: registries that, like
    /// Docker's default insecure list, are spoken to over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let h = self.hostname();
        h == "localhost" || h.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
    }

    /// The same repository at another object.
    pub fn with_digest(&self, digest: &str) -> Reference {
        Reference { digest: Some(digest.to_string()), ..self.clone() }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_host_port_repo_tag_digest() {
        let r = Reference::parse(&format!("127.0.0.1:5000/team/img:v1@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/img");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.object(), D);
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), format!("127.0.0.1:5000/team/img:v1@{D}"));
    }

    #[test]
    fn tag_defaults_and_hosts() {
        let r = Reference::parse("registry.example.com/img").unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.object(), "latest");
        assert!(!r.is_loopback());
        assert!(Reference::parse("localhost/a/b:c").unwrap().is_loopback());
        assert!(Reference::parse("[::1]:5000/a").unwrap().is_loopback());
    }

    #[test]
    fn refuses_bad_references() {
        for bad in [
            "ubuntu:22.04",
            "library/ubuntu",
            "host.example/Upper",
            "host.example/a//b",
            "host.example/a:bad tag",
            "host.example/a@sha256:abc",
            "host.example/a@md5:0123",
            "",
            " host.example/a",
            "host.example/-a",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
