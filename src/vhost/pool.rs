//! A fixed pool of worker threads fed by the queue threads. Runs closures; knows nothing of
//! FUSE or descriptors.

use crate::sync::LockRecover;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use log::warn;

use crate::sys::thread::{set_umask, unshare_fs};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Worker threads that run queued jobs in FIFO order, started as the work needs them (up to
/// the pool's size): an idle daemon, or one whose requests are all cheap, runs none.
pub struct Pool {
    tx: Mutex<Option<Sender<Job>>>,
    rx: Arc<Mutex<Receiver<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    size: usize,
    /// Workers waiting for a job, and jobs queued that no worker has taken yet: a job finds a
    /// worker started for it when there are more of the latter.
    counts: Arc<Counts>,
}

/// See [`Pool`].
#[derive(Default)]
struct Counts {
    idle: AtomicUsize,
    queued: AtomicUsize,
    /// Workers started so far.
    started: AtomicUsize,
}

impl Pool {
    /// A pool of up to `size` workers (at least one), none started yet. Each unshares its
    /// filesystem context first so the fs layer may change umask or cwd per thread.
    pub fn new(size: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        Ok(Pool {
            tx: Mutex::new(Some(tx)),
            rx: Arc::new(Mutex::new(rx)),
            threads: Mutex::new(Vec::new()),
            size: size.max(1),
            counts: Arc::default(),
        })
    }

    /// Queues `job`, starting a worker for it when none waits and the pool is not full;
    /// returns it back if the pool is shut down or has no worker and cannot start one.
    pub fn spawn(&self, job: Job) -> Result<(), Job> {
        let tx = self.tx.locked();
        let Some(tx) = tx.as_ref() else {
            return Err(job);
        };
        let queued = self.counts.queued.fetch_add(1, Ordering::AcqRel) + 1;
        if queued > self.counts.idle.load(Ordering::Acquire) {
            let mut threads = self.threads.locked();
            if threads.len() < self.size {
                let (rx, counts) = (self.rx.clone(), self.counts.clone());
                match thread::Builder::new()
                    .name(format!("fs-worker-{}", threads.len()))
                    .spawn(move || worker(&rx, &counts))
                {
                    Ok(t) => {
                        threads.push(t);
                        self.counts.started.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(e) if threads.is_empty() => {
                        warn!("cannot start a worker thread: {e}");
                        self.counts.queued.fetch_sub(1, Ordering::AcqRel);
                        return Err(job);
                    }
                    // The workers there are take it when one is free.
                    Err(e) => warn!("cannot start another worker thread: {e}"),
                }
            }
        }
        tx.send(job).map_err(|e| {
            self.counts.queued.fetch_sub(1, Ordering::AcqRel);
            e.0
        })
    }

    /// How many jobs queued now would start at once: the workers waiting for one that no
    /// queued job claims yet, and those the pool may still start. A hint (it moves as jobs
    /// come and go), for a request deciding how many pieces to hand out.
    pub fn spare(&self) -> usize {
        let c = &self.counts;
        let free = c
            .idle
            .load(Ordering::Acquire)
            .saturating_sub(c.queued.load(Ordering::Acquire));
        free + self.size.saturating_sub(c.started.load(Ordering::Acquire))
    }

    /// How many workers have been started.
    #[cfg(test)]
    fn started(&self) -> usize {
        self.threads.locked().len()
    }

    /// Stops accepting jobs; workers exit once the queue is drained. With `join`, waits for them.
    pub fn shutdown(&self, join: bool) {
        self.tx.locked().take();
        if join {
            let threads = std::mem::take(&mut *self.threads.locked());
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>, counts: &Counts) {
    if let Err(e) = unshare_fs() {
        warn!("unshare(CLONE_FS) failed in worker: {e}");
    }
    // The guest kernel has applied the caller's umask already; the daemon must not apply one
    // of its own. Set here, not inherited: this thread may have unshared its fs context
    // before the main thread cleared the umask (a race that made mkdir 0777 come out 0755).
    set_umask(0);
    loop {
        counts.idle.fetch_add(1, Ordering::AcqRel);
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => Err(mpsc::RecvError),
        };
        // No longer idle before the job stops counting as queued: a job queued meanwhile
        // never sees this worker as free while it is not.
        counts.idle.fetch_sub(1, Ordering::AcqRel);
        if job.is_ok() {
            counts.queued.fetch_sub(1, Ordering::AcqRel);
        }
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn workers_apply_no_umask_of_their_own() {
        // The test process runs with an inherited umask (022 from the shell, or whatever it
        // is); a worker must serve with 0 whatever the main thread has done so far.
        let inherited = set_umask(0o022);
        let pool = Pool::new(1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(pool
            .spawn(Box::new(move || {
                let m = set_umask(0);
                tx.send(m).unwrap();
            }))
            .is_ok());
        assert_eq!(rx.recv().unwrap(), 0);
        pool.shutdown(true);
        set_umask(inherited);
    }

    #[test]
    fn workers_start_as_jobs_need_them() {
        let pool = Pool::new(4).unwrap();
        assert_eq!(pool.started(), 0, "no job, no worker");
        // Jobs that block until released: each finds no idle worker, up to the size.
        let gate = Arc::new(std::sync::Barrier::new(5));
        for _ in 0..4 {
            let gate = gate.clone();
            assert!(pool
                .spawn(Box::new(move || {
                    gate.wait();
                }))
                .is_ok());
        }
        // A fifth runs once one of the four is free; no fifth worker.
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(pool.spawn(Box::new(move || tx.send(()).unwrap())).is_ok());
        gate.wait();
        rx.recv().unwrap();
        assert_eq!(pool.started(), 4);
        pool.shutdown(true);
    }

    #[test]
    fn spare_counts_free_and_unstarted_workers() {
        let pool = Pool::new(3).unwrap();
        assert_eq!(pool.spare(), 3, "none started: each can be");
        // Two jobs that hold their workers until released.
        let (held, hold) = (Arc::new(std::sync::Barrier::new(3)), 2);
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..hold {
            let (held, tx) = (held.clone(), tx.clone());
            assert!(pool
                .spawn(Box::new(move || {
                    tx.send(()).unwrap();
                    held.wait();
                }))
                .is_ok());
        }
        rx.recv().unwrap();
        rx.recv().unwrap();
        assert_eq!(pool.spare(), 1, "two busy, one left to start");
        held.wait();
        pool.shutdown(true);
    }

    #[test]
    fn runs_jobs_then_stops() {
        let pool = Pool::new(3).unwrap();
        let n = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let n = n.clone();
            assert!(pool
                .spawn(Box::new(move || {
                    n.fetch_add(1, Ordering::SeqCst);
                }))
                .is_ok());
        }
        pool.shutdown(true);
        assert_eq!(n.load(Ordering::SeqCst), 100);
        assert!(pool.spawn(Box::new(|| {})).is_err());
    }
}
