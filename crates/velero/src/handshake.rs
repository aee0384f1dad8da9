//! go-plugin's handshake, as a plugin that is not written in Go speaks it
//! (go-plugin's guide "Writing plugins without Go"): the client starts the
//! plugin with a magic cookie in its environment, and the plugin answers
//! with one line on stdout saying where it listens.

use std::path::Path;

/// The cookie Velero's client sets (pkg/plugin/framework/handshake.go).
pub const MAGIC_COOKIE_KEY: &str = "VELERO_PLUGIN";
pub const MAGIC_COOKIE_VALUE: &str = "hello";
/// go-plugin's own protocol version, the first field of the line.
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// Velero's plugin protocol version, which its client checks.
pub const APP_PROTOCOL_VERSION: u32 = 2;

/// Whether this process was started by a go-plugin client with Velero's
/// cookie: then it is a plugin process, whatever its arguments (Velero
/// passes its own server's flags to every plugin it starts).
pub fn launched_by_velero() -> bool {
    std::env::var(MAGIC_COOKIE_KEY).is_ok_and(|v| v == MAGIC_COOKIE_VALUE)
}

/// Refuses a client that speaks none of the app protocol versions iar
/// does. go-plugin lists the versions it accepts in
/// `PLUGIN_PROTOCOL_VERSIONS`; without it, version 2 is assumed.
pub fn check_versions(offered: Option<&str>) -> Result<(), ProtocolMismatch> {
    let Some(offered) = offered.filter(|s| !s.trim().is_empty()) else {
        return Ok(());
    };
    let wanted = APP_PROTOCOL_VERSION.to_string();
    if offered.split(',').any(|v| v.trim() == wanted) {
        Ok(())
    } else {
        Err(ProtocolMismatch {
            offered: offered.to_string(),
        })
    }
}

/// A plugin client that speaks none of the protocol versions iar does.
#[derive(Debug, thiserror::Error)]
#[error(
    "the plugin client accepts protocol versions {offered}; iar speaks Velero's version {APP_PROTOCOL_VERSION} (rule: plugin-protocol-version)"
)]
pub struct ProtocolMismatch {
    pub offered: String,
}

/// The line go-plugin reads from the plugin's stdout:
/// `CORE-VERSION|APP-VERSION|NETWORK|ADDRESS|PROTOCOL`.
pub fn line(socket: &Path) -> String {
    format!(
        "{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|unix|{}|grpc",
        socket.display()
    )
}

/// The level Velero asked its plugins to log at: its server's own
/// `--log-level`, which reaches every plugin in its arguments.
pub fn log_level(args: &[String]) -> Option<&str> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if let Some(v) = arg.strip_prefix("--log-level=") {
            return Some(v);
        }
        if arg == "--log-level" {
            return it.next().map(String::as_str);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_must_include_velero_s() {
        assert!(check_versions(None).is_ok());
        assert!(check_versions(Some("2")).is_ok());
        assert!(check_versions(Some("1, 2")).is_ok());
        let refused = check_versions(Some("1,3")).unwrap_err().to_string();
        assert!(refused.contains("plugin-protocol-version"), "{refused}");
    }

    #[test]
    fn the_line_names_the_socket() {
        assert_eq!(
            line(Path::new("/tmp/x/plugin.sock")),
            "1|2|unix|/tmp/x/plugin.sock|grpc"
        );
    }

    #[test]
    fn log_level_in_either_spelling() {
        let args = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            log_level(&args(&["--features=", "--log-level", "debug"])),
            Some("debug")
        );
        assert_eq!(log_level(&args(&["--log-level=warning"])), Some("warning"));
        assert_eq!(log_level(&args(&["--uploader-type", "kopia"])), None);
    }
}
