//! Starting a configured server: recovery, users, workers.

use std::sync::Arc;

use crate::auth::{Authenticator, NonceKey};
use crate::config::Config;
use crate::core::Shared;
use crate::location::{MemoryLocation, Persistence, Recovered};
use crate::udp::{unix_now, ServerHandle, UdpServer};
use crate::users::Users;

/// Why the server could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The users file is missing or malformed.
    #[error("users file: {0}")]
    Users(#[from] crate::users::UsersError),
    /// Authentication is on but the users file names nobody.
    #[error("--auth needs users: {0} has none (add some with `sipsec users add`)")]
    NoUsers(String),
    /// The data directory or its files could not be used.
    #[error("location store in {dir}: {err}")]
    Store {
        /// Directory.
        dir: String,
        /// Cause.
        err: std::io::Error,
    },
    /// A listening socket could not be bound.
    #[error("cannot listen on udp {addr}: {err}")]
    Bind {
        /// Address.
        addr: std::net::SocketAddr,
        /// Cause.
        err: std::io::Error,
    },
    /// The OS random generator failed.
    #[error("no randomness for nonces: {0}")]
    Random(std::io::Error),
}

/// A started server and what recovery found.
#[derive(Debug)]
pub struct Started {
    /// The running server.
    pub handle: ServerHandle,
    /// Bindings restored from disk.
    pub recovered: Recovered,
}

/// Recovers the location store, loads users, binds and starts workers.
pub fn start(mut config: Config) -> Result<Started, StartError> {
    let store = |err| StartError::Store {
        dir: config.data_dir.display().to_string(),
        err,
    };
    let location = Arc::new(MemoryLocation::new());
    let persistence = Persistence::new(&config.data_dir, config.durability).map_err(store)?;
    let recovered = persistence.recover(&location, unix_now()).map_err(store)?;
    let auth = if config.auth {
        let users = Users::load(&config.users)?;
        if users.is_empty() {
            return Err(StartError::NoUsers(config.users.display().to_string()));
        }
        let key = NonceKey::random(config.nonce_ttl).map_err(StartError::Random)?;
        Some(Authenticator::new(
            &config.realm,
            key,
            users,
            &config.digest_algorithms,
        ))
    } else {
        None
    };
    let workers = config.workers.max(1);
    let journals = (0..workers)
        .map(|i| persistence.journal(i).map(Some))
        .collect::<Result<Vec<_>, _>>()
        .map_err(store)?;
    let addr = config.udp;
    let bind = |err| StartError::Bind { addr, err };
    let udp = UdpServer::bind(addr, workers).map_err(bind)?;
    if config.advertise.port() == 0 {
        config.advertise.set_port(udp.local_addr().port());
    }
    let shared = Arc::new(Shared::new(config, location, auth));
    let handle = udp.start(shared, journals).map_err(bind)?;
    Ok(Started { handle, recovered })
}
