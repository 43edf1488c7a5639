//! The vhost-user device: queues, FUSE_INIT negotiation, worker threads.
