//! Wheel file names: `{name}-{version}(-{build})?-{python}-{abi}-{platform}(-{variant})?.whl`,
//! each tag field possibly several tags joined with `.`; the variant label
//! is PEP 817's (`[0-9a-z._]`, at most 16 characters). Six fields are a
//! build tag when the third starts with a digit (a python tag never does),
//! else a variant label, as PEP 817 reads them.

use super::WheelError;
pub use crate::pypi::metadata::{normalize_name, variant_label_ok};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    /// The distribution name as written in the file name (`flash_attn`).
    pub name: String,
    /// The version as written in the file name (`2.8.3+rocm6.2torch2.5`).
    pub version: String,
    pub build: Option<String>,
    pub python_tags: Vec<String>,
    pub abi_tags: Vec<String>,
    pub platform_tags: Vec<String>,
    /// A PEP 817 variant wheel's label (`gfx942`).
    pub variant: Option<String>,
}

impl WheelName {
    /// Parse a wheel file name (the final component only).
    pub fn parse(file_name: &str) -> Result<WheelName, WheelError> {
        let bad = |why: &str| WheelError::BadName { name: file_name.to_string(), why: why.to_string() };
        let stem = file_name.strip_suffix(".whl").ok_or_else(|| bad("it does not end with `.whl`"))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let digit = |s: &str| s.starts_with(|c: char| c.is_ascii_digit());
        let (name, version, build, py, abi, plat, variant) = match parts.as_slice() {
            [n, v, p, a, pl] => (*n, *v, None, *p, *a, *pl, None),
            [n, v, b, p, a, pl] if digit(b) => (*n, *v, Some(*b), *p, *a, *pl, None),
            [n, v, p, a, pl, l] if !digit(p) && variant_label_ok(l) => (*n, *v, None, *p, *a, *pl, Some(*l)),
            [n, v, b, p, a, pl] => (*n, *v, Some(*b), *p, *a, *pl, None),
            [n, v, b, p, a, pl, l] => {
                if !variant_label_ok(l) {
                    return Err(bad("a variant label is [0-9a-z._], at most 16 characters"));
                }
                (*n, *v, Some(*b), *p, *a, *pl, Some(*l))
            }
            _ => return Err(bad("expected `{name}-{version}(-{build})?-{python}-{abi}-{platform}(-{variant})?.whl`")),
        };
        if name.is_empty() || version.is_empty() || py.is_empty() || abi.is_empty() || plat.is_empty() {
            return Err(bad("a field is empty"));
        }
        if let Some(b) = build {
            if !b.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(bad("the build tag must start with a digit"));
            }
        }
        let split = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
        Ok(WheelName {
            name: name.to_string(),
            version: version.to_string(),
            build: build.map(str::to_string),
            python_tags: split(py),
            abi_tags: split(abi),
            platform_tags: split(plat),
            variant: variant.map(str::to_string),
        })
    }

    /// Every `python-abi-platform` combination the name stands for.
    pub fn expanded_tags(&self) -> Vec<String> {
        let mut out = Vec::new();
        for py in &self.python_tags {
            for abi in &self.abi_tags {
                for plat in &self.platform_tags {
                    out.push(format!("{py}-{abi}-{plat}"));
                }
            }
        }
        out
    }

    /// True for `any`-platform wheels.
    pub fn is_pure(&self) -> bool {
        self.platform_tags.iter().all(|p| p == "any")
    }

    /// The `.dist-info` directory name this wheel should have.
    pub fn dist_info_dir(&self) -> String {
        format!("{}-{}.dist-info", self.name, self.version)
    }
}

impl std::fmt::Display for WheelName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.name, self.version)?;
        if let Some(b) = &self.build {
            write!(f, "-{b}")?;
        }
        write!(f, "-{}-{}-{}", self.python_tags.join("."), self.abi_tags.join("."), self.platform_tags.join("."))?;
        if let Some(v) = &self.variant {
            write!(f, "-{v}")?;
        }
        write!(f, ".whl")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let n = WheelName::parse("flash_attn-2.8.3+rocm6.2torch2.5-cp311-cp311-linux_x86_64.whl").unwrap();
        assert_eq!(n.name, "flash_attn");
        assert_eq!(n.version, "2.8.3+rocm6.2torch2.5");
        assert_eq!(n.platform_tags, ["linux_x86_64"]);
        assert_eq!(n.to_string(), "flash_attn-2.8.3+rocm6.2torch2.5-cp311-cp311-linux_x86_64.whl");

        let n = WheelName::parse("msgpack-1.1.0-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl").unwrap();
        assert_eq!(n.build.as_deref(), Some("1"));
        assert_eq!(n.platform_tags, ["manylinux2014_x86_64", "manylinux_2_17_x86_64"]);
        assert_eq!(n.expanded_tags().len(), 2);
        assert_eq!(n.to_string(), "msgpack-1.1.0-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl");

        assert!(WheelName::parse("foo-1.0.tar.gz").is_err());
        assert!(WheelName::parse("foo-1.0-cp311.whl").is_err());
        assert!(WheelName::parse("foo-1.0-x-cp311-cp311-Any.whl").is_err());
        assert!(WheelName::parse("foo-1.0-x-cp311-cp311-any-gfx942.whl").is_err());
        let v = WheelName::parse("torch-2.9.0-cp312-cp312-linux_x86_64-gfx942.whl").unwrap();
        assert_eq!((v.variant.as_deref(), v.build.as_deref()), (Some("gfx942"), None));
        assert_eq!(v.to_string(), "torch-2.9.0-cp312-cp312-linux_x86_64-gfx942.whl");
        let v = WheelName::parse("torch-2.9.0-1-cp312-cp312-linux_x86_64-gfx942.whl").unwrap();
        assert_eq!((v.variant.as_deref(), v.build.as_deref()), (Some("gfx942"), Some("1")));
        assert!(WheelName::parse("six-1.16.0-py2.py3-none-any.whl").unwrap().is_pure());
    }

    #[test]
    fn names_normalize() {
        assert_eq!(normalize_name("Flash-Attn"), "flash_attn");
        assert_eq!(normalize_name("zope.interface"), "zope_interface");
        assert_eq!(normalize_name("a--_.b"), "a_b");
    }
}
