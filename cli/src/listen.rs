//! Binding the TCP address a command listens on (`foya serve`, `foya sim-server`,
//! `foya node`): one bind and one wording of its failure, so a taken address reads the
//! same everywhere (`cannot listen on ADDR: the address is already in use (…)`), with a
//! hint that fits the command (port 0 only where the command accepts it).

use std::io::ErrorKind;

/// Which ports the command accepts, for the hint of an "already in use" error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// Any port, 0 included (`serve`, `sim-server`): the hint suggests port 0.
    AnyOrZero,
    /// A fixed port only (`node`: peers dial it; port 0 is refused).
    Fixed,
}

/// Binds a TCP listener on `listen` (`HOST:PORT`).
///
/// # Errors
/// The address cannot be bound: a taken address says so with the hint for `port`
/// (`cannot listen on ADDR: the address is already in use (another process listens on
/// it; choose another --listen[, or port 0 for a free one])`); any other failure is
/// `cannot listen on ADDR` with its cause.
pub async fn bind(listen: &str, port: Port) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| bind_error(listen, e, port))
}

/// The error of a failed bind of `listen`.
fn bind_error(listen: &str, e: std::io::Error, port: Port) -> anyhow::Error {
    if e.kind() != ErrorKind::AddrInUse {
        return anyhow::Error::new(e).context(format!("cannot listen on {listen}"));
    }
    let hint = match port {
        Port::AnyOrZero => "choose another --listen, or port 0 for a free one",
        Port::Fixed => "choose another --listen",
    };
    anyhow::anyhow!(
        "cannot listen on {listen}: the address is already in use (another process listens \
         on it; {hint})"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{Port, bind};

    #[tokio::test]
    async fn a_taken_address_is_named_with_the_hint_of_the_command() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let errors = [
            bind(&addr, Port::AnyOrZero).await.unwrap_err().to_string(),
            bind(&addr, Port::Fixed).await.unwrap_err().to_string(),
        ];
        assert_eq!(
            errors,
            [
                format!(
                    "cannot listen on {addr}: the address is already in use (another process \
                     listens on it; choose another --listen, or port 0 for a free one)"
                ),
                format!(
                    "cannot listen on {addr}: the address is already in use (another process \
                     listens on it; choose another --listen)"
                ),
            ]
        );
        drop(taken);
    }

    #[tokio::test]
    async fn a_free_address_is_bound() {
        let listener = bind("127.0.0.1:0", Port::Fixed).await.unwrap();
        assert_eq!(
            listener.local_addr().unwrap().ip(),
            std::net::IpAddr::from([127, 0, 0, 1])
        );
    }
}
