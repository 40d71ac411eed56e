/* Power-loss recorder: an LD_PRELOAD library that logs every file-system change a process makes
 * under one directory, in the order the kernel saw them, with the data written.
 *
 * Environment: PL_ROOT (absolute, resolved directory: only paths under it are logged), PL_LOG
 * (the log file, outside PL_ROOT), PL_PLANT (optional planted bug: "no-dir-fsync" makes fsync of
 * a directory a no-op that is not logged, "no-file-fsync" the same for files). The writer adds its
 * own markers with pl_mark().
 *
 * Each record: u8 op, 3 pad, i32 fd, i64 a, i64 b, u32 len1, u32 len2, u64 dlen, then path1,
 * path2 and the data. One mutex covers each call and its record, so the log's order is the order
 * the calls took effect in, across threads. `powerloss_log.py` parses it; `powerloss_model.py`
 * replays it under the power-loss persistence model.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_OPEN = 1, OP_WRITE, OP_TRUNC, OP_FSYNC, OP_SYNCALL, OP_RENAME, OP_UNLINK, OP_MKDIR, OP_RMDIR, OP_CLOSE, OP_MARK };
enum { MAX_FD = 65536 };

struct record {
    uint8_t op;
    uint8_t pad[3];
    int32_t fd;
    int64_t a;
    int64_t b;
    uint32_t len1;
    uint32_t len2;
    uint64_t dlen;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX];
static size_t root_len;
static int log_fd = -1;
static int plant_no_dir_fsync, plant_no_file_fsync;
static unsigned char tracked[MAX_FD]; /* 1: a file under the root, 2: a directory under the root */

#define REAL(name) static __typeof__(name) *real_##name; if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

static ssize_t raw_write(int fd, const void *buf, size_t n) {
    static ssize_t (*w)(int, const void *, size_t);
    if (!w) w = dlsym(RTLD_NEXT, "write");
    const char *p = buf;
    while (n > 0) {
        ssize_t done = w(fd, p, n);
        if (done <= 0) return -1;
        p += done;
        n -= (size_t)done;
    }
    return 0;
}

/* A fork while another thread holds the lock must not leave the child waiting on it forever. */
static void hold(void) { pthread_mutex_lock(&lock); }
static void release(void) { pthread_mutex_unlock(&lock); }

__attribute__((constructor)) static void pl_init(void) {
    const char *r = getenv("PL_ROOT"), *l = getenv("PL_LOG"), *plant = getenv("PL_PLANT");
    if (!r || !l) return;
    snprintf(root, sizeof root, "%s", r);
    root_len = strlen(root);
    static int (*o)(const char *, int, ...);
    if (!o) o = dlsym(RTLD_NEXT, "open");
    log_fd = o(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    plant_no_dir_fsync = plant && strcmp(plant, "no-dir-fsync") == 0;
    plant_no_file_fsync = plant && strcmp(plant, "no-file-fsync") == 0;
    pthread_atfork(hold, release, release);
}

static void emit(uint8_t op, int fd, int64_t a, int64_t b, const char *p1, const char *p2, const void *data, uint64_t dlen) {
    struct record rec = {0};
    rec.op = op;
    rec.fd = fd;
    rec.a = a;
    rec.b = b;
    rec.len1 = p1 ? (uint32_t)strlen(p1) : 0;
    rec.len2 = p2 ? (uint32_t)strlen(p2) : 0;
    rec.dlen = dlen;
    raw_write(log_fd, &rec, sizeof rec);
    if (rec.len1) raw_write(log_fd, p1, rec.len1);
    if (rec.len2) raw_write(log_fd, p2, rec.len2);
    if (dlen) raw_write(log_fd, data, dlen);
}

/* `path` (relative to `dirfd`) as an absolute path in `out`; 1 when it lies under the root. */
static int resolve(int dirfd, const char *path, char *out) {
    if (log_fd < 0 || !path) return 0;
    if (path[0] == '/') {
        snprintf(out, PATH_MAX, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = 0;
        }
        snprintf(out, PATH_MAX, "%s/%s", base, path);
    }
    return strncmp(out, root, root_len) == 0 && (out[root_len] == '/' || out[root_len] == 0);
}

static int is_tracked(int fd) { return log_fd >= 0 && fd >= 0 && fd < MAX_FD && tracked[fd]; }

/* Called with the lock held, after the real open returned `fd`. */
static void opened(int fd, const char *abs, int flags, int existed) {
    if (fd < 0 || fd >= MAX_FD) return;
    struct stat st;
    int is_dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    tracked[fd] = is_dir ? 2 : 1;
    emit(OP_OPEN, fd, flags, (existed ? 0 : 1) | (is_dir ? 2 : 0), abs, NULL, NULL, 0);
}

static int do_open(int dirfd, const char *path, int flags, mode_t mode) {
    REAL(openat);
    char abs[PATH_MAX];
    if (!resolve(dirfd, path, abs)) return real_openat(dirfd, path, flags, mode);
    pthread_mutex_lock(&lock);
    struct stat st;
    int existed = stat(abs, &st) == 0;
    int fd = real_openat(dirfd, path, flags, mode);
    if (fd >= 0) opened(fd, abs, flags, existed);
    pthread_mutex_unlock(&lock);
    return fd;
}

#define MODE_ARG(flags) mode_t mode = 0; if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }

int open(const char *path, int flags, ...) { MODE_ARG(flags); return do_open(AT_FDCWD, path, flags, mode); }
int open64(const char *path, int flags, ...) { MODE_ARG(flags); return do_open(AT_FDCWD, path, flags, mode); }
int openat(int dirfd, const char *path, int flags, ...) { MODE_ARG(flags); return do_open(dirfd, path, flags, mode); }
int openat64(int dirfd, const char *path, int flags, ...) { MODE_ARG(flags); return do_open(dirfd, path, flags, mode); }
int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0); }
int creat(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

int close(int fd) {
    REAL(close);
    if (!is_tracked(fd)) return real_close(fd);
    pthread_mutex_lock(&lock);
    int rc = real_close(fd);
    if (rc == 0) {
        tracked[fd] = 0;
        emit(OP_CLOSE, fd, 0, 0, NULL, NULL, NULL, 0);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A sequential write: its offset is where the file position ended minus what was written. */
ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    if (!is_tracked(fd)) return real_write(fd, buf, n);
    pthread_mutex_lock(&lock);
    ssize_t done = real_write(fd, buf, n);
    if (done > 0) emit(OP_WRITE, fd, lseek(fd, 0, SEEK_CUR) - done, 0, NULL, NULL, buf, (uint64_t)done);
    pthread_mutex_unlock(&lock);
    return done;
}

static ssize_t do_pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite);
    if (!is_tracked(fd)) return real_pwrite(fd, buf, n, off);
    pthread_mutex_lock(&lock);
    ssize_t done = real_pwrite(fd, buf, n, off);
    if (done > 0) emit(OP_WRITE, fd, off, 0, NULL, NULL, buf, (uint64_t)done);
    pthread_mutex_unlock(&lock);
    return done;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return do_pwrite(fd, buf, n, off); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return do_pwrite(fd, buf, n, off); }

/* The gathered bytes of the first `done` bytes of `iov`, logged as one write at `off`. */
static void emit_iov(int fd, const struct iovec *iov, int cnt, ssize_t done, off_t off) {
    char *data = malloc((size_t)done);
    if (!data) abort();
    size_t at = 0;
    for (int i = 0; i < cnt && at < (size_t)done; i++) {
        size_t take = iov[i].iov_len < (size_t)done - at ? iov[i].iov_len : (size_t)done - at;
        memcpy(data + at, iov[i].iov_base, take);
        at += take;
    }
    emit(OP_WRITE, fd, off, 0, NULL, NULL, data, (uint64_t)done);
    free(data);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev);
    if (!is_tracked(fd)) return real_writev(fd, iov, cnt);
    pthread_mutex_lock(&lock);
    ssize_t done = real_writev(fd, iov, cnt);
    if (done > 0) emit_iov(fd, iov, cnt, done, lseek(fd, 0, SEEK_CUR) - done);
    pthread_mutex_unlock(&lock);
    return done;
}

static ssize_t do_pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    REAL(pwritev);
    if (!is_tracked(fd)) return real_pwritev(fd, iov, cnt, off);
    pthread_mutex_lock(&lock);
    ssize_t done = real_pwritev(fd, iov, cnt, off);
    if (done > 0) emit_iov(fd, iov, cnt, done, off);
    pthread_mutex_unlock(&lock);
    return done;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return do_pwritev(fd, iov, cnt, off); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return do_pwritev(fd, iov, cnt, off); }

static int do_ftruncate(int fd, off_t length) {
    REAL(ftruncate);
    if (!is_tracked(fd)) return real_ftruncate(fd, length);
    pthread_mutex_lock(&lock);
    int rc = real_ftruncate(fd, length);
    if (rc == 0) emit(OP_TRUNC, fd, length, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int ftruncate(int fd, off_t length) { return do_ftruncate(fd, length); }
int ftruncate64(int fd, off_t length) { return do_ftruncate(fd, length); }

static int do_truncate(const char *path, off_t length) {
    REAL(truncate);
    char abs[PATH_MAX];
    if (!resolve(AT_FDCWD, path, abs)) return real_truncate(path, length);
    pthread_mutex_lock(&lock);
    int rc = real_truncate(path, length);
    if (rc == 0) emit(OP_TRUNC, -1, length, 0, abs, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int truncate(const char *path, off_t length) { return do_truncate(path, length); }
int truncate64(const char *path, off_t length) { return do_truncate(path, length); }

static int do_fsync(int fd, int data_only) {
    REAL(fsync);
    REAL(fdatasync);
    if (!is_tracked(fd)) return data_only ? real_fdatasync(fd) : real_fsync(fd);
    if ((plant_no_dir_fsync && tracked[fd] == 2) || (plant_no_file_fsync && tracked[fd] == 1)) return 0;
    pthread_mutex_lock(&lock);
    int rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
    if (rc == 0) emit(OP_FSYNC, fd, data_only, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int fsync(int fd) { return do_fsync(fd, 0); }
int fdatasync(int fd) { return do_fsync(fd, 1); }

void sync(void) {
    REAL(sync);
    pthread_mutex_lock(&lock);
    real_sync();
    if (log_fd >= 0) emit(OP_SYNCALL, -1, 0, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
}

int syncfs(int fd) {
    REAL(syncfs);
    pthread_mutex_lock(&lock);
    int rc = real_syncfs(fd);
    if (rc == 0 && log_fd >= 0) emit(OP_SYNCALL, fd, 0, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int do_rename(int olddir, const char *oldpath, int newdir, const char *newpath, unsigned flags) {
    REAL(renameat2);
    char a[PATH_MAX], b[PATH_MAX];
    int in_a = resolve(olddir, oldpath, a), in_b = resolve(newdir, newpath, b);
    if (!in_a && !in_b) return real_renameat2(olddir, oldpath, newdir, newpath, flags);
    pthread_mutex_lock(&lock);
    int rc = real_renameat2(olddir, oldpath, newdir, newpath, flags);
    if (rc == 0) emit(OP_RENAME, -1, flags, 0, a, b, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int rename(const char *o, const char *n) { return do_rename(AT_FDCWD, o, AT_FDCWD, n, 0); }
int renameat(int od, const char *o, int nd, const char *n) { return do_rename(od, o, nd, n, 0); }
int renameat2(int od, const char *o, int nd, const char *n, unsigned flags) { return do_rename(od, o, nd, n, flags); }

static int do_unlink(int dirfd, const char *path, int flags) {
    REAL(unlinkat);
    char abs[PATH_MAX];
    if (!resolve(dirfd, path, abs)) return real_unlinkat(dirfd, path, flags);
    pthread_mutex_lock(&lock);
    int rc = real_unlinkat(dirfd, path, flags);
    if (rc == 0) emit((flags & AT_REMOVEDIR) ? OP_RMDIR : OP_UNLINK, -1, 0, 0, abs, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int unlink(const char *path) { return do_unlink(AT_FDCWD, path, 0); }
int unlinkat(int dirfd, const char *path, int flags) { return do_unlink(dirfd, path, flags); }
int rmdir(const char *path) { return do_unlink(AT_FDCWD, path, AT_REMOVEDIR); }

static int do_mkdir(int dirfd, const char *path, mode_t mode) {
    REAL(mkdirat);
    char abs[PATH_MAX];
    if (!resolve(dirfd, path, abs)) return real_mkdirat(dirfd, path, mode);
    pthread_mutex_lock(&lock);
    int rc = real_mkdirat(dirfd, path, mode);
    if (rc == 0) emit(OP_MKDIR, -1, 0, 0, abs, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    return rc;
}

int mkdir(const char *path, mode_t mode) { return do_mkdir(AT_FDCWD, path, mode); }
int mkdirat(int dirfd, const char *path, mode_t mode) { return do_mkdir(dirfd, path, mode); }

/* The writer's own marker (e.g. "ack <id>"), ordered with the file-system calls around it. */
void pl_mark(const char *text) {
    pthread_mutex_lock(&lock);
    if (log_fd >= 0) emit(OP_MARK, -1, 0, 0, text, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
}
