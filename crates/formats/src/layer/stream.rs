//! Opening a compressed stream: the one place quarry picks a decoder,
//! whether the format is known from the first bytes, a file name or a
//! media type. Every decoder reads all of a concatenated stream (gzip
//! members, xz streams), as the tools that write them expect.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::path::Path;

/// Compression or container format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Not compressed (a tar, an index file).
    Tar,
    Gzip,
    Xz,
    Zstd,
    /// A zip archive: not a stream; read with a zip reader.
    Zip,
}

impl Format {
    /// The format the first bytes of a file show (anything unknown is `Tar`).
    pub fn of_magic(magic: &[u8]) -> Format {
        match magic {
            [0x1f, 0x8b, ..] => Format::Gzip,
            [0xfd, b'7', b'z', b'X', b'Z', 0x00, ..] => Format::Xz,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Format::Zstd,
            [b'P', b'K', 0x03, 0x04, ..] | [b'P', b'K', 0x05, 0x06, ..] => Format::Zip,
            _ => Format::Tar,
        }
    }

    /// The format a file name's extension names (`.tar.gz`, `.tgz`, `.xz`,
    /// `.zst`, `.tar`, `.zip`); None for any other name.
    pub fn of_name(name: &str) -> Option<Format> {
        let name = name.to_ascii_lowercase();
        let ends = |exts: &[&str]| exts.iter().any(|e| name.ends_with(e));
        Some(if ends(&[".gz", ".tgz"]) {
            Format::Gzip
        } else if ends(&[".xz", ".txz"]) {
            Format::Xz
        } else if ends(&[".zst", ".tzst"]) {
            Format::Zstd
        } else if ends(&[".tar"]) {
            Format::Tar
        } else if ends(&[".zip", ".whl"]) {
            Format::Zip
        } else {
            return None;
        })
    }

    /// The format of an OCI layer media type (`...tar+gzip`, `...tar+zstd`, `...tar`).
    pub fn of_media_type(media_type: &str) -> Format {
        if media_type.ends_with("+gzip") {
            Format::Gzip
        } else if media_type.ends_with("+zstd") {
            Format::Zstd
        } else {
            Format::Tar
        }
    }
}

/// The format of the file at `path`, from its first bytes.
pub fn sniff(path: &Path) -> io::Result<Format> {
    let mut magic = Vec::with_capacity(6);
    File::open(path)?.take(6).read_to_end(&mut magic)?;
    Ok(Format::of_magic(&magic))
}

/// Whether a decoder checks the stream's own checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    Verify,
    /// The bytes matched a digest before (a .deb against its signed
    /// index): xz's CRC64 could only repeat that check (it cost 0.8 s of
    /// CPU in a 207-package build). gzip and zstd check as they go either way.
    Skip,
}

/// A reader of `r`'s decompressed bytes; `Tar` reads `r` as it is.
pub fn decoder<'a>(format: Format, r: impl BufRead + 'a, checks: Checks) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match format {
        Format::Tar => Box::new(r),
        Format::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
        Format::Xz => {
            let skip = if checks == Checks::Skip { liblzma::stream::IGNORE_CHECK } else { 0 };
            let stream = liblzma::stream::Stream::new_stream_decoder(u64::MAX, liblzma::stream::CONCATENATED | skip)
                .map_err(io::Error::from)?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(r, stream))
        }
        Format::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(r)?),
        Format::Zip => {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a zip archive is not a compressed stream"))
        }
    })
}

/// [`decoder`] for a stream whose format its first bytes tell.
pub fn sniffing_decoder<'a>(mut r: impl BufRead + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let format = Format::of_magic(r.fill_buf()?);
    decoder(format, r, Checks::Verify)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn each_format_round_trips_and_concatenated_streams_are_read_whole() {
        let data = b"the same bytes, twice".to_vec();
        let mut gz = Vec::new();
        for _ in 0..2 {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&data).unwrap();
            gz.extend(e.finish().unwrap());
        }
        let mut xz = Vec::new();
        for _ in 0..2 {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
            e.write_all(&data).unwrap();
            xz.extend(e.finish().unwrap());
        }
        let zst = zstd::encode_all(&[&data[..], &data[..]].concat()[..], 1).unwrap();
        let twice = [&data[..], &data[..]].concat();
        for (bytes, format) in [(gz, Format::Gzip), (xz, Format::Xz), (zst, Format::Zstd), (twice.clone(), Format::Tar)]
        {
            assert_eq!(Format::of_magic(&bytes), format);
            let mut out = Vec::new();
            sniffing_decoder(&bytes[..]).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, twice, "{format:?}");
        }
    }

    #[test]
    fn names_and_media_types() {
        assert_eq!(Format::of_name("x-1.0.tar.gz"), Some(Format::Gzip));
        assert_eq!(Format::of_name("data.tar.xz"), Some(Format::Xz));
        assert_eq!(Format::of_name("data.tar.zst"), Some(Format::Zstd));
        assert_eq!(Format::of_name("control.tar"), Some(Format::Tar));
        assert_eq!(Format::of_name("Packages"), None);
        assert_eq!(Format::of_media_type("application/vnd.oci.image.layer.v1.tar+zstd"), Format::Zstd);
        assert_eq!(Format::of_media_type("application/vnd.oci.image.layer.v1.tar"), Format::Tar);
    }
}
