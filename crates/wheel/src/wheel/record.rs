//! RECORD: the CSV manifest of a wheel, `path,sha256=<urlsafe b64 nopad>,size`,
//! with RECORD's own row left without hash and size.

use super::WheelError;
use base64::Engine;
use std::collections::BTreeMap;

/// One row of RECORD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    pub path: String,
    /// `(algorithm, urlsafe base64 digest)`, None for RECORD itself.
    pub hash: Option<(String, String)>,
    pub size: Option<u64>,
}

/// The RECORD hash field for a sha256 digest: `sha256=<urlsafe b64 nopad>`.
pub fn sha256_field(digest: &[u8]) -> String {
    format!("sha256={}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
}

/// Parse RECORD's text; `record_path` names it in errors.
pub fn parse(text: &[u8], record_path: &str) -> Result<Vec<RecordRow>, WheelError> {
    let bad = |line: u64, why: String| WheelError::BadRecord { record: record_path.to_string(), line, why };
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text);
    let mut rows = Vec::new();
    for result in reader.records() {
        let rec = result.map_err(|e| bad(e.position().map(|p| p.line()).unwrap_or(0), e.to_string()))?;
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        if rec.iter().all(str::is_empty) {
            continue;
        }
        if rec.len() != 3 {
            return Err(bad(line, format!("expected 3 fields (path,hash,size), found {}", rec.len())));
        }
        let hash = match &rec[1] {
            "" => None,
            h => {
                let (algo, digest) =
                    h.split_once('=').ok_or_else(|| bad(line, format!("hash `{h}` is not `algorithm=digest`")))?;
                Some((algo.to_string(), digest.to_string()))
            }
        };
        let size = match &rec[2] {
            "" => None,
            s => Some(s.parse::<u64>().map_err(|_| bad(line, format!("size `{s}` is not a number")))?),
        };
        rows.push(RecordRow { path: rec[0].to_string(), hash, size });
    }
    Ok(rows)
}

/// What the archive holds for one file: sha256 and size, measured.
#[derive(Debug, Clone)]
pub struct Measured {
    pub sha256: [u8; 32],
    pub size: u64,
}

/// Compare RECORD with the measured files. `record_path` is RECORD's own
/// path in the archive. Returns one human sentence per problem, each naming
/// the file; empty means RECORD is right.
pub fn verify(rows: &[RecordRow], files: &BTreeMap<String, Measured>, record_path: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut listed: BTreeMap<&str, &RecordRow> = BTreeMap::new();
    for row in rows {
        if listed.insert(row.path.as_str(), row).is_some() {
            problems.push(format!("`{}` is listed twice in RECORD", row.path));
        }
    }
    // Signatures of RECORD cannot be listed in it.
    let unlisted_ok =
        |p: &str| p == record_path || p == format!("{record_path}.jws") || p == format!("{record_path}.p7s");
    for (path, m) in files {
        let Some(row) = listed.get(path.as_str()) else {
            if !unlisted_ok(path) {
                problems.push(format!("`{path}` is in the wheel but not listed in RECORD"));
            }
            continue;
        };
        match &row.hash {
            None if unlisted_ok(path) => {}
            None => problems.push(format!("`{path}` has no hash in RECORD")),
            Some((algo, digest)) if algo == "sha256" => {
                let actual = sha256_field(&m.sha256);
                if actual != format!("sha256={digest}") {
                    problems.push(format!("`{path}`: RECORD says sha256={digest}, the file has {actual}"));
                }
            }
            Some((algo, _)) => {
                problems.push(format!("`{path}`: RECORD uses hash `{algo}`; quarry checks sha256 only"));
            }
        }
        if let Some(size) = row.size {
            if size != m.size && !unlisted_ok(path) {
                problems.push(format!("`{path}`: RECORD says {size} bytes, the file has {}", m.size));
            }
        }
    }
    for path in listed.keys() {
        if !files.contains_key(*path) {
            problems.push(format!("`{path}` is listed in RECORD but not in the wheel"));
        }
    }
    problems
}

/// Write RECORD rows as CSV (`\n` line ends, as the `wheel` package writes them).
pub fn write(rows: &[RecordRow]) -> Vec<u8> {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    for row in rows {
        let hash = row.hash.as_ref().map(|(a, d)| format!("{a}={d}")).unwrap_or_default();
        let size = row.size.map(|s| s.to_string()).unwrap_or_default();
        // Writing into a Vec cannot fail.
        w.write_record([row.path.as_str(), hash.as_str(), size.as_str()]).expect("write to memory");
    }
    w.into_inner().expect("flush to memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn roundtrip_and_verify() {
        let data = b"hello";
        let digest: [u8; 32] = Sha256::digest(data).into();
        let field = sha256_field(&digest);
        // Known vector: sha256("hello"), urlsafe base64 without padding.
        assert_eq!(field, "sha256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ");
        let rows = vec![
            RecordRow {
                path: "pkg/a,b.py".into(),
                hash: Some(("sha256".into(), field[7..].to_string())),
                size: Some(5),
            },
            RecordRow { path: "pkg-1.0.dist-info/RECORD".into(), hash: None, size: None },
        ];
        let text = write(&rows);
        assert_eq!(String::from_utf8_lossy(&text), format!("\"pkg/a,b.py\",{field},5\npkg-1.0.dist-info/RECORD,,\n"));
        let parsed = parse(&text, "RECORD").unwrap();
        assert_eq!(parsed, rows);

        let mut files = BTreeMap::new();
        files.insert("pkg/a,b.py".to_string(), Measured { sha256: digest, size: 5 });
        files.insert("pkg-1.0.dist-info/RECORD".to_string(), Measured { sha256: [0; 32], size: 99 });
        assert!(verify(&parsed, &files, "pkg-1.0.dist-info/RECORD").is_empty());

        files.insert("pkg/a,b.py".to_string(), Measured { sha256: [1; 32], size: 6 });
        files.insert("pkg/extra.py".to_string(), Measured { sha256: [1; 32], size: 6 });
        let problems = verify(&parsed, &files, "pkg-1.0.dist-info/RECORD");
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems.iter().all(|p| p.contains("pkg/")), "{problems:?}");
    }

    #[test]
    fn bad_rows() {
        assert!(parse(b"a,sha256=x\n", "R").is_err());
        assert!(parse(b"a,nohash,3\n", "R").is_err());
        assert!(parse(b"a,sha256=x,big\n", "R").is_err());
    }
}
