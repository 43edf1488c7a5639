//! One request being served by the union: the filesystem, the view of the branches and
//! options the request pinned when it began (`crate::fuse::Request::view`), and the security
//! context a create sets. What depends on the branch set or the options is a method of a
//! [`Call`] (or takes one), so it reads the request's view, never whatever is current: a
//! branch edit during a request cannot change what the rest of it sees. Outside a request
//! (control changes, sessions moving) the current view is pinned the same way
//! ([`UnionFs::now`]).

use std::ops::Deref;
use std::sync::Arc;

use super::view::View;
use super::UnionFs;
use crate::fuse::SecContext;

/// See the module documentation. Dereferences to the filesystem for what does not depend
/// on the view (the node and handle tables).
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    fs: &'a UnionFs,
    view: &'a Arc<View>,
    label: Option<&'a SecContext>,
}

impl Deref for Call<'_> {
    type Target = UnionFs;

    fn deref(&self) -> &UnionFs {
        self.fs
    }
}

impl<'a> Call<'a> {
    /// The branch set and options of this request.
    pub(crate) fn view(&self) -> &'a View {
        self.view
    }

    /// The same, as the shared snapshot it is (for what is kept per view: the lookup memo).
    pub(crate) fn shared_view(&self) -> &'a Arc<View> {
        self.view
    }

    /// Runs `f` on the view (for reading an option or two).
    pub(crate) fn with_view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        f(self.view)
    }

    /// The security context the object this request creates gets (FUSE_SECURITY_CTX).
    pub(crate) fn label(&self) -> Option<&'a SecContext> {
        self.label
    }

    /// The filesystem.
    pub(crate) fn fs(&self) -> &'a UnionFs {
        self.fs
    }
}

impl UnionFs {
    /// A call of this filesystem that sees `view`, creating with `label`.
    pub(crate) fn call<'a>(
        &'a self,
        view: &'a Arc<View>,
        label: Option<&'a SecContext>,
    ) -> Call<'a> {
        Call {
            fs: self,
            view,
            label,
        }
    }

    /// The view a request beginning now sees (a control change replaces it whole).
    pub(crate) fn now(&self) -> Arc<View> {
        self.views.now()
    }
}
