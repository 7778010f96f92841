//! The platform an image is for (`os/arch[/variant]`), parsed once when the
//! definition is loaded, and the one table of architecture names: what OCI,
//! Debian, Python's platform tags and Rust each call the same machine.

use std::fmt;

/// What is wrong with an `os/arch[/variant]` platform.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    #[error("`{0}` is not of the form os/arch[/variant], e.g. linux/amd64")]
    Form(String),
    #[error("`{platform}`: architecture `{arch}` is not one of {}", Arch::known())]
    Arch { platform: String, arch: String },
}

/// One row per architecture quarry knows.
#[derive(PartialEq, Eq, Hash)]
struct ArchNames {
    /// OCI / Go (`GOARCH`): `amd64`.
    oci: &'static str,
    /// Debian's (`dpkg --print-architecture`): `amd64`, `ppc64el`.
    debian: &'static str,
    /// The kernel's (`uname -m`), which Python's platform tags use: `x86_64`.
    machine: &'static str,
    /// Rust's `std::env::consts::ARCH`.
    rust: &'static str,
}

const ARCHES: &[ArchNames] = &[
    ArchNames { oci: "amd64", debian: "amd64", machine: "x86_64", rust: "x86_64" },
    ArchNames { oci: "arm64", debian: "arm64", machine: "aarch64", rust: "aarch64" },
    ArchNames { oci: "ppc64le", debian: "ppc64el", machine: "ppc64le", rust: "powerpc64" },
    ArchNames { oci: "s390x", debian: "s390x", machine: "s390x", rust: "s390x" },
    ArchNames { oci: "riscv64", debian: "riscv64", machine: "riscv64", rust: "riscv64" },
    ArchNames { oci: "386", debian: "i386", machine: "i686", rust: "x86" },
    ArchNames { oci: "arm", debian: "armhf", machine: "armv7l", rust: "arm" },
];

/// A CPU architecture from the table.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arch(&'static ArchNames);

impl Arch {
    pub fn from_oci(name: &str) -> Option<Arch> {
        ARCHES.iter().find(|a| a.oci == name).map(Arch)
    }

    pub fn from_debian(name: &str) -> Option<Arch> {
        ARCHES.iter().find(|a| a.debian == name).map(Arch)
    }

    /// The machine quarry runs on (amd64 when it is not in the table).
    pub fn host() -> Arch {
        ARCHES.iter().find(|a| a.rust == std::env::consts::ARCH).map(Arch).unwrap_or(Arch(&ARCHES[0]))
    }

    pub fn oci(&self) -> &'static str {
        self.0.oci
    }

    pub fn debian(&self) -> &'static str {
        self.0.debian
    }

    /// `uname -m`, as in `manylinux_2_28_x86_64`.
    pub fn machine(&self) -> &'static str {
        self.0.machine
    }

    fn known() -> String {
        ARCHES.iter().map(|a| a.oci).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Debug for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.oci)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.oci)
    }
}

/// `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Platform {
    pub os: String,
    pub arch: Arch,
    pub variant: Option<String>,
}

impl Platform {
    /// `linux/<this machine's arch>`.
    pub fn host() -> Platform {
        Platform { os: "linux".into(), arch: Arch::host(), variant: None }
    }

    /// Parse `os/arch[/variant]`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Platform, PlatformError> {
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(PlatformError::Form(s.to_string()));
        }
        let arch = Arch::from_oci(parts[1])
            .ok_or_else(|| PlatformError::Arch { platform: s.to_string(), arch: parts[1].to_string() })?;
        Ok(Platform { os: parts[0].to_string(), arch, variant: parts.get(2).map(|v| v.to_string()) })
    }

    /// `oci_spec`'s platform, for index entries.
    pub fn to_oci(&self) -> oci_spec::image::Platform {
        let mut p = oci_spec::image::Platform::default();
        p.set_os(self.os.as_str().into());
        p.set_architecture(self.arch.oci().into());
        p.set_variant(self.variant.clone());
        p
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_architectures_every_way() {
        let p = Platform::parse("linux/ppc64le").unwrap();
        assert_eq!((p.arch.oci(), p.arch.debian(), p.arch.machine()), ("ppc64le", "ppc64el", "ppc64le"));
        assert_eq!(p.to_string(), "linux/ppc64le");
        let p = Platform::parse("linux/arm/v7").unwrap();
        assert_eq!((p.arch.debian(), p.variant.as_deref()), ("armhf", Some("v7")));
        assert_eq!(p.to_string(), "linux/arm/v7");
        assert_eq!(Arch::from_debian("amd64").unwrap().machine(), "x86_64");
        for bad in ["linux", "linux//x", "linux/amd64/v1/x", "linux/vax"] {
            assert!(Platform::parse(bad).is_err(), "{bad}");
        }
        assert!(Platform::parse("linux/vax").unwrap_err().to_string().contains("amd64, arm64"));
    }
}
