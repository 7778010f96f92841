//! Where quarry keeps and fetches what it has made: the cache ([`cache`]:
//! the local directory, its buckets, leases and pruning, and the registry
//! tier many machines share), the OCI distribution API ([`registry`]:
//! pull, push, referrers, cosign signatures and attestations) and the keys
//! and envelopes that sign them ([`signing`]).
//!
//! It sits on `quarry-formats` and `quarry-base`. Within it, `cache` uses
//! `registry` (its shared tier), which uses `signing`; none uses a module
//! above.

pub mod cache;
pub mod registry;
pub mod signing;

// The floors below under the names the modules above have always used.
use quarry_base::progress;
use quarry_formats::{layer, oci, platform};
