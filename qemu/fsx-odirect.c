/* LD_PRELOAD shim for the guest: fsx (cargo install fsx, 0.3.2) has no direct I/O option, so
 * this adds O_DIRECT to every open of the one path named by $ODIRECT_PATH (compared as given to
 * open, e.g. "fsx-odirect-all" relative to the working directory). Its artifacts (-P /tmp) are
 * other paths and stay buffered. The first time it adds O_DIRECT it prints
 * "fsx-odirect: O_DIRECT on PATH" to stderr, which tests/guest/integrity.rs looks for.
 * scripts/build-tools-initrd.sh fsx builds it (cc -shared -fPIC -O2) into
 * /opt/tools/lib/fsx-odirect.so.
 *
 * fsx's Rust std opens files with open64 (File::open) and imports open too; openat and
 * openat64 are wrapped as well so that a std that moves to them keeps the shim working. */
#define _GNU_SOURCE
/* A fortified <fcntl.h> defines open() inline, which would clash with the wrappers below. */
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flags to pass on for path: O_DIRECT added when it is $ODIRECT_PATH. */
static int direct_flags(const char *path, int flags)
{
    static int noted;
    const char *want = getenv("ODIRECT_PATH");

    if (!want || !path || strcmp(path, want) != 0)
        return flags;
    if (!noted) {
        noted = 1;
        fprintf(stderr, "fsx-odirect: O_DIRECT on %s\n", path);
    }
    return flags | O_DIRECT;
}

/* The mode argument exists only when the flags create a file. */
#define MODE_ARG(flags, mode)                                                                  \
    do {                                                                                       \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                                 \
            va_list ap;                                                                        \
            va_start(ap, flags);                                                               \
            mode = va_arg(ap, int);                                                            \
            va_end(ap);                                                                        \
        }                                                                                      \
    } while (0)

#define WRAP_OPEN(name)                                                                        \
    int name(const char *path, int flags, ...)                                                 \
    {                                                                                          \
        static int (*real)(const char *, int, ...);                                            \
        int mode = 0;                                                                          \
        MODE_ARG(flags, mode);                                                                 \
        if (!real)                                                                             \
            real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);                   \
        return real(path, direct_flags(path, flags), mode);                                    \
    }

#define WRAP_OPENAT(name)                                                                      \
    int name(int dirfd, const char *path, int flags, ...)                                      \
    {                                                                                          \
        static int (*real)(int, const char *, int, ...);                                       \
        int mode = 0;                                                                          \
        MODE_ARG(flags, mode);                                                                 \
        if (!real)                                                                             \
            real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name);              \
        return real(dirfd, path, direct_flags(path, flags), mode);                             \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)
