//! What the trunks read from outside the configuration text: gateways'
//! DNS names (through the system's resolver: the hosts file, then DNS),
//! looked up at start and again every `resolve_every`, and the carriers'
//! password files; and the trunks reloaded from the configuration file
//! on the operator's `POST /reload` or SIGHUP.
//!
//! A reload is all or nothing: a file that does not parse, a name that
//! does not resolve, a password file that cannot be read leave the
//! trunks as they were. Credentials and topology hiding are fixed at
//! start (the transactions hold the one, the process's keys the other):
//! a reload that changes them is refused and says so.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::config::Config;
use crate::config_trunks::{Secret, TrunkConfig};
use crate::proto::shared::Shared;

/// Looks up the DNS names of `t`'s gateways: the gateways whose address
/// changed, as (name, old, new). `Err` names one that does not resolve.
pub fn resolve(t: &mut TrunkConfig) -> Result<Vec<(String, SocketAddr, SocketAddr)>, String> {
    let mut changed = Vec::new();
    for g in &mut t.gateways {
        let Some(name) = &g.name else { continue };
        let found: Vec<_> = (name.as_str(), g.addr.port())
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default();
        let addr = found
            .iter()
            .find(|a| a.is_ipv4())
            .or(found.first())
            .copied()
            .ok_or_else(|| format!("{}: gateway {name} does not resolve", t.name))?;
        if addr != g.addr {
            changed.push((name.clone(), g.addr, addr));
            g.addr = addr;
        }
    }
    Ok(changed)
}

/// Reads `t`'s password file (its first line): passwords never come from
/// the command line or the configuration text.
pub fn read_password(t: &mut TrunkConfig) -> Result<(), String> {
    let Some(a) = &mut t.auth else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&a.password_file).map_err(|e| {
        format!(
            "{}: password file {}: {e}",
            t.name,
            a.password_file.display()
        )
    })?;
    let password = text.lines().next().unwrap_or("").trim_end().to_owned();
    if password.is_empty() {
        return Err(format!(
            "{}: password file {} is empty",
            t.name,
            a.password_file.display()
        ));
    }
    a.password = Secret(password);
    Ok(())
}

/// Resolves every trunk's gateways and reads its password.
pub fn prepare(trunks: &mut [TrunkConfig]) -> Result<(), String> {
    for t in trunks {
        resolve(t)?;
        read_password(t)?;
    }
    Ok(())
}

/// What a reload cannot change without a restart, if `new` changes it
/// against `old` (`hiding`: this process can hide topology).
fn needs_restart(hiding: bool, old: &[TrunkConfig], new: &[TrunkConfig]) -> Option<String> {
    for t in new {
        let before = old.iter().find(|o| o.name == t.name);
        if before.map(|o| &o.auth) != Some(&t.auth) && (t.auth.is_some() || before.is_some()) {
            return Some(format!("{}: its credentials changed", t.name));
        }
        if t.hide_topology && !hiding {
            return Some(format!("{}: hide_topology was off for every trunk", t.name));
        }
    }
    old.iter()
        .find(|o| o.auth.is_some() && !new.iter().any(|t| t.name == o.name))
        .map(|o| format!("{}: a trunk with credentials was removed", o.name))
}

/// Reloads the trunks from the configuration file: what changed, in
/// words (or why nothing did).
pub fn reload(shared: &Shared) -> String {
    let Some(path) = &shared.config.config_file else {
        return "trunks: no configuration file to reload from".into();
    };
    let mut fresh = Config::default();
    if let Err(e) = fresh.apply_file(path) {
        return format!("trunks kept: {e}");
    }
    let mut trunks = fresh.trunks;
    if let Err(e) = prepare(&mut trunks) {
        return format!("trunks kept: {e}");
    }
    let hiding = shared.hider.is_some();
    if let Some(why) = needs_restart(hiding, &shared.trunks.configs(), &trunks) {
        return format!("trunks kept: {why} (takes a restart)");
    }
    format!("trunks: {}", shared.trunks.replace(&trunks, &shared.names))
}

/// Looks the gateways' DNS names up again (the trunks whose
/// `resolve_every` is due, by name); a gateway whose address changed is
/// moved there, its state kept. Each change is logged; a name that no
/// longer resolves keeps its last address (logged).
pub fn refresh(shared: &Shared, due: &[String]) {
    let mut trunks = shared.trunks.configs();
    let mut moved = false;
    for t in trunks.iter_mut().filter(|t| due.contains(&t.name)) {
        match resolve(t) {
            Ok(changes) => {
                for (name, old, new) in changes {
                    tracing::info!(target: "sipsec::trunk", trunk = t.name, gateway = name, %old, %new, "gateway's DNS name has a new address");
                    moved = true;
                }
            }
            Err(e) => {
                tracing::warn!(target: "sipsec::trunk", "{e}: its last address is kept");
            }
        }
    }
    if moved {
        shared.trunks.replace(&trunks, &shared.names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trunks(text: &str) -> Vec<TrunkConfig> {
        let mut c = Config::default();
        c.apply_toml(text, "t.toml").unwrap();
        c.trunks
    }

    #[test]
    fn a_gateways_name_resolves_and_says_when_its_address_changes() {
        let mut t = trunks(
            "[[trunk]]\nname = \"c\"\nprefixes = [\"+1\"]\ngateways = [\"localhost:5070\"]\n",
        );
        let changed = resolve(&mut t[0]).unwrap();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].2, "127.0.0.1:5070".parse().unwrap());
        assert_eq!(t[0].gateways[0].addr, changed[0].2);
        assert!(resolve(&mut t[0]).unwrap().is_empty(), "unchanged");
    }

    #[test]
    fn a_reload_that_changes_credentials_or_starts_hiding_is_refused() {
        let plain = trunks(
            "[[trunk]]\nname = \"c\"\nprefixes = [\"+1\"]\ngateways = [\"192.0.2.1:5060\"]\n",
        );
        let more = trunks(
            "[[trunk]]\nname = \"c\"\nprefixes = [\"+1\"]\ngateways = [\"192.0.2.1:5060\", \"192.0.2.2:5060\"]\n",
        );
        assert_eq!(needs_restart(false, &plain, &more), None);
        let auth = trunks(
            "[[trunk]]\nname = \"c\"\nprefixes = [\"+1\"]\ngateways = [\"192.0.2.1:5060\"]\n\
             username = \"u\"\npassword_file = \"/p\"\n",
        );
        let why = needs_restart(false, &plain, &auth).unwrap();
        assert!(why.contains("credentials"), "{why}");
        let why = needs_restart(false, &auth, &[]).unwrap();
        assert!(why.contains("removed"), "{why}");
        let hiding = trunks(
            "[[trunk]]\nname = \"c\"\nprefixes = [\"+1\"]\ngateways = [\"192.0.2.1:5060\"]\nhide_topology = true\n",
        );
        assert!(needs_restart(false, &plain, &hiding).is_some());
        assert_eq!(needs_restart(true, &plain, &hiding), None);
    }
}
