//! `quarry verify FILE` for products that are files: a wheel written by
//! `wheel split` or `wheel merge`. The provenance beside it
//! (`FILE.intoto.json`; with a key, the signed `FILE.intoto.jsonl`, whose
//! payload must be that statement) must name the file with its sha256; the
//! inputs it records are found by sha256 among the files of the input
//! directories (the wheel's own directory and the working directory unless
//! given), the command is run again with the recorded parameters into a
//! private directory, and the file of the same name compared byte for byte:
//! `reproduced`, or the first zip member and header field that differ.
//!
//! Products of container builds (`wheel build`, `kernel build`) and
//! `rocm package` sets are not rebuilt here: they are refused with a
//! clear error rather than said to be reproduced.

use super::VerifyError;
use crate::diff::explain::explain;
use crate::provenance::{ResourceDescriptor, Statement, SLSA_PROVENANCE_V1, STATEMENT_TYPE};
use crate::signing::{dsse, PublicKey};
use std::path::{Path, PathBuf};

pub const SPLIT_BUILD_TYPE: &str = "urn:quarry:build-type:wheel-split:v1";
pub const MERGE_BUILD_TYPE: &str = "urn:quarry:build-type:wheel-merge:v1";

/// Largest statement or envelope read.
const STATEMENT_LIMIT: u64 = 64 << 20;

#[derive(Debug, Clone, serde::Serialize)]
pub struct FileVerification {
    pub target: String,
    /// The provenance's build type.
    pub build_type: String,
    pub reproduced: bool,
    /// sha256 of the given file and of the rebuilt one.
    pub given: String,
    pub rebuilt: String,
    pub builder: String,
    /// The key the signed statement verified with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// Each recorded input and the file found for it.
    pub inputs: Vec<FoundInput>,
    /// Where the rebuilt file differs first (a zip member and field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difference: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FoundInput {
    pub name: String,
    pub sha256: String,
    pub path: PathBuf,
}

pub struct FileOptions {
    /// Where inputs are looked for (empty: the file's directory and the working directory).
    pub inputs: Vec<PathBuf>,
    pub key: Option<PublicKey>,
}

fn bad(path: &Path, message: impl Into<String>) -> VerifyError {
    VerifyError::Provenance { target: path.display().to_string(), message: message.into() }
}

fn read_limited(path: &Path) -> Result<Option<Vec<u8>>, VerifyError> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(VerifyError::Io { path: path.display().to_string(), what: "cannot read".into(), err }),
    };
    let mut bytes = Vec::new();
    file.take(STATEMENT_LIMIT).read_to_end(&mut bytes).map_err(|err| VerifyError::Io {
        path: path.display().to_string(),
        what: "cannot read".into(),
        err,
    })?;
    Ok(Some(bytes))
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The statement about `path`, checked against the key when one is given.
fn statement_of(path: &Path, key: Option<&PublicKey>) -> Result<(Vec<u8>, Option<String>), VerifyError> {
    let (plain_path, signed_path) = (beside(path, ".intoto.json"), beside(path, ".intoto.jsonl"));
    let plain = read_limited(&plain_path)?;
    let Some(key) = key else {
        return plain.map(|b| (b, None)).ok_or_else(|| VerifyError::NoProvenance {
            target: format!("{} (no {} beside it)", path.display(), plain_path.display()),
        });
    };
    let refused =
        |message: String| VerifyError::Signature { image: path.display().to_string(), key: key.describe(), message };
    let envelope = read_limited(&signed_path)?.ok_or_else(|| {
        refused(format!("there is no signed statement {}; sign with --sign-key", signed_path.display()))
    })?;
    let what = signed_path.display().to_string();
    let envelope = dsse::Envelope::parse(&envelope, &what).map_err(|e| refused(e.to_string()))?;
    let payload = envelope.verified_payload(key, &what).map_err(|e| refused(e.to_string()))?;
    if plain.as_ref().is_some_and(|p| *p != payload) {
        return Err(refused(format!("{} is not the statement {} signs", plain_path.display(), what)));
    }
    Ok((payload, Some(key.describe())))
}

/// Verify the wheel at `path` by running its command again.
pub fn verify_file(path: &Path, opts: &FileOptions) -> Result<FileVerification, VerifyError> {
    let (bytes, signed_by) = statement_of(path, opts.key.as_ref())?;
    let statement: Statement = serde_json::from_slice(&bytes)
        .map_err(|e| bad(path, format!("the provenance is not an in-toto statement: {e}")))?;
    if statement.type_ != STATEMENT_TYPE || statement.predicate_type != SLSA_PROVENANCE_V1 {
        return Err(bad(
            path,
            format!("the provenance's predicate is `{}`, not SLSA Provenance v1", statement.predicate_type),
        ));
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let given = crate::oci::digest::sha256_file(path).map_err(|err| VerifyError::Io {
        path: path.display().to_string(),
        what: "cannot read".into(),
        err,
    })?;
    let subject = statement.subject.iter().find(|s| s.name.as_deref() == Some(name.as_str()));
    let recorded = subject.and_then(|s| s.sha256_hex()).unwrap_or("");
    if recorded != given {
        return Err(VerifyError::SubjectMismatch {
            kind: "wheel",
            target: path.display().to_string(),
            subject: if subject.is_some() { format!("sha256:{recorded}") } else { "another file".into() },
            image: format!("sha256:{given}"),
        });
    }
    let def = &statement.predicate.build_definition;
    let dirs = if opts.inputs.is_empty() {
        let mut d = vec![path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)];
        d.extend(std::env::current_dir().ok());
        d
    } else {
        opts.inputs.clone()
    };
    let inputs = def.resolved_dependencies.iter().map(|d| find_input(path, d, &dirs)).collect::<Result<Vec<_>, _>>()?;
    let work = tempfile::tempdir().map_err(|err| VerifyError::Io {
        path: std::env::temp_dir().display().to_string(),
        what: "cannot make a directory".into(),
        err,
    })?;
    let out = work.path().join("rebuilt");
    let p = &def.external_parameters;
    let families = match p["families"].as_str() {
        Some("none") => crate::wheel::split::Families::None,
        _ => crate::wheel::split::Families::Auto,
    };
    let scheme = match p["compression"].as_str() {
        Some("none") => crate::code_objects::kpack_writer::Scheme::None,
        _ => crate::code_objects::kpack_writer::Scheme::ZstdPerKernel,
    };
    let device_prefix = p["devicePrefix"].as_str().map(str::to_string);
    let rebuild_failed =
        |message: String| bad(path, format!("running the recorded `{}` again failed: {message}", def.build_type));
    match def.build_type.as_str() {
        SPLIT_BUILD_TYPE => {
            let [input] = inputs.as_slice() else {
                return Err(bad(path, format!("a split has one input; the provenance records {}", inputs.len())));
            };
            let targets = serde_json::from_value(p["targets"].clone()).unwrap_or(None);
            let options = crate::wheel::split::SplitOptions { device_prefix, targets, families, scheme };
            crate::wheel::split::split(&input.path, &out, &options).map_err(|e| rebuild_failed(e.to_string()))?;
        }
        MERGE_BUILD_TYPE => {
            let shards: Vec<_> = inputs
                .iter()
                .map(|i| crate::wheel::merge::Shard { wheel: i.path.clone(), build_key: None })
                .collect();
            let options = crate::wheel::merge::MergeOptions { device_prefix, families, scheme };
            crate::wheel::merge::merge(&shards, &out, &options).map_err(|e| rebuild_failed(e.to_string()))?;
        }
        other => {
            return Err(bad(
                path,
                format!(
                    "its provenance is of a `{other}`; `quarry verify` rebuilds images and the wheels of `wheel split` and `wheel merge`, not this kind yet (its subject digest{} checked)",
                    if signed_by.is_some() { " and signature were" } else { " was" }
                ),
            ))
        }
    }
    let rebuilt_path = out.join(&name);
    let rebuilt_bytes = std::fs::read(&rebuilt_path)
        .map_err(|_| bad(path, format!("running the recorded `{}` again wrote no `{name}`", def.build_type)))?;
    let given_bytes = std::fs::read(path).map_err(|err| VerifyError::Io {
        path: path.display().to_string(),
        what: "cannot read".into(),
        err,
    })?;
    let rebuilt = crate::oci::Digest::of_bytes(&rebuilt_bytes).hex().to_string();
    Ok(FileVerification {
        target: path.display().to_string(),
        build_type: def.build_type.clone(),
        reproduced: rebuilt_bytes == given_bytes,
        given: format!("sha256:{given}"),
        rebuilt: format!("sha256:{rebuilt}"),
        builder: statement.predicate.run_details.builder.id.clone(),
        signed_by,
        inputs,
        difference: explain(&given_bytes, &rebuilt_bytes).map(|d| d.to_string()),
    })
}

/// The file in `dirs` whose sha256 is the input's.
fn find_input(target: &Path, d: &ResourceDescriptor, dirs: &[PathBuf]) -> Result<FoundInput, VerifyError> {
    let name = d.name.clone().unwrap_or_default();
    let Some(want) = d.sha256_hex() else {
        return Err(bad(target, format!("the input `{name}` has no sha256 in the provenance")));
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        // The recorded name first: most inputs are where they were.
        candidates.push(dir.join(&name));
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut more: Vec<PathBuf> =
                entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "whl")).collect();
            more.sort();
            candidates.extend(more);
        }
    }
    for c in candidates {
        if c.is_file() && crate::oci::digest::sha256_file(&c).is_ok_and(|h| h == want) {
            return Ok(FoundInput { name, sha256: format!("sha256:{want}"), path: c });
        }
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(bad(
        target,
        format!(
            "its input `{name}` (sha256:{want}) is in none of {}; give the directory that holds it with --inputs DIR",
            looked.join(", ")
        ),
    ))
}
