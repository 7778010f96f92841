//! The accounts a definition declares (`users`, `groups`), added over the
//! ones the packages' scripts made (base-passwd's, adduser's): no script
//! knows them. Written as `useradd`/`groupadd` would, except that the
//! shadow entries leave "last change" empty (a date would make every build
//! differ, and 0 would force a password change).

use super::unpack::file;
use super::DistroError;
use crate::definition::UserDef;
use crate::layer::path::{join, normalize_dest};
use crate::layer::{Kind, Node, Tree};
use std::collections::{BTreeMap, BTreeSet};

fn err(m: String) -> DistroError {
    DistroError::Assemble { message: m }
}

fn text(tree: &Tree, p: &[u8]) -> Option<String> {
    tree.get(p).and_then(|n| n.read_content().ok()).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn exists(tree: &Tree, abs: &str) -> bool {
    let Ok(p) = normalize_dest(abs) else { return false };
    tree.follow_symlinks(&p, true).is_some_and(|p| tree.get(&p).is_some())
}

/// Add `users` and `groups` to the tree's account files.
pub fn add(tree: &mut Tree, users: &[UserDef], extra_groups: &BTreeMap<String, u32>) -> Result<(), DistroError> {
    if users.is_empty() && extra_groups.is_empty() {
        return Ok(());
    }
    let (Some(pw), Some(gr)) = (text(tree, b"etc/passwd"), text(tree, b"etc/group")) else {
        return Err(err(
            "`users` and `groups` need /etc/passwd and /etc/group (the package `base-passwd` makes them)".into()
        ));
    };
    let mut shadow = text(tree, b"etc/shadow").unwrap_or_default();
    let mut gshadow = text(tree, b"etc/gshadow").unwrap_or_default();
    let mut passwd: Vec<Vec<String>> =
        pw.lines().filter(|l| !l.is_empty()).map(|l| l.split(':').map(String::from).collect()).collect();
    // (name, gid, members)
    let mut group: Vec<(String, u32, Vec<String>)> = gr
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4).then(|| {
                let members = f[3].split(',').filter(|m| !m.is_empty()).map(String::from).collect();
                (f[0].to_string(), f[2].parse().unwrap_or(0), members)
            })
        })
        .collect();
    let before: BTreeSet<String> = group.iter().map(|g| g.0.clone()).collect();
    let mut used_gids: BTreeSet<u32> = group.iter().map(|g| g.1).collect();
    for (name, gid) in extra_groups {
        if group.iter().any(|g| &g.0 == name) {
            return Err(err(format!("group `{name}` exists already in the image; remove it from `groups`")));
        }
        if !used_gids.insert(*gid) {
            return Err(err(format!("group `{name}`: gid {gid} is taken")));
        }
        group.push((name.clone(), *gid, Vec::new()));
    }
    let mut subids = String::new();
    for (i, u) in users.iter().enumerate() {
        if passwd.iter().any(|p| p[0] == u.name) {
            return Err(err(format!("user `{}` exists already", u.name)));
        }
        if passwd.iter().any(|p| p.get(2).is_some_and(|x| x == &u.uid.to_string())) {
            return Err(err(format!("user `{}`: uid {} is taken", u.name, u.uid)));
        }
        let gid = u.gid.unwrap_or(u.uid);
        if !group.iter().any(|g| g.1 == gid) {
            if group.iter().any(|g| g.0 == u.name) {
                return Err(err(format!(
                    "user `{}`: a group of that name exists with another gid; give `gid`",
                    u.name
                )));
            }
            used_gids.insert(gid);
            group.push((u.name.clone(), gid, Vec::new()));
        }
        for gname in &u.groups {
            if !group.iter().any(|g| &g.0 == gname) {
                // A system group, allocated like `groupadd --system`: downward from 999.
                let gid = (100..=999)
                    .rev()
                    .find(|g| !used_gids.contains(g))
                    .ok_or_else(|| err("no free system gid".into()))?;
                used_gids.insert(gid);
                group.push((gname.clone(), gid, Vec::new()));
            }
            group.iter_mut().find(|g| &g.0 == gname).expect("added above").2.push(u.name.clone());
        }
        let home = u.home.clone().unwrap_or_else(|| format!("/home/{}", u.name));
        let shell = u.shell.clone().unwrap_or_else(|| "/bin/bash".into());
        if !exists(tree, &shell) {
            return Err(err(format!(
                "user `{}`: shell `{shell}` is not in the image; add its package or set `shell`",
                u.name
            )));
        }
        passwd.push(vec![
            u.name.clone(),
            "x".into(),
            u.uid.to_string(),
            gid.to_string(),
            String::new(),
            home.clone(),
            shell,
        ]);
        shadow.push_str(&format!("{}:!::0:99999:7:::\n", u.name));
        // As useradd allocates them: 65536 ids per user from 100000.
        subids.push_str(&format!("{}:{}:65536\n", u.name, 100000 + i * 65536));
        home_dir(tree, u, gid, &home)?;
    }
    let pw_text: String = passwd.iter().map(|p| p.join(":") + "\n").collect();
    let mut gr_text = String::new();
    for (name, gid, members) in &group {
        gr_text.push_str(&format!("{name}:x:{gid}:{}\n", members.join(",")));
        if !before.contains(name) {
            gshadow.push_str(&format!("{name}:!::{}\n", members.join(",")));
        } else if !members.is_empty() {
            gshadow = gshadow
                .lines()
                .map(|l| match l.split_once(':') {
                    Some((n, _)) if n == name => {
                        let mut f: Vec<&str> = l.split(':').collect();
                        let m = members.join(",");
                        if f.len() == 4 {
                            f[3] = &m;
                            f.join(":") + "\n"
                        } else {
                            l.to_string() + "\n"
                        }
                    }
                    _ => l.to_string() + "\n",
                })
                .collect();
        }
    }
    let keep = |tree: &Tree, p: &[u8], default: (u32, u64, u64)| {
        tree.get(p).map(|n| (n.mode, n.uid, n.gid)).unwrap_or(default)
    };
    let shadow_gid = group.iter().find(|g| g.0 == "shadow").map(|g| g.1 as u64).unwrap_or(0);
    for (p, body, default) in [
        (&b"etc/passwd"[..], pw_text, (0o644, 0, 0)),
        (b"etc/group", gr_text, (0o644, 0, 0)),
        (b"etc/shadow", shadow, (0o640, 0, shadow_gid)),
        (b"etc/gshadow", gshadow, (0o640, 0, shadow_gid)),
    ] {
        let (mode, uid, gid) = keep(tree, p, default);
        tree.insert(p.to_vec(), file(body, mode).owned(uid, gid)).map_err(|e| err(e.to_string()))?;
    }
    for p in [&b"etc/subuid"[..], b"etc/subgid"] {
        if let Some(old) = tree.get(p).and_then(|n| n.read_content().ok()) {
            let mut body = old;
            body.extend_from_slice(subids.as_bytes());
            let (mode, uid, gid) = keep(tree, p, (0o644, 0, 0));
            tree.insert(p.to_vec(), file(body, mode).owned(uid, gid)).map_err(|e| err(e.to_string()))?;
        }
    }
    Ok(())
}

/// The mode `useradd -m` gives a home: `HOME_MODE` of the image's
/// login.defs (Ubuntu's says 0750), else what `UMASK` leaves of 0777
/// (Debian's 022: 0755), else 0755.
fn home_mode(tree: &Tree) -> u32 {
    let defs = text(tree, b"etc/login.defs").unwrap_or_default();
    let value = |key: &str| {
        defs.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(key)).then(|| w.next().and_then(|v| u32::from_str_radix(v, 8).ok())).flatten()
        })
    };
    value("HOME_MODE").or_else(|| value("UMASK").map(|m| 0o777 & !m)).unwrap_or(0o755) & 0o7777
}

/// The home directory with /etc/skel copied in, and the sudoers entry.
fn home_dir(tree: &mut Tree, u: &UserDef, gid: u32, home: &str) -> Result<(), DistroError> {
    let h = normalize_dest(home).map_err(|e| err(format!("user `{}`: home `{home}` {e}", u.name)))?;
    let (uid, gid) = (u.uid as u64, gid as u64);
    let mode = home_mode(tree);
    tree.insert(h.clone(), Node::dir(mode).owned(uid, gid)).map_err(|e| err(e.to_string()))?;
    let skel: Vec<(Vec<u8>, Node)> = tree
        .iter()
        .filter(|(p, _)| p.starts_with(b"etc/skel/"))
        .map(|(p, n)| (p[b"etc/skel/".len()..].to_vec(), n.clone()))
        .collect();
    for (rel, mut node) in skel {
        if matches!(node.kind, Kind::Hardlink(_)) {
            continue;
        }
        node.uid = uid;
        node.gid = gid;
        tree.insert(join(&h, &rel), node).map_err(|e| err(e.to_string()))?;
    }
    if u.sudo {
        if !exists(tree, "/usr/bin/sudo") {
            return Err(err(format!("user `{}`: `sudo = true` needs the package `sudo` in `include`", u.name)));
        }
        let rule = format!("{} ALL=(ALL:ALL) NOPASSWD: ALL\n", u.name);
        tree.insert(format!("etc/sudoers.d/{}", u.name).into_bytes(), file(rule, 0o440))
            .map_err(|e| err(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_defs(defs: &str) -> Tree {
        let mut t = Tree::default();
        t.insert(b"etc/login.defs".to_vec(), Node::bytes(defs.as_bytes().to_vec(), 0o644)).unwrap();
        t
    }

    #[test]
    fn homes_get_the_mode_login_defs_gives() {
        // Ubuntu 24.04's login.defs, Debian 12's, none.
        assert_eq!(home_mode(&with_defs("#HOME_MODE 0700\nUMASK\t\t022\nHOME_MODE\t0750\n")), 0o750);
        assert_eq!(home_mode(&with_defs("UMASK\t\t022\n")), 0o755);
        assert_eq!(home_mode(&with_defs("UMASK 027\n")), 0o750);
        assert_eq!(home_mode(&Tree::default()), 0o755);
    }
}
