//! How a guest's QEMU process starts: as an account of its own (never the service's
//! root), under QEMU's whole seccomp filter, with what it needs opened by the service
//! and handed over as descriptors.
//!
//! QEMU's own switch of user (`-runas`; `-run-with user=` from QEMU 9) comes after it
//! has installed its seccomp filter, so it cannot go with `elevateprivileges=deny`
//! (QEMU 7.2 dies of SIGSYS at the switch). The service switches instead, between fork
//! and exec, as libvirt does: QEMU starts as the guest account, in a session of its own,
//! with `no_new_privs` set, in the VM's directory (which it cannot read: the directory
//! only marks the process as the VM's, see `Files::process`); its filter then denies
//! the set*id calls, fork and exec, and scheduler changes.
//!
//! What QEMU needs but its account may not reach (the run directory is the service's
//! alone, mode 0700) comes as descriptors:
//! - the monitor, agent and console sockets: sockets the service bound in the VM's
//!   directory and listens on (`-chardev socket,fd=N`), owned by the service, so that
//!   a guest escaping QEMU cannot swap what the service connects to;
//! - the kernel, initramfs and disks: files the service opened, which QEMU opens again
//!   through `/proc/self/fd/N` (such a path skips the directories on the way, not the
//!   file's own mode: the image's files must be readable by the account, and the VM's
//!   own disks are made the account's, mode 0600; QEMU opens a disk again when its use
//!   changes, as at the end of a migration);
//! - a migration's channel: one end of a socket pair (`-incoming fd:N`; the source gets
//!   the other end over QMP, `getfd`).

use std::fs::{File, Metadata, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::{ProvisionError, Result, io};

/// The system account guests run as (`[cloud] guest_user`, `drover-guest` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestAccount {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Its groups (`kvm` for `/dev/kvm`, where the account belongs to it).
    pub groups: Vec<u32>,
}

impl GuestAccount {
    /// Whether the account may read a file of this owner, group and mode.
    pub(super) fn may_read(&self, meta: &Metadata) -> bool {
        let bits = if meta.uid() == self.uid {
            meta.mode() >> 6
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            meta.mode() >> 3
        } else {
            meta.mode()
        };
        bits & 0o4 != 0
    }
}

/// An image's file, open, if it is a regular file.
pub(super) fn open_boot_file(what: &'static str, path: &Path) -> Result<(File, Metadata)> {
    let refuse = |why: String| ProvisionError::BootFile {
        what,
        path: path.into(),
        why,
    };
    let file = File::open(path).map_err(|e| refuse(e.to_string()))?;
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse("it is not a regular file".into()));
    }
    Ok((file, meta))
}

/// Descriptors handed to a QEMU process: each keeps its number there. Dropped once QEMU
/// has started (it has its own copies).
#[derive(Default)]
pub(super) struct Handover {
    fds: Vec<OwnedFd>,
}

impl Handover {
    /// Hands `fd` over; its number.
    pub(super) fn keep(&mut self, fd: OwnedFd) -> RawFd {
        let number = fd.as_raw_fd();
        self.fds.push(fd);
        number
    }

    /// Binds a socket at `path` (a stale one removed) and hands it over, listening.
    pub(super) fn listen(&mut self, path: &Path) -> std::io::Result<RawFd> {
        let _ = std::fs::remove_file(path);
        Ok(self.keep(UnixListener::bind(path)?.into()))
    }

    /// An image's file (kernel, initramfs, disk), read-only: the path QEMU opens it by.
    /// Refused when the guest account cannot read it.
    pub(super) fn image_file(
        &mut self,
        what: &'static str,
        path: &Path,
        account: Option<&GuestAccount>,
    ) -> Result<String> {
        let (file, meta) = open_boot_file(what, path)?;
        if let Some(account) = account
            && !account.may_read(&meta)
        {
            return Err(ProvisionError::BootFile {
                what,
                path: path.into(),
                why: format!(
                    "the guest account {} (uid {}), which QEMU runs as, cannot read it; make \
                     it readable by all, or by a group of the account",
                    account.name, account.uid
                ),
            });
        }
        Ok(self.reopened(file))
    }

    /// A disk of the VM's own, made the guest account's (mode 0600): the path QEMU
    /// opens it by.
    pub(super) fn own_disk(
        &mut self,
        path: &Path,
        account: Option<&GuestAccount>,
    ) -> Result<String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(io("opening the VM's disk"))?;
        if let Some(account) = account {
            std::os::unix::fs::fchown(&file, Some(account.uid), Some(account.gid))
                .map_err(io("giving the VM's disk to the guest account"))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io("giving the VM's disk to the guest account"))?;
        Ok(self.reopened(file))
    }

    fn reopened(&mut self, file: File) -> String {
        format!("/proc/self/fd/{}", self.keep(file.into()))
    }

    /// Makes `command` start in a session of its own, as `account` when given, with
    /// `no_new_privs`, and with the descriptors handed over open and no other but its
    /// standard ones.
    pub(super) fn confine(&self, command: &mut Command, account: Option<&GuestAccount>) {
        let fds: Vec<RawFd> = self.fds.iter().map(AsRawFd::as_raw_fd).collect();
        let ids = account.map(|a| (a.uid, a.gid, a.groups.clone()));
        let check = |rc: libc::c_int| match rc {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        };
        // SAFETY: the closure runs in the child between fork and exec and makes system
        // calls only (async-signal-safe): it allocates nothing and takes no lock.
        unsafe {
            command.pre_exec(move || {
                // Signals to the service's process group do not reach it, and it
                // outlives the service (a restart adopts it).
                check(libc::setsid())?;
                // Nothing else open in the service (or inherited by it) reaches QEMU.
                let all = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
                check(libc::close_range(3, libc::c_uint::MAX, all))?;
                for &fd in &fds {
                    check(libc::fcntl(fd, libc::F_SETFD, 0))?;
                }
                if let Some((uid, gid, groups)) = &ids {
                    check(libc::setgroups(groups.len(), groups.as_ptr()))?;
                    check(libc::setgid(*gid))?;
                    check(libc::setuid(*uid))?;
                }
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_reads_by_owner_group_or_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "x").unwrap();
        let meta = |mode: u32| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::metadata(&path).unwrap()
        };
        let (uid, gid) = {
            let m = std::fs::metadata(&path).unwrap();
            (m.uid(), m.gid())
        };
        let account = |uid: u32, groups: Vec<u32>| GuestAccount {
            name: "g".into(),
            uid,
            gid: 4_000_000,
            groups,
        };
        let stranger = account(uid + 1, vec![]);
        let member = account(uid + 1, vec![gid]);
        let owner = account(uid, vec![]);
        assert!(stranger.may_read(&meta(0o644)));
        assert!(!stranger.may_read(&meta(0o640)) && member.may_read(&meta(0o640)));
        assert!(!member.may_read(&meta(0o600)) && owner.may_read(&meta(0o600)));
        assert!(!owner.may_read(&meta(0o044)));
    }
}
