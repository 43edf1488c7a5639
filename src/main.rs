//! Entry point: parse, convert, run, log one error, exit non-zero. The only place that exits.

use std::process::ExitCode;

use union_virtiofsd::cli::{self, Parsed};
use union_virtiofsd::{confine, fusedev, start};

fn main() -> ExitCode {
    // The sandbox's supervisor, re-executed by the parent after the fork: nothing else to do.
    if let Some(r) = confine::supervisor_request() {
        return ExitCode::from(start::supervisor(r).code());
    }
    // The helper that unmounts a fusermount3 mount for a confined daemon: nothing else to do.
    if let Some(at) = fusedev::unmount_helper_request() {
        return ExitCode::from(fusedev::unmount_helper(&at));
    }
    union_virtiofsd::sys::mem::configure();
    let exit = match cli::parse(std::env::args_os().collect()) {
        Parsed::Serve(args) => start::serve(*args),
        Parsed::Mount {
            mountpoint,
            args,
            background,
        } => start::mount(mountpoint, &args, background),
        Parsed::Exit(status) => return ExitCode::from(status),
    };
    ExitCode::from(exit.code())
}
