//! Why a server could not start.

/// Why the server could not start; each names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The users file is missing or malformed.
    #[error("users file: {0}")]
    Users(#[from] crate::proto::users::UsersError),
    /// Authentication is on but the users file names nobody.
    #[error("--auth needs users: {0} has none (add some with `sipsec users add`)")]
    NoUsers(String),
    /// Authentication is on but no user is in the realm served.
    #[error("--auth: none of the {count} user(s) in {file} is in realm {realm:?} (they are in {found}): serve that realm with --realm, or add users with `sipsec users add --realm {realm}`")]
    NoUsersInRealm {
        /// Users file.
        file: String,
        /// Realm served.
        realm: String,
        /// Users in the file.
        count: usize,
        /// The realms the file has, quoted.
        found: String,
    },
    /// The data directory or its files could not be used.
    #[error("location store in {dir}: {err}")]
    Store {
        /// Directory.
        dir: String,
        /// Cause.
        err: std::io::Error,
    },
    /// A listening socket could not be bound.
    #[error("cannot listen on {proto} {addr}: {err}")]
    Bind {
        /// "udp" or "tcp".
        proto: &'static str,
        /// Address.
        addr: std::net::SocketAddr,
        /// Cause.
        err: std::io::Error,
    },
    /// A secret kept in the data directory (nonce.key, route.key) could
    /// not be read or made.
    #[error("secret: {0}")]
    Random(std::io::Error),
    /// The privacy keys could not be used.
    #[error("privacy: {0}")]
    Privacy(#[from] crate::proto::privacy::PrivacyError),
    /// The TLS certificate, key or CA files could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::io::tls::TlsError),
    /// The shared location store could not be reached or read.
    #[error("location store (redis): {0}")]
    Redis(String),
    /// The `[dns]` settings cannot be used (an unreadable hosts file).
    #[error("dns: {0}")]
    Dns(String),
    /// The `[media]` settings cannot be used.
    #[error("media: {0}")]
    Media(String),
    /// A trunk's password file cannot be read.
    #[error("trunk: {0}")]
    Trunk(String),
    /// The call records file cannot be opened.
    #[error("call records: {0}")]
    CallRecords(String),
    /// The `[stir]` keys, anchors or CRLs cannot be used.
    #[error("stir: {0}")]
    Stir(String),
    /// The operator endpoint would listen beyond loopback without a token.
    #[error("the operator endpoint on {0} is reachable from other hosts: set http_token (or SIPSEC_HTTP_TOKEN) to require a token, or keep --http on 127.0.0.1")]
    HttpExposed(std::net::SocketAddr),
    /// SIP would be served beyond loopback without authentication.
    #[error("SIP on {0} is reachable from other hosts without authentication: anyone could bind any address-of-record and call through it. Add --auth (and users), or pass --insecure-no-auth ([auth] insecure_no_auth = true) to serve an open registrar anyway")]
    OpenService(std::net::SocketAddr),
    /// The HEP collector's address could not be used.
    #[error("trace (HEP collector {collector}): {err}")]
    Trace {
        /// The collector as configured.
        collector: String,
        /// Cause.
        err: std::io::Error,
    },
}
