//! What the bench binaries share.

/// The `--mib N` argument of a bench binary (`default` when not given; cargo's `--bench` is
/// ignored). Panics, as a bench binary fails, on anything else.
pub fn mib_arg(default: u64) -> u64 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut mib = default;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mib" => {
                mib = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("--mib N"))
            }
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    mib
}
