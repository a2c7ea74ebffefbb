/* The null file system of nullfs.c (names and modes in memory, nothing else), without libfuse:
 * it speaks the FUSE protocol itself, so the same request handling can be served over two
 * transports and compared with nothing else changed:
 *
 *   rw    one thread reads requests from /dev/fuse and writes the replies back (what libfuse
 *         and nullfs.c do);
 *   ring  FUSE over io_uring (Linux 6.14 and later, `enable_uring` parameter of the fuse
 *         module on): FUSE_OVER_IO_URING is negotiated in INIT, then one thread per possible
 *         CPU owns one io_uring with DEPTH entries registered on that CPU's FUSE queue (one
 *         header and one payload buffer each), and answers every request by a
 *         COMMIT_AND_FETCH command that hands in the reply and waits for the next request.
 *         The kernel puts a request on the queue of the CPU its caller runs on; a queue's
 *         thread is pinned to that CPU when the process may run there. FORGET and INTERRUPT
 *         still come through /dev/fuse, which the main thread keeps reading.
 *
 * Requests answered as nullfs.c (libfuse 3.14's defaults for what it does not implement):
 * LOOKUP (a miss is a negative entry cached 1 s), GETATTR, MKDIR, CREATE, UNLINK, RMDIR,
 * RELEASE, FLUSH (ENOSYS, so the kernel stops sending it), OPEN/OPENDIR (fh 0),
 * RELEASEDIR, STATFS; FORGET needs no answer; everything else ENOSYS. Mounted with
 * default_permissions and 1 s entry and attribute timeouts, as nullfs.c.
 *
 * The io_uring side of FUSE is defined here from the kernel's interface description (Linux
 * 6.14, protocol 7.42), because Debian 12's kernel headers predate it.
 *
 * How the kernel hands a request to a queue's thread depends on the ring's task-work mode
 * (TASKRUN): `signal` (io_uring's default: the thread is interrupted to run it), `coop` (it
 * runs when the thread next enters the kernel) or `defer` (single issuer, deferred: it runs
 * only while the thread waits for completions, which is all this thread does).
 *
 * Build: gcc -O2 -pthread nullfs_uring.c -luring   (Debian 12: liburing-dev)
 * Run:   nullfs_uring rw|ring MOUNTPOINT [DEPTH [signal|coop|defer]]   (root; default depth 8,
 *        signal; stays in the foreground until the file system is unmounted; SIGINT/SIGTERM
 *        unmount it) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- FUSE over io_uring, as the kernel defines it (protocol 7.42) ---- */
#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING (1ULL << 41)
#endif
#define RING_CMD_REGISTER 1         /* hand an entry's buffers to the kernel, wait for a request */
#define RING_CMD_COMMIT_AND_FETCH 2 /* hand in a reply, wait for the next request */

struct ring_ent_in_out { /* in the header buffer, after the two 128-byte areas */
    uint64_t flags;
    uint64_t commit_id;  /* set by the kernel; given back with the reply */
    uint32_t payload_sz; /* bytes used in the payload buffer, either way */
    uint32_t padding;
    uint64_t reserved;
};
struct ring_header { /* the first buffer of an entry */
    union {
        struct fuse_in_header in; /* request header from the kernel */
        struct fuse_out_header out; /* reply header to the kernel */
        char area0[128];
    };
    char op_in[128]; /* the request's first (fixed-size) argument; the rest is in the payload */
    struct ring_ent_in_out ent;
};
struct ring_cmd { /* in the 80-byte command area of a 128-byte SQE */
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};
_Static_assert(sizeof(struct ring_header) == 288, "ring header layout");
_Static_assert(sizeof(struct ring_cmd) == 24, "ring command layout");

#define PROTO_MINOR 42
#define MAX_WRITE 4096
#define PAYLOAD (256 * 1024) /* at least the kernel's largest request (max_pages 32: 128 KiB) */
#define NOREPLY 1            /* handle(): the request takes no answer */

/* ---- the file system: as nullfs.c ---- */
#define SLOTS (1u << 21)
#define NAMELEN 64

struct slot {
    uint64_t parent, ino; /* ino 0: never used; ino 1 with parent 0: a deleted slot */
    mode_t mode;
    char name[NAMELEN];
};

static struct slot *table;
static mode_t modes[SLOTS];
static uint64_t next_ino = 2;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* ring mode has a thread per CPU */

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

static uint64_t add(uint64_t parent, const char *name, mode_t mode, int *err) {
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

static void fill_attr(struct fuse_attr *a, uint64_t ino, mode_t mode) {
    memset(a, 0, sizeof *a);
    a->ino = ino;
    a->mode = mode;
    a->nlink = S_ISDIR(mode) ? 2 : 1;
    a->blksize = 4096;
}

static int entry(void *out, uint64_t ino, mode_t mode) {
    struct fuse_entry_out *e = out;
    memset(e, 0, sizeof *e);
    e->nodeid = ino; /* 0: a negative entry the kernel caches */
    e->entry_valid = e->attr_valid = 1;
    if (ino) fill_attr(&e->attr, ino, mode);
    return sizeof *e;
}

/* The size of an opcode's first argument: on /dev/fuse it precedes the names in one buffer, on
 * the ring it comes in the header buffer's op_in area and the names in the payload. */
static size_t arg_size(uint32_t opcode) {
    switch (opcode) {
    case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
    case FUSE_MKDIR: return sizeof(struct fuse_mkdir_in);
    case FUSE_CREATE: return sizeof(struct fuse_create_in);
    case FUSE_OPEN: case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
    case FUSE_RELEASE: case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
    case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
    default: return 0; /* LOOKUP, UNLINK, RMDIR: the name only */
    }
}

/* Answer one request: the reply's argument goes to `out`; returns its length, a negative
 * errno, or NOREPLY. `arg` is the opcode's first argument, `names` what follows it. */
static int handle(const struct fuse_in_header *in, const void *arg, const char *names, void *out) {
    int err = 0, n;
    uint64_t ino;
    switch (in->opcode) {
    case FUSE_LOOKUP: {
        pthread_mutex_lock(&lock);
        struct slot *s = find(in->nodeid, names, 0);
        n = entry(out, s ? s->ino : 0, s ? s->mode : 0);
        pthread_mutex_unlock(&lock);
        return n;
    }
    case FUSE_GETATTR: {
        struct fuse_attr_out *a = out;
        memset(a, 0, sizeof *a);
        a->attr_valid = 1;
        pthread_mutex_lock(&lock);
        fill_attr(&a->attr, in->nodeid,
                  in->nodeid == FUSE_ROOT_ID ? (S_IFDIR | 0755) : modes[in->nodeid]);
        pthread_mutex_unlock(&lock);
        return sizeof *a;
    }
    case FUSE_MKDIR: {
        mode_t mode = S_IFDIR | (((const struct fuse_mkdir_in *)arg)->mode & 07777);
        pthread_mutex_lock(&lock);
        ino = add(in->nodeid, names, mode, &err);
        pthread_mutex_unlock(&lock);
        return ino ? entry(out, ino, mode) : -err;
    }
    case FUSE_CREATE: {
        mode_t mode = S_IFREG | (((const struct fuse_create_in *)arg)->mode & 07777);
        pthread_mutex_lock(&lock);
        ino = add(in->nodeid, names, mode, &err);
        pthread_mutex_unlock(&lock);
        if (!ino) return -err;
        n = entry(out, ino, mode);
        memset((char *)out + n, 0, sizeof(struct fuse_open_out)); /* fh 0 */
        return n + sizeof(struct fuse_open_out);
    }
    case FUSE_UNLINK: case FUSE_RMDIR: {
        pthread_mutex_lock(&lock);
        struct slot *s = find(in->nodeid, names, 0);
        if (s) s->parent = 0, s->ino = 1; /* a deleted slot keeps probe chains intact */
        pthread_mutex_unlock(&lock);
        return s ? 0 : -ENOENT;
    }
    case FUSE_OPEN: case FUSE_OPENDIR:
        memset(out, 0, sizeof(struct fuse_open_out));
        return sizeof(struct fuse_open_out);
    case FUSE_RELEASE: case FUSE_RELEASEDIR: return 0;
    case FUSE_FLUSH: return -ENOSYS; /* as accord: the kernel stops sending FLUSH */
    case FUSE_STATFS: {
        struct fuse_statfs_out *s = out;
        memset(s, 0, sizeof *s);
        s->st.namelen = 255;
        s->st.bsize = 512;
        return sizeof *s;
    }
    case FUSE_FORGET: case FUSE_BATCH_FORGET: case FUSE_INTERRUPT: return NOREPLY;
    case FUSE_DESTROY: return 0;
    default: return -ENOSYS;
    }
}

/* ---- transports ---- */
static int fusefd;
static const char *mountpoint;
static int uring_mode, depth = 8;
static unsigned ring_flags; /* io_uring setup flags besides SQE128 */
static unsigned long dev_requests; /* requests that came through /dev/fuse after INIT */
static struct queue *queues;
static int nqueues;

static void on_signal(int sig) { (void)sig; umount2(mountpoint, MNT_DETACH); }

static void reply_dev(uint64_t unique, int n, const void *out) {
    struct fuse_out_header oh = {.unique = unique, .error = n < 0 ? n : 0};
    struct iovec iov[2] = {{&oh, sizeof oh}, {(void *)out, n > 0 ? (size_t)n : 0}};
    oh.len = sizeof oh + iov[1].iov_len;
    if (writev(fusefd, iov, 2) < 0 && errno != ENOENT) perror("write /dev/fuse");
}

/* Read requests from /dev/fuse and answer them until the file system is unmounted. */
static void serve_dev(char *buf, size_t size) {
    char out[512];
    for (;;) {
        ssize_t r = read(fusefd, buf, size);
        if (r < 0) {
            if (errno == EINTR || errno == ENOENT || errno == EAGAIN) continue;
            if (errno != ENODEV) perror("read /dev/fuse");
            return;
        }
        const struct fuse_in_header *in = (const void *)buf;
        const char *arg = buf + sizeof *in;
        dev_requests++;
        int n = handle(in, arg, arg + arg_size(in->opcode), out);
        if (n != NOREPLY) reply_dev(in->unique, n, out);
    }
}

/* One FUSE queue over one io_uring, served by one thread. */
struct queue {
    int qid;
    pthread_t thread;
    struct io_uring ring;
    struct ring_header *hdr; /* depth entries */
    char *payload;           /* depth * PAYLOAD bytes */
    struct iovec (*iov)[2];
    unsigned long requests, waits; /* waits: returns from io_uring_enter with completions */
};

static void prep_cmd(struct queue *q, int i, int cmd, uint64_t commit_id) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
    if (!sqe) { fprintf(stderr, "queue %d: no free SQE\n", q->qid); exit(1); }
    memset(sqe, 0, 128);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = fusefd;
    sqe->cmd_op = cmd;
    sqe->addr = (uint64_t)(uintptr_t)q->iov[i];
    sqe->len = 2;
    sqe->user_data = i;
    struct ring_cmd *c = (struct ring_cmd *)sqe->cmd;
    c->commit_id = commit_id;
    c->qid = q->qid;
}

static void *serve_queue(void *p) {
    struct queue *q = p;
    cpu_set_t cpus;
    /* on the queue's CPU when the process may run there (not when it is confined by taskset) */
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_ISSET(q->qid, &cpus)) {
        CPU_ZERO(&cpus);
        CPU_SET(q->qid, &cpus);
        sched_setaffinity(0, sizeof cpus, &cpus);
    }
    /* the ring is made by the thread that uses it (needed for deferred task work) */
    int r = io_uring_queue_init(2 * depth, &q->ring, IORING_SETUP_SQE128 | ring_flags);
    if (r < 0) { fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-r)); exit(1); }
    for (int i = 0; i < depth; i++) prep_cmd(q, i, RING_CMD_REGISTER, 0);
    char out[512];
    for (;;) {
        r = io_uring_submit_and_wait(&q->ring, 1);
        if (r < 0) {
            if (r == -EINTR) continue;
            fprintf(stderr, "queue %d: io_uring_submit_and_wait: %s\n", q->qid, strerror(-r));
            exit(1);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        q->waits++;
        io_uring_for_each_cqe(&q->ring, head, cqe) {
            seen++;
            int i = (int)cqe->user_data;
            if (cqe->res < 0) {
                if (cqe->res == -ENOTCONN || cqe->res == -ECANCELED) return NULL; /* unmounted */
                fprintf(stderr, "queue %d: FUSE ring command failed: %s\n", q->qid,
                        strerror(-cqe->res));
                exit(1);
            }
            struct ring_header *h = &q->hdr[i];
            q->requests++;
            char *payload = q->payload + (size_t)i * PAYLOAD;
            struct fuse_in_header in = h->in;
            uint64_t commit_id = h->ent.commit_id;
            int n = handle(&in, h->op_in, payload, out);
            if (n == NOREPLY) n = -ENOSYS; /* the entry comes back only with a reply */
            if (n > 0) memcpy(payload, out, n);
            h->out = (struct fuse_out_header){
                .len = sizeof(struct fuse_out_header) + (n > 0 ? n : 0),
                .error = n < 0 ? n : 0,
                .unique = in.unique};
            h->ent.payload_sz = n > 0 ? n : 0;
            prep_cmd(q, i, RING_CMD_COMMIT_AND_FETCH, commit_id);
        }
        io_uring_cq_advance(&q->ring, seen);
    }
}

static void start_queues(void) {
    int nq = 0;
    /* the kernel makes one queue per possible CPU and uses the ring once all have an entry */
    FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
    int lo = 0, hi = 0;
    if (f && fscanf(f, "%d-%d", &lo, &hi) >= 1) nq = (hi > lo ? hi : lo) + 1;
    if (f) fclose(f);
    if (nq < 1) nq = 1;
    struct queue *qs = queues = calloc(nq, sizeof *qs);
    nqueues = nq;
    for (int qid = 0; qid < nq; qid++) {
        struct queue *q = &qs[qid];
        q->qid = qid;
        q->hdr = aligned_alloc(4096, ((sizeof *q->hdr * depth) + 4095) & ~4095ul);
        q->payload = aligned_alloc(4096, (size_t)depth * PAYLOAD);
        q->iov = calloc(depth, sizeof *q->iov);
        if (!q->hdr || !q->payload || !q->iov) { perror("alloc"); exit(1); }
        memset(q->hdr, 0, sizeof *q->hdr * depth);
        for (int i = 0; i < depth; i++) {
            q->iov[i][0] = (struct iovec){&q->hdr[i], sizeof q->hdr[i]};
            q->iov[i][1] = (struct iovec){q->payload + (size_t)i * PAYLOAD, PAYLOAD};
        }
        if (pthread_create(&q->thread, NULL, serve_queue, q)) { perror("pthread_create"); exit(1); }
    }
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5 || (strcmp(argv[1], "rw") && strcmp(argv[1], "ring"))) {
        fprintf(stderr, "usage: nullfs_uring rw|ring MOUNTPOINT [DEPTH [TASKRUN]]\n");
        return 2;
    }
    if (argc == 5) {
        if (!strcmp(argv[4], "defer"))
            ring_flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        else if (!strcmp(argv[4], "coop"))
            ring_flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
        else if (strcmp(argv[4], "signal")) { fprintf(stderr, "bad TASKRUN\n"); return 2; }
    }
    uring_mode = !strcmp(argv[1], "ring");
    mountpoint = argv[2];
    if (argc >= 4) depth = atoi(argv[3]);
    if (depth < 1 || depth > 1024) { fprintf(stderr, "bad depth\n"); return 2; }
    table = calloc(SLOTS, sizeof *table);
    if (!table) { perror("calloc"); return 1; }

    fusefd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fusefd < 0) { perror("/dev/fuse"); return 1; }
    char opts[256];
    snprintf(opts, sizeof opts, "fd=%d,rootmode=%o,user_id=%u,group_id=%u,default_permissions",
             fusefd, S_IFDIR | 0755, getuid(), getgid());
    if (mount(uring_mode ? "nullfs_uring" : "nullfs_rw", mountpoint, "fuse", MS_NOSUID | MS_NODEV,
              opts)) {
        perror("mount");
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    /* INIT, always through /dev/fuse */
    size_t bufsize = PAYLOAD + 4096;
    char *buf = malloc(bufsize);
    ssize_t r;
    do r = read(fusefd, buf, bufsize); while (r < 0 && errno == EINTR);
    const struct fuse_in_header *in = (const void *)buf;
    if (r < (ssize_t)sizeof *in || in->opcode != FUSE_INIT) {
        fprintf(stderr, "expected FUSE_INIT\n");
        return 1;
    }
    const struct fuse_init_in *ii = (const void *)(buf + sizeof *in);
    uint64_t offered = ii->flags;
    if (offered & FUSE_INIT_EXT) offered |= (uint64_t)ii->flags2 << 32;
    if (ii->major != 7 || ii->minor < 36) { fprintf(stderr, "kernel protocol too old\n"); return 1; }
    uint64_t want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS | FUSE_INIT_EXT;
    if (uring_mode) {
        if (!(offered & FUSE_OVER_IO_URING)) {
            fprintf(stderr, "the kernel does not offer FUSE_OVER_IO_URING (protocol 7.%u; "
                            "is /sys/module/fuse/parameters/enable_uring on?)\n", ii->minor);
            umount2(mountpoint, MNT_DETACH);
            return 1;
        }
        want |= FUSE_OVER_IO_URING;
    }
    struct fuse_init_out io = {
        .major = 7,
        .minor = ii->minor < PROTO_MINOR ? ii->minor : PROTO_MINOR,
        .max_readahead = ii->max_readahead,
        .flags = (uint32_t)(want & offered),
        .flags2 = (uint32_t)((want & offered) >> 32),
        .max_background = 16,
        .congestion_threshold = 12,
        .max_write = MAX_WRITE,
        .time_gran = 1,
    };
    reply_dev(in->unique, sizeof io, &io);

    if (uring_mode) start_queues();
    serve_dev(buf, bufsize); /* everything (rw), or what the ring does not carry (ring) */
    fprintf(stderr, "nullfs_uring %s: %lu requests through /dev/fuse", argv[1], dev_requests);
    for (int i = 0; i < nqueues; i++)
        fprintf(stderr, ", %lu on ring queue %d (in %lu waits)", queues[i].requests, i, queues[i].waits);
    fprintf(stderr, "\n");
    return 0;
}
