//! The `VhostUserBackend` implementation: feature negotiation, the virtio-fs config space, and
//! the per-queue event loop that pops descriptor chains and hands them to workers. Knows
//! descriptors and queues, nothing about files.

use crate::sync::{LockRecover, RwRecover};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::fuse::ServedFs;
use log::{debug, info, warn};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost_user_backend::{VhostUserBackend, VringT};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use virtio_queue::QueueT;
use vm_memory::{ByteValued, GuestAddressSpace, Le32};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use super::dispatch::Dispatcher;
use super::dispatch::Place;
use super::pool::Pool;

pub use super::chain::{GuestMem, Logged};
/// One virtqueue shared between its event-loop thread and the workers.
pub type Vring = super::vring::FsVring;

/// Largest queue size we accept; QEMU's vhost-user-fs allows at most 1024.
pub const MAX_QUEUE_SIZE: usize = 1024;
/// Length of the tag field of the virtio-fs config space.
const TAG_LEN: usize = 36;

/// The virtio-fs device config space (virtio spec 5.11.4).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct VirtioFsConfig {
    tag: [u8; TAG_LEN],
    num_request_queues: Le32,
}

// SAFETY: plain old data of fixed layout (36 bytes + u32, no padding); every bit pattern is valid.
unsafe impl ByteValued for VirtioFsConfig {}

impl Default for VirtioFsConfig {
    fn default() -> Self {
        VirtioFsConfig {
            tag: [0; TAG_LEN],
            num_request_queues: Le32::from(0),
        }
    }
}

/// The virtio-fs vhost-user backend: one high-priority queue plus `num_request_queues` request
/// queues, each served by its own event-loop thread.
pub struct FsBackend<F: ServedFs> {
    dispatcher: Arc<Dispatcher<F>>,
    num_request_queues: u16,
    /// Shared with `release`.
    mem: Arc<RwLock<Option<GuestMem>>>,
    /// `--release-guest-memory`, unless zero.
    release: Option<super::release::Release>,
    event_idx: AtomicBool,
    pool: Option<Arc<Pool>>,
    /// Threads of their own for requests that may wait without bound (SETLKW).
    waiting: WaitThreads,
    /// `--tag`: offered in the config space with VHOST_USER_PROTOCOL_F_CONFIG.
    tag: Option<String>,
    /// How the session moves (`--migration-*`).
    migration: super::Migration,
    /// Moving the session: the thread saving or loading the device state, for
    /// CHECK_DEVICE_STATE to join.
    transfer: std::sync::Mutex<Option<std::thread::JoinHandle<io::Result<()>>>>,
    /// The device state was saved and the host locks let go: if the rings start again here
    /// (the migration failed, or a snapshot was taken of a running guest), the locks are
    /// taken again.
    saved: Arc<AtomicBool>,
    /// Upgrade in place: no request is popped while this is set.
    paused: AtomicBool,
    /// Held (shared) while a ring is being drained, so that a pause knows when none is.
    gate: RwLock<()>,
}

impl<F> FsBackend<F>
where
    F: ServedFs,
{
    /// Builds the backend; `thread_pool_size == 0` serves requests on the queue threads.
    pub fn new(
        dispatcher: Dispatcher<F>,
        num_request_queues: u16,
        thread_pool_size: usize,
        tag: Option<String>,
        migration: super::Migration,
    ) -> io::Result<Self> {
        let pool = match thread_pool_size {
            0 => None,
            n => Some(Arc::new(Pool::new(n)?)),
        };
        Ok(FsBackend {
            dispatcher: Arc::new(dispatcher.helpers(pool.clone())),
            num_request_queues: num_request_queues.max(1),
            mem: Arc::default(),
            release: None,
            event_idx: AtomicBool::new(false),
            pool,
            waiting: WaitThreads::default(),
            tag,
            migration,
            transfer: Default::default(),
            saved: Default::default(),
            paused: AtomicBool::new(false),
            gate: RwLock::new(()),
        })
    }

    /// Gives each ring what its stop and start do: a stop ends the lock waits (their replies
    /// must be written before the ring's position is read); a start after a save takes the
    /// host locks again.
    fn hook_rings(&self, vrings: &[Vring]) {
        for v in vrings {
            v.flight().set_hooks(|| {
                let d = self.dispatcher.clone();
                let saved = self.saved.clone();
                let d2 = d.clone();
                let stop: super::vring::Hook = Box::new(move || {
                    d2.stop_waits();
                });
                let start: super::vring::Hook = Box::new(move || {
                    if saved.swap(false, Ordering::AcqRel) {
                        resume(&d);
                    }
                });
                (stop, start)
            });
        }
    }

    /// SET_DEVICE_STATE_FD: starts saving the session into `file` or loading it from there.
    fn start_transfer(
        &self,
        direction: VhostTransferStateDirection,
        file: std::fs::File,
    ) -> io::Result<()> {
        let d = self.dispatcher.clone();
        let m = self.migration;
        let saved = self.saved.clone();
        let job: Box<dyn FnOnce() -> io::Result<()> + Send> = match direction {
            VhostTransferStateDirection::SAVE => Box::new(move || {
                // A snapshot may come without a ring stop that ended them.
                d.stop_waits();
                let t = std::time::Instant::now();
                // QEMU's destination cannot say what it reads: the newest version.
                let bytes = d
                    .save_state(m.export, crate::fuse::state::Versions::OURS)
                    .map_err(io::Error::other)?;
                let mut file = file;
                std::io::Write::write_all(&mut file, &bytes)?;
                drop(file);
                let locks = d.fs.release_host_locks();
                saved.store(true, Ordering::Release);
                info!(
                    "device state saved: {} bytes in {:.1} ms; {locks} host locks let go for the next daemon",
                    bytes.len(),
                    t.elapsed().as_secs_f64() * 1e3
                );
                Ok(())
            }),
            VhostTransferStateDirection::LOAD => Box::new(move || {
                let t = std::time::Instant::now();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut { file }, &mut bytes)?;
                let done = d.load_state(&bytes, m.on_error).inspect_err(|e| {
                    log::error!("cannot load the device state: {e}");
                })?;
                info!(
                    "device state loaded: {} bytes in {:.1} ms: {} nodes, {} open files, {} locks, {} lost",
                    bytes.len(),
                    t.elapsed().as_secs_f64() * 1e3,
                    done.nodes,
                    done.handles,
                    done.locks,
                    done.lost
                );
                Ok(())
            }),
        };
        let handle = std::thread::Builder::new()
            .name("device-state".into())
            .spawn(job)?;
        if let Some(old) = self.transfer.locked().replace(handle) {
            warn!("a device state transfer was never checked");
            let _ = old.join();
        }
        Ok(())
    }

    /// Upgrade in place, the old daemon's side: stops popping requests, ends the lock waits,
    /// waits until every request popped from `rings` has been answered, then returns the
    /// device state and each ring's position, and lets go of the host locks for the new
    /// daemon. The device state is in the newest version the new daemon `reads`. On error
    /// nothing changed but the pause ([`FsBackend::take_back`] ends it).
    pub fn hand_over(
        &self,
        rings: &[Vring],
        reads: crate::fuse::state::Versions,
    ) -> io::Result<(Vec<u8>, Vec<u16>)> {
        if self.transfer.locked().is_some() {
            return Err(io::Error::other("a device state transfer runs"));
        }
        self.paused.store(true, Ordering::Release);
        // Every drain that saw no pause has ended.
        drop(self.gate.writing());
        self.dispatcher.stop_waits();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        for r in rings {
            if !r.flight().wait_idle(deadline) {
                return Err(io::Error::other(format!(
                    "{} requests still being served after 30 s",
                    r.flight().count()
                )));
            }
        }
        let bytes = self
            .dispatcher
            .save_state(self.migration.export, reads)
            .map_err(io::Error::other)?;
        let positions = rings.iter().map(|r| r.queue_next_avail()).collect();
        let locks = self.dispatcher.fs.release_host_locks();
        info!(
            "upgrade: session saved ({} bytes, device state version {}), {locks} host locks let go for the new daemon",
            bytes.len(),
            crate::fuse::state::version_of(&bytes).unwrap_or(0)
        );
        Ok((bytes, positions))
    }

    /// The session stays here after [`FsBackend::hand_over`] (the new daemon gave up):
    /// the host locks are taken again and requests popped again (the caller kicks the rings).
    pub fn take_back(&self, locks_released: bool) {
        if locks_released {
            let lost = self.dispatcher.fs.retake_host_locks();
            if lost > 0 {
                log::error!("upgrade abandoned: {lost} guest locks were taken by others meanwhile");
            }
        }
        self.paused.store(false, Ordering::Release);
    }

    /// Upgrade in place, the new daemon's side: makes the old daemon's session this one's.
    pub fn take_over(&self, state: &[u8]) -> io::Result<crate::fs::session::Imported> {
        self.dispatcher.load_state(state, self.migration.on_error)
    }

    /// Stops the worker pool (queued requests still finish; new ones are served inline).
    pub fn shutdown(&self) {
        if let Some(pool) = &self.pool {
            pool.shutdown(false);
        }
    }

    /// Drops the daemon's mappings of guest memory every `interval` while requests flow
    /// (none if zero).
    pub fn release_guest_memory(mut self, interval: std::time::Duration) -> Self {
        self.release =
            (!interval.is_zero()).then(|| super::release::Release::new(interval, self.mem.clone()));
        self
    }

    /// Pops every available chain of `vring` and serves it: cheap requests right here, where
    /// a thread hand-off would cost more than the request itself; costly ones (the opcode
    /// table's cost, decided in [`super::dispatch::Dispatcher::serve_or_defer`]) on a worker
    /// when there is a pool and another request waits behind them, here when none does.
    fn drain(&self, vring: &Vring, mem: &GuestMem) -> io::Result<()> {
        let event_idx = self.event_idx.load(Ordering::Acquire);
        let pop = || {
            // A pause (an upgrade) stops the popping between two requests.
            if self.paused.load(Ordering::Acquire) {
                return None;
            }
            let mut state = vring.get_mut();
            let ring = super::Ring {
                table: vm_memory::GuestAddress(state.get_queue().desc_table()),
                size: state.get_queue().size(),
            };
            let chain = state.get_queue_mut().pop_descriptor_chain(mem.memory())?;
            if let Some(release) = &self.release {
                release.note();
            }
            // In flight from the moment it leaves the ring (a chain popped ahead of its turn
            // included), so that a pause never finds the queue idle with a request in hand.
            vring.flight().begin();
            Some((chain, ring))
        };
        loop {
            if event_idx {
                vring.disable_notification().map_err(io::Error::other)?;
            }
            // The chain popped after a costly one, to see whether anything waits behind it.
            let mut ahead = None;
            while let Some((chain, ring)) = ahead.take().or_else(pop) {
                let head = chain.head_index();
                let stays = |place: Place| match place {
                    Place::Here => true,
                    // A costly request with nothing queued behind it is served here: handing
                    // it to a worker would only add a thread wake-up to its latency (a guest
                    // at depth 1 waits for each). With more queued, the worker takes it and
                    // this thread goes on.
                    Place::Worker => {
                        self.pool.is_none() || {
                            ahead = pop();
                            ahead.is_none()
                        }
                    }
                    Place::OwnThread => false,
                };
                let (deferred, place) = match self
                    .dispatcher
                    .serve_or_defer(chain, ring, ring.size, stays)
                {
                    Ok(len) => {
                        complete(vring, head, len, event_idx);
                        continue;
                    }
                    Err(deferred) => deferred,
                };
                let dispatcher = self.dispatcher.clone();
                let worker_vring = vring.clone();
                let job: Box<dyn FnOnce() + Send> = Box::new(move || {
                    let head = deferred.head();
                    let len = dispatcher.serve_deferred(*deferred, ring.size);
                    complete(&worker_vring, head, len, event_idx);
                });
                let job = match place {
                    Place::OwnThread => match self.waiting.spawn(job) {
                        Ok(()) => continue,
                        Err(job) => job,
                    },
                    _ => job,
                };
                match &self.pool {
                    Some(p) => {
                        if let Err(job) = p.spawn(job) {
                            job();
                        }
                    }
                    None => job(),
                }
            }
            // With EVENT_IDX, re-check for chains queued while notifications were off.
            if self.paused.load(Ordering::Acquire)
                || !event_idx
                || !vring.enable_notification().map_err(io::Error::other)?
            {
                return Ok(());
            }
        }
    }
}

/// At most this many requests wait on threads of their own; more go to the pool.
const MAX_WAITING: usize = 256;

/// Counts the threads running requests that may wait without bound.
#[derive(Default)]
struct WaitThreads(Arc<std::sync::atomic::AtomicUsize>);

impl WaitThreads {
    /// Runs `job` on a new thread; gives it back at the limit or if no thread can start.
    fn spawn(&self, job: Box<dyn FnOnce() + Send>) -> Result<(), Box<dyn FnOnce() + Send>> {
        let n = self.0.clone();
        if n.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            n.fetch_sub(1, Ordering::AcqRel);
            return Err(job);
        }
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
        let theirs = slot.clone();
        let started = std::thread::Builder::new()
            .name("fs-lock-wait".into())
            .spawn(move || {
                if let Some(job) = theirs.locked().take() {
                    job();
                }
                n.fetch_sub(1, Ordering::AcqRel);
            });
        if started.is_err() {
            self.0.fetch_sub(1, Ordering::AcqRel);
            if let Some(job) = slot.locked().take() {
                return Err(job);
            }
        }
        Ok(())
    }
}

/// Returns a served chain to the guest and notifies it if needed.
fn complete(vring: &Vring, head: u16, len: u32, event_idx: bool) {
    {
        let mut state = vring.get_mut();
        if let Err(e) = state.add_used(head, len) {
            warn!("cannot return descriptor {head} to the used ring: {e}");
        } else if !event_idx || state.needs_notification().unwrap_or(true) {
            if let Err(e) = state.signal_used_queue() {
                warn!("cannot signal used queue: {e}");
            }
        }
    }
    vring.flight().end();
}

/// The rings start again on this daemon after its device state was saved: the session did
/// not move, so the host locks let go for the next daemon are taken again.
fn resume<F: ServedFs>(d: &Dispatcher<F>) {
    let lost = d.fs.retake_host_locks();
    if lost == 0 {
        info!("rings started again after the device state was saved: the guest's locks are held again");
    } else {
        log::error!("rings started again after the device state was saved: {lost} guest locks were taken by others meanwhile");
    }
}

impl<F> VhostUserBackend for FsBackend<F>
where
    F: ServedFs,
{
    type Bitmap = Logged;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        1 + usize::from(self.num_request_queues)
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
            | VhostUserVirtioFeatures::LOG_ALL.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // F_CONFIG only with --tag (as virtiofsd): without one the frontend supplies the tag,
        // and a frontend reading ours would get an empty one.
        let config = if self.tag.is_some() {
            VhostUserProtocolFeatures::CONFIG
        } else {
            VhostUserProtocolFeatures::empty()
        };
        config
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::DEVICE_STATE
    }

    fn acked_features(&self, features: u64) {
        if features & VhostUserVirtioFeatures::LOG_ALL.bits() != 0 {
            info!("front-end logs dirty memory: a migration begins");
        }
    }

    fn set_device_state_fd(
        &self,
        direction: VhostTransferStateDirection,
        phase: VhostTransferStatePhase,
        file: std::fs::File,
    ) -> io::Result<Option<std::fs::File>> {
        if phase != VhostTransferStatePhase::STOPPED {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("device state transfer in phase {phase:?}"),
            ));
        }
        self.start_transfer(direction, file)?;
        Ok(None)
    }

    fn check_device_state(&self) -> io::Result<()> {
        let Some(t) = self.transfer.locked().take() else {
            return Err(io::Error::other(
                "CHECK_DEVICE_STATE without a device state transfer",
            ));
        };
        t.join()
            .map_err(|_| io::Error::other("the device state thread panicked"))?
            .inspect_err(|e| log::error!("device state transfer failed: {e}"))
    }

    fn reset_device(&self) {
        info!("device reset by the front-end: the session ends");
        self.dispatcher.reset();
    }

    fn set_event_idx(&self, enabled: bool) {
        self.event_idx.store(enabled, Ordering::Release);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        config_bytes(self.tag.as_deref(), self.num_request_queues, offset, size)
    }

    fn update_memory(&self, mem: GuestMem) -> io::Result<()> {
        *self.mem.writing() = Some(mem);
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        // One event-loop thread per queue, so a slow request queue never stalls hiprio.
        (0..self.num_queues()).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK)
            .map_err(|e| warn!("cannot create exit event: {e}"))
            .ok()
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            warn!("queue {thread_id}: unexpected event set {evset:?}");
            return Ok(());
        }
        let Some(vring) = vrings.get(usize::from(device_event)) else {
            warn!("queue {thread_id}: event for unknown vring {device_event}");
            return Ok(());
        };
        let Some(mem) = self.mem.reading().clone() else {
            warn!("queue {thread_id}: kick before the memory table was set");
            return Ok(());
        };
        debug!("queue {thread_id}: kick");
        let _draining = self.gate.reading();
        if self.paused.load(Ordering::Acquire) {
            // Handed (or being handed) to a new daemon, which looks at every ring when it
            // starts.
            return Ok(());
        }
        self.hook_rings(vrings);
        if let Err(e) = self.drain(vring, &mem) {
            warn!("queue {thread_id}: {e}");
        }
        Ok(())
    }
}

/// The `size` bytes of the config space at `offset`, zero-padded; the tag is empty unless
/// `--tag` gave one (otherwise the frontend supplies it).
fn config_bytes(tag: Option<&str>, num_request_queues: u16, offset: u32, size: u32) -> Vec<u8> {
    let mut cfg = VirtioFsConfig {
        num_request_queues: Le32::from(u32::from(num_request_queues)),
        ..Default::default()
    };
    if let Some(t) = tag {
        let n = t.len().min(TAG_LEN);
        cfg.tag[..n].copy_from_slice(&t.as_bytes()[..n]);
    }
    let mut out: Vec<u8> = cfg
        .as_slice()
        .iter()
        .skip(offset as usize)
        .take(size as usize)
        .copied()
        .collect();
    out.resize(size as usize, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_reports_request_queues() {
        let all = config_bytes(None, 3, 0, 40);
        assert_eq!(all.len(), 40);
        assert!(all[..36].iter().all(|b| *b == 0));
        assert_eq!(&all[36..], &3u32.to_le_bytes());
        assert_eq!(config_bytes(None, 2, 36, 4), 2u32.to_le_bytes());
        assert_eq!(config_bytes(None, 2, 38, 8), vec![0, 0, 0, 0, 0, 0, 0, 0]);
        let tagged = config_bytes(Some("myfs"), 1, 0, 40);
        assert_eq!(&tagged[..4], b"myfs");
        assert!(tagged[4..36].iter().all(|b| *b == 0));
    }
}
