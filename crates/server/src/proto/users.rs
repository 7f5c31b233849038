//! The users file: HA1 hashes per user and realm, never passwords.
//!
//! ```text
//! # sipsec users v1: username<TAB>realm<TAB>HA1-MD5<TAB>HA1-SHA-256<TAB>HA1-SHA-512-256
//! alice<TAB>sipsec<TAB>0fbb…<TAB>5b8c…<TAB>e3a1…
//! ```

use std::collections::HashMap;
use std::fmt;

use sip_core::digest::{ha1, Algorithm, Hex};

const HEADER: &str =
    "# sipsec users v1: username<TAB>realm<TAB>HA1-MD5<TAB>HA1-SHA-256<TAB>HA1-SHA-512-256";

/// The stored hashes of one user in one realm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    md5: Hex,
    sha256: Hex,
    sha512_256: Hex,
}

impl UserEntry {
    /// Computes the hashes from a password (used by `users add`/`import` only).
    pub fn from_password(username: &str, realm: &str, password: &str) -> Self {
        Self {
            md5: ha1(Algorithm::Md5, username, realm, password),
            sha256: ha1(Algorithm::Sha256, username, realm, password),
            sha512_256: ha1(Algorithm::Sha512_256, username, realm, password),
        }
    }

    /// The HA1 for an algorithm's base hash.
    pub fn ha1(&self, alg: Algorithm) -> &Hex {
        match alg.base() {
            Algorithm::Md5 => &self.md5,
            Algorithm::Sha256 => &self.sha256,
            _ => &self.sha512_256,
        }
    }
}

/// A users-file problem, with its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsersError {
    /// The file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// File.
        path: String,
        /// OS error text.
        reason: String,
    },
    /// A line does not follow the format.
    #[error("{path}:{line}: {reason}")]
    Syntax {
        /// File.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A username or realm that cannot be stored.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        /// "username" or "realm".
        what: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
}

/// Users keyed by name, then realm.
#[derive(Debug, Clone, Default)]
pub struct Users {
    map: HashMap<String, Vec<(String, UserEntry)>>,
    count: usize,
}

fn check_name(what: &'static str, v: &str) -> Result<(), UsersError> {
    let reason = if v.is_empty() {
        Some("must not be empty")
    } else if v.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        Some("control characters, quotes and backslashes are not allowed")
    } else if v.len() > 128 {
        Some("longer than 128 bytes")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(UsersError::Invalid {
            what,
            value: v.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

impl Users {
    /// Number of (user, realm) entries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every (username, realm, hashes) entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &UserEntry)> {
        self.map
            .iter()
            .flat_map(|(n, rs)| rs.iter().map(move |(r, e)| (n.as_str(), r.as_str(), e)))
    }

    /// Looks a user up in O(1).
    pub fn get(&self, username: &str, realm: &str) -> Option<&UserEntry> {
        self.map
            .get(username)?
            .iter()
            .find(|(r, _)| r == realm)
            .map(|(_, e)| e)
    }

    /// Adds or replaces a user.
    pub fn insert(
        &mut self,
        username: &str,
        realm: &str,
        entry: UserEntry,
    ) -> Result<(), UsersError> {
        check_name("username", username)?;
        check_name("realm", realm)?;
        let list = self.map.entry(username.to_owned()).or_default();
        match list.iter_mut().find(|(r, _)| r == realm) {
            Some((_, e)) => *e = entry,
            None => {
                list.push((realm.to_owned(), entry));
                self.count += 1;
            }
        }
        Ok(())
    }

    /// Removes a user from a realm; whether it was there.
    pub fn remove(&mut self, username: &str, realm: &str) -> bool {
        let Some(list) = self.map.get_mut(username) else {
            return false;
        };
        let before = list.len();
        list.retain(|(r, _)| r != realm);
        let gone = list.len() < before;
        if list.is_empty() {
            self.map.remove(username);
        }
        if gone {
            self.count -= 1;
        }
        gone
    }

    /// Parses a users file's text.
    pub fn parse(text: &str, path: &str) -> Result<Self, UsersError> {
        let mut users = Users::default();
        for (i, line) in text.lines().enumerate() {
            let syntax = |reason| UsersError::Syntax {
                path: path.to_owned(),
                line: i + 1,
                reason,
            };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 5 {
                return Err(syntax("expected 5 tab-separated fields: username realm HA1-MD5 HA1-SHA-256 HA1-SHA-512-256"));
            }
            let hex = |s: &str, len: usize, what| {
                Hex::from_hex(s)
                    .filter(|_| s.len() == len)
                    .ok_or_else(|| syntax(what))
            };
            let entry = UserEntry {
                md5: hex(f[2], 32, "HA1-MD5 must be 32 hex digits")?,
                sha256: hex(f[3], 64, "HA1-SHA-256 must be 64 hex digits")?,
                sha512_256: hex(f[4], 64, "HA1-SHA-512-256 must be 64 hex digits")?,
            };
            if users.get(f[0], f[1]).is_some() {
                return Err(syntax("duplicate username and realm"));
            }
            users
                .insert(f[0], f[1], entry)
                .map_err(|_| syntax("invalid username or realm"))?;
        }
        Ok(users)
    }

    /// The file's text: the header, then one line per user and realm,
    /// sorted by name.
    pub fn render(&self) -> String {
        let mut names: Vec<_> = self.map.iter().collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = String::with_capacity(self.count * 200);
        out.push_str(HEADER);
        out.push('\n');
        for (name, realms) in names {
            for (realm, e) in realms {
                out.push_str(&format!(
                    "{name}\t{realm}\t{}\t{}\t{}\n",
                    e.md5, e.sha256, e.sha512_256
                ));
            }
        }
        out
    }

    /// Reads `username,password` CSV (with that header) and adds every row.
    /// Returns how many rows were imported.
    pub fn import_csv(&mut self, csv: &str, realm: &str, path: &str) -> Result<usize, UsersError> {
        let mut lines = csv.lines().enumerate();
        let header = lines.next().map(|(_, l)| l.trim().to_ascii_lowercase());
        if header.as_deref() != Some("username,password") {
            return Err(UsersError::Syntax {
                path: path.to_owned(),
                line: 1,
                reason: "the first line must be the header 'username,password'",
            });
        }
        let mut n = 0;
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let Some((user, password)) = line.split_once(',') else {
                return Err(UsersError::Syntax {
                    path: path.to_owned(),
                    line: i + 1,
                    reason: "expected username,password",
                });
            };
            let password = password.strip_suffix('\r').unwrap_or(password);
            if password.is_empty() {
                return Err(UsersError::Syntax {
                    path: path.to_owned(),
                    line: i + 1,
                    reason: "empty password",
                });
            }
            self.insert(
                user.trim(),
                realm,
                UserEntry::from_password(user.trim(), realm, password),
            )?;
            n += 1;
        }
        Ok(n)
    }
}

impl fmt::Display for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} user(s)", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_round_trip_and_errors() {
        let mut u = Users::default();
        u.insert(
            "alice",
            "sipsec",
            UserEntry::from_password("alice", "sipsec", "secret"),
        )
        .expect("valid");
        let csv = "username,password\nbob,pa,ss\ncarol,x\r\n";
        assert_eq!(u.import_csv(csv, "sipsec", "users.csv"), Ok(2));
        let text = u.render();
        assert!(
            !text.contains("secret") && !text.contains("pa,ss"),
            "no passwords in the file"
        );
        let back = Users::parse(&text, "users.tsv").expect("parse");
        assert_eq!(back.len(), 3);
        assert_eq!(
            back.get("bob", "sipsec"),
            Some(&UserEntry::from_password("bob", "sipsec", "pa,ss"))
        );
        assert!(back.get("bob", "other").is_none());

        let e = Users::parse("alice\tsipsec\tnothex\ta\tb\n", "u").unwrap_err();
        assert!(e.to_string().starts_with("u:1: HA1-MD5"), "{e}");
        assert!(Users::parse("a\tb\n", "u").is_err());
        assert!(u.import_csv("user,pass\n", "r", "x.csv").is_err());
        assert!(u
            .import_csv("username,password\nnopassword\n", "r", "x.csv")
            .is_err());
        assert!(u
            .insert("bad\"name", "r", UserEntry::from_password("a", "r", "p"))
            .is_err());
    }
}
