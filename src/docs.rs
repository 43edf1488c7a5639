//! The man page and shell completions, generated from the clap definitions (so they never
//! drift from `--help`), and the subcommands that print them (`union-virtiofsd man`,
//! `union-virtiofsd completions SHELL`: what packages install); the book's generated option
//! reference (`reference`) and the checks of the book's links (tests). Never exits by itself.

use std::io::{self, Write};

use clap_complete::Shell;

pub mod reference;

#[cfg(test)]
mod links;

/// Writes `text` (the man page or a completion script) on stdout; the exit status (0, or 2
/// with one line on stderr when it cannot be made or written).
pub fn print(text: io::Result<Vec<u8>>) -> u8 {
    let mut stdout = io::stdout().lock();
    match text
        .and_then(|t| stdout.write_all(&t))
        .and_then(|()| stdout.flush())
    {
        // A reader that stops early (`| head`) is no error.
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                io::stderr(),
                "union-virtiofsd: cannot write the output: {e}"
            );
            2
        }
        _ => 0,
    }
}

fn command() -> clap::Command {
    crate::cli::command_for(80)
}

/// The man page's sections after OPTIONS, COMMANDS and the `ctl` client (roff). What the code
/// knows by itself (options, commands, the union options' list) is generated; these are the
/// facts around it.
const AFTER_OPTIONS: &str = r#".SH "EXIT STATUS"
.TP
0
The front\-end hung up, SIGTERM or SIGINT came, or the session went to a new daemon (\fB\-\-upgrade\fR).
.TP
1
Setting up or serving failed after the command line was accepted (the sandbox, the seccomp filter, the vhost\-user session, an upgrade).
.TP
2
Bad command\-line input, said in one line, with nothing made: an unknown option or value, options that contradict each other, a branch that does not exist or is given twice, a \fB\-\-socket\-path\fR the daemon will not use (too long, no such directory, a file that is not a socket, a socket another process serves on). \fBctl\fR, \fBman\fR and \fBcompletions\fR exit 2 on any error too.
.TP
128+N
Killed by signal N (159: SIGSYS under \fB\-\-seccomp kill\fR).
.SH FILES
For a daemon started with \fB\-\-socket\-path\fR \fIS\fR, next to \fIS\fR:
.TP
\fIS\fR
The vhost\-user socket the front\-end (QEMU, cloud\-hypervisor) connects to.
.TP
\fIS\fR\fB.pid\fR
The daemon's pid, locked while it runs: a second daemon on \fIS\fR is refused, and \fB\-\-upgrade\fR \fIS\fR\fB.pid\fR names the daemon to take over from.
.TP
\fIS\fR\fB.ctl\fR
The control socket \fBunion\-virtiofsd ctl\fR talks to (same owner and \fB\-\-socket\-group\fR as \fIS\fR), unless \fB\-\-ctl\-socket\fR puts it elsewhere (with \fB\-\-fd\fR there is none without it).
.TP
\fIS\fR\fB.upgrade\fR
The socket where a new daemon started with \fB\-\-upgrade\fR asks the running one for its session.
.PP
The daemon removes them when it ends; a stale \fIS\fR (no process serving on it, its pid file unlocked) is replaced at start, anything else at \fIS\fR is refused. With \fB\-\-fd\fR there are no such files, only the \fB\-\-ctl\-socket\fR given. \fB\-\-config\fR \fIFILE\fR is re\-read on SIGHUP.
.SH ENVIRONMENT
.TP
\fBRUST_LOG\fR
The log filter, in env_logger's syntax (\fBerror\fR, \fBinfo\fR, \fBunion_virtiofsd=debug\fR); when set it wins over \fB\-\-log\-level\fR and \fB\-d\fR, as in virtiofsd (Podman passes \fBRUST_LOG=ERROR\fR).
.TP
\fBCOLUMNS\fR
The width \fB\-\-help\fR is wrapped to (else the terminal's, at most 100).
.PP
The sandbox's supervisor is re\-executed with two variables of its own, \fBUNION_VIRTIOFSD_SUPERVISE\fR and \fBUNION_VIRTIOFSD_SUPERVISE_SOCKET\fR; they are internal, not for users to set.
.SH EXAMPLES
Serve two disks and a read\-only base to QEMU, new files on the disk with the most free space:
.PP
.nf
.RS
union\-virtiofsd \-\-socket\-path /run/vm1\-fs.sock \e
    \-\-branches /srv/disk1=RW:/srv/disk2=RW:/srv/base=RO \e
    \-o category.create=mfs,minfreespace=1G &
qemu\-system\-x86_64 \-m 4G \-object memory\-backend\-memfd,id=mem,size=4G,share=on \e
    \-numa node,memdev=mem \-chardev socket,id=fs0,path=/run/vm1\-fs.sock \e
    \-device vhost\-user\-fs\-pci,chardev=fs0,tag=pool ...
# in the guest:
mount \-t virtiofs pool /mnt
.RE
.fi
.PP
The same pool as a mergerfs config file (\fB/etc/union\-virtiofsd/pool.conf\fR, the systemd unit \fBunion\-virtiofsd@pool\fR reads it), or as mergerfs's own \fB\-o\fR string:
.PP
.nf
.RS
branches=/srv/disk1=RW:/srv/disk2=RW:/srv/base=RO
category.create=mfs
minfreespace=1G
moveonenospc=true

union\-virtiofsd \-\-socket\-path /run/pool.sock \e
    \-o branches=/srv/disk1:/srv/disk2,category.create=mfs,moveonenospc=true
.RE
.fi
.PP
libvirt starts it as its virtiofsd (the domain's memory must be shared: \fB<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>\fR); a wrapper script in \fB<binary path=...>\fR adds the union's options to what libvirt passes (\fB\-\-fd\fR, \fB\-\-shared\-dir\fR):
.PP
.nf
.RS
<filesystem type='mount' accessmode='passthrough'>
  <driver type='virtiofs' queue='1024'/>
  <binary path='/usr/local/libexec/libvirt\-pool\-wrapper'/>
  <source dir='/srv/disk1'/>
  <target dir='pool'/>
</filesystem>
.RE
.fi
.PP
Change a running daemon through its control socket:
.PP
.nf
.RS
union\-virtiofsd ctl \-\-socket /run/pool.sock get category.create
union\-virtiofsd ctl \-\-socket /run/pool.sock set branches +>/srv/disk3
union\-virtiofsd ctl \-\-socket /run/pool.sock query /photos/a.jpg fullpath
.RE
.fi
"#;

/// The man page's last section (after the union options' list and VERSION).
const SEE_ALSO: &str = r#".SH "SEE ALSO"
\fBvirtiofsd\fR(1), \fBmergerfs\fR(1), \fBqemu\fR(1), \fBvirsh\fR(1), \fBmount\fR(8)
"#;

/// The man page (roff), section 1: clap's NAME, SYNOPSIS, DESCRIPTION, OPTIONS and COMMANDS,
/// then the `ctl` client's synopsis, options and commands, EXIT STATUS, FILES, ENVIRONMENT,
/// EXAMPLES, the union options (UNION OPTIONS: clap's EXTRA, from `after_long_help`), VERSION
/// and SEE ALSO.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let cmd = command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    out.extend_from_slice(b".SH COMMANDS\n");
    commands(&cmd, "union-virtiofsd", &mut out);
    if let Some(ctl) = cmd.find_subcommand("ctl") {
        out.extend_from_slice(b".SH \"CONTROL CLIENT\"\n");
        let ctl = ctl.clone().bin_name("union-virtiofsd ctl");
        let man = clap_mangen::Man::new(ctl.clone());
        let mut part = Vec::new();
        man.render_options_section(&mut part)?;
        // Its sections become subsections of this one.
        let part = String::from_utf8_lossy(&part).replace(".SH ", ".SS ");
        out.extend_from_slice(part.as_bytes());
        out.extend_from_slice(b".SS COMMANDS\n");
        commands(&ctl, "union-virtiofsd ctl", &mut out);
    }
    out.extend_from_slice(AFTER_OPTIONS.as_bytes());
    let mut rest = Vec::new();
    man.render_extra_section(&mut rest)?;
    let rest = String::from_utf8_lossy(&rest).replacen(".SH EXTRA", ".SH \"UNION OPTIONS\"", 1);
    out.extend_from_slice(rest.as_bytes());
    man.render_version_section(&mut out)?;
    out.extend_from_slice(SEE_ALSO.as_bytes());
    Ok(out)
}

/// One `.TP` entry per subcommand of `cmd` (called as `bin`): its usage line and its help.
/// (clap_mangen's own section points at a page per subcommand, which is not installed.)
fn commands(cmd: &clap::Command, bin: &str, out: &mut Vec<u8>) {
    let roff = |t: &str| t.replace('\\', "\\e").replace('-', "\\-");
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut sub = sub.clone().bin_name(format!("{bin} {}", sub.get_name()));
        let usage = sub.render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
        let help = sub
            .get_long_about()
            .or(sub.get_about())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let help = roff(&help).replace("\n\n", "\n.IP\n");
        out.extend_from_slice(format!(".TP\n\\fB{}\\fR\n{help}\n", roff(usage)).as_bytes());
    }
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "union-virtiofsd", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_and_completions_name_the_options() {
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(man.contains(".TH union-virtiofsd 1"), "{}", &man[..200]);
        for opt in [
            "readonly",
            "shared\\-dir",
            "socket\\-path",
            "print\\-capabilities",
        ] {
            assert!(man.contains(opt), "man page lacks {opt}");
        }
        let sections: Vec<_> = man.lines().filter(|l| l.starts_with(".SH")).collect();
        assert_eq!(
            sections,
            [
                ".SH NAME",
                ".SH SYNOPSIS",
                ".SH DESCRIPTION",
                ".SH OPTIONS",
                ".SH COMMANDS",
                ".SH \"CONTROL CLIENT\"",
                ".SH \"EXIT STATUS\"",
                ".SH FILES",
                ".SH ENVIRONMENT",
                ".SH EXAMPLES",
                ".SH \"UNION OPTIONS\"",
                ".SH VERSION",
                ".SH \"SEE ALSO\""
            ]
        );
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let c = String::from_utf8(completions(shell)).unwrap();
            assert!(
                c.contains("readonly") && c.contains("shared-dir"),
                "{shell}"
            );
            // The commands and ctl's own.
            for word in ["ctl", "completions", "query", "keys"] {
                assert!(c.contains(word), "{shell} lacks {word}");
            }
        }
    }
}
