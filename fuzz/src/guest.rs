//! One fuzzed guest session against the daemon's real request routing over a [`UnionFs`] on
//! the branches of [`crate::env`]: through a [`Dispatcher`], requests put into descriptor chains
//! in mock guest memory (virtio-queue's `MockSplitQueue`, as the daemon's own dispatch tests
//! do), or straight through the protocol layer's [`Server`] with plain byte buffers (a
//! transport that is not virtio); and the invariants checked when the session ends. Panics (the fuzzer's findings) on a broken
//! invariant; knows nothing of how requests are made up.

use std::mem::size_of;
use std::sync::{Arc, OnceLock};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use fuse_backend_rs::abi::fuse_abi::OutHeader;
use union_virtiofsd::config::registry::Settings;
use union_virtiofsd::fs::options::Negotiate;
use union_virtiofsd::fs::{FsConfig, UnionFs};
use union_virtiofsd::fuse::Server;
use union_virtiofsd::union::Branch;
use union_virtiofsd::vhost::{Dispatcher, Ring};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

use crate::env::{env, open_fds, Snapshot};
use crate::wire::{out_header, Input, Request, State, DESTROY, INTERRUPT, SETLKW};

/// Guest memory as the daemon sees it (dirty-page logging included).
pub type Mem = GuestMemoryMmap<vhost_user_backend::bitmap::BitmapMmapRegion>;
/// The chain type the dispatcher serves here.
pub type Chain = DescriptorChain<&'static Mem>;

/// Guest memory: two 16 MiB regions with a 16 MiB hole between them.
pub const REGIONS: [(u64, usize); 2] = [(0, 0x100_0000), (0x200_0000, 0x100_0000)];
/// Descriptor entries per mock queue.
pub const QUEUE_LEN: u16 = 16;
/// Where request bytes go (slot `k` at `+ k * 64 KiB`).
const REQUEST_AT: u64 = 0x10_0000;
/// Where the main slot's reply goes: room for a 1 MiB read.
const REPLY_AT: u64 = 0x80_0000;
/// Bytes of the main slot's reply buffer.
pub const REPLY_LEN: u32 = (1 << 20) + 0x1000;
/// Where a waiting SETLKW's reply goes (slot `k` at `+ k * 4 KiB`).
const LOCK_REPLY_AT: u64 = 0x40_0000;
/// Threads serving SETLKW at once (slots `1..=WAIT_SLOTS`).
const WAIT_SLOTS: usize = 8;
/// The longest one request may take (generous: the branches are small tmpfs).
const REQUEST_BUDGET: Duration = Duration::from_secs(2);

/// CPU time this thread has used (user and system).
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
/// Requests per session at most.
const MAX_REQUESTS: usize = 200;

/// Option sets a session runs with (the first input byte picks one). Only policies that
/// choose deterministically, so that an input replays the same way.
pub const OPTION_SETS: &[&str] = &[
    "category.create=epff,minfreespace=0",
    "category.create=mfs,minfreespace=0,moveonenospc=true,category.action=all",
    "cow=true,minfreespace=0,category.create=ff",
    "follow-symlinks=all,minfreespace=0,link-exdev=rel-symlink,rename-exdev=rel-symlink",
    "category.create=epall,category.search=all,minfreespace=0,inodecalc=path-hash,xattr=nosys",
    "minfreespace=0,node-fds=2,inode-file-handles=prefer,link-cow=true,lock-timeout=1",
    "minfreespace=0,symlinkify=true,symlinkify-timeout=0,cache.files=auto-full,statfs=full",
    "category.create=ff,cache.writeback=true,direct-io=true,nullrw=true,xattr=noattr",
    "category.create=eplfs",
];

/// The guest memory of this process.
pub fn memory() -> &'static Mem {
    static MEM: OnceLock<Mem> = OnceLock::new();
    MEM.get_or_init(|| {
        let ranges: Vec<_> = REGIONS
            .iter()
            .map(|&(at, len)| (GuestAddress(at), len))
            .collect();
        Mem::from_ranges(&ranges).expect("guest memory")
    })
}

/// The chain made of `descs` in the descriptor table of slot `slot`'s queue, as given (flags
/// and `next` fields untouched: loops and stray indices stay). `None` if the queue refuses it.
pub fn chain_of(slot: usize, descs: &[RawDescriptor]) -> Option<Chain> {
    let mem = memory();
    let q = MockSplitQueue::create(mem, ring(slot).table, QUEUE_LEN);
    // A fresh avail ring each time: the mock counts chains up from what memory holds.
    mem.write_obj(0u16, q.avail_addr().unchecked_add(2)).ok()?;
    q.add_desc_chains(descs, 0).ok()?;
    q.create_queue::<Queue>().ok()?.iter(mem).ok()?.next()
}

/// The descriptor table of the mock queue of `slot`.
pub fn ring(slot: usize) -> Ring {
    Ring {
        table: GuestAddress(slot as u64 * 0x1000),
        size: QUEUE_LEN,
    }
}

/// One descriptor.
pub fn desc(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
}

/// What `used` bytes the daemon wrote into the writable descriptors of `chain`, gathered.
pub fn gather(chain: Chain, used: u32) -> Vec<u8> {
    let mem = memory();
    let mut out = Vec::with_capacity(used as usize);
    for d in chain.writable() {
        let want = (used as usize - out.len()).min(d.len() as usize);
        if want == 0 {
            break;
        }
        let mut buf = vec![0u8; want];
        if mem.read_slice(&mut buf, d.addr()).is_err() {
            break;
        }
        out.extend_from_slice(&buf);
    }
    out
}

/// Checks a reply: nothing (a dropped chain), or a header that tells its own length and the
/// request's unique id, with no body after an error.
pub fn check_reply(req: &Request, used: u32, reply: &[u8]) {
    if used == 0 {
        return;
    }
    let h: OutHeader = out_header(reply).unwrap_or_else(|| {
        panic!(
            "opcode {} unique {}: {used} bytes used, no reply header",
            req.opcode, req.unique
        )
    });
    assert_eq!(h.len, used, "opcode {}: header length", req.opcode);
    assert_eq!(h.unique, req.unique, "opcode {}: unique", req.opcode);
    assert!(
        (-4095..=0).contains(&h.error),
        "opcode {}: error {} is not an errno",
        req.opcode,
        h.error
    );
    if h.error != 0 {
        assert_eq!(
            used as usize,
            size_of::<OutHeader>(),
            "opcode {}: a body after errno {}",
            req.opcode,
            h.error
        );
    }
}

/// What carries a session's requests to the protocol layer.
pub enum Carrier {
    /// Descriptor chains through the virtio dispatcher.
    Chain(Dispatcher<UnionFs>),
    /// Plain byte buffers, straight to the protocol server.
    Bytes(Server<UnionFs>),
}

/// Serves `req` on slot `slot` in the plain layout (one readable descriptor, one writable of
/// `reply_len` bytes; or a byte buffer each), checks the reply and returns it.
pub fn serve_plain(via: &Carrier, slot: usize, req: &Request, reply_len: u32) -> Vec<u8> {
    let d = match via {
        Carrier::Chain(d) => d,
        Carrier::Bytes(server) => {
            let mut bytes = req.bytes.clone();
            let mut reply = vec![0u8; reply_len as usize];
            let start = thread_cpu_time();
            let used = server.serve_bytes(&mut bytes, &mut reply, 1024);
            let spent = thread_cpu_time().saturating_sub(start);
            assert!(
                slot != 0 || spent < REQUEST_BUDGET,
                "opcode {} used {spent:?} of CPU",
                req.opcode,
            );
            reply.truncate(used);
            let used = u32::try_from(used).expect("a reply fits its buffer");
            check_reply(req, used, &reply);
            trace(req, used, &reply);
            return reply;
        }
    };
    let (req_at, reply_at) = if slot == 0 {
        (REQUEST_AT, REPLY_AT)
    } else {
        (
            REQUEST_AT + slot as u64 * 0x1_0000,
            LOCK_REPLY_AT + slot as u64 * 0x1000,
        )
    };
    memory()
        .write_slice(&req.bytes, GuestAddress(req_at))
        .expect("request fits");
    let descs = [
        desc(req_at, req.bytes.len() as u32, VRING_DESC_F_NEXT as u16, 1),
        desc(reply_at, reply_len, VRING_DESC_F_WRITE as u16, 0),
    ];
    let chain = chain_of(slot, &descs).expect("plain chain");
    let start = thread_cpu_time();
    let used = d.handle(chain.clone(), ring(slot), 1024);
    // A request that keeps a daemon thread busy this long is a denial of service (SETLKW
    // excepted: it waits by design, on a thread of its own). CPU time of this thread (the
    // request is served on it), so that a loaded machine does not look like a slow request.
    let spent = thread_cpu_time().saturating_sub(start);
    assert!(
        slot != 0 || spent < REQUEST_BUDGET,
        "opcode {} used {spent:?} of CPU",
        req.opcode,
    );
    let reply = gather(chain, used);
    check_reply(req, used, &reply);
    trace(req, used, &reply);
    reply
}

/// With `UVFS_FUZZ_TRACE` set, one line per request on stderr: to read what an input does,
/// run the target binary on that file.
pub fn trace(req: &Request, used: u32, reply: &[u8]) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("UVFS_FUZZ_TRACE").is_some()) {
        let error = out_header(reply).map(|h| h.error);
        eprintln!(
            "uvfs-fuzz: unique {} opcode {} node {}: {used} bytes, error {error:?}",
            req.unique,
            req.opcode,
            req.node()
        );
    }
}

/// Serves `req` on the main slot and learns from its reply.
pub fn serve(via: &Carrier, state: &mut State, req: &Request) {
    let reply = serve_plain(via, 0, req, REPLY_LEN);
    state.learn(req.opcode, &reply);
}

/// A SETLKW being served on a thread of its own.
struct Wait<'scope> {
    unique: u64,
    slot: usize,
    thread: ScopedJoinHandle<'scope, ()>,
}

/// Joins the waits that ended; with `stuck`, a wait that has not is a finding.
fn reap(state: &mut State, waits: &mut Vec<Wait<'_>>, stuck: bool) {
    let mut i = 0;
    while i < waits.len() {
        if waits[i].thread.is_finished() {
            let w = waits.swap_remove(i);
            state.waiting.retain(|&u| u != w.unique);
            if let Err(p) = w.thread.join() {
                std::panic::resume_unwind(p);
            }
        } else if stuck {
            panic!(
                "SETLKW unique {} still waits 5 s after FUSE_INTERRUPT",
                waits[i].unique
            );
        } else {
            i += 1;
        }
    }
}

/// A session in progress: the filesystem, its dispatcher, what the guest learned and what the
/// end of the session is checked against.
pub struct Harness {
    /// The filesystem, also held by the dispatcher.
    pub fs: Arc<UnionFs>,
    /// The daemon's request routing, as the session reaches it.
    pub via: Carrier,
    /// What the guest learned.
    pub state: State,
    fds_before: usize,
    fds_ready: usize,
    snapshot: Snapshot,
}

impl Harness {
    /// Resets the branches and starts a session with option set `opts` (modulo their number)
    /// and a `--max-pages` of `max_pages`, its requests carried in descriptor chains or, with
    /// `bytes`, in plain byte buffers.
    pub fn begin(opts: u8, max_pages: u16, bytes: bool) -> Harness {
        let env = env();
        env.reset();
        let snapshot = env.snapshot();
        let fds_before = open_fds();
        let mut s = Settings::default();
        s.apply_list(OPTION_SETS[opts as usize % OPTION_SETS.len()])
            .expect("option set");
        // --posix-acl, --security-label and --allow-idmap (command-line flags, not -o keys):
        // on for every other option set, taken when the INIT offers them.
        if opts & 0x80 != 0 {
            s.opts.posix_acl = Negotiate::Auto;
            s.opts.security_label = Negotiate::Auto;
            s.opts.allow_idmap = true;
        }
        let branches = env
            .branches()
            .iter()
            .map(|(p, m)| {
                format!("{}={m}", p.display())
                    .parse::<Branch>()
                    .expect("branch")
            })
            .collect();
        let fs = Arc::new(
            UnionFs::new(FsConfig {
                branches,
                opts: s.opts,
                ids: Default::default(),
            })
            .expect("union over the fuzzing branches"),
        );
        let via = if bytes {
            Carrier::Bytes(Server::new(Arc::clone(&fs), max_pages))
        } else {
            Carrier::Chain(Dispatcher::shared(Arc::clone(&fs), max_pages))
        };
        Harness {
            fs,
            via,
            state: State::new(env.nodev),
            fds_before,
            fds_ready: open_fds(),
            snapshot,
        }
    }

    /// Serves `req` on the main slot and learns from its reply.
    pub fn serve(&mut self, req: &Request) {
        serve(&self.via, &mut self.state, req);
    }

    /// Runs the session in `input`: INIT, then one request per record (SETLKW on threads of
    /// their own, as the daemon runs them), then [`Harness::finish`].
    pub fn run(mut self, input: &mut Input<'_>) {
        let init = self.state.init(input);
        self.serve(&init);
        let (d, state) = (&self.via, &mut self.state);
        std::thread::scope(|s| {
            let mut waits: Vec<Wait<'_>> = Vec::new();
            let mut n = 0;
            while !input.is_empty() && n < MAX_REQUESTS {
                n += 1;
                let req = state.request(input);
                if req.opcode != SETLKW {
                    serve(d, state, &req);
                    continue;
                }
                reap(state, &mut waits, false);
                let busy: Vec<usize> = waits.iter().map(|w| w.slot).collect();
                let Some(slot) = (1..=WAIT_SLOTS).find(|k| !busy.contains(k)) else {
                    continue;
                };
                state.waiting.push(req.unique);
                let unique = req.unique;
                let thread = s.spawn(move || {
                    serve_plain(d, slot, &req, 0x1000);
                });
                waits.push(Wait {
                    unique,
                    slot,
                    thread,
                });
            }
            // As a guest kernel whose waiting processes were killed: interrupt every wait.
            let start = Instant::now();
            while !waits.is_empty() {
                let uniques: Vec<u64> = waits.iter().map(|w| w.unique).collect();
                for unique in uniques {
                    let req = state.plain(INTERRUPT, 0, &unique.to_le_bytes());
                    serve(d, state, &req);
                }
                std::thread::sleep(Duration::from_micros(200));
                let stuck = start.elapsed() > Duration::from_secs(5);
                reap(state, &mut waits, stuck);
            }
        });
        self.finish();
    }

    /// Ends the session with DESTROY and checks that the daemon let go of everything: only the
    /// root node, no handle, no listing, no descriptor more than before; then, once the
    /// filesystem is dropped, none at all; and nothing outside the branches changed.
    pub fn finish(mut self) {
        let destroy = self.state.plain(DESTROY, 0, &[]);
        self.serve(&destroy);
        let counts = (
            self.fs.inode_count(),
            self.fs.handle_count(),
            self.fs.listed_entries(),
        );
        assert_eq!(
            counts,
            (1, 0, 0),
            "after DESTROY: (nodes, handles, listed entries)"
        );
        assert_eq!(
            open_fds(),
            self.fds_ready,
            "descriptors after DESTROY (before the session: {})",
            self.fds_ready
        );
        let Harness {
            fs,
            via,
            fds_before,
            snapshot,
            ..
        } = self;
        drop(via);
        drop(fs);
        assert_eq!(
            open_fds(),
            fds_before,
            "descriptors once the filesystem is gone"
        );
        assert_eq!(
            env().snapshot(),
            snapshot,
            "something outside the branches changed"
        );
    }
}
