use crate::code_objects::kpack_writer::Scheme;
use crate::code_objects::target_list::TargetList;
use crate::wheel::split::{split, Families, SplitOptions, VariantSchema};
use std::path::PathBuf;

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum FamiliesArg {
    Auto,
    None,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum CompressionArg {
    Zstd,
    None,
}

impl From<FamiliesArg> for Families {
    fn from(a: FamiliesArg) -> Families {
        match a {
            FamiliesArg::Auto => Families::Auto,
            FamiliesArg::None => Families::None,
        }
    }
}

impl From<CompressionArg> for Scheme {
    fn from(a: CompressionArg) -> Scheme {
        match a {
            CompressionArg::Zstd => Scheme::ZstdPerKernel,
            CompressionArg::None => Scheme::None,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum VariantSchemaArg {
    Pep817,
    #[value(name = "wheelnext-0.2")]
    Wheelnext02,
}

impl From<VariantSchemaArg> for VariantSchema {
    fn from(a: VariantSchemaArg) -> VariantSchema {
        match a {
            VariantSchemaArg::Pep817 => VariantSchema::Pep817,
            VariantSchemaArg::Wheelnext02 => VariantSchema::Wheelnext02,
        }
    }
}

/// `--variants` and the schema of their metadata (split and merge share them).
#[derive(clap::Args)]
pub(super) struct VariantArgs {
    /// Also write a PEP 817 variant host wheel per GPU target (NAME-...-<target>.whl,
    /// its variant property `amd :: gfx_arch :: <target>`) and NAME-VERSION-variants.json
    #[arg(long)]
    variants: bool,
    /// The variant metadata's form: pep817 (as ROCm's splitter writes it) or
    /// wheelnext-0.2 (the schema PyPI's variantlib 0.2 reads)
    #[arg(long = "variant-schema", value_enum, default_value = "pep817", requires = "variants")]
    variant_schema: VariantSchemaArg,
}

impl VariantArgs {
    pub(super) fn schema(&self) -> Option<VariantSchema> {
        self.variants.then(|| self.variant_schema.into())
    }

    /// Recorded in provenance only when given: a split without it keeps the
    /// statement it always had.
    pub(super) fn record(&self, parameters: &mut serde_json::Value) {
        if let Some(s) = self.schema() {
            parameters["variants"] = serde_json::json!(s.name());
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Fat wheels (ELF files with a .hip_fatbin section)
    #[arg(required = true)]
    wheels: Vec<PathBuf>,
    /// Where the host and device wheels go
    #[arg(short = 'o', long = "out-dir", value_name = "DIR")]
    out_dir: PathBuf,
    /// Device wheels are named NAME-<target> [default: <project>-device]
    #[arg(long = "device-prefix", value_name = "NAME")]
    device_prefix: Option<String>,
    /// Keep only these processors' code (gfx942,gfx1100); the rest is left out
    #[arg(long, value_name = "LIST", value_parser = TargetList::parse_option)]
    targets: Option<TargetList>,
    /// auto: device wheels require their sub-family and family wheels, and code
    /// for generic processors goes to those (ROCm's rocm-bootstrap packaging
    /// chain); none: one wheel per processor, no chain
    #[arg(long, value_enum, default_value = "auto")]
    families: FamiliesArg,
    /// How kernels are stored in the .kpack archives
    #[arg(long, value_enum, default_value = "zstd")]
    compression: CompressionArg,
    /// Another `Requires-Dist` of each device wheel (repeatable); `@GFXARCH@`
    /// becomes its target, and a requirement naming it goes to target wheels
    /// only (e.g. "rocm-sdk-device-@GFXARCH@ == 7.1")
    #[arg(long = "device-requires-dist", value_name = "REQUIREMENT")]
    device_requires_dist: Vec<String>,
    #[command(flatten)]
    variants: VariantArgs,
    #[command(flatten)]
    sign: crate::cli::sign_args::SignArgs,
    /// Print a JSON array, one object per input wheel, on stdout
    #[arg(long)]
    json: bool,
}

/// `NAME.intoto.json` beside each wheel a split wrote (signed with a key).
fn provenance(
    r: &crate::wheel::split::SplitReport,
    a: &Args,
    key: Option<&crate::signing::SigningKey>,
) -> Result<Vec<crate::provenance::files::Written>, crate::provenance::ProvenanceError> {
    use crate::provenance::files::{input_file, write_beside, FileBuild};
    let mut parameters = serde_json::json!({
        "devicePrefix": a.device_prefix,
        "targets": a.targets.as_ref().map(|t| &t.targets),
        "families": match a.families { FamiliesArg::Auto => "auto", FamiliesArg::None => "none" },
        "compression": match a.compression { CompressionArg::Zstd => "zstd", CompressionArg::None => "none" },
    });
    // Only when given: a split without it keeps the statement it always had.
    if !a.device_requires_dist.is_empty() {
        parameters["deviceRequiresDist"] = serde_json::json!(a.device_requires_dist);
    }
    a.variants.record(&mut parameters);
    let build = FileBuild {
        build_type: crate::provenance::files::SPLIT_BUILD_TYPE.into(),
        parameters,
        inputs: vec![input_file(&r.input)?],
    };
    let mut products = vec![r.host.clone()];
    products.extend(r.device.iter().map(|d| d.wheel.clone()));
    products.extend(r.variants.iter().chain(&r.variants_json).cloned());
    write_beside(&products, &build, key)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    super::super::set_output_mode(a.json, false);
    let options = SplitOptions {
        device_prefix: a.device_prefix.clone(),
        targets: a.targets.as_ref().map(|t| t.targets.clone()),
        families: a.families.into(),
        scheme: a.compression.into(),
        device_requires: a.device_requires_dist.clone(),
        variants: a.variants.schema(),
    };
    let key = a.sign.load()?;
    let mut reports = Vec::new();
    let mut failures = crate::cli::exit::Failures::default();
    for wheel in &a.wheels {
        match split(wheel, &a.out_dir, &options) {
            Ok(r) => {
                provenance(&r, &a, key.as_ref())?;
                if !a.json {
                    outln!("{} -> {}", wheel.display(), r.host.display());
                    for (bin, code) in &r.binaries {
                        let archs: Vec<String> = code.code_objects.iter().map(|(a, n)| format!("{a} ({n})")).collect();
                        outln!("  {bin}: {} wrapper(s); {}", code.wrappers, archs.join(", "));
                    }
                    for d in &r.device {
                        outln!(
                            "  {} ({:?} {}): {}",
                            d.wheel.display(),
                            d.level,
                            d.key,
                            d.kpacks.len() + d.databases.len()
                        );
                    }
                    for v in r.variants.iter().chain(&r.variants_json) {
                        outln!("  {} (variant)", v.display());
                    }
                    if !r.dropped.is_empty() {
                        outln!("  left out (--targets): {}", r.dropped.join(", "));
                    }
                }
                reports.push(serde_json::to_value(&r)?);
            }
            Err(e) => {
                reports.push(serde_json::json!({ "wheel": wheel.display().to_string(), "error": e.to_string() }));
                failures.0.push(e.to_string());
            }
        }
    }
    if a.json {
        super::super::print_json(&reports)?;
    }
    failures.or_status(0)
}
