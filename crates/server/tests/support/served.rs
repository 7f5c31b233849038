//! A server started in this test process on a scratch data directory of
//! its own, which goes when the test is done with the server (and stays
//! for reading when the test failed). Needs `mod scratch` beside it.

#![allow(dead_code)]

use std::path::Path;

use sipsec_server::io::journal::Recovered;
use sipsec_server::{start, Config, ServerHandle, StartError, Started};

use crate::scratch::Scratch;

/// A started server and its data directory. Not `Drop` itself, so a test
/// may take `handle` to shut it down; the directory is removed after.
#[derive(Debug)]
pub struct Served {
    /// The running server.
    pub handle: ServerHandle,
    /// Bindings restored from disk.
    pub recovered: Recovered,
    dir: Scratch,
}

impl Served {
    /// Starts `config` with its data in a new scratch directory `name`.
    pub fn start(name: &str, mut config: Config) -> Result<Self, StartError> {
        let dir = Scratch::unmade(name);
        config.data_dir = dir.path_buf();
        let Started { handle, recovered } = start(config)?;
        Ok(Self {
            handle,
            recovered,
            dir,
        })
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
