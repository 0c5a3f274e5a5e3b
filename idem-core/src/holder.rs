//! Who this process is, as records name the holder of a claim: `host:pid`.

use std::sync::OnceLock;

/// This process as the holder of its claims: the host's name and the process id, `host:pid`.
/// Stores that can keep it (PostgreSQL) write it with every claim, so an operator can tell which
/// process holds a key, or held it when it died.
///
/// ```
/// let me = idem_core::holder();
/// assert!(me.ends_with(&format!(":{}", std::process::id())));
/// ```
pub fn holder() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(|| {
        let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".to_owned());
        format!("{host}:{}", std::process::id())
    })
}
