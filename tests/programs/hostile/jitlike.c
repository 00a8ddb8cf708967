/* A JIT-like target for tests/hostile_targets.rs: it copies a small
 * function (a counting loop with a frame-pointer frame) into anonymous
 * executable memory and calls it from native code, then naps; its own
 * /tmp/perf-PID.map is what the first argument says:
 *
 *   good       a perf map naming the copied code `jit_hot`
 *   stale      the same, its mtime an hour before the process started
 *   devzero    a symbolic link to /dev/zero
 *   link PATH  a symbolic link to PATH (a root-only file in the test)
 *   fifo       a fifo
 *   sparse     a 2 GB sparse file whose first line names `jit_hot`
 *
 * It prints its pid once the map is in place, then runs until killed.
 * Built with frame pointers (util::build_c). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* push rbp; mov rbp,rsp; mov ecx,0x80000; 1: dec ecx; jnz 1b; pop rbp; ret */
static const unsigned char CODE[] = {0x55, 0x48, 0x89, 0xe5, 0xb9, 0x00, 0x00, 0x08, 0x00,
                                     0xff, 0xc9, 0x75, 0xfc, 0x5d, 0xc3};

static void write_map(const char *path, void *code) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fprintf(f, "%lx %zx jit_hot\n", (unsigned long)code, sizeof CODE);
    fclose(f);
}

__attribute__((noinline)) void native_nap(void) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void native_driver(void (*jit)(void)) {
    for (;;) {
        for (int i = 0; i < 20; i++) jit();
        native_nap();
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: jitlike MODE [PATH]\n"); return 2; }
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) { perror("mmap"); return 1; }
    memcpy(code, CODE, sizeof CODE);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
    unlink(path);
    const char *mode = argv[1];
    if (!strcmp(mode, "good")) {
        write_map(path, code);
    } else if (!strcmp(mode, "stale")) {
        write_map(path, code);
        struct timespec t[2];
        clock_gettime(CLOCK_REALTIME, &t[0]);
        t[0].tv_sec -= 3600;
        t[1] = t[0];
        if (utimensat(AT_FDCWD, path, t, 0)) { perror("utimensat"); return 1; }
    } else if (!strcmp(mode, "devzero")) {
        if (symlink("/dev/zero", path)) { perror(path); return 1; }
    } else if (!strcmp(mode, "link") && argc > 2) {
        if (symlink(argv[2], path)) { perror(path); return 1; }
    } else if (!strcmp(mode, "fifo")) {
        if (mkfifo(path, 0644)) { perror(path); return 1; }
    } else if (!strcmp(mode, "sparse")) {
        write_map(path, code);
        if (truncate(path, 2L << 30)) { perror("truncate"); return 1; }
    } else {
        fprintf(stderr, "jitlike: unknown mode %s\n", mode);
        return 2;
    }
    printf("%d\n", getpid());
    fflush(stdout);
    native_driver((void (*)(void))code);
    return 0;
}
