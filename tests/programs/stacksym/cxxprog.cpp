// A program whose call chain stacksym must name: main -> wcns::outer() ->
// wcns::tmpl<int>(int) -> [wcns::helper(int), always inlined] -> wcns::probe().
// It prints the addresses of that chain (return addresses from
// __builtin_return_address, the leaf as the current instruction pointer),
// then an anonymous executable page for a fake JIT symbol, then waits for
// stdin to close so the test can symbolize it alive and after it exited.
#include <cstdint>
#include <cstdio>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t chain[4];

namespace wcns {

__attribute__((noinline)) void probe() {
    chain[2] = (uintptr_t)__builtin_return_address(0);  // inside helper, inlined into tmpl<int>
    uintptr_t ip;
#if defined(__x86_64__)
    asm volatile("lea 0(%%rip), %0" : "=r"(ip));
#elif defined(__aarch64__)
    asm volatile("adr %0, ." : "=r"(ip));
#else
    ip = (uintptr_t)&probe;
#endif
    chain[3] = ip;
    asm volatile("" ::: "memory");
}

inline __attribute__((always_inline)) int helper(int x) {
    probe();
    return x * 3;
}

template <typename T>
__attribute__((noinline)) T tmpl(T x) {
    chain[1] = (uintptr_t)__builtin_return_address(0);  // inside outer
    T r = helper(x) + 1;
    asm volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) int outer(int v) {
    chain[0] = (uintptr_t)__builtin_return_address(0);  // inside main
    int r = tmpl<int>(v) + 2;
    asm volatile("" ::: "memory");
    return r;
}

}  // namespace wcns

int main(int argc, char**) {
    int r = wcns::outer(argc);
    void* jit = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("pid %d\n", (int)getpid());
    printf("chain %#lx %#lx %#lx %#lx\n", (unsigned long)chain[0], (unsigned long)chain[1],
           (unsigned long)chain[2], (unsigned long)chain[3]);
    printf("jit %#lx\n", (unsigned long)(uintptr_t)jit);
    printf("result %d\n", r);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
