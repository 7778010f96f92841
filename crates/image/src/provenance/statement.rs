//! The in-toto Statement v1 with the SLSA Provenance v1 predicate, as the
//! types of the specifications (in-toto/attestation `spec/v1`,
//! `slsa.dev/spec/v1.0/provenance`), with the fields quarry fills.
//!
//! Written here rather than taken from a crate: the statement is a few
//! plain structs, and owning their field order, and which optional fields
//! appear, is what makes the bytes reproducible. `runDetails.metadata` (the
//! build's times and invocation id) is present only when the caller gives
//! times; nothing else of the build machine has a field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `_type` of an in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub use crate::oci::SLSA_PROVENANCE_V1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Provenance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    pub build_definition: BuildDefinition,
    pub run_details: RunDetails,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildDefinition {
    /// What kind of build the parameters describe (a URI, versioned).
    pub build_type: String,
    /// What the user chose: definition files, `--set` values, targets.
    pub external_parameters: serde_json::Value,
    /// Every input, by digest.
    pub resolved_dependencies: Vec<ResourceDescriptor>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetails {
    pub builder: Builder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Builder {
    pub id: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub version: BTreeMap<String, String>,
}

/// Times of the build, RFC 3339: only when the user gives them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_on: Option<String>,
}

/// A subject or an input: at least one of `uri` and `digest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDescriptor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Algorithm -> lower-case hex.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digest: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, serde_json::Value>,
}

impl ResourceDescriptor {
    /// A descriptor named `name` with one sha256 digest (bare hex or `sha256:HEX`).
    pub fn sha256(name: impl Into<String>, hex: &str) -> ResourceDescriptor {
        let hex = hex.strip_prefix("sha256:").unwrap_or(hex);
        ResourceDescriptor {
            name: Some(name.into()),
            digest: BTreeMap::from([("sha256".to_string(), hex.to_string())]),
            ..Default::default()
        }
    }

    pub fn with_uri(mut self, uri: impl Into<String>) -> ResourceDescriptor {
        self.uri = Some(uri.into());
        self
    }

    pub fn sha256_hex(&self) -> Option<&str> {
        self.digest.get("sha256").map(String::as_str)
    }
}

/// The id and version of the builder: quarry, by its package URL.
pub fn quarry_builder() -> Builder {
    let version = env!("CARGO_PKG_VERSION");
    Builder {
        id: format!("pkg:cargo/quarry@{version}"),
        version: BTreeMap::from([("quarry".to_string(), version.to_string())]),
    }
}

impl Statement {
    pub fn new(subject: Vec<ResourceDescriptor>, definition: BuildDefinition, metadata: Option<Metadata>) -> Statement {
        Statement {
            type_: STATEMENT_TYPE.to_string(),
            subject,
            predicate_type: SLSA_PROVENANCE_V1.to_string(),
            predicate: Provenance {
                build_definition: definition,
                run_details: RunDetails { builder: quarry_builder(), metadata },
            },
        }
    }

    /// The statement as it is stored: pretty JSON ending in a newline. The
    /// same statement gives the same bytes (struct fields in order, maps sorted).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = serde_json::to_vec_pretty(self).expect("a statement is plain data");
        b.push(b'\n');
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_has_the_spec_field_names_and_round_trips() {
        let s = Statement::new(
            vec![ResourceDescriptor::sha256("img", &"a".repeat(64))],
            BuildDefinition {
                build_type: "t".into(),
                external_parameters: serde_json::json!({"k": 1}),
                resolved_dependencies: vec![ResourceDescriptor::sha256("d", &"b".repeat(64)).with_uri("https://x/d")],
            },
            None,
        );
        let v: serde_json::Value = serde_json::from_slice(&s.to_bytes()).unwrap();
        assert_eq!(v["_type"], STATEMENT_TYPE);
        assert_eq!(v["predicateType"], SLSA_PROVENANCE_V1);
        assert_eq!(v["subject"][0]["digest"]["sha256"], "a".repeat(64));
        assert_eq!(v["predicate"]["buildDefinition"]["resolvedDependencies"][0]["uri"], "https://x/d");
        assert!(v["predicate"]["runDetails"]["builder"]["id"].as_str().unwrap().starts_with("pkg:cargo/quarry@"));
        assert!(v["predicate"]["runDetails"].get("metadata").is_none(), "no clock unless asked");
        let back: Statement = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.to_bytes(), s.to_bytes());
    }
}
