//! The payload cosign signs for an image (Red Hat's "simple signing"
//! format as cosign writes it): the repository it is pushed to and the
//! manifest digest, in cosign's field order, so the same image in the same
//! repository gives the same bytes.

use serde::{Deserialize, Serialize};

/// The media type of the payload layer in a `.sig` manifest.
pub const MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The `critical.type` cosign writes and checks.
pub const TYPE: &str = "cosign container image signature";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload {
    pub critical: Critical,
    /// cosign writes `null` without annotations.
    pub optional: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Critical {
    pub identity: Identity,
    pub image: ImageRef,
    #[serde(rename = "type")]
    pub type_: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    #[serde(rename = "docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

/// The payload for the image `digest` (`sha256:...`) in `repository` (`HOST/REPO`).
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    let p = Payload {
        critical: Critical {
            identity: Identity { docker_reference: repository.to_string() },
            image: ImageRef { docker_manifest_digest: digest.to_string() },
            type_: TYPE.to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&p).expect("plain data")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_payload_is_cosigns() {
        let p = String::from_utf8(super::payload("h:5000/r", "sha256:ab")).unwrap();
        assert_eq!(
            p,
            r#"{"critical":{"identity":{"docker-reference":"h:5000/r"},"image":{"docker-manifest-digest":"sha256:ab"},"type":"cosign container image signature"},"optional":null}"#
        );
    }
}
