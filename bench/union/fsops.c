/* Metadata micro-benchmark for the union benchmarks: create, stat or unlink N files named
 * f0..f(N-1) in DIR (PREFIX0.. instead with a fourth argument), or rename f0.. to g0..;
 * print the elapsed nanoseconds. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: fsops create|stat|unlink|rename DIR N [PREFIX]\n");
        return 2;
    }
    const char *op = argv[1], *dir = argv[2], *prefix = argc == 5 ? argv[4] : "f";
    long n = atol(argv[3]);
    char p[4096], q[4096];
    struct timespec a, b;
    struct stat st;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s%ld", dir, prefix, i);
        if (!strcmp(op, "create")) {
            int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
            if (fd < 0) { perror(p); return 1; }
            close(fd);
        } else if (!strcmp(op, "stat")) {
            if (lstat(p, &st) != 0) { perror(p); return 1; }
        } else if (!strcmp(op, "rename")) {
            snprintf(q, sizeof q, "%s/g%ld", dir, i);
            if (rename(p, q) != 0) { perror(p); return 1; }
        } else if (!strcmp(op, "unlink")) {
            if (unlink(p) != 0) { perror(p); return 1; }
        } else { fprintf(stderr, "bad op\n"); return 2; }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    return 0;
}
