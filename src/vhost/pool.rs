//! A fixed pool of worker threads fed by the queue threads. Runs closures; knows nothing of
//! FUSE or descriptors.

use crate::sync::LockRecover;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use log::warn;

use crate::sys::thread::{set_umask, unshare_fs};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Worker threads that run queued jobs in FIFO order.
pub struct Pool {
    tx: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    /// Starts `size` workers (at least one). Each unshares its filesystem context first so the
    /// fs layer may change umask or cwd per thread.
    pub fn new(size: usize) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..size.max(1))
            .map(|i| {
                let rx = rx.clone();
                thread::Builder::new()
                    .name(format!("fs-worker-{i}"))
                    .spawn(move || worker(&rx))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Pool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        })
    }

    /// Queues `job`; returns it back if the pool is shut down.
    pub fn spawn(&self, job: Job) -> Result<(), Job> {
        match self.tx.locked().as_ref() {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
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

fn worker(rx: &Mutex<Receiver<Job>>) {
    if let Err(e) = unshare_fs() {
        warn!("unshare(CLONE_FS) failed in worker: {e}");
    }
    // The guest kernel has applied the caller's umask already; the daemon must not apply one
    // of its own. Set here, not inherited: this thread may have unshared its fs context
    // before the main thread cleared the umask (a race that made mkdir 0777 come out 0755).
    set_umask(0);
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
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
