/* The floor of a union that keeps its files on a real branch: nullfs.c's names and replies,
 * plus the system calls on a backing directory that any such file system must make for each
 * request (LOOKUP: fstatat of the name; GETATTR: fstat; CREATE: openat O_CREAT|O_EXCL and
 * fstat; RELEASE: close; UNLINK: unlinkat; MKDIR: mkdirat and an O_PATH descriptor). What it
 * costs over nullfs is the branch file system's own work; what accord costs over it is the
 * union's logic and its FUSE library, nothing else. One directory level is enough for the
 * floor rows (a directory under the root, files in it); deeper trees work the same way.
 * Mounted with accord's options, one thread, like nullfs.
 *
 * Build: gcc -O2 passfs.c $(pkg-config fuse3 --cflags --libs)
 * Run:   passfs BACKING_DIR MOUNTPOINT   (stays in the foreground) */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 34
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOTS (1u << 21)
#define NAMELEN 64

struct slot {
    uint64_t parent, ino; /* ino 0: never used; ino 1 with parent 0: a deleted slot */
    char name[NAMELEN];
};

static struct slot *table;
static struct slot **by_ino; /* the slot of each inode number, for GETATTR */
static int *dirfds;          /* an O_PATH descriptor per directory inode, else -1 */
static uint64_t next_ino = 2;

static uint32_t hash(uint64_t parent, const char *name) {
    uint64_t h = parent * 0x9E3779B97F4A7C15ull;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 0x100000001B3ull;
    return (uint32_t)(h >> 20) & (SLOTS - 1);
}

static struct slot *find(uint64_t parent, const char *name, int insert) {
    struct slot *free_slot = NULL;
    for (uint32_t i = hash(parent, name);; i = (i + 1) & (SLOTS - 1)) {
        struct slot *s = &table[i];
        if (s->ino == 0) return insert ? (free_slot ? free_slot : s) : NULL;
        if (s->parent == 0) { if (!free_slot) free_slot = s; continue; }
        if (s->parent == parent && !strcmp(s->name, name)) return s;
    }
}

/* The inode number of (parent, name), numbered on first sight; 0 when the table is full. */
static uint64_t number(uint64_t parent, const char *name) {
    if (strlen(name) >= NAMELEN) return 0;
    struct slot *s = find(parent, name, 1);
    if (s->ino > 1 && s->parent) return s->ino;
    if (next_ino >= SLOTS) return 0;
    *s = (struct slot){.parent = parent, .ino = next_ino++};
    strcpy(s->name, name);
    by_ino[s->ino] = s;
    dirfds[s->ino] = -1;
    return s->ino;
}

static void forget_name(uint64_t parent, const char *name) {
    struct slot *s = find(parent, name, 0);
    if (!s) return;
    by_ino[s->ino] = NULL;
    s->parent = 0, s->ino = 1;
}

static int dirfd_of(fuse_ino_t ino) { return ino < SLOTS ? dirfds[ino] : -1; }

static void reply_entry(fuse_req_t req, uint64_t ino, struct stat *st) {
    struct fuse_entry_param e = {.ino = ino, .attr_timeout = 1.0, .entry_timeout = 1.0};
    if (ino) { e.attr = *st; e.attr.st_ino = ino; }
    fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct stat st;
    if (fstatat(dirfd_of(parent), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) reply_entry(req, 0, &st); /* a negative entry, cached */
        else fuse_reply_err(req, errno);
        return;
    }
    uint64_t ino = number(parent, name);
    if (!ino) { fuse_reply_err(req, ENOSPC); return; }
    if (S_ISDIR(st.st_mode) && dirfds[ino] < 0)
        dirfds[ino] = openat(dirfd_of(parent), name, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    reply_entry(req, ino, &st);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    int rc;
    if (dirfd_of(ino) >= 0) rc = fstatat(dirfds[ino], "", &st, AT_EMPTY_PATH);
    else if (ino < SLOTS && by_ino[ino])
        rc = fstatat(dirfd_of(by_ino[ino]->parent), by_ino[ino]->name, &st, AT_SYMLINK_NOFOLLOW);
    else { fuse_reply_err(req, ENOENT); return; }
    if (rc != 0) { fuse_reply_err(req, errno); return; }
    st.st_ino = ino;
    fuse_reply_attr(req, &st, 1.0);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    int pfd = dirfd_of(parent);
    struct stat st;
    if (mkdirat(pfd, name, mode & 07777) != 0) { fuse_reply_err(req, errno); return; }
    int fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    uint64_t ino = fd < 0 ? 0 : number(parent, name);
    if (!ino || fstatat(fd, "", &st, AT_EMPTY_PATH) != 0) {
        int err = ino ? errno : ENOSPC;
        if (fd >= 0) close(fd);
        fuse_reply_err(req, err);
        return;
    }
    dirfds[ino] = fd;
    reply_entry(req, ino, &st);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
    int fd = openat(dirfd_of(parent), name, (fi->flags & O_ACCMODE) | O_CREAT | O_EXCL,
                    mode & 07777);
    if (fd < 0) { fuse_reply_err(req, errno); return; }
    struct stat st;
    uint64_t ino = number(parent, name);
    if (!ino || fstat(fd, &st) != 0) {
        int err = ino ? errno : ENOSPC;
        close(fd);
        fuse_reply_err(req, err);
        return;
    }
    struct fuse_entry_param e = {.ino = ino, .attr = st, .attr_timeout = 1.0, .entry_timeout = 1.0};
    e.attr.st_ino = ino;
    fi->fh = (uint64_t)fd;
    fuse_reply_create(req, &e, fi);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name, int flags) {
    if (unlinkat(dirfd_of(parent), name, flags) != 0) { fuse_reply_err(req, errno); return; }
    struct slot *s = find(parent, name, 0);
    if (s && dirfds[s->ino] >= 0) close(dirfds[s->ino]), dirfds[s->ino] = -1;
    forget_name(parent, name);
    fuse_reply_err(req, 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_name(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    remove_name(req, parent, name, AT_REMOVEDIR);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    close((int)fi->fh);
    fuse_reply_err(req, 0);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino, (void)fi;
    fuse_reply_err(req, ENOSYS); /* as accord: the kernel stops sending FLUSH */
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup,
    .getattr = op_getattr,
    .mkdir = op_mkdir,
    .create = op_create,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .release = op_release,
    .flush = op_flush,
};

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: passfs BACKING_DIR MOUNTPOINT\n"); return 2; }
    table = calloc(SLOTS, sizeof *table);
    by_ino = calloc(SLOTS, sizeof *by_ino);
    dirfds = malloc(SLOTS * sizeof *dirfds);
    if (!table || !by_ino || !dirfds) { perror("calloc"); return 1; }
    memset(dirfds, 0xff, SLOTS * sizeof *dirfds);
    dirfds[1] = open(argv[1], O_PATH | O_DIRECTORY);
    if (dirfds[1] < 0) { perror(argv[1]); return 1; }
    char *args[] = {argv[0], "-o", "default_permissions,fsname=passfs", NULL};
    struct fuse_args fa = FUSE_ARGS_INIT(3, args);
    struct fuse_session *se = fuse_session_new(&fa, &ops, sizeof ops, NULL);
    if (!se || fuse_session_mount(se, argv[2]) != 0) return 1;
    fuse_set_signal_handlers(se);
    int rc = fuse_session_loop(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return rc ? 1 : 0;
}
