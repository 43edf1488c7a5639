//! The ordinary user the host set-up makes for tests of an unprivileged daemon
//! and of a user's host mount (scripts/install-deps.sh: system user `uvfs-test` with 65536
//! subordinate uids and gids).
//! Looks it up; never creates it.

/// `uvfs-test`'s ids and the first of its subordinate ranges.
pub struct TestUser {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// First subordinate uid (/etc/subuid).
    pub sub_uid: u32,
    /// First subordinate gid (/etc/subgid).
    pub sub_gid: u32,
}

/// The user's name.
pub const NAME: &str = "uvfs-test";

/// Looks the user up; panics with the set-up command when it is missing.
pub fn uvfs_test() -> TestUser {
    let id = |flag: &str| -> u32 {
        let out = std::process::Command::new("id")
            .args([flag, NAME])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no user {NAME}: run scripts/install-deps.sh"
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let sub = |file: &str| -> u32 {
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("uvfs-test:")?
                    .split(':')
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{NAME} has no range in {file}"))
    };
    TestUser {
        uid: id("-u"),
        gid: id("-g"),
        sub_uid: sub("/etc/subuid"),
        sub_gid: sub("/etc/subgid"),
    }
}
