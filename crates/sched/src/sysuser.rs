//! System accounts: who a job runs as. Looked up through the C library (so NSS sources
//! such as LDAP count), never by reading files named in a request.

use std::ffi::{CStr, CString};

use crate::fsfacts::Facts;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
    /// Primary and supplementary groups, found once at lookup.
    pub groups: Vec<u32>,
}

impl SystemUser {
    /// The account called `name`, if there is one.
    pub fn lookup(name: &str) -> Option<SystemUser> {
        let name = CString::new(name).ok()?;
        lookup_with(|pwd, buf, len, result| unsafe {
            libc::getpwnam_r(name.as_ptr(), pwd, buf, len, result)
        })
    }

    /// The account this process runs as.
    pub fn current() -> Option<SystemUser> {
        let uid = unsafe { libc::geteuid() };
        lookup_with(|pwd, buf, len, result| unsafe { libc::getpwuid_r(uid, pwd, buf, len, result) })
    }

    /// The groups of `name` whose primary group is `gid`.
    fn find_groups(name: &str, gid: u32) -> Vec<u32> {
        let Ok(name) = CString::new(name) else {
            return vec![gid];
        };
        let mut count: libc::c_int = 32;
        loop {
            let mut groups = vec![0 as libc::gid_t; count as usize];
            let found =
                unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
            if found >= 0 {
                groups.truncate(count.max(0) as usize);
                return groups;
            }
            if count as usize <= groups.len() {
                return vec![gid];
            }
        }
    }

    /// The names of this user's groups (those that have one).
    pub fn group_names(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter_map(|&gid| group_name(gid))
            .collect()
    }

    /// Whether this user may read a file of these `facts`, judged by its owner, group
    /// and mode bits (the engine checks every submission's command this way).
    pub fn may_read(&self, facts: &Facts) -> bool {
        facts.is_file && (self.uid == 0 || self.has_permission(facts, 0o4))
    }

    /// Whether this user may write what these `facts` describe, not a directory (a file,
    /// or a device such as `/dev/null`).
    pub fn may_write(&self, facts: &Facts) -> bool {
        !facts.is_dir && (self.uid == 0 || self.has_permission(facts, 0o2))
    }

    /// Whether this user may make files in a directory of these `facts`.
    pub fn may_create_in(&self, facts: &Facts) -> bool {
        facts.is_dir
            && (self.uid == 0
                || (self.has_permission(facts, 0o2) && self.has_permission(facts, 0o1)))
    }

    /// Whether this user may enter (search) a directory of these `facts`.
    pub fn may_enter(&self, facts: &Facts) -> bool {
        facts.is_dir && (self.uid == 0 || self.has_permission(facts, 0o1))
    }

    /// Whether the mode bits of `facts` grant `bit` (4 read, 2 write, 1 execute) to this
    /// user's class: owner, else group, else others.
    fn has_permission(&self, facts: &Facts, bit: u32) -> bool {
        let shift = if facts.uid == self.uid {
            6
        } else if self.groups.contains(&facts.gid) {
            3
        } else {
            0
        };
        facts.mode & (bit << shift) != 0
    }
}

/// The id of the group called `name`, if there is one.
pub fn group_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    group_with(|group, buf, len, result| unsafe {
        libc::getgrnam_r(name.as_ptr(), group, buf, len, result)
    })
    .map(|(gid, _)| gid)
}

/// The name of the group whose id is `gid`, if there is one.
pub fn group_name(gid: u32) -> Option<String> {
    group_with(|group, buf, len, result| unsafe { libc::getgrgid_r(gid, group, buf, len, result) })
        .map(|(_, name)| name)
}

/// The id and name of the group a `getgr*_r` call finds.
fn group_with(
    call: impl Fn(*mut libc::group, *mut libc::c_char, usize, *mut *mut libc::group) -> libc::c_int,
) -> Option<(u32, String)> {
    let mut buf = vec![0 as libc::c_char; 4096];
    loop {
        let mut group: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc = call(&mut group, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() || group.gr_name.is_null() {
            return None;
        }
        let name = unsafe { CStr::from_ptr(group.gr_name) }
            .to_string_lossy()
            .into_owned();
        return Some((group.gr_gid, name));
    }
}

/// Whether this process may switch to other users. Asked once: the service never
/// changes its own user (jobs switch in their child processes), and the engine asks on
/// every submission.
pub fn running_as_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| unsafe { libc::geteuid() == 0 })
}

fn lookup_with(
    call: impl Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> libc::c_int,
) -> Option<SystemUser> {
    let mut buf = vec![0 as libc::c_char; 4096];
    loop {
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pwd, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        let text = |p: *const libc::c_char| {
            if p.is_null() {
                String::new()
            } else {
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        let name = text(pwd.pw_name);
        return Some(SystemUser {
            groups: SystemUser::find_groups(&name, pwd.pw_gid),
            name,
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home: text(pwd.pw_dir),
            shell: text(pwd.pw_shell),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_current_exist_and_strangers_do_not() {
        let root = SystemUser::lookup("root").unwrap();
        assert_eq!(root.uid, 0);
        assert!(SystemUser::current().is_some());
        assert!(SystemUser::lookup("no-such-user-here").is_none());
        assert!(SystemUser::lookup("bad\0name").is_none());
        assert_eq!(group_id("root"), Some(0));
        assert!(root.groups.contains(&0));
    }
}
