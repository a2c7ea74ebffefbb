/* The floor of the FUSE rows: a file system that keeps names and modes in memory and does
 * nothing else (no branches, no disk, no data). Whatever it costs per create, stat or
 * unlink is the cost of the FUSE round trips themselves on this machine and kernel, which no
 * FUSE daemon can go below. It is mounted with the options accord uses (default_permissions,
 * 1 s entry and attribute timeouts, negative entries cached) and answers from one thread:
 * run.sh pins it and the workload to one CPU, the cheapest way a FUSE request can travel
 * (no wake-up of another CPU). libfuse's multi-threaded loop was 4-5x slower here.
 *
 * Build: gcc -O2 nullfs.c $(pkg-config fuse3 --cflags --libs)
 * Run:   nullfs MOUNTPOINT   (stays in the foreground; fusermount3 -u MOUNTPOINT stops it) */
#define FUSE_USE_VERSION 34
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOTS (1u << 21) /* open addressing; the benchmarks use far fewer names */
#define NAMELEN 64

struct slot {
    uint64_t parent, ino; /* ino 0: never used; ino 1 with parent 0: a deleted slot */
    mode_t mode;
    char name[NAMELEN];
};

static struct slot *table;
static mode_t modes[SLOTS]; /* by inode number */
static uint64_t next_ino = 2;

static uint32_t hash(uint64_t parent, const char *name) {
    uint64_t h = parent * 0x9E3779B97F4A7C15ull;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 0x100000001B3ull;
    return (uint32_t)(h >> 20) & (SLOTS - 1);
}

/* The slot holding (parent, name), or NULL; with `insert`, the first free slot on the way. */
static struct slot *find(uint64_t parent, const char *name, int insert) {
    struct slot *free_slot = NULL;
    for (uint32_t i = hash(parent, name);; i = (i + 1) & (SLOTS - 1)) {
        struct slot *s = &table[i];
        if (s->ino == 0) return insert ? (free_slot ? free_slot : s) : NULL;
        if (s->parent == 0) { if (!free_slot) free_slot = s; continue; }
        if (s->parent == parent && !strcmp(s->name, name)) return s;
    }
}

static void fill(struct stat *st, uint64_t ino, mode_t mode) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_mode = mode;
    st->st_nlink = S_ISDIR(mode) ? 2 : 1;
    st->st_blksize = 4096;
}

static void reply_entry(fuse_req_t req, uint64_t ino, mode_t mode) {
    struct fuse_entry_param e = {.ino = ino, .attr_timeout = 1.0, .entry_timeout = 1.0};
    if (ino) fill(&e.attr, ino, mode);
    fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct slot *s = find(parent, name, 0);
    uint64_t ino = s ? s->ino : 0;
    mode_t mode = s ? s->mode : 0;
    reply_entry(req, ino, mode); /* ino 0: a negative entry the kernel caches */
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    fill(&st, ino, ino == 1 ? (S_IFDIR | 0755) : modes[ino]);
    fuse_reply_attr(req, &st, 1.0);
}

static uint64_t add(fuse_ino_t parent, const char *name, mode_t mode, int *err) {
    if (strlen(name) >= NAMELEN) { *err = ENAMETOOLONG; return 0; }
    struct slot *s = find(parent, name, 1);
    uint64_t ino = 0;
    if (s->ino > 1 && s->parent) *err = EEXIST;
    else if (next_ino >= SLOTS) *err = ENOSPC;
    else {
        ino = next_ino++;
        *s = (struct slot){.parent = parent, .ino = ino, .mode = mode};
        strcpy(s->name, name);
        modes[ino] = mode;
    }
    return ino;
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    int err = 0;
    uint64_t ino = add(parent, name, S_IFDIR | (mode & 07777), &err);
    if (!ino) fuse_reply_err(req, err); else reply_entry(req, ino, S_IFDIR | (mode & 07777));
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
    int err = 0;
    uint64_t ino = add(parent, name, S_IFREG | (mode & 07777), &err);
    if (!ino) { fuse_reply_err(req, err); return; }
    struct fuse_entry_param e = {.ino = ino, .attr_timeout = 1.0, .entry_timeout = 1.0};
    fill(&e.attr, ino, S_IFREG | (mode & 07777));
    fi->fh = 0;
    fuse_reply_create(req, &e, fi);
}

static void op_remove(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct slot *s = find(parent, name, 0);
    if (s) s->parent = 0, s->ino = 1; /* a deleted slot keeps probe chains intact */
    fuse_reply_err(req, s ? 0 : ENOENT);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino, (void)fi;
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
    .unlink = op_remove,
    .rmdir = op_remove,
    .release = op_release,
    .flush = op_flush,
};

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: nullfs MOUNTPOINT\n"); return 2; }
    table = calloc(SLOTS, sizeof *table);
    if (!table) { perror("calloc"); return 1; }
    char *args[] = {argv[0], "-o", "default_permissions,fsname=nullfs", NULL};
    struct fuse_args fa = FUSE_ARGS_INIT(3, args);
    struct fuse_session *se = fuse_session_new(&fa, &ops, sizeof ops, NULL);
    if (!se || fuse_session_mount(se, argv[1]) != 0) return 1;
    fuse_set_signal_handlers(se);
    int rc = fuse_session_loop(se);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return rc ? 1 : 0;
}
