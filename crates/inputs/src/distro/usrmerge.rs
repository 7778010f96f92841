//! Merged /usr: on current Debian and Ubuntu systems /bin, /sbin and /lib*
//! are symlinks into /usr, and a package's files land there.

use crate::layer::path::join;

/// Directories that are symlinks into /usr on a merged-/usr system.
pub const MERGED: [&[u8]; 6] = [b"bin", b"sbin", b"lib", b"lib32", b"lib64", b"libx32"];

/// Where a package's path lands once /bin, /sbin and /lib* point into /usr.
pub fn merged_usr_path(p: &[u8]) -> Vec<u8> {
    for d in MERGED {
        if p == d || (p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/') {
            return join(b"usr", p);
        }
    }
    p.to_vec()
}
