//! Reading and writing the users file (format in `proto::users`).

use std::io::{self, Write};
use std::path::Path;

use crate::proto::users::{Users, UsersError};

fn io_error(path: &Path) -> impl Fn(io::Error) -> UsersError + '_ {
    move |e| UsersError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Loads a users file.
pub fn load(path: &Path) -> Result<Users, UsersError> {
    let text = std::fs::read_to_string(path).map_err(io_error(path))?;
    Users::parse(&text, &path.display().to_string())
}

/// Loads a users file, or an empty set if it does not exist yet.
pub fn load_or_empty(path: &Path) -> Result<Users, UsersError> {
    if path.exists() {
        load(path)
    } else {
        Ok(Users::default())
    }
}

/// Writes the file atomically (temporary file, then rename). A new file
/// is owner-only (0600). An existing one keeps its owner and group, and
/// its group's read bit (0640: a service reading it as a member of the
/// file's group, as `packaging/sipsec.service` does), never more.
pub fn save(users: &Users, path: &Path) -> Result<(), UsersError> {
    use std::os::unix::fs::MetadataExt;
    let kept = std::fs::metadata(path).ok();
    let mode = 0o600 | kept.as_ref().map_or(0, |m| m.mode() & 0o040);
    let tmp = path.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp).map_err(io_error(path))?;
        if let Some(m) = &kept {
            std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid())).map_err(io_error(path))?;
        }
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(io_error(path))?;
        f.write_all(users.render().as_bytes())
            .map_err(io_error(path))?;
        f.sync_all().map_err(io_error(path))?;
    }
    std::fs::rename(&tmp, path).map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::users::UserEntry;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saved_files_are_private_and_load_back() {
        let mut u = Users::default();
        u.insert("alice", "r", UserEntry::from_password("alice", "r", "pw"))
            .expect("valid");
        let dir = std::env::temp_dir().join(format!("sipsec-users-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("users.tsv");
        save(&u, &p).expect("save");
        let mode = std::fs::metadata(&p).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load(&p).expect("load").len(), 1);
        assert_eq!(load_or_empty(&dir.join("none")).expect("empty").len(), 0);
        let e = load(&dir.join("none")).expect_err("missing");
        assert!(e.to_string().contains("none"), "{e}");
        // A file made readable by a group keeps that, never more.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        save(&u, &p).expect("save");
        let mode = std::fs::metadata(&p).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
