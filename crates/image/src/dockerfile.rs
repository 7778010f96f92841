//! Rendering an image definition as an equivalent Dockerfile, for people who
//! build with docker. Paths are written relative to a build context (the
//! repository root by default); what a Dockerfile cannot say exactly
//! (archive maps, stripped components) becomes an explicit RUN with a note.
//!
//! Over 400 lines: one renderer for every layer kind, whose stages share
//! the user and mode state of the Dockerfile being written; 50 are tests.

use crate::definition::{Base, FilesLayer, Image, InputKind, Layer, LayerKind, SourceKind, StepLayer};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct RenderError {
    pub file: String,
    pub message: String,
}

/// Quote a string as a JSON string (the exec form of Dockerfile instructions).
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

fn exec_form(args: &[String]) -> String {
    format!("[{}]", args.iter().map(|a| q(a)).collect::<Vec<_>>().join(", "))
}

/// Lexically normalize (`a/../b` -> `b`) without touching the disk.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A host path as seen from the build context, or an error when outside it.
fn in_context(image: &Image, context: &Path, p: &Path) -> Result<String, RenderError> {
    let abs =
        lexical(&if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) });
    let ctx = lexical(&if context.is_absolute() {
        context.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(context)
    });
    match abs.strip_prefix(&ctx) {
        Ok(rel) if rel.as_os_str().is_empty() => Ok(".".into()),
        Ok(rel) => Ok(rel.display().to_string()),
        Err(_) => Err(RenderError {
            file: image.file.display().to_string(),
            message: format!(
                "`{}` lies outside the build context `{}`; pass --context with a directory that holds every input",
                p.display(),
                context.display()
            ),
        }),
    }
}

fn dest_dir(dest: &str) -> String {
    if dest.ends_with('/') {
        dest.to_string()
    } else {
        format!("{dest}/")
    }
}

/// What the stage rendered so far can do: whether its image has a shell
/// (tools such as `chmod`) and which user RUN instructions run as.
struct Stage {
    has_tools: bool,
    user: Option<String>,
}

/// File modes after the layer's COPYs. `COPY --chmod` needs BuildKit (the
/// classic builder of Docker 20.10, Debian's docker.io, refuses it), so
/// modes are set by `RUN ["chmod", ...]` (exec form: no shell needed, only
/// chmod), as root. A scratch stage has no chmod: COPY keeps the mode the
/// file has in the build context, and a comment says which one is wanted.
fn render_modes(out: &mut String, stage: &mut Stage, modes: &[(String, u32)]) {
    if modes.is_empty() {
        return;
    }
    if !stage.has_tools {
        for (path, mode) in modes {
            writeln!(
                out,
                "# {path} must have mode {mode:04o}: COPY keeps the context file's mode (no chmod in a scratch image)"
            )
            .unwrap();
        }
        return;
    }
    ensure_root(out, stage);
    let mut by_mode: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for (path, mode) in modes {
        by_mode.entry(*mode).or_default().push(path.clone());
    }
    for (mode, paths) in by_mode {
        let mut args = vec!["chmod".to_string(), format!("{mode:04o}")];
        args.extend(paths);
        writeln!(out, "RUN {}", exec_form(&args)).unwrap();
    }
}

/// Switch to root when an earlier USER (the base's, a step's) is another user.
fn ensure_root(out: &mut String, stage: &mut Stage) {
    let other = |u: &str| u != "root" && u != "0" && !u.starts_with("0:") && !u.starts_with("root:");
    if stage.user.as_deref().is_some_and(other) {
        writeln!(out, "USER root").unwrap();
        stage.user = Some("root".into());
    }
}

fn render_layer(
    out: &mut String,
    image: &Image,
    context: &Path,
    layer: &Layer,
    stage: &mut Stage,
) -> Result<(), RenderError> {
    writeln!(out, "\n# layer: {}", layer.name).unwrap();
    match &layer.kind {
        LayerKind::Files(files) => render_files(out, image, context, files, stage),
        LayerKind::Packages(p) => {
            ensure_root(out, stage);
            render_packages_layer(out, image, layer, p);
            Ok(())
        }
        LayerKind::Step(step) => render_step(out, image, context, step, stage),
    }
}

fn render_files(
    out: &mut String,
    image: &Image,
    context: &Path,
    files: &FilesLayer,
    stage: &mut Stage,
) -> Result<(), RenderError> {
    let mut modes = Vec::new();
    for s in &files.sources {
        let chown = s.owner.map(|(u, g)| format!(" --chown={u}:{g}")).unwrap_or_default();
        match &s.kind {
            SourceKind::Dir(d) => {
                let src = in_context(image, context, &d.path)?;
                if !d.include.is_empty() || !d.exclude.is_empty() {
                    writeln!(out, "# quarry filters this directory: include {:?}, exclude {:?}", d.include, d.exclude)
                        .unwrap();
                }
                writeln!(out, "COPY{chown} {} {}", q(&format!("{src}/")), q(&dest_dir(&s.dest))).unwrap();
            }
            SourceKind::File(f) => {
                let src = in_context(image, context, &f.path)?;
                writeln!(out, "COPY{chown} {} {}", q(&src), q(&s.dest)).unwrap();
                if let Some(m) = f.mode {
                    let name = Path::new(&src).file_name().unwrap_or_default().to_string_lossy();
                    let target = if s.dest.ends_with('/') { format!("{}{name}", s.dest) } else { s.dest.clone() };
                    modes.push((target, m));
                }
            }
            SourceKind::Archive(a) => {
                let src = in_context(image, context, &a.path)?;
                let zip = src.ends_with(".zip") || src.ends_with(".whl");
                if a.strip_components == 0 && a.map.is_empty() && !zip {
                    writeln!(out, "ADD{chown} {} {}", q(&src), q(&dest_dir(&s.dest))).unwrap();
                } else {
                    // ADD cannot strip components or place parts: unpack in a RUN.
                    let tmp = "/tmp/quarry-archive";
                    writeln!(
                        out,
                        "COPY {} {}",
                        q(&src),
                        q(&format!("{tmp}/{}", Path::new(&src).file_name().unwrap_or_default().to_string_lossy()))
                    )
                    .unwrap();
                    let name = Path::new(&src).file_name().unwrap_or_default().to_string_lossy().into_owned();
                    let unpack = if zip {
                        format!("cd {tmp} && mkdir x && cd x && unzip -q ../{name}")
                    } else {
                        format!("cd {tmp} && mkdir x && tar -xf {name} -C x --strip-components={}", a.strip_components)
                    };
                    let place = if a.map.is_empty() {
                        format!("mkdir -p {0} && cp -a {tmp}/x/. {0}/", s.dest)
                    } else {
                        a.map
                            .iter()
                            .map(|(from, to)| format!("mkdir -p {to} && cp -a {tmp}/x/{from}/. {to}/"))
                            .collect::<Vec<_>>()
                            .join(" && ")
                    };
                    writeln!(out, "RUN {unpack} && {place} && rm -rf {tmp}").unwrap();
                }
            }
            SourceKind::Remove => {}
            SourceKind::Pypi(p) => render_pypi_source(out, image, s, p),
            SourceKind::Wheels(w) => {
                // pip resolves the same set from the wheelhouse; it installs
                // into the image's Python rather than under `dest`.
                let src = in_context(image, context, &w.dir)?;
                let what = match &w.extra {
                    Some(e) => format!("the wheels `{e}` adds"),
                    None => "the host set".into(),
                };
                writeln!(out, "# quarry installs {what} of this wheelhouse natively (see the wheels page)").unwrap();
                writeln!(out, "COPY {} /tmp/quarry-wheels/", q(&format!("{src}/"))).unwrap();
                writeln!(
                    out,
                    "RUN python3 -m pip install --no-index --find-links /tmp/quarry-wheels /tmp/quarry-wheels/*.whl \\\n    && rm -rf /tmp/quarry-wheels"
                )
                .unwrap();
            }
            SourceKind::Rocm(_) => {
                writeln!(out, "# a ROCm dist tree: copy it into rocm-dist/ in the context, or, for build artifacts,")
                    .unwrap();
                writeln!(out, "#   quarry rocm flatten --artifact-dir ARTIFACTS --output rocm-dist").unwrap();
                writeln!(out, "COPY{chown} \"rocm-dist/\" {}", q(&dest_dir(&s.dest))).unwrap();
            }
            SourceKind::RocmArtifacts(r) => {
                writeln!(out, "# ROCm artifacts from {}: flatten them first with", r.dir.display()).unwrap();
                writeln!(out, "#   quarry rocm flatten --artifact-dir {} --output rocm-dist", r.dir.display()).unwrap();
                writeln!(out, "COPY{chown} \"rocm-dist/\" {}", q(&dest_dir(&s.dest))).unwrap();
            }
        }
        if !s.remove.is_empty() {
            writeln!(out, "RUN rm -rf {}", s.remove.join(" ")).unwrap();
        }
    }
    render_modes(out, stage, &modes);
    if !files.remove.is_empty() {
        writeln!(out, "RUN rm -rf {}", files.remove.join(" ")).unwrap();
    }
    Ok(())
}

fn render_step(
    out: &mut String,
    image: &Image,
    context: &Path,
    step: &StepLayer,
    stage: &mut Stage,
) -> Result<(), RenderError> {
    let run = &step.run;
    {
        for input in &step.inputs {
            match &input.kind {
                InputKind::File(p) => {
                    writeln!(out, "COPY {} {}", q(&in_context(image, context, p)?), q(&input.dest)).unwrap();
                }
                InputKind::Pypi(req) => {
                    let req = crate::pypi::resolved(req, image.platform.arch);
                    writeln!(out, "# pypi `{}`: fetch it into the context first with", req.requirement).unwrap();
                    writeln!(out, "#   {}", crate::pypi::pip_command_line(&req, "pypi")).unwrap();
                    if let Some(sha) = &input.sha256 {
                        writeln!(out, "# pinned sha256: {}", sha.hex()).unwrap();
                    }
                    let dest = if input.dest.ends_with('/') { input.dest.clone() } else { format!("{}/", input.dest) };
                    writeln!(out, "COPY {} {}", q(&format!("pypi/{}", crate::pypi::file_glob(&req))), q(&dest))
                        .unwrap();
                }
            }
        }
        for (k, v) in &run.env {
            writeln!(out, "ENV {k}={}", q(v)).unwrap();
        }
        if let Some(w) = &run.workdir {
            writeln!(out, "WORKDIR {w}").unwrap();
        }
        if let Some(u) = &run.user {
            writeln!(out, "USER {u}").unwrap();
            stage.user = Some(u.clone());
        }
        // `RUN --network=none` needs BuildKit; the classic builder refuses
        // the flag, so the file says it in a comment instead.
        if !run.network {
            writeln!(
                out,
                "# quarry runs this step without network (`docker build --network none` does so for every RUN)"
            )
            .unwrap();
        }
        let shell = run.shell.clone().unwrap_or_else(|| vec!["/bin/sh".into(), "-ec".into()]);
        let mut args = shell;
        args.push(run.script.clone());
        writeln!(out, "RUN {}", exec_form(&args)).unwrap();
    }
    Ok(())
}

/// A `packages` layer as apt in a RUN: the versions the image's lock pins
/// for the layer when there is one, else the names as the definition gives them.
fn render_packages_layer(out: &mut String, image: &Image, layer: &Layer, p: &crate::definition::PackageSet) {
    let pinned: Option<Vec<String>> =
        crate::plan::lockfile::LockFile::read(&crate::plan::lockfile::lock_path(&image.file))
            .ok()
            .flatten()
            .and_then(|l| l.layer.get(&layer.name).cloned())
            .filter(|l| l.include == p.include)
            .map(|l| l.packages.iter().map(|x| format!("{}={}", x.name, x.version)).collect());
    if pinned.is_none() {
        writeln!(
            out,
            "# packages from {} ({}); `quarry lock` pins their versions",
            p.suites.join(", "),
            p.components.join(" ")
        )
        .unwrap();
    }
    let list = pinned.unwrap_or_else(|| p.include.clone());
    writeln!(
        out,
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} && rm -rf /var/lib/apt/lists/*",
        list.join(" ")
    )
    .unwrap();
}

/// A `pypi` source: the wheel is copied in from `pypi/` in the context and
/// unpacked as quarry does (see `source::wheel_install`), with `unzip` and a shell.
fn render_pypi_source(
    out: &mut String,
    image: &Image,
    s: &crate::definition::Source,
    p: &crate::definition::PypiSource,
) {
    let (site_packages, bin) = (&p.site_packages, &p.bin);
    let req = crate::pypi::resolved(&p.request, image.platform.arch);
    let dest = s.dest.trim_end_matches('/');
    let dest = if dest.is_empty() { "" } else { dest };
    let sp = if site_packages.starts_with('/') { site_packages.to_string() } else { format!("{dest}/{site_packages}") };
    let tmp = "/tmp/quarry-pypi";
    writeln!(out, "# pypi `{}`: fetch the wheel into the context first with", req.requirement).unwrap();
    writeln!(out, "#   {}", crate::pypi::pip_command_line(&req, "pypi")).unwrap();
    if let Some(sha) = &p.sha256 {
        writeln!(out, "# pinned sha256: {}", sha.hex()).unwrap();
    }
    writeln!(
        out,
        "# installed like `pip install --prefix {dest}`, without Python: programs the wheel ships under bin/"
    )
    .unwrap();
    writeln!(out, "# are linked into {dest}/bin in place of their console scripts (needs unzip in the image)").unwrap();
    writeln!(out, "COPY {} {}", q(&format!("pypi/{}", crate::pypi::file_glob(&req))), q(&format!("{tmp}/"))).unwrap();
    let mut links = String::new();
    for (name, path) in bin {
        links.push_str(&format!(" && ln -sfn {sp}/{path} {dest}/bin/{name}"));
    }
    let lines = [
        format!("RUN set -e; cd {tmp} && unzip -q *.whl -d w && cd w && mkdir -p {dest}/bin {sp} &&"),
        "for d in *.data; do [ -d \"$d\" ] || continue;".to_string(),
        format!("  if [ -d \"$d/scripts\" ]; then cp -a \"$d/scripts/.\" {dest}/bin/; fi;"),
        format!("  if [ -d \"$d/data\" ]; then cp -a \"$d/data/.\" {dest}/; fi;"),
        "  for l in purelib platlib; do if [ -d \"$d/$l\" ]; then cp -a \"$d/$l/.\" .; fi; done; rm -rf \"$d\"; done &&"
            .to_string(),
        format!("cp -a . {sp}/ &&"),
        "for n in $(sed -n '/^\\[console_scripts\\]/,/^\\[/s/^ *\\([A-Za-z0-9._-]*\\) *=.*/\\1/p' *.dist-info/entry_points.txt 2>/dev/null); do"
            .to_string(),
        "  t=$(find . -path \"*/bin/$n\" -type f -perm -u+x | sort | head -n1);".to_string(),
        format!("  if [ -n \"$t\" ] && [ ! -e {dest}/bin/$n ]; then ln -s {sp}/${{t#./}} {dest}/bin/$n; fi; done{links} &&"),
        format!("rm -rf {tmp}"),
    ];
    writeln!(out, "{}", lines.join(" \\\n    ")).unwrap();
}

/// A `packages` base as the distro's own image plus apt: the nearest a
/// Dockerfile gets (its package versions are not pinned like quarry's lock).
fn render_packages_base(out: &mut String, p: &crate::definition::PackagesBase, stage: &str) {
    let distro = if p.keyring.image_path().to_string_lossy().contains("ubuntu") { "ubuntu" } else { "debian" };
    writeln!(out, "FROM {distro}:{}{stage}", p.suite()).unwrap();
    if !p.include.is_empty() {
        writeln!(
            out,
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} && rm -rf /var/lib/apt/lists/*",
            p.include.join(" ")
        )
        .unwrap();
    }
    for (name, gid) in &p.groups {
        writeln!(out, "RUN getent group {name} || groupadd -g {gid} {name}").unwrap();
    }
    for u in &p.users {
        let mut cmd = String::new();
        for g in &u.groups {
            cmd.push_str(&format!("(getent group {g} || groupadd -r {g}) && "));
        }
        let groups = if u.groups.is_empty() { String::new() } else { format!(" -G {}", u.groups.join(",")) };
        let shell = u.shell.clone().unwrap_or_else(|| "/bin/bash".into());
        cmd.push_str(&format!("useradd -m -u {} -s {shell}{groups} {}", u.uid, u.name));
        if u.sudo {
            cmd.push_str(&format!(
                " && echo '{0} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{0} && chmod 0440 /etc/sudoers.d/{0}",
                u.name
            ));
        }
        writeln!(out, "RUN {cmd}").unwrap();
    }
}

/// Render `image` as a Dockerfile whose build context is `context`.
pub fn render(image: &Image, context: &Path) -> Result<String, RenderError> {
    let mut out = String::new();
    let rel_file = in_context(image, context, &image.file).unwrap_or_else(|_| image.file.display().to_string());
    writeln!(out, "# Generated by `quarry dockerfile {rel_file}`: do not edit; edit the definition and render again.")
        .unwrap();
    writeln!(out, "# Build context: the repository root. quarry's own builds are reproducible; docker's are not.")
        .unwrap();
    if !image.params.is_empty() {
        let shown: Vec<String> = image.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(out, "# Parameters: {}", shown.join(" ")).unwrap();
    }
    render_stage(&mut out, image, context, None)?;
    Ok(out)
}

/// A setting an image gets from its `image` base, when one of them sets it.
fn inherited(image: &Image, get: impl Fn(&crate::definition::ConfigDef) -> Option<String> + Copy) -> Option<String> {
    match &image.base {
        Base::Image(base) => get(&base.config).or_else(|| inherited(base, get)),
        _ => None,
    }
}

/// The base at the bottom of a chain of `image` bases.
fn root_base(image: &Image) -> &Base {
    match &image.base {
        Base::Image(b) => root_base(b),
        other => other,
    }
}

/// A docker stage name for an image name (lowercase letters, digits, `-_.`).
fn stage_name(name: &str) -> String {
    let n: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' })
        .collect();
    if n.starts_with(|c: char| c.is_ascii_lowercase()) {
        n
    } else {
        format!("base-{n}")
    }
}

/// One image as a Dockerfile stage (`FROM ... AS alias` when `alias` is given).
/// An `image` base becomes an earlier stage of the same file.
fn render_stage(out: &mut String, image: &Image, context: &Path, alias: Option<&str>) -> Result<(), RenderError> {
    let stage = alias.map(|a| format!(" AS {a}")).unwrap_or_default();
    match &image.base {
        Base::Packages(p) => render_packages_base(out, p, &stage),
        Base::Scratch => writeln!(out, "FROM scratch{stage}").unwrap(),
        Base::Registry { reference } => writeln!(out, "FROM {reference}{stage}").unwrap(),
        Base::Rootfs(crate::definition::RootfsBase { path, .. }) => {
            writeln!(out, "FROM scratch{stage}").unwrap();
            writeln!(out, "ADD {} /", q(&in_context(image, context, path)?)).unwrap();
        }
        Base::Oci { path, reference } => {
            let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_else(|| "base".into());
            writeln!(out, "# the `oci` base {}: load it first (quarry load {})", path.display(), path.display())
                .unwrap();
            writeln!(out, "FROM {name}:{}{stage}", reference.clone().unwrap_or_else(|| "latest".into())).unwrap();
        }
        Base::Image(base) => {
            let name = stage_name(&base.name);
            let rel = in_context(base, context, &base.file).unwrap_or_else(|_| base.file.display().to_string());
            writeln!(out, "# base: the image of {rel}, as a stage").unwrap();
            render_stage(out, base, context, Some(&name))?;
            writeln!(out, "\n# {}", image.name).unwrap();
            writeln!(out, "FROM {name}{stage}").unwrap();
        }
    }
    // Every base but scratch is a Linux root filesystem with coreutils.
    let mut state =
        Stage { has_tools: !matches!(root_base(image), Base::Scratch), user: inherited(image, |c| c.user.clone()) };
    for layer in &image.layers {
        render_layer(out, image, context, layer, &mut state)?;
    }
    let c = &image.config;
    writeln!(out).unwrap();
    if let Some(p) = &c.platform {
        writeln!(out, "# platform: {p}").unwrap();
    }
    for (k, v) in &c.env {
        writeln!(out, "ENV {k}={}", q(v)).unwrap();
    }
    for (k, v) in &c.labels {
        writeln!(out, "LABEL {}={}", q(k), q(v)).unwrap();
    }
    for p in &c.exposed_ports {
        writeln!(out, "EXPOSE {p}").unwrap();
    }
    for v in &c.volumes {
        writeln!(out, "VOLUME {}", q(v)).unwrap();
    }
    // A step's WORKDIR and USER would otherwise stay in force: restate the
    // inherited ones.
    if let Some(w) = c.workdir.clone().or_else(|| inherited(image, |c| c.workdir.clone())) {
        writeln!(out, "WORKDIR {w}").unwrap();
    }
    if let Some(u) = c.user.clone().or_else(|| inherited(image, |c| c.user.clone())) {
        writeln!(out, "USER {u}").unwrap();
    }
    if let Some(s) = &c.stop_signal {
        writeln!(out, "STOPSIGNAL {s}").unwrap();
    }
    if let Some(e) = &c.entrypoint {
        writeln!(out, "ENTRYPOINT {}", exec_form(e)).unwrap();
    }
    if let Some(cmd) = &c.cmd {
        writeln!(out, "CMD {}", exec_form(cmd)).unwrap();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalization() {
        assert_eq!(lexical(Path::new("/a/b/../c/./d")), PathBuf::from("/a/c/d"));
        assert_eq!(
            exec_form(&["/bin/sh".into(), "-c".into(), "echo \"hi\"".into()]),
            r#"["/bin/sh", "-c", "echo \"hi\""]"#
        );
    }

    #[test]
    fn packages_layer_renders_as_apt_get_pinned_by_the_lock() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("img.toml");
        std::fs::write(
            &f,
            "name = \"x\"\nbase = { registry = \"r/x@sha256:00\" }\n[config]\nplatform = \"linux/amd64\"\n[[layer]]\nname = \"tools\"\n[[layer.source]]\n[layer.source.packages]\nsuite = \"bookworm\"\nmirror = \"host\"\nkeyring = \"k.gpg\"\ninclude = [\"jq\"]\n",
        )
        .unwrap();
        let image = crate::definition::load_image(&f, &Default::default()).unwrap();
        let out = render(&image, d.path()).unwrap();
        assert!(out.contains("apt-get install -y --no-install-recommends jq &&"), "{out}");
        let pin = |n: &str, v: &str| crate::distro::pins::PinnedPackage {
            name: n.into(),
            version: v.into(),
            architecture: "amd64".into(),
            suite: None,
            priority: None,
            file: format!("pool/{n}.deb"),
            sha256: "0".repeat(64),
            size: 1,
        };
        let layer = crate::distro::pins::PackagePins {
            suites: vec!["bookworm".into()],
            architecture: "amd64".into(),
            components: vec!["main".into()],
            variant: None,
            include: vec!["jq".into()],
            release: [("bookworm".to_string(), "sha256:00".to_string())].into(),
            below: Some("none".into()),
            packages: vec![pin("jq", "1.6-2.1"), pin("libjq1", "1.6-2.1")],
        };
        let mut file =
            crate::plan::lockfile::LockFile { version: crate::plan::lockfile::LOCK_VERSION, ..Default::default() };
        file.layer.insert("tools".into(), layer);
        file.write(&crate::plan::lockfile::lock_path(&f)).unwrap();
        let out = render(&image, d.path()).unwrap();
        assert!(out.contains("--no-install-recommends jq=1.6-2.1 libjq1=1.6-2.1 &&"), "{out}");
    }
}
