//! Resident memory of this process, read from `/proc/self/status` (Linux).

/// Reads one `Vm*` line of `/proc/self/status`, in kibibytes.
fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The resident set now, in kibibytes (0 where the platform does not say).
pub(crate) fn current_kib() -> u64 {
    status_kib("VmRSS:").unwrap_or(0)
}

/// The peak resident set of the process so far, in kibibytes (0 where unknown).
pub(crate) fn peak_kib() -> u64 {
    status_kib("VmHWM:").unwrap_or(0)
}

/// Kibibytes as mebibytes.
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_at_least_the_current_set() {
        let now = current_kib();
        let peak = peak_kib();
        if cfg!(target_os = "linux") {
            assert!(now > 0);
            assert!(peak >= now, "{peak} < {now}");
        }
    }
}
