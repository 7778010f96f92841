//! A matrix file (TOML): one job, described once, over axes of values.
//!
//! ```toml
//! name = "msgpack"                       # default: the file's stem
//! [job]
//! kind = "wheel"                         # wheel | kernel | image
//! source = { pypi = "msgpack==1.1.0", sha256 = "..." }   # or "path/to/project" (or an sdist; may name axes)
//! # a version axis: the requirement is a template, one sha256 per requirement it becomes
//! # source = { pypi = "flash-attn=={flash_attn}", sha256 = { "flash-attn==2.8.3" = "..." } }
//! image = "../../images/hip-builder-debian13.toml"       # a definition, an OCI layout or an engine image
//!                                        # (wheel and kernel jobs: an engine image may be a template,
//!                                        #  "builder:rocm{rocm}", one image per cell)
//! local_version = "o{opt}"              # wheels: a PEP 440 local label from axis values
//! lock = "msgpack.lock"                 # wheels: the build requirements' lock, shared by every cell
//! repair = false                        # wheels
//! split = false                         # wheels: host + per-target device wheels
//! merge = false                         # wheels: one shard per `targets` value, merged by collect
//!                                       #  (or split = "by-target"; see `sharding`)
//! command = ["make"]                    # kernels: the build command
//! outputs = ["build/libk.so"]           # kernels: what it writes (default build/ and /out)
//! [job.env]                             # the build's environment, filled from axis values
//! CFLAGS = "-O{opt}"
//! [job.env_for.opt.3]                   # variables only in cells whose `opt` is `3`
//! LDFLAGS = "-flto"
//! [axes]                                # every combination of these values is a cell
//! python = ["cp313"]                    # special: the Python (wheels)
//! targets = ["gfx90a,gfx942"]           # special: the GPU targets
//! opt = ["2", "3"]
//! [[exclude]]                           # cells matching every key are left out
//! opt = "3"
//! [[include]]                           # cells added as written (every axis named)
//! python = "cp313"
//! opt = "s"
//! needs = { gpus = 1 }                  # an included cell may need more
//! [needs]                               # what each cell asks its scheduler for
//! gpus = 0
//! cpus = 2
//! memory = "4G"
//! [cache]
//! registry = "127.0.0.1:5000/quarry-cache"   # the shared cache and where products go
//! ```
//! Axes are taken in name order (TOML tables are unordered). Paths are
//! relative to the matrix file. Every error names the file and the field.
//!
//! Over 400 lines: 45 of them are tests (the code is under 400).

pub use super::source::JobSource;
use super::source::RawSource;
pub use super::template::{fill, placeholders};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct MatrixFileError {
    pub file: String,
    pub field: String,
    pub message: String,
}

/// What each cell builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Wheel,
    Kernel,
    Image,
}

/// What a cell asks its scheduler for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    #[serde(default)]
    pub gpus: u32,
    #[serde(default = "default_cpus")]
    pub cpus: u32,
    /// Slurm's and Kubernetes' spelling: `4G`, `512M`.
    #[serde(default = "default_memory")]
    pub memory: String,
}

fn default_cpus() -> u32 {
    2
}

fn default_memory() -> String {
    "4G".into()
}

impl Default for Needs {
    fn default() -> Needs {
        Needs { gpus: 0, cpus: default_cpus(), memory: default_memory() }
    }
}

#[derive(Debug, Clone)]
pub struct Job {
    pub kind: JobKind,
    pub source: Option<JobSource>,
    /// A definition (.toml), an OCI layout, or an engine image (as `--image` takes it).
    pub image: String,
    pub local_version: Option<String>,
    pub lock: Option<PathBuf>,
    pub repair: bool,
    /// Wheel jobs: split each wheel into host and device wheels.
    pub split: bool,
    /// Wheel jobs: each cell is a shard for its GPU targets; `collect`
    /// merges the cells that differ only in them (see `sharding`).
    pub merge: bool,
    pub exclude: Vec<String>,
    pub test: Option<String>,
    pub isolation: bool,
    pub command: Vec<String>,
    pub outputs: Vec<String>,
    /// `NAME = "template with {axis}"`.
    pub env: BTreeMap<String, String>,
    /// Axis -> value -> variables set only in cells with that value.
    pub env_for: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>,
    /// Image jobs: `--set NAME=template`.
    pub set: BTreeMap<String, String>,
}

impl Job {
    /// The image names axis values: an engine image per cell.
    pub fn image_is_template(&self) -> bool {
        !placeholders(&self.image).is_empty()
    }
}

/// A parsed, checked matrix file.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub file: PathBuf,
    pub name: String,
    pub job: Job,
    /// Axis name -> values, in name order.
    pub axes: BTreeMap<String, Vec<String>>,
    pub exclude: Vec<BTreeMap<String, String>>,
    pub include: Vec<(BTreeMap<String, String>, Option<Needs>)>,
    pub needs: Needs,
    pub registry: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: Option<String>,
    job: RawJob,
    #[serde(default)]
    axes: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    exclude: Vec<BTreeMap<String, String>>,
    #[serde(default)]
    include: Vec<RawInclude>,
    #[serde(default)]
    needs: Option<Needs>,
    #[serde(default)]
    cache: Option<RawCache>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    registry: Option<String>,
}

#[derive(serde::Deserialize)]
struct RawInclude {
    needs: Option<Needs>,
    #[serde(flatten)]
    values: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    kind: JobKind,
    source: Option<RawSource>,
    image: String,
    local_version: Option<String>,
    lock: Option<String>,
    #[serde(default)]
    repair: bool,
    split: Option<super::split_mode::RawSplit>,
    #[serde(default)]
    merge: bool,
    #[serde(default)]
    exclude: Vec<String>,
    test: Option<String>,
    #[serde(default = "yes")]
    isolation: bool,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    env_for: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    set: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

/// Memory as Slurm's `--mem` takes it and `emit` turns into a Kubernetes
/// quantity: digits, then at most one of K, M, G, T (no suffix: megabytes).
fn valid_memory(m: &str) -> bool {
    let digits = m.strip_suffix(['K', 'M', 'G', 'T']).unwrap_or(m);
    !digits.is_empty() && digits.len() <= 12 && digits.bytes().all(|b| b.is_ascii_digit()) && digits != "0"
}

/// An axis name: what `{name}` templates and cell ids use.
fn valid_axis(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Matrix {
    pub fn load(file: &Path) -> Result<Matrix, MatrixFileError> {
        let err = |field: &str, message: String| MatrixFileError {
            file: file.display().to_string(),
            field: field.to_string(),
            message,
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            err(
                "(file)",
                format!("cannot read it: {e}; give a matrix file (see docs/cache-and-matrices.md, Build matrices)"),
            )
        })?;
        let raw: Raw = toml::from_str(&text).map_err(|e| err("(syntax)", e.message().to_string()))?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let name = match raw.name {
            Some(n) => n,
            None => file.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
        };
        let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(err("name", format!("`{name}`: use letters, digits, `-`, `_` and `.`")));
        }
        for (axis, values) in &raw.axes {
            if !valid_axis(axis) {
                return Err(err(
                    &format!("axes.{axis}"),
                    "an axis name is lowercase letters, digits and `_`, starting with a letter".into(),
                ));
            }
            if values.is_empty() {
                return Err(err(&format!("axes.{axis}"), "give at least one value".into()));
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(v) = values.iter().find(|v| !seen.insert(v.as_str())) {
                return Err(err(&format!("axes.{axis}"), format!("`{v}` is listed twice")));
            }
        }
        let known = |field: &str, m: &BTreeMap<String, String>| -> Result<(), MatrixFileError> {
            match m.keys().find(|k| !raw.axes.contains_key(*k)) {
                Some(k) => Err(err(field, format!("`{k}` is no axis (axes: {})", axis_list(&raw.axes)))),
                None => Ok(()),
            }
        };
        for (i, e) in raw.exclude.iter().enumerate() {
            known(&format!("exclude[{i}]"), e)?;
        }
        for (i, inc) in raw.include.iter().enumerate() {
            known(&format!("include[{i}]"), &inc.values)?;
            if let Some(missing) = raw.axes.keys().find(|a| !inc.values.contains_key(*a)) {
                return Err(err(&format!("include[{i}]"), format!("name every axis: `{missing}` is missing")));
            }
            if let Some(j) = raw.include[..i].iter().position(|o| o.values == inc.values) {
                return Err(err(
                    &format!("include[{i}]"),
                    format!("names the same cell as include[{j}]: give its needs once"),
                ));
            }
        }
        for (field, needs) in std::iter::once(("needs".to_string(), raw.needs.as_ref()))
            .chain(raw.include.iter().enumerate().map(|(i, inc)| (format!("include[{i}].needs"), inc.needs.as_ref())))
        {
            if let Some(n) = needs.filter(|n| !valid_memory(&n.memory)) {
                return Err(err(
                    &format!("{field}.memory"),
                    format!("`{}` is not an amount of memory: a whole number with K, M, G or T (`4G`, `512M`), as Slurm's --mem and Kubernetes' resources take it", n.memory),
                ));
            }
            if let Some(n) = needs.filter(|n| n.cpus == 0) {
                return Err(err(&format!("{field}.cpus"), format!("is {}: a cell needs at least one CPU", n.cpus)));
            }
        }
        let j = raw.job;
        let source = match j.source {
            None => None,
            Some(raw) => Some(raw.resolve(dir).map_err(|(field, message)| err(field, message))?),
        };
        match (j.kind, &source) {
            (JobKind::Wheel | JobKind::Kernel, None) => {
                return Err(err(
                    "job.source",
                    "wheel and kernel jobs build a project: give its path or { pypi, sha256 }".into(),
                ))
            }
            (JobKind::Kernel, Some(JobSource::Pypi { .. })) => {
                return Err(err("job.source", "a kernel job builds a project directory".into()))
            }
            _ => {}
        }
        let (split, merge) = super::split_mode::resolve(j.split, j.merge, j.kind == JobKind::Wheel, &raw.axes)
            .map_err(|(field, message)| err(field, message))?;
        if j.kind == JobKind::Kernel && j.command.is_empty() {
            return Err(err("job.command", "a kernel job needs its build command, e.g. [\"make\"]".into()));
        }
        // The image is a path when it names a file or directory beside the matrix.
        let image = if dir.join(&j.image).exists() { dir.join(&j.image).display().to_string() } else { j.image };
        let job = Job {
            kind: j.kind,
            source,
            image,
            local_version: j.local_version,
            lock: j.lock.map(|l| dir.join(l)),
            repair: j.repair,
            split,
            merge,
            exclude: j.exclude,
            test: j.test,
            isolation: j.isolation,
            command: j.command,
            outputs: j.outputs,
            env: j.env,
            env_for: j.env_for,
            set: j.set,
        };
        let m = Matrix {
            file: file.to_path_buf(),
            name,
            job,
            axes: raw.axes,
            exclude: raw.exclude,
            include: raw.include.into_iter().map(|i| (i.values, i.needs)).collect(),
            needs: raw.needs.unwrap_or_default(),
            registry: raw.cache.and_then(|c| c.registry),
        };
        m.check_templates().map_err(|(field, message)| err(&field, message))?;
        Ok(m)
    }

    /// Every `{axis}` in a template names an axis.
    fn check_templates(&self) -> Result<(), (String, String)> {
        let mut templates: Vec<(String, &str)> = Vec::new();
        if let Some(t) = &self.job.local_version {
            templates.push(("job.local_version".into(), t));
        }
        if self.job.image_is_template() {
            if self.job.kind == JobKind::Image {
                return Err((
                    "job.image".into(),
                    "an image job builds one definition: give its path, and per-cell parameters in [job.set]".into(),
                ));
            }
            templates.push(("job.image".into(), &self.job.image));
        }
        let path_source = match &self.job.source {
            Some(JobSource::Path(p)) => Some(p.to_string_lossy()),
            _ => None,
        };
        match (&self.job.source, &path_source) {
            (Some(JobSource::Pypi { requirement, .. }), _) => templates.push(("job.source.pypi".into(), requirement)),
            (_, Some(p)) => templates.push(("job.source".into(), p)),
            _ => {}
        }
        templates.extend(self.job.env.iter().map(|(k, v)| (format!("job.env.{k}"), v.as_str())));
        for (axis, by_value) in &self.job.env_for {
            let field = format!("job.env_for.{axis}");
            let Some(values) = self.axes.get(axis) else {
                return Err((field, format!("`{axis}` is no axis (axes: {})", axis_list(&self.axes))));
            };
            let included = |v: &str| self.include.iter().any(|(i, _)| i.get(axis).map(String::as_str) == Some(v));
            if let Some(v) = by_value.keys().find(|v| !values.contains(v) && !included(v)) {
                return Err((format!("{field}.{v}"), format!("`{v}` is no value of `{axis}`")));
            }
            for (v, vars) in by_value {
                templates.extend(vars.iter().map(|(k, t)| (format!("{field}.{v}.{k}"), t.as_str())));
            }
        }
        templates.extend(self.job.set.iter().map(|(k, v)| (format!("job.set.{k}"), v.as_str())));
        for (field, t) in templates {
            for name in placeholders(t) {
                if !self.axes.contains_key(&name) {
                    return Err((field, format!("`{{{name}}}` is no axis (axes: {})", axis_list(&self.axes))));
                }
            }
        }
        Ok(())
    }
}

fn axis_list(axes: &BTreeMap<String, Vec<String>>) -> String {
    if axes.is_empty() {
        "none".into()
    } else {
        axes.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Matrix, MatrixFileError> {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("m.toml");
        std::fs::write(&f, text).unwrap();
        Matrix::load(&f)
    }

    const BASE: &str = "[job]\nkind = \"wheel\"\nsource = \"proj\"\nimage = \"img:1\"\n";

    #[test]
    fn parses_and_names_what_is_wrong() {
        let m = load(&format!("{BASE}local_version = \"o{{opt}}\"\n[axes]\nopt = [\"2\", \"3\"]\n[needs]\ngpus = 1\n"))
            .unwrap();
        assert_eq!(m.name, "m");
        assert_eq!(m.axes["opt"], ["2", "3"]);
        assert_eq!(m.needs, Needs { gpus: 1, cpus: 2, memory: "4G".into() });
        assert!(!m.job.split);
        assert!(load(&format!("{BASE}split = true\n")).unwrap().job.split);
        for (text, field) in [
            (format!("{BASE}local_version = \"{{nope}}\"\n[axes]\nopt = [\"2\"]\n"), "job.local_version"),
            (format!("{BASE}[axes]\nOpt = [\"2\"]\n"), "axes.Opt"),
            (format!("{BASE}[axes]\nopt = [\"2\", \"2\"]\n"), "axes.opt"),
            (format!("{BASE}[axes]\nopt = [\"2\"]\n[[exclude]]\nopz = \"2\"\n"), "exclude[0]"),
            (format!("{BASE}[axes]\nopt = [\"2\"]\npy = [\"cp311\"]\n[[include]]\nopt = \"3\"\n"), "include[0]"),
            ("[job]\nkind = \"kernel\"\nsource = \"p\"\nimage = \"i\"\n".to_string(), "job.command"),
            (
                "[job]\nkind = \"kernel\"\nsource = \"p\"\nimage = \"i\"\ncommand = [\"make\"]\nsplit = true\n"
                    .to_string(),
                "job.split",
            ),
            ("[job]\nkind = \"wheel\"\nimage = \"i\"\n".to_string(), "job.source"),
            (format!("{BASE}[axes]\nopt = [\"2\"]\n[job.env_for.opt.9]\nX = \"1\"\n"), "job.env_for.opt.9"),
            (format!("{BASE}[axes]\nopt = [\"2\"]\n[job.env_for.nope.2]\nX = \"1\"\n"), "job.env_for.nope"),
            (format!("{BASE}[axes]\nopt = [\"2\"]\n[job.env_for.opt.2]\nX = \"{{nope}}\"\n"), "job.env_for.opt.2.X"),
            ("[job]\nkind = \"image\"\nimage = \"i{opt}.toml\"\n[axes]\nopt = [\"2\"]\n".to_string(), "job.image"),
            (
                "[job]\nkind = \"wheel\"\nimage = \"i\"\nsource = { pypi = \"p=={v}\", sha256 = \"".to_string()
                    + &"a".repeat(64)
                    + "\" }\n[axes]\nv = [\"1\", \"2\"]\n",
                "job.source.sha256",
            ),
        ] {
            let e = load(&text).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }
}
