//! A Debian archive made for a test: .deb files built here, a Packages
//! index, a Release file clearsigned with a key made for the test, all
//! served over HTTP on 127.0.0.1.

use super::*;
use flate2::write::GzEncoder;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (path, content, mode) of a file in a package.
pub type Entry<'a> = (&'a str, &'a [u8], u32);

/// A tar.gz of entries, directories first.
fn targz(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), flate2::Compression::default()));
    let mut dirs = std::collections::BTreeSet::new();
    for (p, _, _) in entries {
        let mut d = Path::new(p).parent();
        while let Some(x) = d.filter(|x| !x.as_os_str().is_empty() && *x != Path::new(".")) {
            dirs.insert(x.to_path_buf());
            d = x.parent();
        }
    }
    for d in dirs {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, format!("{}/", d.display()), std::io::empty()).unwrap();
    }
    for (p, data, mode) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, p, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// A .deb with a control paragraph, control members (maintainer scripts
/// are `(name, text)`) and data files.
pub fn make_deb(out: &Path, control: &str, members: &[(&str, &str)], files: &[Entry]) {
    let mut ctl: Vec<(String, &[u8], u32)> = vec![("./control".into(), control.as_bytes(), 0o644)];
    for (name, text) in members {
        let script = matches!(*name, "preinst" | "postinst" | "prerm" | "postrm" | "config");
        ctl.push((format!("./{name}"), text.as_bytes(), if script { 0o755 } else { 0o644 }));
    }
    let ctl: Vec<Entry> = ctl.iter().map(|(p, d, m)| (p.as_str(), *d, *m)).collect();
    let control_tgz = targz(&ctl);
    let data_tgz = targz(files);
    let mut ar = ar::Builder::new(std::fs::File::create(out).unwrap());
    for (name, data) in
        [("debian-binary", b"2.0\n".to_vec()), ("control.tar.gz", control_tgz), ("data.tar.gz", data_tgz)]
    {
        let mut h = ar::Header::new(name.as_bytes().to_vec(), data.len() as u64);
        h.set_mode(0o644);
        ar.append(&h, &data[..]).unwrap();
    }
}

pub struct Archive {
    pub root: tempfile::TempDir,
    pub gnupg: PathBuf,
    pub keyring: PathBuf,
    pub other_keyring: PathBuf,
    pub url: String,
    pub requests: Requests,
}

impl Drop for Archive {
    fn drop(&mut self) {
        for home in [&self.gnupg, &self.root.path().join("gnupg-other")] {
            let _ = Command::new("gpgconf").arg("--homedir").arg(home).args(["--kill", "all"]).status();
        }
    }
}

pub fn gpg(home: &Path) -> Command {
    let mut c = Command::new("gpg");
    c.arg("--homedir").arg(home).args(["--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]);
    c
}

fn make_key(home: &Path, keyring: &Path) {
    std::fs::create_dir_all(home).unwrap();
    std::fs::set_permissions(home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    run_expect(
        gpg(home).args(["--quick-gen-key", "quarry test <test@example.invalid>", "ed25519", "sign", "never"]),
        0,
    );
    let out = run_expect(gpg(home).arg("--export"), 0);
    std::fs::write(keyring, out.stdout).unwrap();
}

/// Paths requested from a test server, in order.
pub type Requests = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Serve `root` over HTTP/1.1 on 127.0.0.1 (GET only, one request per connection).
fn serve(root: PathBuf, requests: Requests) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let root = root.clone();
            let requests = requests.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap_or(0);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
                requests.lock().unwrap().push(path.clone());
                let file = root.join(&path);
                match (path.contains(".."), std::fs::read(&file)) {
                    (false, Ok(body)) => {
                        let _ =
                            write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                        let _ = s.write_all(&body);
                    }
                    _ => {
                        let _ = write!(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

pub fn sha256(data: &[u8]) -> String {
    quarry::oci::digest::sha256_hex(data)
}

/// One package of a test archive.
pub struct Pkg<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// More control fields (`Depends: x\n`).
    pub extra: &'a str,
    /// Control members besides `control` (maintainer scripts, triggers).
    pub members: &'a [(&'a str, &'a str)],
    pub files: &'a [Entry<'a>],
}

/// An archive of suite `test` holding `pkgs`, signed, served; None when
/// gpg is missing (outside CI).
pub fn archive(pkgs: &[Pkg]) -> Option<Archive> {
    archive_suites(&[("test", pkgs)])
}

/// An archive of several suites (a release and its pockets), each with its
/// own signed index over one pool, served.
pub fn archive_suites(suites: &[(&str, &[Pkg])]) -> Option<Archive> {
    if !have_tool("gpg") || !have_tool("gpgv") {
        return None;
    }
    let root = tempfile::tempdir().unwrap();
    let gnupg = root.path().join("gnupg");
    let keyring = root.path().join("test.gpg");
    make_key(&gnupg, &keyring);
    let other_keyring = root.path().join("other.gpg");
    make_key(&root.path().join("gnupg-other"), &other_keyring);
    let www = root.path().join("www");
    std::fs::create_dir_all(www.join("pool/main")).unwrap();
    let requests = Requests::default();
    let url = serve(www.clone(), requests.clone());
    let a = Archive { root, gnupg, keyring, other_keyring, url, requests };
    for (suite, pkgs) in suites {
        a.publish(suite, pkgs);
    }
    Some(a)
}

impl Archive {
    /// (Re)write `suite`'s index to hold exactly `pkgs` (their .debs made in
    /// the pool when missing) and sign it anew: a point or security release.
    pub fn publish(&self, suite: &str, pkgs: &[Pkg]) {
        let www = self.root.path().join("www");
        let pool = www.join("pool/main");
        let mut index = String::new();
        for Pkg { name, version, extra, members, files } in pkgs {
            let control = format!("Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@example.invalid>\n{extra}Description: test package {name}\n");
            let file = format!("{name}_{version}_amd64.deb");
            if !pool.join(&file).exists() {
                make_deb(&pool.join(&file), &control, members, files);
            }
            let bytes = std::fs::read(pool.join(&file)).unwrap();
            index.push_str(&format!(
                "{control}Filename: pool/main/{file}\nSize: {}\nSHA256: {}\nPriority: optional\n\n",
                bytes.len(),
                sha256(&bytes)
            ));
        }
        let dist = www.join("dists").join(suite);
        std::fs::create_dir_all(dist.join("main/binary-amd64")).unwrap();
        let gz = {
            let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(index.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        std::fs::write(dist.join("main/binary-amd64/Packages.gz"), &gz).unwrap();
        let release = format!(
            "Origin: quarry-test\nSuite: {suite}\nCodename: {suite}\nArchitectures: amd64\nComponents: main\nSHA256:\n {} {} main/binary-amd64/Packages.gz\n",
            sha256(&gz),
            gz.len()
        );
        std::fs::write(dist.join("Release"), &release).unwrap();
        let _ = std::fs::remove_file(dist.join("InRelease"));
        run_expect(
            gpg(&self.gnupg).arg("--clearsign").arg("-o").arg(dist.join("InRelease")).arg(dist.join("Release")),
            0,
        );
    }
}

/// path -> (type, content or link target) of the `i`th layer of a built
/// image (`built`: `quarry build --json`'s output) in the OCI layout `out`.
pub fn layer_entries(
    out: &Path,
    built: &serde_json::Value,
    i: usize,
) -> std::collections::BTreeMap<String, (tar::EntryType, Vec<u8>)> {
    use std::io::Read;
    let digest = built["layers"][i]["digest"].as_str().unwrap().trim_start_matches("sha256:");
    let f = std::fs::File::open(out.join("blobs/sha256").join(digest)).unwrap();
    // Layers are multi-member gzip (1 MiB blocks): a plain GzDecoder would stop after the first.
    let mut a = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
    let mut m = std::collections::BTreeMap::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let mut data = Vec::new();
        if e.header().entry_type() == tar::EntryType::Symlink {
            data = e.link_name_bytes().unwrap().to_vec();
        } else {
            e.read_to_end(&mut data).unwrap();
        }
        m.insert(
            e.path().unwrap().display().to_string().trim_end_matches('/').to_string(),
            (e.header().entry_type(), data),
        );
    }
    m
}
