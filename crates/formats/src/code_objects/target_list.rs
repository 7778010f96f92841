//! A list of GPU targets as users and ROCm's variables write it: target
//! ids (`gfx942`, `gfx90a:xnack+`, `gfx11-generic`) separated by `,`
//! (hipcc's `HCC_AMDGPU_TARGET`), `;` (`PYTORCH_ROCM_ARCH`, CMake lists) or
//! spaces, in any mix. This is the one parser of every `--targets`, of the
//! environment's lists and of a matrix's target axis, so a list that one
//! command takes every other takes too.

use super::target_id::{TargetId, TargetIdError};

/// GPU targets, in the order given, each once, and where the list came
/// from (`--targets`, `PYTORCH_ROCM_ARCH`, `detected`, `default`, ...).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TargetList {
    pub targets: Vec<String>,
    pub source: String,
}

/// Why a target list does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetListError {
    // The entry's own error is part of the message, not a cause: clap
    // prints a value parser's message alone, after the option's name.
    #[error("{0}; a target list is target ids separated by `,` or `;` (gfx90a,gfx942)")]
    Target(TargetIdError),
    #[error("empty list; give targets like gfx90a,gfx942")]
    Empty,
}

impl TargetList {
    /// Parse `text` (see the module doc); every target id is checked as
    /// [`TargetId::parse`] does, duplicates are dropped. `source` names the
    /// list in reports; errors leave naming it to the caller (clap names
    /// the option).
    pub fn parse(text: &str, source: &str) -> Result<TargetList, TargetListError> {
        let mut targets: Vec<String> = Vec::new();
        for t in split(text) {
            TargetId::parse(t).map_err(TargetListError::Target)?;
            if !targets.iter().any(|o| o == t) {
                targets.push(t.to_string());
            }
        }
        if targets.is_empty() {
            return Err(TargetListError::Empty);
        }
        Ok(TargetList { targets, source: source.into() })
    }

    /// A list given as a command's `--targets` (clap's value parser).
    pub fn parse_option(text: &str) -> Result<TargetList, TargetListError> {
        TargetList::parse(text, "--targets")
    }

    /// Semicolon-separated, as `PYTORCH_ROCM_ARCH` takes them.
    pub fn joined(&self) -> String {
        self.targets.join(";")
    }
}

/// The entries of a list, unchecked: what lies between `,`, `;` and spaces.
fn split(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', ';', ' ', '\t', '\n']).map(str::trim).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_separators_and_spaces_give_one_list() {
        let l = TargetList::parse("gfx90a; gfx942;gfx90a,gfx1100 gfx942:xnack-", "PYTORCH_ROCM_ARCH").unwrap();
        assert_eq!(l.targets, ["gfx90a", "gfx942", "gfx1100", "gfx942:xnack-"]);
        assert_eq!(l.joined(), "gfx90a;gfx942;gfx1100;gfx942:xnack-");
        assert_eq!(TargetList::parse_option("gfx11-generic").unwrap().targets, ["gfx11-generic"]);
    }

    #[test]
    fn bad_entries_and_empty_lists_are_named() {
        let e = TargetList::parse_option("gfx90a,sm_80").unwrap_err().to_string();
        assert!(e.starts_with("`sm_80` is not a target id") && e.contains("separated by `,` or `;`"), "{e}");
        let e = TargetList::parse_option("gfx90a:xnack").unwrap_err().to_string();
        assert!(e.contains("unknown target feature `xnack`"), "{e}");
        let e = TargetList::parse(" ; ,", "GPU_ARCHS").unwrap_err().to_string();
        assert_eq!(e, "empty list; give targets like gfx90a,gfx942");
    }
}
