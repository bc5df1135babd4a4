//! Store benchmarks (plain timing, no harness): creating 1,000 instances one transaction each,
//! then the latency of listing one page of `servers/detail` with 10,000 instances in the store.
//!
//! Run: `cargo bench -p store --bench store`. Knobs: `STORE_BENCH_DIR` (where the database
//! file goes; the system temp directory by default), `STORE_BENCH_PAGE` (page size, 100).
// A benchmark binary reports on stdout and may stop at the first failure.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

mod common;

use store::*;

fn main() {
    let base = std::env::var_os("STORE_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let page_size = common::page_size();
    let dir = tempfile::tempdir_in(base).unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db")).unwrap();
    let seed = common::seed(&store);
    common::thousand_creates(&store, &seed);
    for n in 1000..10_000 {
        common::create(&store, &seed, n);
    }
    common::listing(&store, &seed, page_size);
}
