//! Loading a definition: read the image file and the layer files it names,
//! gather parameters (layer defaults < image `[params]` < `--set`),
//! substitute `${NAME}` everywhere, then validate into typed values. An
//! `image` base is loaded the same way, with this image's parameters.

use super::image::{Base, Image};
use super::params::{subst_value, SubstError};
use super::raw::{ImageFile, LayerBody};
use super::validate::{validate_base, validate_config, validate_layer, ValidBase};
use super::{field_err, DefinitionError};
use crate::platform::Platform;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn read(what: &'static str, file: &Path) -> Result<String, DefinitionError> {
    std::fs::read_to_string(file).map_err(|err| DefinitionError::Read { what, file: file.display().to_string(), err })
}

fn parse_err(file: &Path, e: impl std::fmt::Display) -> DefinitionError {
    DefinitionError::Parse { file: file.display().to_string(), message: e.to_string().trim_end().to_string() }
}

fn subst_err(file: &Path, e: SubstError) -> DefinitionError {
    match e {
        SubstError::Unset(u) => field_err(
            file,
            u.field,
            format!(
                "parameter `${{{}}}` is not set; pass `--set {}=VALUE` or declare a default under [params]",
                u.name, u.name
            ),
        ),
        SubstError::Syntax(s) => field_err(file, s.field, s.message),
    }
}

/// An OCI repository name (the distribution spec's grammar): components
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` joined by `/`. Nothing like `..`, an
/// absolute path or an upper-case letter gets through, so `out/NAME` stays
/// inside `out/` and the tag is valid.
fn valid_repository(name: &str) -> bool {
    let component = |c: &str| {
        let b = c.as_bytes();
        let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
        if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
            return false;
        }
        let mut i = 0;
        while i < b.len() {
            if alnum(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !alnum(b[i]) {
                i += 1;
            }
            let sep = &c[start..i];
            if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
                return false;
            }
        }
        true
    };
    name.len() <= 255 && name.split('/').all(component)
}

/// An OCI tag: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn valid_tag(tag: &str) -> bool {
    let b = tag.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|x| x.is_ascii_alphanumeric() || b"._-".contains(x))
}

/// Find `layers/NAME.toml` in the parent of the image's directory, else beside the image.
pub fn find_layer_file(image_file: &Path, name: &str) -> Option<PathBuf> {
    let dir = image_file.parent().unwrap_or(Path::new("."));
    let mut candidates = Vec::new();
    if let Some(parent) = dir.parent() {
        candidates.push(parent.join("layers").join(format!("{name}.toml")));
    }
    candidates.push(dir.join("layers").join(format!("{name}.toml")));
    candidates.push(dir.join(format!("{name}.toml")));
    candidates.into_iter().find(|p| p.is_file())
}

/// Parameter values by name (`--set K=V`, `[params]`).
pub type Params = BTreeMap<String, String>;

/// Parse `--set K=V` arguments.
pub fn parse_sets(sets: &[String]) -> Result<Params, DefinitionError> {
    let mut m = BTreeMap::new();
    for s in sets {
        let (k, v) = s.split_once('=').ok_or_else(|| DefinitionError::SetNoValue { set: s.clone() })?;
        if k.is_empty() {
            return Err(DefinitionError::SetEmptyKey { set: s.clone() });
        }
        m.insert(k.to_string(), v.to_string());
    }
    Ok(m)
}

/// Load an image definition and every layer it names. A `--set` of a
/// parameter that no definition involved declares or uses is an error
/// naming the known ones (a misspelt name would otherwise be ignored).
pub fn load_image(file: &Path, sets: &BTreeMap<String, String>) -> Result<Image, DefinitionError> {
    let mut known = BTreeSet::new();
    let image = load_image_in(file, sets, &mut Vec::new(), &mut known)?;
    if let Some(name) = sets.keys().find(|k| !known.contains(*k)) {
        return Err(DefinitionError::UnknownParam {
            file: file.display().to_string(),
            name: name.clone(),
            hint: super::params::suggest(name, &known),
        });
    }
    Ok(image)
}

/// `chain`: the definitions whose `image` bases led here, to refuse cycles.
/// `known`: every parameter the definitions declare or refer to, gathered.
fn load_image_in(
    file: &Path,
    sets: &BTreeMap<String, String>,
    chain: &mut Vec<PathBuf>,
    known: &mut BTreeSet<String>,
) -> Result<Image, DefinitionError> {
    let text = read("image definition", file)?;
    known.extend(super::params::referenced(&text));
    // First pass: structure and unknown fields, with line numbers.
    let parsed: ImageFile = toml::from_str(&text).map_err(|e| parse_err(file, e))?;
    let mut doc: toml::Value = toml::from_str(&text).map_err(|e| parse_err(file, e))?;

    // Layer files, read first so their [params] defaults are known.
    let mut layer_docs = Vec::new();
    for (i, name) in parsed.layers.iter().enumerate() {
        let lf = find_layer_file(file, name).ok_or_else(|| {
            field_err(
                file,
                format!("layers[{i}]"),
                format!(
                    "unknown layer `{name}`: no `layers/{name}.toml` next to the image's directory or beside the image file"
                ),
            )
        })?;
        let ltext = read("layer definition", &lf)?;
        known.extend(super::params::referenced(&ltext));
        let lparsed: LayerBody = toml::from_str(&ltext).map_err(|e| parse_err(&lf, e))?;
        if lparsed.name != *name {
            return Err(field_err(&lf, "name", format!("is `{}` but the file is named for `{name}`", lparsed.name)));
        }
        let ldoc: toml::Value = toml::from_str(&ltext).map_err(|e| parse_err(&lf, e))?;
        layer_docs.push((lf, lparsed.params.clone().unwrap_or_default(), ldoc));
    }

    let mut params: BTreeMap<String, String> = BTreeMap::new();
    for (_, defaults, _) in &layer_docs {
        params.extend(defaults.clone());
    }
    params.extend(parsed.params.clone());
    known.extend(params.keys().cloned());
    params.extend(sets.clone());

    subst_value(&mut doc, "", &params, &["params"]).map_err(|e| subst_err(file, e))?;
    let img: ImageFile = doc.try_into().map_err(|e| parse_err(file, e))?;
    let platform = match &img.config.platform {
        Some(p) => Platform::parse(p).map_err(|source| DefinitionError::Platform {
            file: file.display().to_string(),
            field: "config.platform".into(),
            source,
        })?,
        None => Platform::host(),
    };

    let mut layers = Vec::new();
    for (lf, _, mut ldoc) in layer_docs {
        subst_value(&mut ldoc, "", &params, &["params"]).map_err(|e| subst_err(&lf, e))?;
        let body: LayerBody = ldoc.try_into().map_err(|e| parse_err(&lf, e))?;
        layers.push(validate_layer(&lf, "", body, &platform)?);
    }
    for (i, body) in img.layer.into_iter().enumerate() {
        let prefix = format!("layer[{i}].");
        if body.params.is_some() {
            return Err(field_err(
                file,
                format!("{prefix}params"),
                "parameters of an image belong in its top-level [params] table",
            ));
        }
        layers.push(validate_layer(file, &prefix, body, &platform)?);
    }
    let mut seen = std::collections::BTreeSet::new();
    for l in &layers {
        if !seen.insert(l.name.clone()) {
            return Err(field_err(
                file,
                "layers",
                format!("layer `{}` appears twice; layer names must be unique", l.name),
            ));
        }
    }

    if img.name.is_empty() {
        return Err(field_err(file, "name", "must not be empty"));
    }
    if !valid_repository(&img.name) {
        return Err(field_err(
            file,
            "name",
            format!("`{}` is not an image name: lowercase letters and digits, parts joined by `.`, `_`, `__` or `-`, path components by `/` (as OCI repository names; it also names the output, out/NAME)", img.name),
        ));
    }
    if let Some(tag) = img.tag.as_deref().filter(|t| !valid_tag(t)) {
        return Err(field_err(
            file,
            "tag",
            format!("`{tag}` is not a tag: up to 128 letters, digits, `_`, `.` and `-`, not starting with `.` or `-`"),
        ));
    }
    validate_config(file, &img.config)?;
    let family = validate_family(file, &parsed, &params)?;
    let base = match validate_base(file, img.base, &platform)? {
        ValidBase::Done(b) => b,
        ValidBase::Image(path) => {
            Base::Image(Box::new(load_base_image(file, &path, &params, &platform, chain, known)?))
        }
    };
    Ok(Image {
        file: file.to_path_buf(),
        name: img.name,
        tag: img.tag.unwrap_or_else(|| "latest".into()),
        base,
        layers,
        config: img.config,
        platform,
        params,
        family,
    })
}

/// `[family]`: a parameter of `[params]` that the image's name or tag uses
/// (so each member is its own image), with distinct, non-empty values.
fn validate_family(
    file: &Path,
    parsed: &ImageFile,
    params: &BTreeMap<String, String>,
) -> Result<Option<super::image::Family>, DefinitionError> {
    let Some(f) = &parsed.family else { return Ok(None) };
    if !params.contains_key(&f.param) {
        return Err(field_err(
            file,
            "family.param",
            format!(
                "`{}` is not a parameter: declare it in [params] (its default is the member a plain load gives)",
                f.param
            ),
        ));
    }
    let used = format!("${{{}}}", f.param);
    if !parsed.name.contains(&used) && !parsed.tag.as_deref().is_some_and(|t| t.contains(&used)) {
        return Err(field_err(
            file,
            "family.param",
            format!("use `{used}` in `name` or `tag`, so that each member of the family is its own image"),
        ));
    }
    let mut seen = BTreeSet::new();
    if f.values.is_empty() {
        return Err(field_err(file, "family.values", "give at least one value"));
    }
    for (i, v) in f.values.iter().enumerate() {
        if v.is_empty() || !seen.insert(v) {
            return Err(field_err(file, format!("family.values[{i}]"), format!("`{v}` is empty or given twice")));
        }
    }
    Ok(Some(super::image::Family { param: f.param.clone(), values: f.values.clone() }))
}

/// Load the definition an `image` base names, with this image's parameters
/// (its own defaults < this image's [params] < --set); refuses cycles and a
/// platform other than this image's.
fn load_base_image(
    file: &Path,
    base_file: &Path,
    params: &BTreeMap<String, String>,
    platform: &Platform,
    chain: &mut Vec<PathBuf>,
    known: &mut BTreeSet<String>,
) -> Result<Image, DefinitionError> {
    let field = "base.image";
    if !base_file.is_file() {
        return Err(field_err(
            file,
            field,
            format!(
                "`{}` is not an image definition file (relative paths resolve from the directory of the file that names them)",
                base_file.display()
            ),
        ));
    }
    let me = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let next = base_file.canonicalize().unwrap_or_else(|_| base_file.to_path_buf());
    let mut path: Vec<PathBuf> = chain.clone();
    path.push(me);
    if path.contains(&next) {
        path.push(next);
        let shown: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
        return Err(field_err(
            file,
            field,
            format!("image bases form a cycle: {}; an image cannot be built on itself", shown.join(" -> ")),
        ));
    }
    let saved = std::mem::replace(chain, path);
    let loaded = load_image_in(base_file, params, chain, known);
    *chain = saved;
    let base = loaded?;
    if base.platform != *platform {
        return Err(field_err(
            file,
            field,
            format!(
                "`{}` is for {} but this image is for {platform}; set the same `config.platform` in both",
                base_file.display(),
                base.platform
            ),
        ));
    }
    Ok(base)
}
